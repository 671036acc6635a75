"""Queue addresses (design section 4, "Addresses") and identifier quoting for both dialects."""

from __future__ import annotations

import pytest
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from queuelake.dialects.address import (
    POSTGRES_MAX_NAME_BYTES,
    POSTGRES_MAX_TABLE_BYTES,
    SQLSERVER_MAX_NAME_CHARS,
    QueueAddress,
    checked_postgresql,
    format_postgresql,
    format_sqlserver,
    parse_postgresql,
    parse_sqlserver,
    quote_postgresql,
    quote_sqlserver,
)
from queuelake.dialects.dialect import format_address, parse, qualified_name, quote_identifier
from queuelake.errors import AddressError
from sqlglot import exp

SQLGLOT = {"sqlserver": "tsql", "postgresql": "postgres"}

# --- SQL Server round trips (design section 4) ----------------------------------------------------

SQLSERVER_CASES = [
    # (canonical address, parsed address)
    ("my.tb[e@[my.[sch@ma]@[my.c@ta]]og]", QueueAddress("my.tb[e", "my.[sch@ma", "my.c@ta]og")),
    ("Special_]_Characters", QueueAddress("Special_]_Characters")),
    ("[SpecialCharacters]", QueueAddress("[SpecialCharacters]")),
    ("Queue@[db@]", QueueAddress("Queue", "db@")),
    ("Queue@[dbo]@[n service.bus&#]", QueueAddress("Queue", "dbo", "n service.bus&#")),
    ("Queue@@[n service.bus&#]", QueueAddress("Queue", None, "n service.bus&#")),
    ("Queue@[db@]@[n service.bus&#]", QueueAddress("Queue", "db@", "n service.bus&#")),
    ("Special_]_Characters@[[SpecialCharacters]]]", QueueAddress("Special_]_Characters", "[SpecialCharacters]")),
    ("my table.with dots@[sch]]ema]", QueueAddress("my table.with dots", "sch]ema")),
    ("Queue", QueueAddress("Queue")),
]


@pytest.mark.parametrize(("text", "expected"), SQLSERVER_CASES)
def test_sqlserver_round_trip_cases(text: str, expected: QueueAddress) -> None:
    assert parse_sqlserver(text) == expected
    assert format_sqlserver(expected) == text
    assert parse_sqlserver(format_sqlserver(expected)) == expected
    assert format_sqlserver(parse_sqlserver(text)) == text
    assert parse(text, "sqlserver") == expected
    assert format_address(expected, "sqlserver") == text


def test_sqlserver_design_example_parts() -> None:
    addr = parse_sqlserver("my.tb[e@[my.[sch@ma]@[my.c@ta]]og]")
    assert addr.table == "my.tb[e"
    assert addr.schema == "my.[sch@ma"
    assert addr.catalog == "my.c@ta]og"


@pytest.mark.parametrize(
    ("text", "canonical", "expected"),
    [
        ("Queue@dbo", "Queue@[dbo]", QueueAddress("Queue", "dbo")),
        ("Queue@dbo@nsb", "Queue@[dbo]@[nsb]", QueueAddress("Queue", "dbo", "nsb")),
        ("Queue@", "Queue", QueueAddress("Queue")),
        ("Queue@[]", "Queue", QueueAddress("Queue")),
        ("Queue@[]@[]", "Queue", QueueAddress("Queue")),
        ("Queue@@nsb", "Queue@@[nsb]", QueueAddress("Queue", None, "nsb")),
        ("Queue@[dbo]@", "Queue@[dbo]", QueueAddress("Queue", "dbo")),
    ],
)
def test_sqlserver_non_canonical_forms_format_canonically(text: str, canonical: str, expected: QueueAddress) -> None:
    assert parse_sqlserver(text) == expected
    assert format_sqlserver(parse_sqlserver(text)) == canonical
    assert parse_sqlserver(canonical) == expected


# --- PostgreSQL round trips -------------------------------------------------------------------------

POSTGRES_CASES = [
    ('"schema"."table"', QueueAddress("table", "schema")),
    ('"table"', QueueAddress("table")),  # default schema: None; the caller applies public
    ('"my.schema"."my.table"', QueueAddress("my.table", "my.schema")),
    ('"sch""ema"."ta""ble"', QueueAddress('ta"ble', 'sch"ema')),
    ('"public"."Special_]_Characters"', QueueAddress("Special_]_Characters", "public")),
    ('"public"."[SpecialCharacters]"', QueueAddress("[SpecialCharacters]", "public")),
    ('"db@"."Queue"', QueueAddress("Queue", "db@")),
    ('"n service.bus&#"."Queue"', QueueAddress("Queue", "n service.bus&#")),
    ('"MixedCase"."Orders"', QueueAddress("Orders", "MixedCase")),
    ('"""".""""', QueueAddress('"', '"')),
]


@pytest.mark.parametrize(("text", "expected"), POSTGRES_CASES)
def test_postgresql_round_trip_cases(text: str, expected: QueueAddress) -> None:
    assert parse_postgresql(text) == expected
    assert format_postgresql(expected) == text
    assert parse_postgresql(format_postgresql(expected)) == expected
    assert format_postgresql(parse_postgresql(text)) == text
    assert parse(text, "postgresql") == expected
    assert format_address(expected, "postgresql") == text


@pytest.mark.parametrize(
    ("text", "canonical", "expected"),
    [
        ("schema.table", '"schema"."table"', QueueAddress("table", "schema")),
        ("table", '"table"', QueueAddress("table")),
        ("Orders", '"Orders"', QueueAddress("Orders")),  # no case folding: the transport quotes names
        # split at the FIRST dot outside quotes: the rest is the table name
        ("a.b.c", '"a"."b.c"', QueueAddress("b.c", "a")),
        ('"a.b".c', '"a.b"."c"', QueueAddress("c", "a.b")),
        ('s."t.u"', '"s"."t.u"', QueueAddress("t.u", "s")),
        ('"a.b"', '"a.b"', QueueAddress("a.b")),
    ],
)
def test_postgresql_non_canonical_forms_format_canonically(text: str, canonical: str, expected: QueueAddress) -> None:
    assert parse_postgresql(text) == expected
    assert format_postgresql(parse_postgresql(text)) == canonical
    assert parse_postgresql(canonical) == expected


def test_postgresql_default_schema_is_applied_by_the_caller() -> None:
    addr = parse_postgresql('"Orders"')
    assert addr.schema is None
    assert addr.with_defaults("public") == QueueAddress("Orders", "public")
    assert parse_postgresql('"sales"."Orders"').with_defaults("public") == QueueAddress("Orders", "sales")


# --- property tests ---------------------------------------------------------------------------------

# The full Unicode range except NUL and surrogates (which no database identifier can hold).
NAME_CHARS = st.characters(exclude_categories=("Cs",), exclude_characters="\x00")


def _utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def _sqlserver_name(**kw) -> st.SearchStrategy[str]:
    return st.text(NAME_CHARS, min_size=1, max_size=70, **kw).filter(
        lambda s: _utf16_units(s) <= SQLSERVER_MAX_NAME_CHARS
    )


sqlserver_addresses = st.builds(
    QueueAddress,
    table=_sqlserver_name().filter(lambda s: "@" not in s and not s.startswith("#")),  # "#t" is a temp table
    schema=st.none() | _sqlserver_name(),
    catalog=st.none() | _sqlserver_name(),
)

postgres_addresses = st.builds(
    QueueAddress,
    table=st.text(NAME_CHARS, min_size=1, max_size=30).filter(lambda s: _utf8_bytes(s) <= POSTGRES_MAX_TABLE_BYTES),
    schema=st.none()
    | st.text(NAME_CHARS, min_size=1, max_size=30).filter(lambda s: _utf8_bytes(s) <= POSTGRES_MAX_NAME_BYTES),
)


@settings(max_examples=300, deadline=None)
@given(sqlserver_addresses)
def test_sqlserver_parse_format_round_trip_property(addr: QueueAddress) -> None:
    text = format_sqlserver(addr)
    assert parse_sqlserver(text) == addr
    assert format_sqlserver(parse_sqlserver(text)) == text


@settings(max_examples=300, deadline=None)
@given(postgres_addresses)
def test_postgresql_parse_format_round_trip_property(addr: QueueAddress) -> None:
    text = format_postgresql(addr)
    assert parse_postgresql(text) == addr
    assert format_postgresql(parse_postgresql(text)) == text


# --- hostile names never change a statement's meaning ---------------------------------------------

HOSTILE = [
    "x'; DROP TABLE users; --",
    'x"; DROP TABLE users; --',
    "x]; DROP TABLE users; --",
    "[x]",
    "]",
    "[",
    '"',
    "'",
    '""',
    "]]",
    "a/*b",
    "a*/b",
    "-- comment",
    "a;b",
    "a.b",
    "a b",
    "@p",
    "$1",
    "\\",
    "tab\there",
    "new\nline",
    "Ünïcödé 名前 имя",
    "emoji 😀🚀",
    "\u202eRTL override",
    "'\";--]/*[",
]


def _sqlglot_tables(sql: str, dialect: str) -> list[exp.Table]:
    statements = sqlglot.parse(sql, read=SQLGLOT[dialect])
    assert len(statements) == 1, f"{sql!r} parsed as {len(statements)} statements"
    assert statements[0] is not None
    return list(statements[0].find_all(exp.Table))


def _identifier_names(sql: str, dialect: str) -> list[tuple[str, bool]]:
    statements = sqlglot.parse(sql, read=SQLGLOT[dialect])
    assert len(statements) == 1, f"{sql!r} parsed as {len(statements)} statements"
    return [(i.name, i.quoted) for i in statements[0].find_all(exp.Identifier)]


@pytest.mark.parametrize("dialect", ["sqlserver", "postgresql"])
@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_identifier_stays_one_identifier(name: str, dialect: str) -> None:
    quoted = quote_identifier(name, dialect)
    assert _identifier_names(f"SELECT * FROM {quoted}", dialect) == [(name, True)]
    assert _identifier_names(f"SELECT {quoted} FROM t WHERE 1 = 1", dialect) == [(name, True), ("t", False)]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_sqlserver_three_part_name(name: str) -> None:
    qualified = qualified_name(QueueAddress(name, name, name), "sqlserver")
    (table,) = _sqlglot_tables(f"SELECT * FROM {qualified} WITH (UPDLOCK, READPAST, ROWLOCK)", "sqlserver")
    assert [(p.name, p.quoted) for p in table.parts] == [(name, True)] * 3


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_postgresql_two_part_name(name: str) -> None:
    qualified = qualified_name(QueueAddress(name, name), "postgresql")
    (table,) = _sqlglot_tables(f"SELECT * FROM {qualified} FOR UPDATE SKIP LOCKED", "postgresql")
    assert [(p.name, p.quoted) for p in table.parts] == [(name, True)] * 2


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_survive_an_address_round_trip(name: str) -> None:
    sqlserver_table = name.replace("@", "at")
    for addr, dialect in (
        (QueueAddress(sqlserver_table, name, name), "sqlserver"),
        (QueueAddress(name, name), "postgresql"),
    ):
        text = format_address(addr, dialect)
        assert parse(text, dialect) == addr
        (table,) = _sqlglot_tables(f"DELETE FROM {qualified_name(parse(text, dialect), dialect)}", dialect)
        expected = [addr.catalog, addr.schema, addr.table] if dialect == "sqlserver" else [addr.schema, addr.table]
        assert [p.name for p in table.parts] == expected


def test_longest_allowed_hostile_names_quote_safely() -> None:
    ss = ("x']; --/*" * 20)[:SQLSERVER_MAX_NAME_CHARS]
    assert _identifier_names(f"SELECT * FROM {quote_sqlserver(ss)}", "sqlserver") == [(ss, True)]
    pg = ('x"; --/*' * 20)[:POSTGRES_MAX_NAME_BYTES]
    assert _identifier_names(f"SELECT * FROM {quote_postgresql(pg)}", "postgresql") == [(pg, True)]


@pytest.mark.parametrize("dialect", ["sqlserver", "postgresql"])
def test_two_hundred_character_names_are_refused(dialect: str) -> None:
    name = ("x'; DROP TABLE t; --" * 10)[:200]
    assert len(name) == 200
    with pytest.raises(AddressError, match="SQL Server allows 128|PostgreSQL allows 63"):
        quote_identifier(name, dialect)
    with pytest.raises(AddressError):
        parse(name, dialect)


@settings(max_examples=200, deadline=None)
@given(name=st.text(NAME_CHARS, min_size=1, max_size=15), dialect=st.sampled_from(["sqlserver", "postgresql"]))
def test_any_identifier_quotes_to_exactly_itself_property(name: str, dialect: str) -> None:
    quoted = quote_identifier(name, dialect)
    assert _identifier_names(f"SELECT {quoted} FROM t", dialect) == [(name, True), ("t", False)]
    if dialect == "sqlserver" and name.startswith("#"):
        return  # a temporary table in table position: see test_sqlserver_refuses_temporary_table_names
    assert _identifier_names(f"SELECT * FROM {quoted}", dialect) == [(name, True)]
    address = QueueAddress(name.replace("@", "at"), name)
    (table,) = _sqlglot_tables(f"SELECT * FROM {qualified_name(address, dialect)}", dialect)
    assert [p.name for p in table.parts] == [address.schema, address.table]


@pytest.mark.parametrize("table", ["#Orders", "##Orders", "#"])
def test_sqlserver_refuses_temporary_table_names(table: str) -> None:
    """``[#Orders]`` names a temporary table in tempdb, bracketed or not: never a queue."""
    (parsed,) = _sqlglot_tables(f"SELECT * FROM {quote_sqlserver(table)}", "sqlserver")
    assert parsed.this.args.get("temporary") or parsed.this.args.get("global_")
    with pytest.raises(AddressError, match="starts with #, which SQL Server reads as a temporary table"):
        parse_sqlserver(f"{table}@[dbo]")
    with pytest.raises(AddressError, match="temporary table"):
        format_sqlserver(QueueAddress(table, "dbo"))
    with pytest.raises(AddressError, match="temporary table"):
        qualified_name(QueueAddress(table, "dbo", "nsb"), "sqlserver")
    # a # elsewhere, or in the schema or catalog, is an ordinary character
    assert parse_sqlserver("Or#ders@[#s]@[#c]") == QueueAddress("Or#ders", "#s", "#c")
    assert qualified_name(QueueAddress("Or#ders", "#s", "#c"), "sqlserver") == "[#c].[#s].[Or#ders]"


# --- rejected addresses and names -------------------------------------------------------------------


def test_sqlserver_name_length_limits() -> None:
    ok = "t" * SQLSERVER_MAX_NAME_CHARS
    assert parse_sqlserver(ok) == QueueAddress(ok)
    assert quote_sqlserver(ok) == f"[{ok}]"
    with pytest.raises(AddressError, match=r"table name is 129 characters.*SQL Server allows 128"):
        parse_sqlserver("t" * 129)
    with pytest.raises(AddressError, match=r"schema name is 129 characters.*SQL Server allows 128"):
        parse_sqlserver(f"t@[{'s' * 129}]")
    with pytest.raises(AddressError, match=r"catalog name is 129 characters.*SQL Server allows 128"):
        parse_sqlserver(f"t@[dbo]@[{'c' * 129}]")
    with pytest.raises(AddressError, match=r"129 characters.*SQL Server allows 128"):
        quote_sqlserver("q" * 129)
    with pytest.raises(AddressError, match="SQL Server allows 128"):
        format_sqlserver(QueueAddress("t" * 129))


def test_sqlserver_limit_counts_utf16_code_units() -> None:
    """sysname is nvarchar(128): an emoji outside the BMP takes two of the 128 units."""
    assert quote_sqlserver("😀" * 64) == "[" + "😀" * 64 + "]"
    assert parse_sqlserver("😀" * 64) == QueueAddress("😀" * 64)
    with pytest.raises(AddressError, match=r"130 characters \(UTF-16 code units\)"):
        quote_sqlserver("😀" * 65)
    with pytest.raises(AddressError, match="UTF-16 code units"):
        parse_sqlserver("😀" * 65)


def test_postgresql_table_length_limit_in_utf8_bytes() -> None:
    assert parse_postgresql("t" * 55) == QueueAddress("t" * 55)
    with pytest.raises(AddressError, match=r"table name is 56 UTF-8 bytes; the PostgreSQL transport allows 55"):
        parse_postgresql("t" * 56)
    # multibyte: 27 characters, 54 bytes is fine; 28 two-byte characters is 56 bytes
    assert parse_postgresql("é" * 27) == QueueAddress("é" * 27)
    with pytest.raises(AddressError, match=r"table name is 56 UTF-8 bytes"):
        parse_postgresql("é" * 28)
    with pytest.raises(AddressError, match=r"table name is 56 UTF-8 bytes"):
        parse_postgresql('"public"."' + "😀" * 14 + '"')
    with pytest.raises(AddressError, match=r"table name is 56 UTF-8 bytes"):
        format_postgresql(QueueAddress("t" * 56))
    with pytest.raises(AddressError, match=r"table name is 56 UTF-8 bytes"):
        checked_postgresql(QueueAddress("t" * 56, "public"))


def test_postgresql_schema_and_identifier_limits() -> None:
    assert parse_postgresql(f'"{"s" * 63}"."t"') == QueueAddress("t", "s" * 63)
    with pytest.raises(AddressError, match=r"schema name is 64 UTF-8 bytes; PostgreSQL allows 63"):
        parse_postgresql(f'"{"s" * 64}"."t"')
    assert quote_postgresql("i" * 63) == '"' + "i" * 63 + '"'
    with pytest.raises(AddressError, match=r"64 UTF-8 bytes; PostgreSQL allows 63.*truncate"):
        quote_postgresql("i" * 64)
    with pytest.raises(AddressError, match=r"64 UTF-8 bytes"):
        quote_postgresql("ж" * 32)


@pytest.mark.parametrize(
    ("dialect", "text", "what"),
    [
        ("sqlserver", "a\x00b", "table"),
        ("sqlserver", "t@[s\x00]", "schema"),
        ("sqlserver", "t@[s]@[c\x00]", "catalog"),
        ("postgresql", "a\x00b", "table"),
        ("postgresql", '"s\x00"."t"', "schema"),
    ],
)
def test_nul_is_rejected(dialect: str, text: str, what: str) -> None:
    with pytest.raises(AddressError, match=f"{what} name contains a NUL character"):
        parse(text, dialect)


@pytest.mark.parametrize("dialect", ["sqlserver", "postgresql"])
def test_nul_lone_surrogate_and_empty_identifiers_are_rejected(dialect: str) -> None:
    with pytest.raises(AddressError, match="NUL"):
        quote_identifier("a\x00b", dialect)
    with pytest.raises(AddressError, match="lone surrogate"):
        quote_identifier("a\ud800b", dialect)
    with pytest.raises(AddressError, match="empty"):
        quote_identifier("", dialect)
    with pytest.raises(AddressError, match="lone surrogate"):
        parse("a\udc00", dialect)
    with pytest.raises(AddressError, match="NUL"):
        format_address(QueueAddress("a\x00"), dialect)


@pytest.mark.parametrize(
    ("dialect", "text"),
    [
        ("sqlserver", ""),
        ("sqlserver", "@[dbo]"),
        ("sqlserver", "@[dbo]@[nsb]"),
        ("sqlserver", "@"),
        ("postgresql", ""),
        ("postgresql", '""'),
        ("postgresql", '"s".""'),
        ("postgresql", '"s".'),
        ("postgresql", "s."),
    ],
)
def test_empty_table_is_rejected(dialect: str, text: str) -> None:
    with pytest.raises(AddressError, match="empty"):
        parse(text, dialect)


@pytest.mark.parametrize("dialect", ["sqlserver", "postgresql"])
def test_empty_table_cannot_be_formatted(dialect: str) -> None:
    with pytest.raises(AddressError, match="table name is empty"):
        format_address(QueueAddress(""), dialect)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("t@[dbo", r"unterminated \[ in the schema part"),
        ("t@[dbo]]", r"unterminated \[ in the schema part"),
        ("t@[dbo]@[nsb", r"unterminated \[ in the catalog part"),
        ("t@[dbo]x", "unexpected text after the schema part"),
        ("t@[dbo]@[nsb]x", "unexpected text after the catalog part"),
        ("t@[dbo]@[nsb]@[x]", "too many @-separated parts"),
        ("t@dbo@nsb@x", "too many @-separated parts"),
    ],
)
def test_malformed_sqlserver_addresses(text: str, message: str) -> None:
    with pytest.raises(AddressError, match=message):
        parse_sqlserver(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"schema', "unterminated quote"),
        ('"schema"."table', "unterminated quote"),
        ('"a""', "unterminated quote"),
        ('"schema"x."table"', "text after a closing quote"),
        ('"schema"."table"x', "text after a closing quote"),
        ('"schema"."table".x', "text after a closing quote"),
        ('"schema" ."table"', "text after a closing quote"),
        ('ab"c"', "a quote in the middle of a name"),
        ('s.ab"c"', "a quote in the middle of a name"),
        (".table", "schema name is empty"),
        ('"".table', "schema name is empty"),
    ],
)
def test_malformed_postgresql_addresses(text: str, message: str) -> None:
    with pytest.raises(AddressError, match=message):
        parse_postgresql(text)


def test_error_messages_name_the_address() -> None:
    with pytest.raises(AddressError, match=r"'t@\[dbo'"):
        parse_sqlserver("t@[dbo")
    with pytest.raises(AddressError, match=r"'\"schema'"):
        parse_postgresql('"schema')


def test_other_rejections() -> None:
    with pytest.raises(AddressError, match="contains @"):
        format_sqlserver(QueueAddress("a@b"))
    with pytest.raises(AddressError, match="no catalog part"):
        format_postgresql(QueueAddress("t", "s", "c"))
    with pytest.raises(AddressError, match="no catalog part"):
        checked_postgresql(QueueAddress("t", None, "c"))
    with pytest.raises(AddressError, match="schema name is empty"):
        checked_postgresql(QueueAddress("t", ""))
    with pytest.raises(AddressError, match="empty"):
        parse_sqlserver(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("call", [parse, format_address, quote_identifier, qualified_name])
def test_unknown_dialect_is_rejected(call) -> None:
    arg = QueueAddress("t") if call in (format_address, qualified_name) else "t"
    with pytest.raises(AddressError, match="unknown dialect 'mysql'"):
        call(arg, "mysql")


# --- qualified names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("addr", "expected"),
    [
        (QueueAddress("Orders"), "[Orders]"),
        (QueueAddress("Orders", "dbo"), "[dbo].[Orders]"),
        (QueueAddress("Orders", "dbo", "nsb"), "[nsb].[dbo].[Orders]"),
        # a catalog without a schema: NOT [nsb].[Orders], which would mean schema nsb
        (QueueAddress("Orders", None, "nsb"), "[nsb]..[Orders]"),
        (QueueAddress("my.tb[e", "my.[sch@ma", "my.c@ta]og"), "[my.c@ta]]og].[my.[sch@ma].[my.tb[e]"),
        (QueueAddress("Special_]_Characters", "dbo"), "[dbo].[Special_]]_Characters]"),
    ],
)
def test_qualified_name_sqlserver(addr: QueueAddress, expected: str) -> None:
    assert qualified_name(addr, "sqlserver") == expected
    (table,) = _sqlglot_tables(f"SELECT * FROM {expected}", "sqlserver")
    assert table.name == addr.table
    assert table.db == (addr.schema or "")
    assert table.catalog == (addr.catalog or "")


@pytest.mark.parametrize(
    ("addr", "expected"),
    [
        (QueueAddress("Orders"), '"Orders"'),
        (QueueAddress("Orders", "public"), '"public"."Orders"'),
        (QueueAddress('ta"ble', 'sch"ema'), '"sch""ema"."ta""ble"'),
        (QueueAddress("my.table", "my.schema"), '"my.schema"."my.table"'),
    ],
)
def test_qualified_name_postgresql(addr: QueueAddress, expected: str) -> None:
    assert qualified_name(addr, "postgresql") == expected
    (table,) = _sqlglot_tables(f"SELECT * FROM {expected}", "postgresql")
    assert table.name == addr.table
    assert table.db == (addr.schema or "")


def test_qualified_name_after_defaults() -> None:
    assert (
        qualified_name(parse("Orders", "sqlserver").with_defaults("dbo", "nsb"), "sqlserver") == "[nsb].[dbo].[Orders]"
    )
    assert qualified_name(parse("Orders@[sales]", "sqlserver").with_defaults("dbo"), "sqlserver") == "[sales].[Orders]"
    assert qualified_name(parse("Orders", "postgresql").with_defaults("public"), "postgresql") == '"public"."Orders"'


def test_qualified_name_postgresql_refuses_a_catalog() -> None:
    with pytest.raises(AddressError, match="no catalog part"):
        qualified_name(QueueAddress("t", "s", "c"), "postgresql")


def test_qualified_name_refuses_over_long_parts() -> None:
    with pytest.raises(AddressError, match="SQL Server allows 128"):
        qualified_name(QueueAddress("t", "s" * 129), "sqlserver")
    with pytest.raises(AddressError, match="PostgreSQL allows 63"):
        qualified_name(QueueAddress("t", "s" * 64), "postgresql")


# --- the value type ---------------------------------------------------------------------------------


def test_with_defaults_keeps_explicit_parts() -> None:
    assert QueueAddress("t").with_defaults("dbo", "nsb") == QueueAddress("t", "dbo", "nsb")
    assert QueueAddress("t", "s", "c").with_defaults("dbo", "nsb") == QueueAddress("t", "s", "c")
    assert QueueAddress("t").with_defaults("public") == QueueAddress("t", "public")


def test_addresses_sort_with_default_parts() -> None:
    """Sorting a mix of None and named schemas must not raise TypeError (None < str)."""
    addrs = [QueueAddress("b"), QueueAddress("a", "s", "c"), QueueAddress("a", "s"), QueueAddress("a")]
    assert sorted(addrs) == [QueueAddress("a"), QueueAddress("a", "s"), QueueAddress("a", "s", "c"), QueueAddress("b")]
    assert QueueAddress("a") < QueueAddress("a", "s")
    assert QueueAddress("a", "s") >= QueueAddress("a")
    assert len({QueueAddress("a", "s"), QueueAddress("a", "s")}) == 1

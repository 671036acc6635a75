"""Bodies to typed columns in Spark: ``from_json`` with the table's schema, and each row's verdict.
XML bodies are first rewritten as JSON text for that schema (``xml_serializer``: XmlSerializer's list
wrappers, empty lists and ``xsi:nil``, which ``from_xml`` cannot read as a JSON body's list), so a type
whose endpoints moved from XML to JSON lands both in the same columns with the same values.

A row is written to its type's table when it parsed, or parsed in part (its JSON is a valid object,
but a value did not fit its column's type: a shape the sampled rows did not show; that field is
null). A row that did not parse at all, or only in part, is recorded in ``body_unparsed`` with the
reason; it never stops its type's table or any other.

Body fields become top-level columns after the identity columns; a field named like one of them
(case-insensitively, ``Queue``, ``message_id``) is stored as ``body_<field>``. A field whose name a
Delta column cannot hold without column mapping (which would lift the table's protocol past what other
readers take: a space, ``,;{}()=``, a tab, a newline, or no name at all) is stored under its name
encoded as .NET's ``XmlConvert.EncodeName`` does it: each such character as ``_xHHHH_`` (``Order Id`` is
``Order_x0020_Id``, the empty name ``_x0000_``), a ``_xHHHH`` the name holds itself escaped as
``_x005F_xHHHH``, so that the column gives its field back exactly (``key_of``). Such fields were dropped
with no record (a review).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pyspark.sql.types import ArrayType, DataType, MapType, StringType, StructField, StructType, TimestampType

from queuelake.lake.stage_tables import BODY_IDENTITY
from queuelake.pipeline.bodies.infer import CORRUPT
from queuelake.pipeline.bodies.xml_serializer import json_of_xml

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import Column, DataFrame

IDENTITY = BODY_IDENTITY.names
# characters a Delta column name cannot hold without column mapping
BAD_NAME = re.compile(r"[ ,;{}()\n\t=]")
_ESCAPED_CHAR = re.compile(r"_x([0-9A-Fa-f]{4})_")
_ESCAPE_LIKE = re.compile(r"_(x[0-9A-Fa-f]{4})")
_EMPTY = "_x0000_"
_RESERVED = {n.lower() for n in IDENTITY} | {CORRUPT}
PARTLY = "partly parsed: a value does not fit its column's type (a shape the sampled bodies did not show)"
# fields (in the schema's order, nested ones after their parent) a partly parsed row's reason may name:
# each is one more JSON path looked up in such a row, and past this many the reason names none
NAMED_FIELDS = 64


def does_not_fit(field: str) -> str:
    """The reason of a row whose ``field`` (a path: ``Meta.Total``) held a value its column's type cannot
    take: the field named, as ``out_of_range`` names a time's (a review: one text for every field)."""
    return (
        f"partly parsed: {field} does not fit its column's type "
        "(a shape the sampled bodies did not show; its column holds null)"
    )


def out_of_range(field: str) -> str:
    """The reason of a row whose ``field`` held a time no reader holds: the field named, a type may have many
    (a review: the reason was one text for every field)."""
    return f"partly parsed: {field} is a time outside 0001-01-01 .. 9999-12-31 UTC (its column holds null)"


# Spark's JSON parser (Jackson) refuses a string value of more than 20,000,000 characters, and its row read
# as malformed JSON: a valid 50 MB body was recorded in body_unparsed so (a review). The journal holds the
# body whole, so the parse takes any string a Spark string can hold
PARSER_LIMITS = {"maxStringLen": str(2**31 - 1)}

# the first and the last microsecond .NET's DateTime (and pyarrow's datetime) can hold, in UTC
_FIRST_MICROS, _LAST_MICROS = -62_135_596_800_000_000, 253_402_300_799_999_999


def _escaped(name: str) -> bool:
    """True for a reserved name with any number of ``body_`` before it (``queue``, ``body_queue``, ...)."""
    lowered = name.lower()
    while lowered.startswith("body_") and lowered[5:]:
        lowered = lowered[5:]
    return lowered in _RESERVED


def column_of(key: str) -> str:
    """The column of a body's field: ``body_`` before a name the typed table's own columns use, and before
    a field that already reads like such a column (``body_queue``), so that two fields never share one
    column (a body with ``Queue`` and ``body_queue`` failed its type's every ``bodies``: two columns
    ``body_queue``); a name no column can hold, encoded (``encoded``)."""
    return f"body_{key}" if _escaped(key) else encoded(key)


def key_of(column: str) -> str:
    """The body field of a column (``column_of``'s inverse)."""
    if column.lower().startswith("body_") and _escaped(column[5:]):
        return column[5:]
    return decoded(column)


def encoded(key: str) -> str:
    """``key`` as a column name: itself when a column can hold it and it holds no ``_xHHHH_``; else each
    character a column cannot hold as ``_xHHHH_`` and each ``_xHHHH`` of its own as ``_x005F_xHHHH``
    (``XmlConvert.EncodeName``'s scheme); the empty name as ``_x0000_``."""
    if not key:
        return _EMPTY
    if not BAD_NAME.search(key) and not _ESCAPED_CHAR.search(key):
        return key
    key = _ESCAPE_LIKE.sub(r"_x005F_\1", key)
    return BAD_NAME.sub(lambda m: f"_x{ord(m.group(0)):04X}_", key)


def decoded(column: str) -> str:
    """``encoded``'s inverse."""
    if column == _EMPTY:
        return ""
    if "_x" not in column:
        return column
    return _ESCAPED_CHAR.sub(lambda m: chr(int(m.group(1), 16)), column)


def to_keys(columns: StructType) -> StructType:
    """A table's body columns as the bodies' own field names."""
    return StructType([StructField(key_of(f.name), f.dataType, True) for f in columns.fields])


def to_columns(keys: StructType) -> StructType:
    return StructType([StructField(column_of(f.name), f.dataType, True) for f in keys.fields])


def parsed(
    rows: DataFrame, schema: StructType, xml: bool = True, spellings: dict[str, list[str]] | None = None
) -> DataFrame:
    """``rows`` (the selection's columns) with ``p``: the body as ``schema`` (field names as in the
    body), ``verdict`` (null: written; else the reason it goes to ``body_unparsed``) and ``written``.
    ``xml``: the rows may hold XML bodies (False: none do, so no Python UDF runs). ``spellings``: a
    lower-case name -> the ways the samples spelled it (``evolve.spelled``): a struct's field is also
    read under each other spelling of its name, wherever the body has none under its own (``_spelled``).
    The body's text is never rewritten: a string column holds what the body held (the keys were
    respelled on the text, and an object held by a string column was stored with them respelled too:
    a review)."""
    from pyspark.sql import functions as F

    corrupt_name = CORRUPT  # a name no body field has (a body's own ``_corrupt_record`` failed its type: a review)
    taken = {f.name.lower() for f in schema.fields}
    while corrupt_name.lower() in taken:
        corrupt_name = "_" + corrupt_name
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": corrupt_name, **PARSER_LIMITS}
    is_xml = F.col("format") == "xml"
    source = F.col("text")
    if xml:  # null in, null out for JSON rows: a Python UDF is not skipped inside a CASE
        source = F.when(is_xml, json_of_xml(F.when(is_xml, F.col("text")), schema)).otherwise(source)
    df = rows.withColumn("_json", source)
    others = _others(spellings or {}, corrupt_name)
    with_corrupt = StructType([*schema.fields, StructField(corrupt_name, StringType(), True)])
    read_as, named, build = _spelled(with_corrupt, others, _spelled_depth(schema, others))
    assert isinstance(read_as, StructType)
    p = F.from_json(F.col("_json"), read_as, options)
    if build is not None:  # each field from its first spelling the body holds, as the schema spells it
        # the parse as a column first, its fields then taken from that column: built on the parse itself,
        # each field's expression held a copy of the whole ``from_json`` (its schema too), so a type's plan
        # grew as the square of its fields: one body of 5,000 keys with two spellings of a name ran the
        # driver's JVM out of memory, and its type's bodies failed on every run (a review)
        df = df.withColumn(SPELLED, p.cast(named))
        p = build(F.col(SPELLED))
    df = df.withColumn("p", F.when(F.col("format").isin("json", "xml"), p))
    corrupt = F.col("p").getField(corrupt_name)
    partly = F.from_json(F.col("_json"), "map<string,string>", PARSER_LIMITS).isNotNull()  # a JSON object
    malformed = F.concat(F.lit("malformed "), F.upper(F.col("format")))
    verdict = (
        F.when(F.col("reason").isNotNull(), F.col("reason"))
        .when(F.col("p").isNull(), malformed)
        .when(
            corrupt.isNotNull(),
            F.when(partly, F.coalesce(*_unfit_fields(schema, others), F.lit(PARTLY))).otherwise(malformed),
        )
    )
    for field, outside in _times_outside(schema):  # the first such field of the row named
        verdict = verdict.when(outside, F.lit(out_of_range(field)))
    written = F.col("reason").isNull() & F.col("p").isNotNull() & (corrupt.isNull() | partly)
    return df.withColumn("verdict", verdict).withColumn("written", written)


# How many more fields than its own (or how many times as many, if more) the parse's schema may hold to
# read every spelling of every name (``_spelled``): a struct under each spelling of its name holds a copy
# of its own fields under each of theirs, so spellings nested in spellings multiply (a tree 38 objects
# deep, each name in two casings, is 2^38); past this, names are read under their other spellings only
# down to the depth that fits
MAX_SPELLED_FIELDS = 5_000
# the column holding the body read under every spelling, before each field takes its first spelling
SPELLED = "_spelled"
SPELLED_TIMES = 4
# how many ways of spelling one field's path (each name's spellings, depth by depth) a partly parsed
# row's reason looks up (``_unfit_fields``)
MAX_SPELLED_PATHS = 8
_NO_PATH = "'[]\\"  # characters a name of a JSON path cannot hold


def _others(spellings: dict[str, list[str]], corrupt_name: str) -> Callable[[str], list[str]]:
    """A field's name -> its other spellings the samples showed (the parse's own column: none)."""

    def others(name: str) -> list[str]:
        return [] if name == corrupt_name else [s for s in spellings.get(name.lower(), []) if s != name]

    return others


def _spelled_size(t: DataType, others: Callable[[str], list[str]], depth: int) -> int:
    """How many fields ``_spelled`` makes of ``t`` with the other spellings read ``depth`` objects deep."""
    if isinstance(t, StructType):
        return sum(
            (1 + (len(others(f.name)) if depth > 0 else 0)) * (1 + _spelled_size(f.dataType, others, depth - 1))
            for f in t.fields
        )
    if isinstance(t, ArrayType):
        return _spelled_size(t.elementType, others, depth)
    if isinstance(t, MapType):
        return _spelled_size(t.valueType, others, depth)
    return 0


def _spelled_depth(schema: StructType, others: Callable[[str], list[str]]) -> int:
    """How many objects deep the other spellings are read: all the way (``MAX_SCHEMA_DEPTH`` levels hold
    at most 40 objects), or as deep as ``MAX_SPELLED_FIELDS`` and ``SPELLED_TIMES`` allow."""
    own = _spelled_size(schema, others, 0)
    depth, allowed = 64, max(own + MAX_SPELLED_FIELDS, SPELLED_TIMES * own)
    while depth > 0 and _spelled_size(schema, others, depth) > allowed:
        depth -= 1
    return depth


def _spelled(
    t: DataType, others: Callable[[str], list[str]], depth: int
) -> tuple[DataType, DataType, Callable[[Column], Column] | None]:
    """How to read a value of type ``t`` with its structs' fields under every spelling of their names,
    ``depth`` objects deep: the type ``from_json`` reads (a field under each of its spellings, as the
    body spells them: Spark matches names exactly), the same type renamed so that no struct holds two
    names differing in case only (a field under another spelling is ``_<position>``: Spark's field access
    cannot tell ``Sku`` from ``sku``), and what makes a value of the renamed type a value of ``t`` (each
    field its first spelling that holds a value). None for the last: ``t`` is read as it is.

    Why not respell the keys on the text, as before: a regular expression cannot tell an object's
    keys from the keys of an object held by a string column (a field that is an object in one body and
    text in another), whose text was stored respelled (a review)."""
    from pyspark.sql import functions as F

    if isinstance(t, StructType) and depth > 0:
        read: list[StructField] = []
        renamed_types: list[DataType] = []
        parts: list[tuple[str, int, int, Callable[[Column], Column] | None]] = []
        changed = False
        for f in t.fields:
            inner_read, inner_named, inner_build = _spelled(f.dataType, others, depth - 1)
            names = [f.name, *others(f.name)]
            parts.append((f.name, len(read), len(names), inner_build))
            read += [StructField(name, inner_read, True) for name in names]
            renamed_types += [inner_named] * len(names)
            changed = changed or len(names) > 1 or inner_build is not None
        if not changed:
            return t, t, None
        positional = len(read) > len(t.fields)
        names_of = [f"_{i}" if positional else f.name for i, f in enumerate(read)]
        named = StructType([StructField(n, dt, True) for n, dt in zip(names_of, renamed_types)])

        def build(value: Column) -> Column:
            fields = []
            for name, start, count, inner in parts:
                found = [value.getField(names_of[i]) for i in range(start, start + count)]
                if inner is not None:
                    found = [inner(f) for f in found]
                fields.append((found[0] if count == 1 else F.coalesce(*found)).alias(name))
            return F.when(value.isNotNull(), F.struct(*fields))

        return StructType(read), named, build
    if isinstance(t, ArrayType):
        read_element, named_element, build_element = _spelled(t.elementType, others, depth)
        if build_element is None:
            return t, t, None
        each = build_element
        return ArrayType(read_element, True), ArrayType(named_element, True), lambda v: F.transform(v, each)
    if isinstance(t, MapType):
        read_value, named_value, build_value = _spelled(t.valueType, others, depth)
        if build_value is None:
            return t, t, None
        entry = build_value
        return (
            MapType(t.keyType, read_value, True),
            MapType(t.keyType, named_value, True),
            lambda v: F.transform_values(v, lambda _, x: entry(x)),
        )
    return t, t, None


def _unfit_fields(schema: StructType, others: Callable[[str], list[str]]) -> list[Column]:
    """Per field (depth first, at most ``NAMED_FIELDS``): its reason where the body holds a value for it
    (a JSON path into the row's ``_json``, each name under its spellings: at most ``MAX_SPELLED_PATHS``
    paths) and the parse left it null, the value that did not fit; else null. An element of a list names
    its list; a name no JSON path can spell names none."""
    from functools import reduce
    from itertools import islice, product

    from pyspark.sql import functions as F

    out: list[Column] = []

    def walk(fields: list[StructField], parents: list[list[str]], parsed: Column) -> None:
        for field in fields:
            if len(out) >= NAMED_FIELDS:
                return
            if any(c in field.name for c in _NO_PATH):
                continue  # its own children too: no path reaches them
            names = [*parents, [s for s in [field.name, *others(field.name)] if not any(c in s for c in _NO_PATH)]]
            value = parsed.getField(field.name)
            paths = ("$" + "".join(f"['{name}']" for name in path) for path in product(*names))
            found = [F.get_json_object(F.col("_json"), path).isNotNull() for path in islice(paths, MAX_SPELLED_PATHS)]
            present = reduce(lambda a, b: a | b, found)
            out.append(F.when(present & value.isNull(), F.lit(does_not_fit(".".join(n[0] for n in names)))))
            if isinstance(field.dataType, StructType):
                walk(field.dataType.fields, names, value)

    walk(schema.fields, [], F.col("p"))
    return out


def _outside(field: str) -> Column:
    from pyspark.sql import functions as F

    micros = F.unix_micros(F.col("p").getField(field))
    return (micros < F.lit(_FIRST_MICROS)) | (micros > F.lit(_LAST_MICROS))


def _times_outside(schema: StructType) -> list[tuple[str, Column]]:
    """True for a row whose body's time (a top-level timestamp field) lies outside what .NET's DateTime
    and pyarrow hold: ``0001-01-01T00:00:00+05:00`` is year 0 in UTC, Spark parses and Parquet stores it,
    and then no Python reader of the table could read it, nor an endpoint parse what publish sent of
    it (a review). Such a field is written null (``typed``) and the row recorded as partly parsed. Each
    top-level timestamp field with its check."""
    return [(f.name, _outside(f.name)) for f in schema.fields if isinstance(f.dataType, TimestampType)]


def typed(df: DataFrame, schema: StructType) -> DataFrame:
    """The rows to write: identity columns, then the body's fields as columns."""
    from pyspark.sql import functions as F

    body = [
        (
            F.when(_outside(f.name), F.lit(None)).otherwise(F.col("p").getField(f.name))
            if isinstance(f.dataType, TimestampType)
            else F.col("p").getField(f.name)
        ).alias(column_of(f.name))
        for f in schema.fields
    ]
    return df.where(F.col("written")).select(*[F.col(c) for c in IDENTITY], *body)


def unparsed(df: DataFrame, journal_version: int) -> DataFrame:
    """The rows for ``body_unparsed``."""
    from pyspark.sql import functions as F

    return df.where(F.col("verdict").isNotNull()).select(
        "message_id",
        "queue",
        "seq",
        "id",
        "message_type",
        "type_name",
        "content_type",
        F.col("verdict").alias("reason"),
        F.substring(F.col("text"), 1, 200).alias("body_start"),
        F.lit(journal_version).cast("long").alias("journal_version"),
        F.current_timestamp().alias("recorded_at"),
    )

"""Queue addresses of the two NServiceBus SQL transports, and identifier quoting: one set of rules
per dialect (parse, format, check, quote, qualify), which that dialect's object in ``dialect.py``
binds. Nothing here knows a dialect by name: code holding a name asks ``dialect.dialect(name)``, so
a third dialect gets its own rules, never another dialect's quoting by a fall-through.

Addresses come from config and from database rows (SubscriptionRouting.QueueAddress), so they are
untrusted: every identifier that reaches SQL goes through its dialect's ``quote``, and names a
server would truncate or refuse are rejected here with a message that names them.

SQL Server canonical form: ``Table@[schema]@[catalog]``. The table part runs to the first ``@`` and
is literal; schema and catalog are bracketed (``]]`` escapes ``]``) and may hold ``@``.
PostgreSQL canonical form: ``"schema"."table"``, split at the first dot outside quotes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from queuelake.errors import AddressError

POSTGRES_MAX_TABLE_BYTES = 55  # the transport appends suffixes for index names (63-byte limit)
POSTGRES_MAX_NAME_BYTES = 63
SQLSERVER_MAX_NAME_CHARS = 128  # sysname is nvarchar(128): UTF-16 code units, not code points


@functools.total_ordering
@dataclass(frozen=True)
class QueueAddress:
    """A queue table. ``schema``/``catalog`` None mean "the configured default"."""

    table: str
    schema: str | None = None
    catalog: str | None = None

    def with_defaults(self, schema: str | None, catalog: str | None = None) -> QueueAddress:
        return QueueAddress(self.table, self.schema or schema, self.catalog or catalog)

    def _sort_key(self) -> tuple:
        # None (the default) sorts before any name; a plain tuple comparison would raise TypeError.
        return (self.table, self.schema is not None, self.schema or "", self.catalog is not None, self.catalog or "")

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, QueueAddress):
            return NotImplemented
        return self._sort_key() < other._sort_key()


def _has_surrogate(name: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in name)


def _utf16_units(name: str) -> int:
    return len(name.encode("utf-16-le", "surrogatepass")) // 2


# --- SQL Server ---------------------------------------------------------------------------------


def _read_bracketed(text: str, start: int, what: str, address: str) -> tuple[str, int]:
    """Read ``[name]`` starting at ``text[start] == '['``; return name and the index after it."""
    out = []
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == "]":
            if i + 1 < len(text) and text[i + 1] == "]":
                out.append("]")
                i += 2
                continue
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    raise AddressError(f"address {address!r}: unterminated [ in the {what} part")


def _read_part(text: str, start: int, what: str, address: str) -> tuple[str, int]:
    if start < len(text) and text[start] == "[":
        name, end = _read_bracketed(text, start, what, address)
        if end < len(text) and text[end] != "@":
            raise AddressError(f"address {address!r}: unexpected text after the {what} part")
        return name, end
    end = text.find("@", start)
    end = len(text) if end < 0 else end
    return text[start:end], end


def parse_sqlserver(address: str) -> QueueAddress:
    if not isinstance(address, str) or not address:
        raise AddressError("queue address is empty")
    at = address.find("@")
    if at < 0:
        return _checked_sqlserver(QueueAddress(address), address)
    table = address[:at]
    schema, end = _read_part(address, at + 1, "schema", address)
    catalog = ""
    if end < len(address):  # address[end] == "@"
        catalog, end = _read_part(address, end + 1, "catalog", address)
        if end < len(address):
            raise AddressError(f"address {address!r}: too many @-separated parts")
    return _checked_sqlserver(QueueAddress(table, schema or None, catalog or None), address)


def _checked_sqlserver(addr: QueueAddress, original: str) -> QueueAddress:
    if not addr.table:
        raise AddressError(f"address {original!r}: the table name is empty")
    _check_sqlserver_table(addr.table, original)
    for what, name in (("table", addr.table), ("schema", addr.schema), ("catalog", addr.catalog)):
        if name is None:
            continue
        if "\x00" in name:
            raise AddressError(f"address {original[:80]!r}: {what} name contains a NUL character")
        if _has_surrogate(name):
            raise AddressError(f"address {original[:80]!r}: {what} name contains a lone surrogate (invalid Unicode)")
        size = _utf16_units(name)
        if size > SQLSERVER_MAX_NAME_CHARS:
            raise AddressError(
                f"address {original[:80]!r}: {what} name is {size} characters (UTF-16 code units); "
                f"SQL Server allows {SQLSERVER_MAX_NAME_CHARS}"
            )
    return addr


def checked_sqlserver(addr: QueueAddress, original: str | None = None) -> QueueAddress:
    return _checked_sqlserver(addr, original if original is not None else addr.table)


def _check_sqlserver_table(table: str, original: str) -> None:
    if table.startswith("#"):
        # [#name] is a temporary table in tempdb even when bracketed (and [##name] a global one).
        raise AddressError(
            f"address {original[:80]!r}: table name starts with #, which SQL Server reads as a temporary table"
        )


def _bracket(name: str) -> str:
    return "[" + name.replace("]", "]]") + "]"


def format_sqlserver(addr: QueueAddress) -> str:
    if "@" in addr.table:
        raise AddressError(f"table name {addr.table!r} contains @, which SQL Server addresses cannot hold")
    _checked_sqlserver(addr, addr.table)  # never write an address that parse_sqlserver would refuse
    text = addr.table
    if addr.schema or addr.catalog:
        text += "@" + (_bracket(addr.schema) if addr.schema else "")
    if addr.catalog:
        text += "@" + _bracket(addr.catalog)
    return text


def quote_sqlserver(name: str) -> str:
    """``[name]`` with ``]`` doubled: the only escaping T-SQL needs inside brackets."""
    _check_identifier(name)
    size = _utf16_units(name)
    if size > SQLSERVER_MAX_NAME_CHARS:
        raise AddressError(
            f"identifier {name[:80]!r} is {size} characters (UTF-16 code units); "
            f"SQL Server allows {SQLSERVER_MAX_NAME_CHARS}"
        )
    return _bracket(name)


def qualified_sqlserver(addr: QueueAddress) -> str:
    """``[catalog].[schema].[table]``, the parts present. A None schema or catalog is left to the
    server (apply ``with_defaults`` first to pin them); a catalog without a schema is written
    ``[catalog]..[table]``, since ``[catalog].[table]`` would mean schema ``catalog``."""
    _check_sqlserver_table(addr.table, addr.table)
    table = quote_sqlserver(addr.table)
    schema = quote_sqlserver(addr.schema) if addr.schema is not None else None
    if addr.catalog is not None:
        return quote_sqlserver(addr.catalog) + "." + (schema or "") + "." + table
    return table if schema is None else schema + "." + table


def _check_identifier(name: str) -> None:
    if not isinstance(name, str) or not name:
        raise AddressError(f"identifier {name!r} is empty or not a string")
    if "\x00" in name:
        raise AddressError(f"identifier {name[:80]!r} contains a NUL character")
    if _has_surrogate(name):
        raise AddressError(f"identifier {name[:80]!r} contains a lone surrogate (invalid Unicode)")


# --- PostgreSQL ---------------------------------------------------------------------------------


def _pg_split(address: str) -> list[str]:
    parts: list[str] = []
    buf: list[str] = []
    i, quoted, was_quoted = 0, False, False
    while i < len(address):
        ch = address[i]
        if quoted:
            if ch == '"':
                if i + 1 < len(address) and address[i + 1] == '"':
                    buf.append('"')
                    i += 2
                    continue
                quoted = False
            else:
                buf.append(ch)
        elif ch == '"':
            if buf and not was_quoted:
                raise AddressError(f"address {address!r}: a quote in the middle of a name")
            quoted, was_quoted = True, True
        elif ch == "." and len(parts) == 0:
            parts.append("".join(buf))
            buf, was_quoted = [], False
        else:
            if was_quoted and not quoted:
                raise AddressError(f"address {address!r}: text after a closing quote")
            buf.append(ch)
        i += 1
    if quoted:
        raise AddressError(f"address {address!r}: unterminated quote")
    parts.append("".join(buf))
    return parts


def parse_postgresql(address: str) -> QueueAddress:
    if not isinstance(address, str) or not address:
        raise AddressError("queue address is empty")
    parts = _pg_split(address)
    if len(parts) == 1:
        addr = QueueAddress(parts[0])
    else:
        if not parts[0]:
            raise AddressError(f"address {address!r}: the schema name is empty")
        addr = QueueAddress(parts[1], parts[0])
    return checked_postgresql(addr, address)


def checked_postgresql(addr: QueueAddress, original: str | None = None) -> QueueAddress:
    shown = (original or addr.table)[:80]
    if not addr.table:
        raise AddressError(f"address {shown!r}: the table name is empty")
    if addr.schema is not None and not addr.schema:
        raise AddressError(f"address {shown!r}: the schema name is empty (use None for the default schema)")
    if addr.catalog is not None:
        raise AddressError(f"address {shown!r}: PostgreSQL addresses have no catalog part")
    for what, name in (("table", addr.table), ("schema", addr.schema)):
        if name is None:
            continue
        if "\x00" in name:
            raise AddressError(f"address {shown!r}: {what} name contains a NUL character")
        if _has_surrogate(name):
            raise AddressError(f"address {shown!r}: {what} name contains a lone surrogate (invalid Unicode)")
    size = len(addr.table.encode("utf-8"))
    if size > POSTGRES_MAX_TABLE_BYTES:
        raise AddressError(
            f"address {shown!r}: table name is {size} UTF-8 bytes; the PostgreSQL transport allows "
            f"{POSTGRES_MAX_TABLE_BYTES}"
        )
    if addr.schema is not None:
        size = len(addr.schema.encode("utf-8"))
        if size > POSTGRES_MAX_NAME_BYTES:
            raise AddressError(
                f"address {shown!r}: schema name is {size} UTF-8 bytes; PostgreSQL allows {POSTGRES_MAX_NAME_BYTES}"
            )
    return addr


def quote_postgresql(name: str) -> str:
    """``"name"`` with ``"`` doubled. Names are case-sensitive, as the transport creates them."""
    _check_identifier(name)
    size = len(name.encode("utf-8"))
    if size > POSTGRES_MAX_NAME_BYTES:
        raise AddressError(
            f"identifier {name[:80]!r} is {size} UTF-8 bytes; PostgreSQL allows {POSTGRES_MAX_NAME_BYTES} "
            "(it would silently truncate a longer name)"
        )
    return '"' + name.replace('"', '""') + '"'


def format_postgresql(addr: QueueAddress) -> str:
    checked_postgresql(addr)  # never write an address that parse_postgresql would refuse (or drop a catalog)
    table = '"' + addr.table.replace('"', '""') + '"'
    if addr.schema is None:
        return table
    return '"' + addr.schema.replace('"', '""') + '".' + table


def qualified_postgresql(addr: QueueAddress) -> str:
    """``"schema"."table"`` (``"table"`` alone when the schema is left to the search path)."""
    if addr.catalog is not None:
        raise AddressError(f"address {addr.table[:80]!r}: PostgreSQL addresses have no catalog part")
    parts = [addr.schema, addr.table] if addr.schema is not None else [addr.table]
    return ".".join(quote_postgresql(p) for p in parts)

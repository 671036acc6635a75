"""A queue's rows, picked as the user names the queue: the transports spell one queue several ways
(`error`, `public.error`, `"public"."error"`, `error@[dbo]@[nsb]`), and a notebook parameter names it
once. An empty selection is a note, not an empty plot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import functions as F

from queuelake.dialects.address import QueueAddress, parse_postgresql
from queuelake.errors import AddressError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

# PostgreSQL's canonical address, as the journal's ``queue`` column holds it: ``"schema"."table"``, each
# identifier in double quotes, a quote inside one doubled (``"O'Brien""s"`` is the table O'Brien"s)
_IDENTIFIER = r'"((?:[^"]|"")*)"'
_POSTGRESQL_ADDRESS = r'^"(?:[^"]|"")*"(?:\."(?:[^"]|"")*")?$'


def unquoted(column: Column) -> Column:
    """A queue address without its quotes: each identifier of a PostgreSQL address (the whole value must be
    one) loses the quotes around it, and a doubled quote inside it stands for one: `"public"."O'Brien""s"`
    is public.O'Brien"s. Anything else (SQL Server's `error@[dbo]@[nsb]`, a name already unquoted) is left
    as it is, so unquoting twice changes nothing."""
    inner = F.regexp_replace(F.regexp_replace(column, _IDENTIFIER, "$1"), '""', '"')
    return F.when(column.rlike(_POSTGRESQL_ADDRESS), inner).otherwise(column)


def unquote_queues(df: DataFrame) -> DataFrame:
    """The ``queue`` column without quotes (``unquoted``): `"public"."Sales"` reads better as public.Sales,
    and a queue parameter is compared with it as the user writes it."""
    return df.withColumn("queue", unquoted(F.col("queue")))


def queue_rows(df: DataFrame, queue: str) -> DataFrame:
    """The rows of the queue called ``queue`` (``queue_matches``), or all rows when the parameter is empty."""
    wanted = queue_matches(queue)
    return df if wanted is None else df.where(wanted)


def queue_matches(queue: str) -> Column | None:
    """Whether a row's ``queue`` is the queue called ``queue`` (None: the parameter is empty, every row). The
    transports spell one queue several ways, and the frame's ``queue`` column may be unquoted
    (``unquote_queues``) or not. ``queue`` is read as queuelake reads a PostgreSQL address (split at the
    first dot outside quotes):
    - a bare name (`error`, or `"Sales.Orders"` for a table with a dot) is that table in any schema:
      public.error, `"audit"."error"`, `error@[dbo]@[nsb]`;
    - a qualified one (`public.error`, `"public"."error"`) is that table in that schema only (SQL Server's
      `error@[public]` too, in any catalog), never `other.error` nor `"other"."public.error"`; written
      unquoted, it is also a SQL Server table of that name (whose address takes a dot as part of the name);
    - SQL Server's own form (`error@[dbo]`, holding an ``@``) is that address, in any catalog when it names
      none. A value written exactly as the column holds it (unquoted) always matches."""
    text = queue.strip()
    if not text:
        return None
    column = unquoted(F.col("queue"))
    as_written = column == text
    if "@" in text and not text.startswith('"'):  # SQL Server's form, Table@[schema]@[catalog]
        return as_written | column.startswith(text + "@")
    try:
        address = parse_postgresql(text)
    except AddressError:  # not one PostgreSQL takes (a quote inside a name, a long name): split at its first dot
        schema, dot, rest = text.partition(".")
        address = QueueAddress(rest, schema) if dot and schema and rest else QueueAddress(text)
    if not text.startswith('"'):  # a SQL Server table of this very name (its table part is literal), any schema
        as_written = as_written | column.startswith(text + "@")
    table = address.table
    if address.schema is None:
        # PostgreSQL's schema.table, unquoted: the table is what follows the first dot, as queuelake splits an
        # address (a dotted table name, as NServiceBus endpoints often have, is not taken for a schema's)
        table_part = F.regexp_extract(column, r"^[^.]*\.(.*)$", 1)
        bare = (table_part == table) | column.startswith(table + "@")
        if "." not in table:  # an address without a schema (a dotted one would read as schema.table)
            bare = bare | (column == table)
        return as_written | bare
    sqlserver = f"{table}@[{address.schema.replace(']', ']]')}]"
    in_schema = (column == f"{address.schema}.{table}") | (column == sqlserver) | column.startswith(sqlserver + "@")
    return as_written | in_schema


def none_if_empty(df: DataFrame, what: str, queue: str) -> DataFrame | None:
    """``df``, or None with a note saying what was looked for where, so that the cells after it skip instead
    of drawing empty plots."""
    if not df.isEmpty():
        return df
    where = f"queue {queue!r}" if queue else "the journal"
    print(f"note: no {what} in {where}: nothing to show")
    return None

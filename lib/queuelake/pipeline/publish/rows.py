"""Which rows of a round are sent, in the round's fixed order (files by path, rows in file order),
cut into batches of Arrow columns. The driver and the executors read a round through these, so both
cut the same rows into the same batches."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.lake.round_files import open_file, read_table

# What a send reads of an outbound row (the outbound contract's columns). Columns of the user's own
# beside them are never converted to Python: a value there past what Python holds (a timestamp in year
# 20000) failed the whole round, although nothing is sent from it.
SENT_COLUMNS = [
    "key",
    "message_type",
    "intent",
    "destination",
    "body",
    "headers",
    "ttbr_ms",
    "deliver_at",
    "correlation_id",
    "conversation_id",
]


# The types a batch is built with, whatever the files wrote (string_view from delta-rs rewrites, a
# body as text, int96 or naive times from Spark): one schema, so batches cut across files concatenate.
SENT_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("message_type", pa.string()),
        ("intent", pa.string()),
        ("destination", pa.string()),
        ("body", pa.binary()),  # JSON text is sent as its UTF-8 bytes
        ("headers", pa.map_(pa.string(), pa.string())),
        ("ttbr_ms", pa.int64()),
        ("deliver_at", pa.timestamp("us", tz="UTC")),  # naive times are UTC
        ("correlation_id", pa.string()),
        ("conversation_id", pa.string()),
    ]
)
_PLAIN = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}


def _cast(column: pa.Array | pa.ChunkedArray, kind: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """``column`` as ``kind``: view types through their plain form (not every kernel takes them); a
    timestamp unit truncated as Python's datetime does (nanoseconds Spark wrote)."""
    if column.type == kind:
        return column
    if column.type in _PLAIN:
        column = column.cast(_PLAIN[column.type])
    return column.cast(kind, safe=not pa.types.is_timestamp(kind))


def sent_columns(batch: pa.Table | pa.RecordBatch) -> pa.Table:
    """The sent columns of ``batch`` in ``SENT_SCHEMA``, a missing optional column as nulls."""
    n = batch.num_rows
    names = batch.schema.names
    columns = [_cast(batch.column(f.name), f.type) if f.name in names else pa.nulls(n, f.type) for f in SENT_SCHEMA]
    at = SENT_SCHEMA.get_field_index("message_type")
    columns[at] = tidy_message_types(columns[at])
    return pa.Table.from_arrays(columns, schema=SENT_SCHEMA)


def tidy_message_types(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``message_type`` as routing reads it: each ``;``-separated entry trimmed, empty ones dropped. Why:
    routing tidied its own copy, and the header went out as written (`` A.B , Asm ;;``), which an
    endpoint resolving each entry may not (a review). Each distinct value is tidied once."""
    from queuelake.nsb.message_types import split_types

    whole = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    encoded = pc.dictionary_encode(whole)
    given = encoded.dictionary.to_pylist()
    tidy = [";".join(split_types(v) or []) for v in given]
    if tidy == given:
        return column
    return pa.array(tidy, pa.string()).take(encoded.indices)


def table_of(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows given as dicts (tests, callers of ``Router.build``) in ``SENT_SCHEMA``: a text body as
    its UTF-8 bytes, headers as pairs or a dict, a naive ``deliver_at`` as UTC."""
    columns: dict[str, list[Any]] = {f.name: [row.get(f.name) for row in rows] for f in SENT_SCHEMA}
    columns["body"] = [b.encode("utf-8") if isinstance(b, str) else b for b in columns["body"]]
    columns["headers"] = [list(h.items()) if isinstance(h, dict) else h for h in columns["headers"]]
    columns["deliver_at"] = [
        t.replace(tzinfo=dt.timezone.utc) if t is not None and t.tzinfo is None else t for t in columns["deliver_at"]
    ]
    return pa.table(columns, schema=SENT_SCHEMA)


def accepted_batches(
    parquet: Any, bad_keys: set[str] | frozenset[str], row_groups: list[int] | None = None
) -> Iterator[pa.Table]:
    """The rows of one outbound Parquet file (or of some of its row groups) that are sent: a key,
    not rejected; in file order, one Parquet batch at a time, as ``SENT_SCHEMA`` columns (no Python
    object per row: a rejected row's value Python cannot hold, a year 20000, is never converted).
    The driver and the executors read a round through this, so both cut the same rows into batches."""
    columns = [c for c in SENT_COLUMNS if c in parquet.schema_arrow.names]
    for record_batch in parquet.iter_batches(batch_size=5000, row_groups=row_groups, columns=columns):
        mask = accepted(record_batch["key"], bad_keys)
        table = sent_columns(record_batch)  # no view types left: filter has kernels for these
        yield table if pc.all(mask).as_py() else table.filter(mask)


def without_rejected_values(batch: pa.RecordBatch | pa.Table, mask: pa.Array) -> pa.RecordBatch | pa.Table:
    """``batch`` with the rejected rows' ``deliver_at`` made null (``mask``: the rows sent). A rejected
    row may hold one Python cannot (year 20000, a BC date): the contract refuses it, and converting
    it anyway failed the round. (Not a filter: pyarrow 26 has no take kernel for the string_view
    columns delta-rs rewrites.)"""
    if "deliver_at" not in batch.schema.names or pc.all(mask).as_py():
        return batch
    index = batch.schema.get_field_index("deliver_at")
    return batch.set_column(index, "deliver_at", pc.if_else(mask, batch.column(index), None))


def accepted(keys: pa.ChunkedArray | pa.Array, bad_keys: set[str] | frozenset[str]) -> pa.Array:
    """True for the rows that are sent: a key, and not excluded (rejected by the outbound contract, or
    carried over unchanged by a rewrite: ``carried``)."""
    keys = keys.cast(pa.string())  # files delta-rs rewrites store string_view (no is_in kernel)
    mask = pc.is_valid(keys)
    if len(bad_keys) > _LOOKUPS * len(keys):
        # far more keys excluded than looked up (a rewrite's carried-over rows): ``is_in`` would hash
        # them all for every batch; a look-up per row costs the batch's size instead
        out = pa.array([key in bad_keys for key in keys.to_pylist()], pa.bool_())
        mask = pc.and_(mask, pc.invert(out))
    elif bad_keys:
        mask = pc.and_(mask, pc.invert(pc.is_in(keys, excluded(bad_keys))))
    return pc.fill_null(mask, False)


_LOOKUPS = 8  # excluded keys per key looked up past which ``accepted`` looks each key up in Python


def excluded(bad_keys: set[str] | frozenset[str]) -> pa.Array:
    """``bad_keys`` as an Arrow array, built once per frozen set. Why: it was built (and sorted) for every
    Parquet batch of the round, and a rewrite's 300,000 carried-over keys took 40 s to cut 60 batches."""
    return _excluded(bad_keys if isinstance(bad_keys, frozenset) else frozenset(bad_keys))


@functools.lru_cache(maxsize=4)
def _excluded(bad_keys: frozenset[str]) -> pa.Array:
    return pa.array(list(bad_keys), pa.string())


def in_batches(tables: Iterable[pa.Table], size: int) -> Iterator[pa.Table]:
    """``tables`` (of one schema) cut into tables of ``size`` rows (the last may be shorter), each
    one contiguous chunk per column."""
    held: list[pa.Table] = []
    count = 0
    for table in tables:
        while table.num_rows:
            part = table.slice(0, size - count)
            held.append(part)
            count += part.num_rows
            table = table.slice(part.num_rows)
            if count == size:
                yield pa.concat_tables(held).combine_chunks()
                held, count = [], 0
    if held:
        yield pa.concat_tables(held).combine_chunks()


def round_batches(files: list[str], bad_keys: set[str] | frozenset[str], size: int) -> Iterator[pa.Table]:
    """Accepted rows in the round's fixed order (files by path, rows in file order), in batches."""
    frozen = frozenset(bad_keys)  # its Arrow array built once (``excluded``)
    return in_batches((table for uri in files for table in accepted_batches(open_file(uri), frozen)), size)


def count_accepted(files: list[str], bad_keys: set[str]) -> tuple[int, set[str]]:
    """Rows of the round that will be sent, and the message types its Publish rows fan out (reads only
    the key, intent and type columns)."""
    total, published = 0, set[str]()
    frozen = frozenset(bad_keys)  # its Arrow array built once (``excluded``)
    for uri in files:
        # files delta-rs rewrites (DELETE/UPDATE) store string_view, which is_in has no kernel for
        table = read_table(uri, ["key", "intent", "message_type"])
        keys = table["key"].cast(pa.string())
        sent = pc.is_valid(keys)
        if bad_keys:
            sent = pc.and_(sent, pc.invert(pc.is_in(keys, excluded(frozen))))
        total += pc.sum(sent).as_py() or 0
        publishes = pc.and_(sent, pc.invert(pc.fill_null(pc.equal(table["intent"].cast(pa.string()), "Send"), False)))
        types = pc.unique(pc.filter(table["message_type"].cast(pa.string()), publishes))
        published.update(t for t in types.to_pylist() if t is not None)
    return total, published

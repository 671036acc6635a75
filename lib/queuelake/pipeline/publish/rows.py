"""Which rows of a round are sent, in the round's fixed order (files by path, rows in file order),
cut into batches. The driver and the executors read a round through these, so both cut the same
rows into the same batches."""

from __future__ import annotations

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


def accepted_rows(
    parquet: Any, bad_keys: set[str] | frozenset[str], row_groups: list[int] | None = None
) -> Iterator[dict[str, Any]]:
    """The rows of one outbound Parquet file (or of some of its row groups) that are sent: a key,
    not rejected; in file order, one Parquet batch in memory. The driver and the executors read a
    round through this, so both cut the same rows into batches."""
    columns = [c for c in SENT_COLUMNS if c in parquet.schema_arrow.names]
    for record_batch in parquet.iter_batches(batch_size=5000, row_groups=row_groups, columns=columns):
        mask = accepted(record_batch["key"], bad_keys)
        rows = without_rejected_values(record_batch, mask).to_pylist()
        yield from (row for row, ok in zip(rows, mask.to_pylist()) if ok)


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
    """True for the rows that are sent: a key, and not rejected by the outbound contract."""
    keys = keys.cast(pa.string())  # files delta-rs rewrites store string_view (no is_in kernel)
    mask = pc.is_valid(keys)
    if bad_keys:
        mask = pc.and_(mask, pc.invert(pc.is_in(keys, pa.array(sorted(bad_keys), pa.string()))))
    return pc.fill_null(mask, False)


def in_batches(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    """``rows`` cut into lists of ``size`` (the last may be shorter)."""
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def round_batches(files: list[str], bad_keys: set[str], size: int) -> Iterator[list[dict[str, Any]]]:
    """Accepted rows in the round's fixed order (files by path, rows in file order), in batches."""
    return in_batches((row for uri in files for row in accepted_rows(open_file(uri), bad_keys)), size)


def count_accepted(files: list[str], bad_keys: set[str]) -> int:
    """Rows of the round that will be sent (reads only the key column)."""
    total = 0
    for uri in files:
        # files delta-rs rewrites (DELETE/UPDATE) store string_view, which is_in has no kernel for
        keys = read_table(uri, ["key"])["key"].cast(pa.string())
        total += len(keys) - keys.null_count
        if bad_keys:
            total -= pc.sum(pc.is_in(keys, pa.array(list(bad_keys), pa.string()))).as_py() or 0
    return total

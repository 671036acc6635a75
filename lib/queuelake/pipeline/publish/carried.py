"""Rows a round's files carry over unchanged from a rewrite of the table: not sent again.

A round sends the rows the table gained, as a set of rows, not as files. Why: a data commit's added
files are all new to the increment (``increments._surviving``), so an outbound table another job
overwrote (``mode("overwrite")``, CREATE OR REPLACE, a full refresh), MERGEd or UPDATEd (an upsert by key
rewrites whole files) had every row of the files it wrote published again, with the same MessageId (500
duplicate copies in a review's run, no warning). When a round's versions (P, V] hold such a commit, a
row of its files that is identical, in every column the wire uses (``rows.SENT_COLUMNS``), to a row of
the table at P that the range removed was sent before: its key joins the round's exclusion, as a
rejected row's does, so the driver and the executors cut the same batches, and a resumed round
computes the same set (P and V are fixed). A row with the same key and changed content is sent.

Rows are compared by a 128-bit fingerprint (BLAKE2b) of their wire columns, each value length-prefixed
and its nulls marked, after ``rows.sent_columns`` (the types a send reads, whatever a writer stored);
the fingerprints of P's removed rows are held as one sorted numpy array, 16 bytes a row, and the files
are read one Parquet batch at a time, their wire columns only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from queuelake.errors import PublishError
from queuelake.lake.port import LakeEngine
from queuelake.lake.round_files import open_file
from queuelake.pipeline.publish.rows import SENT_COLUMNS, sent_columns
from queuelake.report import log

_READ_ROWS = 20_000  # rows of a file read at once


def _text(column: pa.Array) -> pa.Array:
    """A column's values as bytes, each unambiguous within its row's concatenation: ``V<len>:<value>``,
    ``N`` for a null; a map as its entries' keys and values so prefixed, in order."""
    kind = column.type
    if pa.types.is_map(kind):
        # the entries' children whole (a slice's offsets point into them), joined back per row
        flat = _join([_text(column.keys), _text(column.items)])
        value = pc.binary_join(pa.ListArray.from_arrays(column.offsets, flat), b"")
    elif pa.types.is_timestamp(kind):
        value = column.cast(pa.int64()).cast(pa.string()).cast(pa.binary())
    else:
        value = column if pa.types.is_binary(kind) else column.cast(pa.string()).cast(pa.binary())
    length = pc.binary_length(value).cast(pa.string()).cast(pa.binary())
    marked = pc.binary_join_element_wise(b"V", length, b":", value, b"")
    return pc.if_else(pc.is_null(column), pa.scalar(b"N", pa.binary()), marked)


def _join(parts: list[pa.Array]) -> pa.Array:
    return pc.binary_join_element_wise(*parts, b"")


def fingerprints(table: pa.Table | pa.RecordBatch) -> np.ndarray:
    """One 16-byte fingerprint per row of ``table``'s wire columns (``rows.SENT_COLUMNS``; a missing
    one counts as nulls), as a numpy ``S16`` array in row order."""
    sent = sent_columns(table).combine_chunks()
    rows = _join([_text(sent.column(name).combine_chunks()) for name in SENT_COLUMNS])
    digests = b"".join(hashlib.blake2b(row, digest_size=16).digest() for row in rows.to_pylist())
    return np.frombuffer(digests, dtype="S16")


def _batches(files: Iterable[str]) -> Iterator[pa.RecordBatch]:
    for uri in files:
        parquet = open_file(uri)
        columns = [c for c in SENT_COLUMNS if c in parquet.schema_arrow.names]
        yield from parquet.iter_batches(batch_size=_READ_ROWS, columns=columns)


def known(tables: Iterable[pa.Table | pa.RecordBatch]) -> np.ndarray:
    """The sorted fingerprints of every row of ``tables``."""
    parts = [fingerprints(t) for t in tables]
    return np.sort(np.concatenate(parts)) if parts else np.empty(0, dtype="S16")


def unchanged(before: np.ndarray, tables: Iterable[pa.Table | pa.RecordBatch]) -> tuple[set[str], int]:
    """The keys of the rows of ``tables`` whose fingerprint is in ``before`` (sorted), and how many
    rows those keys hold. A key that also holds a row not in ``before`` (the same key twice in a
    round, once changed) is not among them: it is sent."""
    same: list[pa.Array] = []
    changed: list[pa.Array] = []
    for table in tables:
        found = fingerprints(table)
        hit = np.zeros(len(found), dtype=bool)
        if len(before):
            at = np.minimum(np.searchsorted(before, found), len(before) - 1)
            hit = before[at] == found
        keys = table.column("key").cast(pa.string())
        keys = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
        mask = pa.array(hit)
        same.append(pc.drop_null(keys.filter(mask)))
        changed.append(pc.drop_null(keys.filter(pc.invert(mask))))
    if not same:
        return set(), 0
    carried = pa.concat_arrays(same)
    keys = pc.unique(carried)
    keys = keys.filter(pc.invert(pc.is_in(keys, pc.unique(pa.concat_arrays(changed)))))
    return set(keys.to_pylist()), int(pc.sum(pc.is_in(carried, keys)).as_py() or 0)


def carried_over(
    lake: LakeEngine,
    output: str,
    after: int | None,
    upto: int,
    files: list[str],
    resumed: bool,
    whole: bool = False,
) -> tuple[set[str], int, bool]:
    """The keys of the round (``after``, ``upto``]'s rows (in ``files``) carried over unchanged by a
    rewrite of the table, their row count, and whether the round is cut with every row of its files
    because the rows carried over cannot be told (the caller records that in the ledger before the
    round's first batch: its ``whole:`` row); nothing, with nothing read, when no data commit of the
    range removed files (``LakeEngine.rewrite``).

    When the removed files are gone (vacuumed), a new round sends every row, said. A round the ledger
    says was cut that way (``whole``) resumes that way: the same rows in the same order, so the same
    batches, whatever storage holds now. Before that row was kept, such a round, interrupted, failed on
    every later run ("its batches cannot be cut again"), with no way on but editing the ledger. A
    resumed round (``resumed``: batches in the ledger) cut without its unchanged rows whose removed
    files are gone since fails: its batches left cannot be cut again; the error names the files to
    restore."""
    if whole:
        log.info(
            "publish %s: the round (%s, %s] was cut with every row of its files (the rows a rewrite carried over "
            "could not be told when it started): it %s so",
            output,
            after,
            upto,
            "resumes" if resumed else "is cut",
        )
        return set(), 0, True
    found = lake.rewrite(output, after, upto)
    if found is None or not files:
        return set(), 0, False
    versions = ", ".join(str(v) for v, _ in found.commits)
    operations = ", ".join(dict.fromkeys(op for _, op in found.commits))
    plural = "s" if len(found.commits) > 1 else ""
    if found.gone:
        why = (
            f"version{plural} {versions} rewrote the table ({operations}) and {len(found.gone)} file(s) of version "
            f"{after} it removed are no longer in storage (vacuumed), so the rows it carried over unchanged cannot "
            "be told from new ones"
        )
        if resumed:
            shown = ", ".join(found.gone[:5]) + (f" and {len(found.gone) - 5} more" if len(found.gone) > 5 else "")
            raise PublishError(
                f"publish {output}: the round ({after}, {upto}] was started without the rows it carried over "
                f"unchanged, but {why} since: the batches it has not sent cannot be cut again as they were, so "
                "none is sent. Restore those files into the table's folder (from the storage's versioning, soft "
                f"delete or a backup) and run publish again: {shown}"
            )
        log.warning("publish %s: %s; every row of the round's files is sent, some again", output, why)
        return set(), 0, True
    keys, rows = unchanged(known(_batches(found.removed)), _batches(files))
    log.info(
        "publish %s: version%s %s rewrote the table (%s); %d row(s) carried over unchanged, not sent again",
        output,
        plural,
        versions,
        operations,
        rows,
    )
    return keys, rows, False

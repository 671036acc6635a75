"""``message_keys`` rewritten into files of non-overlapping key ranges, each sorted by key: after it, the
log's statistics of ``key`` leave ~1 index file per looked-up id (``search.py``), where every
increment file (sorted, but spanning nearly all GUIDs) admits every id.

Why range by range: the index has a row per journal row and key kind (~3 per journal row on a real
journal: 5,770,443 at 1,923,481 journal rows in bench/where.py). The ranges' bounds are quantiles of a
sample of the keys; the index is read once, a batch at a time, each batch sorted and cut into local
Arrow files, one per range (``_spill``); each range is then deduplicated, sorted and appended as one
file. Memory holds one range (``RANGE_ROWS``); local disk the index once. (A first version read each
range with ``matching_rows``: on the build's increments, a row group of a million rows each, nothing
was pruned and every range read the whole index: 74 s for 12 ranges at 2,000,000 journal rows.)

``maintain`` runs it after its compaction of every table (which bin-packs files and may merge
rewritten ones): it rewrites when an increment came since the last rewrite or two files' ranges overlap.

Why it is safe beside a running ``maintain`` build or a second rewrite: the rows rewritten are those of
increments up to the watermark read first (``upto <= covered``), appended with the rewrite's number;
then one delete removes ``upto <= covered AND rewrite < number``. Increments written meanwhile carry a
later ``upto`` and stay; a row is deleted only once a complete copy of its range with a higher number
is committed. A rewrite killed half-way leaves duplicates, which the next one removes.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from queuelake.lake.deletes import RowFilter
from queuelake.lake.engines import table_engine
from queuelake.lake.port import LakeEngine
from queuelake.lake.round_files import open_file
from queuelake.pipeline.key_index.build import KEYS, SCHEMA, watermark
from queuelake.report import log

REWRITE_APP_ID = "queuelake.message_keys.rewrite"
RANGE_ROWS = 500_000  # index rows per rewritten file (a lookup reads one such file's matching row groups)
_IDENTITY = ["key", "kind", "queue", "seq"]  # an index row, whatever increment or rewrite wrote it
_BATCH_ROWS = 200_000  # rows read at once while the index is cut into ranges
_STEP = 1_000_000  # application versions per rewrite: number * _STEP + range


@dataclass
class Rewritten:
    rewrite: int | None = None
    covered: int | None = None
    files_before: int = 0
    files_written: int = 0
    rows: int = 0
    duplicates_dropped: int = 0
    skipped: str | None = None

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rewrite": self.rewrite,
            "journal_version_covered": self.covered,
            "files_before": self.files_before,
            "files_written": self.files_written,
            "rows": self.rows,
            "duplicates_dropped": self.duplicates_dropped,
        }
        if self.skipped:
            out["skipped"] = self.skipped
        return out


def rewrite(lake: LakeEngine) -> Rewritten:
    """Rewrite the index's rows up to its watermark into sorted files of disjoint key ranges, unless
    they already are (no increment written since the last rewrite)."""
    keys = table_engine(lake, KEYS)
    covered = watermark(lake)
    out = Rewritten(covered=covered)
    if covered is None:
        out.skipped = "no index yet"
        return out
    version = keys.table_version(KEYS)
    assert version is not None
    files = keys.added_files(KEYS, None, version)
    out.files_before = len(files)
    increments = keys.count_rows(KEYS, _where(f'"rewrite" = 0 AND "upto" <= {covered}', _increments(covered)))
    if increments.rows == 0 and not _overlapping(files):
        out.skipped = "no increment since the last rewrite, and the files' key ranges are disjoint"
        return out
    number = (keys.last_version(KEYS, REWRITE_APP_ID) or 0) // _STEP + 1
    out.rewrite = number
    cuts = _cuts(files)
    # said as it goes: a rewrite of a 3M-message journal's index was silent for 50 s (a review)
    log.info(
        "message_keys: rewrite %d: %d file(s) (%d row(s) added since the last rewrite) into %d key range(s)",
        number,
        len(files),
        increments.rows,
        len(cuts) + 1,
    )
    with tempfile.TemporaryDirectory(prefix="queuelake-message-keys-") as spill:
        ranges = _spill(files, cuts, covered, Path(spill))
        for i, path in enumerate(ranges):
            with pa.memory_map(str(path)) as source:
                rows = pa.ipc.open_file(source).read_all()
            unique = rows.group_by(_IDENTITY).aggregate([])
            out.duplicates_dropped += rows.num_rows - unique.num_rows
            unique = unique.sort_by([(name, "ascending") for name in _IDENTITY])
            n = unique.num_rows
            data = unique.append_column("upto", pa.array([covered] * n, pa.int64()))
            data = data.append_column("rewrite", pa.array([number] * n, pa.int64())).cast(SCHEMA)
            if n:
                keys.append(KEYS, data, REWRITE_APP_ID, number * _STEP + i + 1)
                out.files_written += 1
                out.rows += n
            log.info("message_keys: rewrite %d: key range %d/%d written (%d row(s))", number, i + 1, len(ranges), n)
            del rows, unique, data
    old = f'"upto" <= {covered} AND "rewrite" < {number}'
    keys.delete_rows(KEYS, _where(old, (ds.field("upto") <= covered) & (ds.field("rewrite") < number)))
    log.debug(
        "message_keys: rewrite %d: %d file(s) into %d of disjoint key ranges (%d row(s), %d duplicate(s) dropped)",
        number,
        out.files_before,
        out.files_written,
        out.rows,
        out.duplicates_dropped,
    )
    return out


def _overlapping(files: list[str]) -> bool:
    """Do two files' key ranges overlap (from their footers)? A compaction (``maintain``'s bin-packing
    of every table, which runs before this) may have merged rewritten files."""
    ranges = []
    for uri in files:
        meta = open_file(uri).metadata
        if meta.num_rows == 0:
            continue
        index = next((i for i in range(meta.num_columns) if meta.schema.column(i).path == "key"), None)
        stats = (
            [meta.row_group(g).column(index).statistics for g in range(meta.num_row_groups)]
            if index is not None
            else []
        )
        if not stats or any(s is None or not s.has_min_max for s in stats):
            return True
        ranges.append((min(str(s.min) for s in stats), max(str(s.max) for s in stats)))
    ranges.sort()
    return any(low <= high for (_, high), (low, _) in zip(ranges, ranges[1:]))


def _cuts(files: list[str]) -> list[str]:
    """Keys cutting the index into ranges of ~``RANGE_ROWS`` rows each: quantiles of a sample of the
    keys (every n-th key of each file, the files read one at a time, their key column alone)."""
    total = sum(open_file(uri).metadata.num_rows for uri in files)
    ranges = math.ceil(total / RANGE_ROWS)
    if ranges <= 1:
        return []
    every = max(1, total // (ranges * 100))
    sample: list[str] = []
    for uri in files:
        column = open_file(uri).read(columns=["key"]).column("key")
        sample += column.take(pa.array(range(0, len(column), every))).to_pylist()
    sample.sort()
    cuts: list[str] = []
    for r in range(1, ranges):
        key = sample[min(len(sample) - 1, r * len(sample) // ranges)]
        if not cuts or key > cuts[-1]:
            cuts.append(key)
    return cuts


def _spill(files: list[str], cuts: list[str], covered: int, folder: Path) -> list[Path]:
    """The rows up to the watermark (``upto <= covered``) of every file, read once a batch at a time,
    each batch sorted and cut at ``cuts`` into one local Arrow file per key range. Memory holds a
    batch; the ranges' files hold the index once."""
    schema = pa.schema([SCHEMA.field(name) for name in _IDENTITY])
    paths = [folder / f"{i}.arrow" for i in range(len(cuts) + 1)]
    writers = [pa.ipc.new_file(str(path), schema) for path in paths]
    try:
        for uri in files:
            for batch in open_file(uri).iter_batches(columns=[*_IDENTITY, "upto"], batch_size=_BATCH_ROWS):
                rows = pa.Table.from_batches([batch])
                rows = rows.filter(pc.less_equal(rows.column("upto"), covered)).select(_IDENTITY).cast(schema)
                rows = rows.sort_by("key")
                keys = rows.column("key")
                start = 0
                for i, cut in enumerate([*cuts, None]):
                    stop = rows.num_rows if cut is None else _first_at_or_after(keys, cut, start)
                    if stop > start:
                        writers[i].write_table(rows.slice(start, stop - start))
                    start = stop
    finally:
        for writer in writers:
            writer.close()
    return paths


def _first_at_or_after(keys: pa.ChunkedArray, cut: str, low: int) -> int:
    """The first index at or after ``low`` whose key is >= ``cut`` in sorted ``keys`` (a bisection)."""
    high = len(keys)
    while low < high:
        middle = (low + high) // 2
        if keys[middle].as_py() < cut:
            low = middle + 1
        else:
            high = middle
    return low


def _increments(covered: int) -> ds.Expression:
    return (ds.field("rewrite") == 0) & (ds.field("upto") <= covered)


def _where(sql: str, expression: ds.Expression) -> RowFilter:
    return RowFilter(sql, expression, ("upto", "rewrite"))

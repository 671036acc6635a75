"""Write Parquet data files into a Delta table's folder, then commit them in one transaction.

This is the half of a Delta write that deltalake's ``write_deltalake`` does not expose: Spark executors
write files (``FileSink``) and one process commits all of them (``commit_files``) with the application
transaction. Until that commit the files are invisible (Delta readers only see files the log names), so
a process killed in between leaves orphan files and no rows; ``maintain`` vacuums orphans later.

Here: the files (written, described with their Delta statistics, staged, deleted), and
``commit_files``, which hands them to the commit as add actions. The commit itself, exactly once per
(app_id, version), is ``delta_rs/commits.py``'s; the partition spellings are ``partitions.py``'s.

Runs in Spark Python workers too: keep imports light and everything picklable.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from queuelake.lake.delta_rs.commits import commit_actions
from queuelake.lake.partitions import partition_dir, split_partitions
from queuelake.timetext import iso_utc

TARGET_FILE_BYTES = 256 * 1024 * 1024  # Arrow bytes per data file before rolling over to the next
ROW_GROUP_BYTES = 64 * 1024 * 1024  # Arrow bytes buffered per row group (bounded memory per open file)
_STRING_STATS_MAX = 64  # longer strings get no min/max: a truncated max would be wrong for data skipping
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass
class WrittenFile:
    """One data file written and not yet committed; ``path`` is relative to the table, not URI-encoded
    (deltalake encodes it when it writes the log)."""

    path: str
    size: int
    partition_values: dict[str, str | None]
    modification_time: int
    stats: str

    def add_action(self):  # -> deltalake.transaction.AddAction
        from deltalake.transaction import AddAction

        return AddAction(self.path, self.size, self.partition_values, self.modification_time, True, self.stats)


@dataclass
class StagedFiles:
    """Files written into a table's folder and not yet committed: what a drain claim records, so that
    whoever resolves the claim can commit exactly these files later (paths, sizes, statistics)."""

    files: list[WrittenFile]
    write_id: str

    def to_json(self, **extra: object) -> str:
        """``extra``: more top-level keys, for the record that carries the files (``from_json`` reads
        only its own)."""
        return json.dumps(
            {"write_id": self.write_id, "files": [dataclasses.asdict(f) for f in self.files], **extra},
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> StagedFiles:
        data = json.loads(text)
        return cls([WrittenFile(**f) for f in data["files"]], data["write_id"])

    @property
    def rows(self) -> int:
        return sum(json.loads(f.stats).get("numRecords", 0) for f in self.files)


def missing_files(
    table_uri: str, files: Iterable[WrittenFile], storage_options: dict[str, str] | None = None
) -> list[str]:
    """Staged files that are not (or no longer) there: committing them would corrupt the table."""
    from pyarrow import fs as pafs

    fs, base = filesystem(table_uri, storage_options)
    paths = [f.path for f in files]
    infos = fs.get_file_info([f"{base}/{p}" for p in paths])
    return [p for p, info in zip(paths, infos) if info.type == pafs.FileType.NotFound]


def filesystem(table_uri: str, storage_options: dict[str, str] | None = None):
    """(pyarrow FileSystem, base path) for a table: a local absolute path or a cloud URI, with the
    lake's storage options (given, else those registered for its root: see ``storage.py``)."""
    from queuelake.lake.storage import filesystem as storage_filesystem

    return storage_filesystem(table_uri, storage_options or None)


def delete_files(table_uri: str, files: Iterable[WrittenFile], storage_options: dict[str, str] | None = None) -> None:
    """Best effort: what stays behind is only an orphan that vacuum removes."""
    fs, base = filesystem(table_uri, storage_options)
    for f in files:
        try:
            fs.delete_file(f"{base}/{f.path}")
        except OSError:
            pass


# ---------------------------------------------------------------- statistics


def _stats_kind(t: pa.DataType) -> str | None:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_timestamp(t):
        return "ts"
    if pa.types.is_date32(t):
        return "date"
    return None


@dataclass
class _ColumnStats:
    """Running nullCount / min / max of one top-level column, in JSON-ready values.

    Statistics are optional in Delta, per column: a bound that cannot be stated exactly is left out
    (the column is then never skipped), never a reason to fail the file. Two such cases come from
    values at the edges of their types: a timestamp maximum in the last millisecond of year 9999
    (the log carries milliseconds and a maximum rounds up, to an instant that does not exist), and
    values Python cannot hold at all. Failing there failed the drain's batch on every run."""

    kind: str | None
    nested: bool
    nulls: int = 0
    lo: Any = None
    hi: Any = None
    unbounded: bool = False  # a value whose bound cannot be stated was seen: no min/max for the file

    def update(self, column: pa.ChunkedArray | pa.Array) -> None:
        self.nulls += column.null_count
        if self.kind is None or self.unbounded or column.null_count == len(column):
            return
        try:
            if self.kind in ("ts", "date"):
                column = column.cast(pa.int64() if self.kind == "ts" else pa.int32())
            bounds = pc.min_max(column)
            lo, hi = bounds["min"].as_py(), bounds["max"].as_py()
        except (pa.ArrowException, UnicodeDecodeError, ValueError, OverflowError):
            self.unbounded = True  # e.g. text that is not valid UTF-8 (a quarantined row's)
            return
        self.lo = lo if self.lo is None else min(self.lo, lo)
        self.hi = hi if self.hi is None else max(self.hi, hi)

    def bounds(self) -> tuple[Any, Any] | None:
        if self.lo is None or self.unbounded:
            return None
        if self.kind == "str":
            if len(self.lo) > _STRING_STATS_MAX or len(self.hi) > _STRING_STATS_MAX:
                return None
            return self.lo, self.hi
        if self.kind == "ts":  # micros since the epoch; stats carry milliseconds: floor min, ceil max
            return _ms_bound(self.lo // 1000), _ms_bound(-(-self.hi // 1000))
        if self.kind == "date":
            try:
                return str((_EPOCH + timedelta(days=self.lo)).date()), str((_EPOCH + timedelta(days=self.hi)).date())
            except OverflowError:
                return None
        return self.lo, self.hi

    def json_bounds(self) -> tuple[Any, Any] | None:
        """``bounds``, or None where either end cannot be written (see the class docstring)."""
        bounds = self.bounds()
        return None if bounds is None or None in bounds else bounds


def _ms_bound(millis: int) -> str | None:
    """Milliseconds since the epoch as the log's ISO text; None when that instant is outside
    0001-01-01 .. 9999-12-31 23:59:59.999 (the maximum of a file holding 9999-12-31 23:59:59.9995
    or later rounds up past it)."""
    try:
        return iso_utc(_EPOCH + timedelta(milliseconds=millis), "milliseconds")
    except OverflowError:
        return None


def _is_nested(t: pa.DataType) -> bool:
    return pa.types.is_nested(t)


# ---------------------------------------------------------------- the sink


COMPRESSION = "snappy"


def leaf_paths(schema: pa.Schema) -> list[str]:
    """The Parquet column paths of an Arrow schema's leaves, as pyarrow's writer names them."""

    def walk(name: str, t: pa.DataType) -> list[str]:
        if pa.types.is_map(t):
            return walk(f"{name}.key_value.key", t.key_type) + walk(f"{name}.key_value.value", t.item_type)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return walk(f"{name}.list.element", t.value_type)
        if pa.types.is_struct(t):
            return [path for field in t for path in walk(f"{name}.{field.name}", field.type)]
        return [name]

    return [path for field in schema for path in walk(field.name, field.type)]


@dataclass
class _OpenFile:
    path: str
    partition_values: dict[str, str | None]
    stream: Any
    writer: pq.ParquetWriter
    stats: dict[str, _ColumnStats]
    rows: int = 0
    arrow_bytes: int = 0
    buffer: list[pa.Table] = field(default_factory=list)
    buffered: int = 0


class FileSink:
    """Writes rows to Parquet files under the table folder, rolling files and row groups by size.

    Memory stays bounded: at most ``ROW_GROUP_BYTES`` of Arrow data is buffered per open file (one open
    file per partition value seen by this task).
    """

    def __init__(
        self,
        table_uri: str,
        schema: pa.Schema,
        partition_by: list[str] | None = None,
        prefix: str | None = None,
        target_file_bytes: int = TARGET_FILE_BYTES,
        row_group_bytes: int = ROW_GROUP_BYTES,
        storage_options: dict[str, str] | None = None,
        dictionary_columns: tuple[str, ...] | None = None,
        statistics_columns: list[str] | None = None,
        uncompressed_columns: tuple[str, ...] = (),
    ) -> None:
        self.table_uri = table_uri
        self.use_dictionary: bool | list[str] = (
            True if dictionary_columns is None else [c for c in dictionary_columns if c not in (partition_by or [])]
        )
        self.write_statistics: bool | list[str] = (
            True if statistics_columns is None else [c for c in statistics_columns if c not in (partition_by or [])]
        )
        self.storage_options = storage_options
        self.fs, self.base = filesystem(table_uri, storage_options)
        self.partition_by = list(partition_by or [])
        self.data_schema = pa.schema([f for f in schema if f.name not in self.partition_by])
        self.compression: str | dict[str, str] = COMPRESSION
        if uncompressed_columns:  # per Parquet column (a leaf: headers.key_value.key), all named
            self.compression = {
                path: "none" if path.split(".", 1)[0] in uncompressed_columns else COMPRESSION
                for path in leaf_paths(self.data_schema)
            }
        self.prefix = prefix or f"part-{uuid.uuid4()}"
        self.target_file_bytes = target_file_bytes
        self.row_group_bytes = row_group_bytes
        self._open: dict[tuple[tuple[str, str | None], ...], _OpenFile] = {}
        self._count = 0
        self.written: list[WrittenFile] = []

    def write(self, data: pa.Table) -> None:
        """Rows already conformed to the table schema (partition columns included)."""
        if data.num_rows == 0:
            return
        for values, rows in split_partitions(data, self.partition_by):
            key = tuple(sorted(values.items()))
            open_file = self._open.get(key) or self._start(values, key)
            open_file.buffer.append(rows)
            open_file.buffered += rows.nbytes
            open_file.rows += rows.num_rows
            for name, stats in open_file.stats.items():
                stats.update(rows.column(name))
            if open_file.buffered >= self.row_group_bytes:
                self._flush(open_file)
            if open_file.arrow_bytes >= self.target_file_bytes:
                self._finish(key)

    def close(self) -> list[WrittenFile]:
        """Finish every open file; returns all files this sink wrote."""
        for key in list(self._open):
            self._finish(key)
        return self.written

    def abort(self) -> None:
        """Delete what this sink wrote (best effort; leftovers are orphans for vacuum)."""
        for open_file in self._open.values():
            try:
                open_file.writer.close()
                open_file.stream.close()
            except Exception:
                pass
            self.written.append(WrittenFile(open_file.path, 0, {}, 0, ""))
        self._open.clear()
        delete_files(self.table_uri, self.written, self.storage_options)
        self.written = []

    def _start(self, values: dict[str, str | None], key: tuple) -> _OpenFile:
        folder = partition_dir(self.partition_by, values)
        name = f"{self.prefix}-{self._count:05d}.snappy.parquet"
        self._count += 1
        path = f"{folder}/{name}" if folder else name
        if folder:
            self.fs.create_dir(f"{self.base}/{folder}", recursive=True)
        stream = self.fs.open_output_stream(f"{self.base}/{path}")
        writer = pq.ParquetWriter(
            stream,
            self.data_schema,
            compression=self.compression,
            use_dictionary=self.use_dictionary,
            write_statistics=self.write_statistics,
        )
        stats = {f.name: _ColumnStats(_stats_kind(f.type), _is_nested(f.type)) for f in self.data_schema}
        open_file = _OpenFile(path, values, stream, writer, stats)
        self._open[key] = open_file
        return open_file

    def _flush(self, open_file: _OpenFile) -> None:
        if not open_file.buffer:
            return
        table = pa.concat_tables(open_file.buffer)
        open_file.writer.write_table(table, row_group_size=max(table.num_rows, 1))
        open_file.arrow_bytes += open_file.buffered
        open_file.buffer, open_file.buffered = [], 0

    def _finish(self, key: tuple) -> None:
        open_file = self._open.pop(key)
        self._flush(open_file)
        open_file.writer.close()
        open_file.stream.close()
        size = self.fs.get_file_info(f"{self.base}/{open_file.path}").size
        self.written.append(
            WrittenFile(
                path=open_file.path,
                size=int(size),
                partition_values=open_file.partition_values,
                modification_time=int(time.time() * 1000),
                stats=_stats_json(open_file),
            )
        )


def _stats_json(open_file: _OpenFile) -> str:
    """Delta file statistics: numRecords, and per top-level column nullCount and (where exact) min/max."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name, stats in open_file.stats.items():
        if stats.nested:
            continue
        nulls[name] = stats.nulls
        bounds = stats.json_bounds()
        if bounds is not None:
            mins[name], maxs[name] = bounds
    return json.dumps(
        {"numRecords": open_file.rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
        separators=(",", ":"),
    )


# ---------------------------------------------------------------- commit


def commit_files(
    table_uri: str,
    table: str,
    files: list[WrittenFile],
    app_id: str,
    version: int,
    write_id: str,
    engine: str,
    kill_pids: Iterable[int] = (),
    attempts: int = 20,
    delete_if_committed: bool = True,
    storage_options: dict[str, str] | None = None,
    load: Callable[[], Any] | None = None,
) -> bool:
    """Commit ``files`` in one Delta transaction carrying (app_id, version).

    Returns False, deleting the files, when app_id already committed ``version`` or later (a retried
    batch, or another writer with the same app id won the race). ``delete_if_committed=False`` keeps
    them: a drain claim's staged files may be the very files that earlier commit added. The commit
    and its retries are ``commits.commit_actions``'s.
    """

    def committed() -> None:
        if delete_if_committed:
            delete_files(table_uri, files, storage_options)

    return commit_actions(
        table_uri,
        table,
        [f.add_action() for f in files],
        app_id,
        version,
        write_id,
        engine,
        kill_pids=kill_pids,
        attempts=attempts,
        on_committed=committed,
        storage_options=storage_options,
        load=load,
    )

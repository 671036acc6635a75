"""Write Parquet data files into a Delta table's folder, then commit them in one transaction.

This is the half of a Delta write that deltalake's ``write_deltalake`` does not expose: Spark executors
write files (``FileSink``) and one process commits all of them (``commit_files``) with the application
transaction. Until that commit the files are invisible (Delta readers only see files the log names), so
a process killed in between leaves orphan files and no rows; ``maintain`` vacuums orphans later.

Here: the files (written, described with their Delta statistics, staged, deleted), and
``commit_files``, which hands them to the commit as add actions. The statistics themselves are
``file_stats.py``'s. The commit itself, exactly once per
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
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from queuelake.lake.delta_rs.commits import commit_actions
from queuelake.lake.file_stats import ColumnStats, column_stats, stats_json
from queuelake.lake.partitions import partition_dir, split_partitions

TARGET_FILE_BYTES = 256 * 1024 * 1024  # Arrow bytes per data file before rolling over to the next
ROW_GROUP_BYTES = 64 * 1024 * 1024  # Arrow bytes buffered per row group (bounded memory per open file)


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


def ages_seconds(
    table_uri: str, paths: Iterable[str], storage_options: dict[str, str] | None = None
) -> dict[str, float | None]:
    """Seconds since each file (relative to the table) was last written, by the store's clock as
    pyarrow reports it; None where the store does not say."""
    import time

    fs, base = filesystem(table_uri, storage_options)
    wanted = list(paths)
    infos = fs.get_file_info([f"{base}/{p}" for p in wanted])
    now = time.time()
    return {p: (now - i.mtime.timestamp() if i.mtime is not None else None) for p, i in zip(wanted, infos)}


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
    stats: dict[str, ColumnStats]
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
        open_file = _OpenFile(path, values, stream, writer, column_stats(self.data_schema))
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
                stats=stats_json(open_file.rows, open_file.stats),
            )
        )


# ---------------------------------------------------------------- commit


def replace_files(
    table_uri: str,
    table: str,
    files: list[WrittenFile],
    schema: pa.Schema,
    partition_by: list[str],
    write_id: str,
    storage_options: dict[str, str] | None = None,
    read_version: int | None = None,
) -> None:
    """One overwrite commit: the table's rows become ``files``' and its schema ``schema`` (every file it
    had is removed from the log; vacuum deletes them later). What ``DeltaRsEngine.replace_dataframe``
    commits once the executors wrote the rewritten rows. Not keyed by an application transaction; the
    commit carries ``write_id``, so that a commit whose reply was lost is known as this one when tried
    again (``transient.repeated``: a throttled store must not throw a whole rewrite away). A table
    committed to since ``read_version`` is not replaced (``check_unchanged``): the overwrite removed
    the newer commit's rows without a word (a review)."""
    from deltalake import CommitProperties

    from queuelake.lake import transient
    from queuelake.lake.common import check_unchanged, landed
    from queuelake.lake.delta_rs.commits import WRITE_ID_KEY
    from queuelake.lake.storage import delta_table

    def commit() -> None:
        dt = delta_table(table_uri, None, storage_options)
        if read_version is not None and dt.version() != read_version:
            if landed(dt, read_version, WRITE_ID_KEY, write_id):
                return  # this very commit, its reply lost
            check_unchanged(table, read_version, dt.version())
        dt.create_write_transaction(
            [f.add_action() for f in files],
            mode="overwrite",
            schema=schema,
            partition_by=partition_by or None,
            commit_properties=CommitProperties(custom_metadata={WRITE_ID_KEY: write_id}),
        )

    transient.repeated(commit, f"{table}'s rewrite")


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

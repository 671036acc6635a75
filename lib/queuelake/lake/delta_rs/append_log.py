"""A table's Delta log followed commit by commit, and blind appends written as its next commit file.

Why: deltalake's Python API costs with the table's file count on every commit. Its
``create_write_transaction`` rebuilds the snapshot's file list and drops the snapshot it made, and
keeping one current (``update_incremental``) costs as much again: 88 ms of CPU per group commit at
10,000 files against 11 ms at none (round 20, ``bench/drain.py --journal-files``), and a fresh load
per queue to read its workers' last versions cost 57 ms more each. A drain's commit needs none of
that: it is a blind append (add actions of staged files, the app transactions, commit info), and
Delta lets any writer make one by creating the log's next commit file, ``_delta_log/<v>.json``, if
it is absent.

So ``AppendLog`` loads the table once (deltalake: the app versions its checkpoint and log hold),
then reads only each newer commit file, once, for the app versions and metadata it carries. A
commit is written to a temporary file in the log folder and linked to its version's name: the link
fails if that version exists (put-if-absent on POSIX, what deltalake itself does on a local disk).
Losing to another writer means reading the winner and trying the next version, after checking again
which of the batches are still to commit: exactly once per (app id, version), as ``commits.py``. The
commit file itself (its text, the put-if-absent link, reading one back) is ``commit_files.py``'s.

Where this does not apply, the caller commits through deltalake as before (``appendable``): object
storage (no link; conditional puts are left to deltalake), a protocol this writer does not know
(writer version above 2: features it would have to honour), a schema with invariants, and paths that
would need URI encoding.

Checkpoints (written by deltalake): during a run, every ``FOLLOWED_CHECKPOINT_INTERVAL`` (100, Delta's
default) versions or the table's ``delta.checkpointInterval`` if longer; and once at the run's end
(``finish``) when the table's interval has passed since the last checkpoint. Why: the journal's
interval of 10 (``rust.CHECKPOINT_INTERVAL``) is for deltalake's commits, each of which replays the log
from the last checkpoint; a followed-log commit replays nothing, and a checkpoint costs a load and a
write of the whole file list (about 140 ms with 10,000 files: every 10 commits, most of what a drain's
commits still cost at that size). The state a run leaves is checkpointed as before, so the next run's
loads and other readers replay no more than they did.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from queuelake.errors import LakeError
from queuelake.lake.delta_rs.checkpoint import write_appended_checkpoint
from queuelake.lake.delta_rs.commit_files import (
    commit_file_name,
    commit_text,
    put_if_absent,
    read_actions,
    sweep_temporaries,
)
from queuelake.lake.delta_rs.commits import kill_before_commit
from queuelake.lake.delta_rs.log_head import LogHead, read_log_head
from queuelake.lake.files import WrittenFile
from queuelake.lake.storage import delta_table, read_retrying
from queuelake.report import log

if TYPE_CHECKING:
    from deltalake import DeltaTable

DEFAULT_CHECKPOINT_INTERVAL = 100  # Delta's, when the table sets none
FOLLOWED_CHECKPOINT_INTERVAL = 100  # the most often a run's commits checkpoint (module docstring)
_PLAIN_PATH = re.compile(r"^[A-Za-z0-9._=/-]+$")  # what needs no URI encoding in an add action's path
_ATTEMPTS = 50


class AppendLog:
    """One table's log, followed from one deltalake load by reading each newer commit file once.

    Thread-safe: the drain's workers ask their app ids' versions while the committer appends, and
    are not held up by its commit's write, sync and checkpoint: ``_state`` guards what was read,
    ``_writing`` one commit at a time."""

    _snapshot: DeltaTable | None  # deltalake's load, when the log's head could not be read alone
    _snapshot_apps: dict[str, int] | None

    def __init__(
        self,
        table_uri: str,
        table: str,
        engine: str,
        storage_options: dict[str, str] | None = None,
        loaded: DeltaTable | LogHead | None = None,
    ) -> None:
        """``loaded``: the table as a load (or a read of its log's head) made just before found it,
        followed from there (its version is no newer than the log's, and every commit after it is read
        like any other)."""
        from queuelake.lake.storage import filesystem, is_s3

        self.table_uri = table_uri
        self.table = table
        self.engine = engine
        self.storage_options = storage_options
        self._fs, base = filesystem(table_uri, storage_options)
        self._log_dir = f"{base}/_delta_log"
        self._local = not is_s3(table_uri) and type(self._fs).__name__ == "LocalFileSystem"
        self._state = threading.Lock()
        self._writing = threading.Lock()
        self._appended = False  # has this log committed anything (``finish`` checkpoints only then)
        self._load(loaded)

    # ------------------------------------------------------------ following

    def _load(self, loaded: DeltaTable | LogHead | None = None) -> None:
        """The table as its log's head says now (``log_head``: a local log, no file list read), else as
        deltalake sees it (or as ``loaded`` saw it); the app versions seen since start over from it."""
        if loaded is None and self._local:
            loaded = read_log_head(self._log_dir)
        if isinstance(loaded, LogHead):
            self._start_from(
                loaded.version, loaded.configuration, loaded.description, loaded.partition_columns, loaded.protocol
            )
            self._arrow_schema = loaded.arrow_schema()
            self._schema_ok = "delta.invariants" not in loaded.schema_string
            self._snapshot = None
            self._snapshot_apps = dict(loaded.apps)
            self._snapshot_apps_read = True
            return
        from deltalake.exceptions import TableNotFoundError

        try:
            options = dict(self.storage_options or {}) or None
            dt = loaded if loaded is not None else delta_table(self.table_uri, None, options)
        except TableNotFoundError:
            raise LakeError(f"lake table {self.table!r} does not exist at {self.table_uri}") from None
        metadata = dt.metadata()
        protocol = dt.protocol()
        self._start_from(
            dt.version(),
            metadata.configuration,
            metadata.description,
            list(metadata.partition_columns),
            {"minWriterVersion": protocol.min_writer_version},
        )
        self._arrow_schema = pa.schema(dt.schema().to_arrow())
        self._schema_ok = "delta.invariants" not in dt.schema().to_json()
        self._snapshot = dt

    def _start_from(
        self,
        version: int,
        configuration: Mapping[str, str | None],
        description: str | None,
        partition_by: list[str],
        protocol: Mapping[str, Any],
    ) -> None:
        from queuelake.lake.marks import check_writable, engine_of

        check_writable(self.table, self.table_uri, engine_of(configuration, description), self.engine)
        self.version = version
        self._apps: dict[str, int] = {}  # app versions of the commits read after the snapshot
        self._loaded_apps: dict[str, int | None] = {}  # the snapshot's, asked once each (1 ms a question)
        self._snapshot_apps = None  # the snapshot's, all read in one pass
        self._snapshot_apps_read = False
        self._partition_by = partition_by
        self._protocol_ok = int(protocol["minWriterVersion"]) <= 2
        self._table_interval = int(configuration.get("delta.checkpointInterval") or DEFAULT_CHECKPOINT_INTERVAL)
        self._checkpoint_interval = max(self._table_interval, FOLLOWED_CHECKPOINT_INTERVAL)
        self._checkpointed = self._last_checkpoint()

    def target(self) -> tuple[pa.Schema, list[str]]:
        """The table's Arrow schema and partition columns, as of now (what staged files are written in):
        a commit that changed them since is read first, and loads the table afresh."""
        with self._state:
            self._catch_up()
            return self._arrow_schema, list(self._partition_by)

    def _read_commit(self, version: int) -> bytes | None:
        return self._read_log_file(commit_file_name(version))

    def _last_checkpoint(self) -> int:
        """The version of the table's last checkpoint (``_last_checkpoint``), -1 when it has none."""
        text = self._read_log_file("_last_checkpoint")
        try:
            return int(json.loads(text)["version"]) if text else -1
        except (ValueError, KeyError, TypeError):
            return -1

    def _read_log_file(self, name: str) -> bytes | None:
        path = f"{self._log_dir}/{name}"
        try:
            if self._local:
                with open(path, "rb") as f:
                    return f.read()
            # a throttled store's 503 on a file smaller than its error body (``_last_checkpoint``) is an
            # error the S3 client does not retry: one failed a drain, and the run (a review)
            return read_retrying(lambda: self._read_remote(path), f"the Delta log's {name}")
        except FileNotFoundError:
            return None

    def _read_remote(self, path: str) -> bytes:
        with self._fs.open_input_stream(path) as stream:
            return bytes(stream.read())

    def _catch_up(self) -> None:
        """Read every commit after the one followed so far. A commit that changes the table's
        metadata or protocol (a column added, a property set) loads the table afresh."""
        while True:
            text = self._read_commit(self.version + 1)
            if text is None:
                return
            if read_actions(text, self._apps):
                self._load()
                continue
            self.version += 1

    def app_version(self, app_id: str) -> int | None:
        """The newest version ``app_id`` committed, as of now (every commit file written before this
        call is read): what ``LakeEngine.last_version`` answers, without loading the table."""
        with self._state:
            self._catch_up()
            return self._app_version(app_id)

    def _app_version(self, app_id: str) -> int | None:
        seen = self._apps.get(app_id)
        if seen is not None:
            return seen
        if not self._snapshot_apps_read:
            self._snapshot_apps = self._read_snapshot_apps()
            self._snapshot_apps_read = True
        if self._snapshot_apps is not None:
            return self._snapshot_apps.get(app_id)
        if app_id not in self._loaded_apps and self._snapshot is not None:
            self._loaded_apps[app_id] = self._snapshot.transaction_version(app_id)
        return self._loaded_apps.get(app_id)

    def _read_snapshot_apps(self) -> dict[str, int] | None:
        """Every app id's version as of the snapshot, in one pass: the ``txn`` column of its last
        checkpoint, then the ``txn`` actions of the commit files after it. Why: deltalake answers one
        app id at a time, about 0.75 ms each whatever the table's size; a run of 500 queues asked 500
        times. None where the log is not laid out as expected (a checkpoint in parts, or of another
        kind, or a commit file gone): deltalake then answers each question."""
        import pyarrow.parquet as pq

        try:
            last = json.loads(self._read_log_file("_last_checkpoint") or b'{"version": -1}')
            checkpoint = int(last["version"])
            if checkpoint > self.version or "parts" in last:
                return None
            apps: dict[str, int] = {}
            if checkpoint >= 0:
                path = f"{self._log_dir}/{checkpoint:020d}.checkpoint.parquet"
                if self._local:
                    txn = pq.read_table(path, columns=["txn"]).column("txn")
                else:
                    with self._fs.open_input_file(path) as f:
                        txn = pq.read_table(f, columns=["txn"]).column("txn")
                for action in txn.drop_null().to_pylist():
                    apps[action["appId"]] = max(int(action["version"]), apps.get(action["appId"], 0))
            for version in range(checkpoint + 1, self.version + 1):
                text = self._read_commit(version)
                if text is None:
                    return None
                read_actions(text, apps)
        except Exception as exc:  # noqa: BLE001 - a faster path only: deltalake answers instead
            log.debug("lake table %s: app versions not read in one pass (%s)", self.table, type(exc).__name__)
            return None
        return apps

    # ------------------------------------------------------------ appending

    def appendable(self, files: list[WrittenFile]) -> bool:
        """Can ``append_group`` commit these files, or must deltalake (see the module docstring)?"""
        return (
            self._local
            and self._protocol_ok
            and self._schema_ok
            and all(_PLAIN_PATH.match(f.path) and not f.partition_values for f in files)
            and not self._partition_by
        )

    def append_group(self, batches: list[tuple[list[WrittenFile], str, int]], write_id: str) -> int | None:
        """One commit of every batch (files, app id, version) whose app id has not committed that
        version, carrying each app id's highest version and ``write_id``. Returns how many batches it
        carried (0: all were in the log), or None when the table changed so that deltalake must commit.
        A batch may be left out only with every lower version of its app id committed or in the same
        group (``commits.commit_group``'s rule)."""
        with self._writing:
            for attempt in range(_ATTEMPTS):
                with self._state:
                    self._catch_up()
                    todo = [b for b in batches if (self._app_version(b[1]) or 0) < b[2]]
                    if not todo:
                        return 0
                    if not self.appendable([f for files, _, _ in todo for f in files]):
                        return None  # the table changed (its protocol, say): deltalake commits it
                    versions: dict[str, int] = {}
                    for _, app_id, v in todo:
                        versions[app_id] = max(v, versions.get(app_id, 0))
                    version = self.version + 1
                    text = commit_text(todo, versions, write_id, self.version)
                if attempt == 0:
                    kill_before_commit()
                if put_if_absent(self._log_dir, version, text):
                    self._appended = True
                    with self._state:  # a reader may have read this very commit since the link
                        if self.version < version:
                            self.version = version
                            self._apps.update(versions)
                    self._checkpoint_if_due(version)
                    return len(todo)
                time.sleep(min(0.002 * 2**attempt, 0.2))  # another writer took it: read theirs, try the next
        raise LakeError(
            f"lake table {self.table}: could not commit a group of {len(batches)} batch(es) after {_ATTEMPTS} attempts"
        )

    def finish(self) -> None:
        """At the end of a run: a checkpoint of the newest version when the table's own interval has
        passed since the last one, so that the next run's loads and other readers replay at most
        that many commit files (the module docstring)."""
        with self._writing:
            if not self._appended:
                return
            with self._state:
                self._catch_up()
                version = self.version
            if version - self._checkpointed >= self._table_interval:
                self._checkpoint(version)
                # with the checkpoint, not every run: listing a log of 30,000 commit files takes 20 ms
                if self._local:
                    sweep_temporaries(self._log_dir, self.table)

    def _checkpoint_if_due(self, version: int) -> None:
        """During a run, a checkpoint every ``_checkpoint_interval`` versions (the module docstring)."""
        if version % self._checkpoint_interval == 0:
            self._checkpoint(version)

    def _checkpoint(self, version: int) -> None:
        """A failed checkpoint fails nothing: the commits are in the log, and a later one tries again."""
        from deltalake import DeltaTable

        written = False
        if self._local:
            try:
                written = write_appended_checkpoint(self._log_dir, version)
            except Exception as exc:  # noqa: BLE001 - a faster path only: deltalake writes it instead
                log.debug("lake table %s: no checkpoint from the last one (%s)", self.table, type(exc).__name__)
        try:
            if not written:
                options = dict(self.storage_options or {}) or None
                DeltaTable(self.table_uri, version=version, storage_options=options).create_checkpoint()
            self._checkpointed = version
        except Exception as exc:  # noqa: BLE001 - a checkpoint is an optimisation
            log.warning("lake table %s: no checkpoint at version %d (%s)", self.table, version, type(exc).__name__)

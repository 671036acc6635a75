"""Work a command has begun on the lake and not finished, recorded beside the tables so that the next
run finishes it: small JSON files under the lake root, ``_queuelake/pending/<kind>/<name>.json``.

Why: some commands change several tables in several commits and must end with a step that makes
the change final. ``erase`` deletes rows from the derived and typed tables and the journal, then
purges the removed files from storage; killed before the purge, the erased rows stayed readable by
time travel, and a second ``erase`` selected nothing (the journal rows were already gone), so it
never purged them. A record written before the first delete names the tables to purge; a command
that finds one does what it names, then clears it.

A record is also how a running command says it is running: it names its process (host, pid namespace,
pid and when the process started, so that a reused pid is not taken for it) and is rewritten between
steps. Another command finishes the work of every record, but clears only a dead command's: one whose
process is gone from this host (and pid namespace), or, from elsewhere, one left alone for
``STALE_SECONDS``. It cleared a running erase's record, and that erase, killed afterwards, left its
removed files for good.

Not a Delta table: a record is written and cleared once per command, read only by the next one, and
a table's log would outlive it. ``list_tables`` never lists the folder (no ``_delta_log``).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from queuelake.lake import storage

FOLDER = "_queuelake/pending"
# a record untouched this long is a killed command's: a running one rewrites it between its steps, and
# every REFRESH_SECONDS while a step runs (``Kept``)
STALE_SECONDS = 3600.0
REFRESH_SECONDS = STALE_SECONDS / 6


@dataclass(frozen=True)
class Record:
    name: str
    payload: dict[str, Any]
    age_seconds: float  # since it was last written (0 when the store gives no time)

    @property
    def stale(self) -> bool:
        """Its command is gone: its process ended (on this host), or it has not written for long."""
        owner = self.payload.get(OWNER) or {}
        here = owner.get("host") == socket.gethostname() and owner.get("pids", _PIDS) == _PIDS
        if here and isinstance(owner.get("pid"), int):
            return not _alive(owner["pid"], owner.get("started"))
        return self.age_seconds >= STALE_SECONDS


OWNER = "_owner"  # the payload's key naming the recording process


def _pid_namespace() -> str | None:
    """This process's pid namespace (``pid:[4026531836]``), None where the system does not say. Two
    containers with one host name (host networking, a fixed ``hostname:``) number their processes
    apart: a pid of another namespace says nothing here, and a running erase's record was taken for
    a dead one's (found by a review)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


_PIDS = _pid_namespace()


def _alive(pid: int, started: str | None) -> bool:
    """The process ``pid`` runs, and is the one that started at ``started`` (``_started``): a pid is
    reused, and a container restarted with its host name gets the same low pids again, so a killed
    erase's record looked alive to every later erase, each of which got its pid (found by a review)."""
    now = _started(pid)
    if started is not None and now is not None:
        return now == started
    if pid == os.getpid():
        return False  # not this process's record (it clears its own): another's with the same pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def _started(pid: int) -> str | None:
    """When process ``pid`` started, as this boot's clock ticks (Linux ``/proc/<pid>/stat``'s
    ``starttime``) after the boot's id; None when it is gone or the system says nothing."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rpartition(")")[2].split()
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as boot:
            return f"{boot.read().strip()}:{fields[19]}"
    except (OSError, IndexError):
        return None


def _where(root: str, kind: str) -> tuple[Any, str]:
    fs, base = storage.filesystem(root)
    return fs, f"{base}/{FOLDER}/{kind}"


def record(root: str, kind: str, name: str, payload: dict[str, Any]) -> None:
    """Record (or replace) the pending work ``name`` of ``kind``; durable when this returns."""
    fs, folder = _where(root, kind)
    fs.create_dir(folder, recursive=True)
    owner = {"host": socket.gethostname(), "pids": _PIDS, "pid": os.getpid(), "started": _started(os.getpid())}
    owned = {**payload, OWNER: owner}
    # written aside, then moved in place: a reader (another erase) saw a half-written record, truncated
    # by the rewrite, and failed on its JSON; an object store's put is whole already
    staged = f"{folder}/{name}.json.{os.getpid()}.tmp"
    with fs.open_output_stream(staged) as out:
        out.write(json.dumps(owned, sort_keys=True).encode("utf-8"))
    fs.move(staged, f"{folder}/{name}.json")


def recorded(root: str, kind: str) -> list[Record]:
    """Every pending work of ``kind``, by name; [] when there is none."""
    from pyarrow import fs as pafs

    fs, folder = _where(root, kind)
    infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    found: list[Record] = []
    for info in sorted(infos, key=lambda i: i.path):
        age = max(0.0, time.time() - info.mtime.timestamp()) if info.mtime is not None else 0.0
        if info.type == pafs.FileType.File and info.base_name.endswith(".tmp") and age >= STALE_SECONDS:
            _remove(fs, info.path)  # a record a killed command was writing aside: never moved in place
        if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
            continue
        try:
            with fs.open_input_stream(info.path) as stream:
                payload = json.loads(stream.read().decode("utf-8"))
        except FileNotFoundError:
            continue  # cleared since it was listed: done
        found.append(Record(info.base_name[: -len(".json")], payload, age))
    return found


def clear(root: str, kind: str, name: str) -> None:
    """The pending work ``name`` done: its record removed (none left is fine)."""
    fs, folder = _where(root, kind)
    _remove(fs, f"{folder}/{name}.json")


def _remove(fs: Any, path: str) -> None:
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


class Kept:
    """A pending record its command keeps fresh: written by ``record``, rewritten every ``every``
    seconds by a daemon thread while the command runs, removed by ``clear``; leaving the ``with``
    block stops the rewrites and leaves the record (the work is unfinished: the next command
    finishes it). Why: a record is rewritten between an erase's steps, and one step (a journal's
    delete, a purge) may outlast ``STALE_SECONDS`` on a big lake: another host then took the running
    erase's record for a dead one's and cleared it."""

    def __init__(self, root: str, kind: str, name: str, every: float = REFRESH_SECONDS) -> None:
        self.root, self.kind, self.name, self.every = root, kind, name, every
        self._lock = threading.Lock()
        self._payload: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, payload: dict[str, Any]) -> None:
        with self._lock:
            record(self.root, self.kind, self.name, payload)
            self._payload = payload
        if self._thread is None:
            self._thread = threading.Thread(target=self._refresh, name=f"pending {self.name}", daemon=True)
            self._thread.start()

    def clear(self) -> None:
        self._stop.set()
        with self._lock:
            self._payload = None
            clear(self.root, self.kind, self.name)

    def _refresh(self) -> None:
        from queuelake.report import log

        while not self._stop.wait(self.every):
            with self._lock:
                if self._payload is None or self._stop.is_set():
                    return
                try:
                    record(self.root, self.kind, self.name, self._payload)
                except Exception as exc:  # noqa: BLE001 - a store's passing error: the next refresh tries again
                    log.warning("%s: could not refresh its pending record (%s); trying again later", self.name, exc)

    def __enter__(self) -> Kept:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

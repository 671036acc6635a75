"""Pins the database server to a CPU of its own and the bench's client side to another (``--pin``).

Why: on a 2-core machine the server and the client share both cores, so a consumer that spends more
client CPU per row also takes cores from the server, and the ratio mixes the two (issue 60). Pinned,
the server's processes run on one CPU and every thread of the bench (the raw leg's connections, the
drain's workers and committer, any process they start) on the other: the raw limit and the drain
then meet the same server with the same one core, and the client's cost shows as its own.

How: the postmaster is found as the parent of a backend (``pg_backend_pid()``), so the same code pins
an embedded server and a local one given by ``--dsn``. The postmaster and every process it has
started are pinned (each of their threads); backends it forks later inherit its affinity. The bench's
threads are pinned each (Linux's affinity is per thread; threads and processes started later inherit
their creator's). ``check`` reads the affinity back, from a new backend too, and stops the bench if a
process or thread escaped. ``restore`` gives a ``--dsn`` server's processes back their affinity.
Where the platform has no affinity (``os.sched_setaffinity``), fewer than two CPUs are available, or
the server is not a process of this machine the bench may pin, the bench says why and runs unpinned.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

PROC = Path("/proc")


@dataclass
class Pinning:
    """What ``pin`` did: ``pinned`` false with a ``reason`` when it could not."""

    pinned: bool
    reason: str | None = None
    client_cpu: int | None = None
    server_cpu: int | None = None
    postmaster: int | None = None
    before: dict[int, set[int]] = field(default_factory=dict)  # server pid -> its affinity before
    checks: int = 0
    server_processes_checked: int = 0
    client_threads_checked: int = 0
    postmaster_taskset: str | None = None

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {"requested": True, "pinned": self.pinned}
        if not self.pinned:
            out["reason"] = self.reason
            return out
        out.update(
            method="os.sched_setaffinity",
            server_cpus=[self.server_cpu],
            client_cpus=[self.client_cpu],
            postmaster_pid=self.postmaster,
            checks=self.checks,
            server_processes_checked=self.server_processes_checked,
            client_threads_checked=self.client_threads_checked,
            postmaster_taskset=self.postmaster_taskset,
        )
        return out


def unpinned() -> dict[str, Any]:
    return {"requested": False, "pinned": False}


def _parent(pid: int) -> int | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _children(parent: int) -> list[int]:
    out = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and _parent(int(entry.name)) == parent:
            out.append(int(entry.name))
    return out


def _threads(pid: int) -> list[int]:
    try:
        return [int(t.name) for t in (PROC / str(pid) / "task").iterdir()]
    except OSError:  # the process ended meanwhile
        return []


def _server_processes(postmaster: int) -> list[int]:
    return [postmaster, *_children(postmaster)]


def _client_processes(postmaster: int) -> list[int]:
    """This process and its descendants (a drain on processes, a command the bench started), the
    server's processes left out should the bench have started the postmaster as its own child."""
    out, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        if pid == postmaster:
            continue
        out.append(pid)
        todo.extend(_children(pid))
    return out


def _postmaster(uri: str) -> int | None:
    """The server's postmaster, if it is a PostgreSQL process of this machine."""
    with psycopg.connect(uri, autocommit=True) as c:
        backend = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        parent = _parent(backend)
        if parent is None:
            return None
        try:
            exe = os.path.basename(os.readlink(PROC / str(parent) / "exe"))
        except OSError:
            exe = (PROC / str(parent) / "comm").read_text().strip() if (PROC / str(parent)).exists() else ""
        return parent if exe.startswith("postgres") else None


def _set(pid: int, cpu: int) -> None:
    for tid in _threads(pid):
        try:
            os.sched_setaffinity(tid, {cpu})
        except ProcessLookupError:  # the thread ended meanwhile
            continue


def pin(uri: str) -> Pinning:
    """Server processes to the second available CPU, this process's threads to the first."""
    if not hasattr(os, "sched_setaffinity") or not PROC.is_dir():
        return Pinning(False, "this platform has no CPU affinity (os.sched_setaffinity, /proc)")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return Pinning(False, f"only {len(cpus)} CPU available to the bench")
    client, server = cpus[0], cpus[1]
    postmaster = _postmaster(uri)
    if postmaster is None:
        return Pinning(False, "the server is not a PostgreSQL process of this machine")
    pinning = Pinning(True, client_cpu=client, server_cpu=server, postmaster=postmaster)
    try:
        for pid in _server_processes(postmaster):
            try:
                pinning.before[pid] = os.sched_getaffinity(pid)
            except ProcessLookupError:  # ended meanwhile (an autovacuum worker, a backend)
                continue
            _set(pid, server)
    except PermissionError as exc:
        restore(pinning)
        return Pinning(False, f"may not set the server's affinity: {exc}")
    for pid in _client_processes(postmaster):
        _set(pid, client)
    check(uri, pinning)
    return pinning


def check(uri: str, pinning: Pinning) -> None:
    """Every server process (a backend opened for the check among them: one forked after ``pin``)
    on the server's CPU and every client thread on the client's; a stray stops the bench."""
    if not pinning.pinned or pinning.postmaster is None:
        return
    strays: list[str] = []
    with psycopg.connect(uri, autocommit=True) as c:
        backend = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        server = _server_processes(pinning.postmaster)
        if backend not in server:
            strays.append(f"backend {backend} is not a child of the postmaster {pinning.postmaster}")
        strays += _off_cpu(server, pinning.server_cpu, "server")[0]
        pinning.server_processes_checked += len(server)
    client_strays, client_threads = _off_cpu(_client_processes(pinning.postmaster), pinning.client_cpu, "client")
    strays += client_strays
    pinning.client_threads_checked += client_threads
    if strays:
        raise SystemExit("--pin: processes off their CPU: " + "; ".join(strays[:10]))
    pinning.checks += 1
    if pinning.postmaster_taskset is None and shutil.which("taskset"):
        done = subprocess.run(["taskset", "-pc", str(pinning.postmaster)], capture_output=True, text=True)
        pinning.postmaster_taskset = done.stdout.strip() or done.stderr.strip()


def _off_cpu(pids: list[int], cpu: int | None, label: str) -> tuple[list[str], int]:
    """The threads of ``pids`` not on ``cpu`` alone (one that ended meanwhile is skipped), and how many
    threads were checked."""
    strays: list[str] = []
    checked = 0
    for pid in pids:
        for tid in _threads(pid):
            try:
                cpus = os.sched_getaffinity(tid)
            except ProcessLookupError:
                continue
            if cpus != {cpu}:
                strays.append(f"{label} {pid}/{tid} on {sorted(cpus)}")
            checked += 1
    return strays, checked


def restore(pinning: Pinning) -> None:
    """The server's processes (those still running) get their affinity from before ``pin``: a
    ``--dsn`` server outlives the bench."""
    for pid, cpus in pinning.before.items():
        for tid in _threads(pid):
            try:
                os.sched_setaffinity(tid, cpus)
            except (ProcessLookupError, PermissionError):
                continue


def postmaster(uri: str) -> int | None:
    """The server's postmaster pid, where it is a process of this machine (else None)."""
    return _postmaster(uri)


def server_cpu_seconds(postmaster: int) -> float | None:
    """CPU seconds the server has spent so far: the postmaster's own, its ended children's (backends
    it has reaped: ``cutime``, ``cstime``) and its running children's. Unlike the machine's busy time
    this leaves out whatever else the machine runs (another bench), so a server's cost per row can be
    compared across runs of a loaded machine."""
    hz = os.sysconf("SC_CLK_TCK")

    def ticks(pid: int, children: bool) -> int:
        stat = (PROC / str(pid) / "stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return sum(int(f) for f in fields[11 : 15 if children else 13])

    try:
        total = ticks(postmaster, True)
    except OSError:
        return None
    for pid in _children(postmaster):
        try:
            total += ticks(pid, False)
        except OSError:  # ended meanwhile: counted in cutime from now on (or lost, a few ticks)
            continue
    return total / hz

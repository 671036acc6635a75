"""CPU spent while one leg of a bench runs: the client's, the database server's and the machine's.

Why: on a small shared machine the wall-clock ratio moves by a third between runs, while the CPU a
leg spends per row hardly moves. And it tells what no wall clock does: whether a target can be met
on this machine at all. A leg that needs C client and S server CPU seconds cannot end in less than
(C + S) / cores seconds, however well its threads overlap; when that floor is above raw / 0.6, a
whole-command ratio of 0.6 is out of reach without spending less CPU (issue 60), and the bench says
so beside the ratio (``floor``). Tighter still: nothing reaches the server before the command has
started (its interpreter, imports, connections), so that part of its time overlaps nothing.
"""

from __future__ import annotations

import os
import time
from typing import Any

import _pin


class CpuMeter:
    """CPU spent between ``__enter__`` and ``__exit__``: the client's (this process's, or with
    ``children`` the commands it ran and waited for meanwhile: a whole command is a child process),
    and the whole machine's busy and stolen time from ``/proc/stat`` (Linux; None elsewhere). The
    machine's busy time minus the client's is the server's, plus whatever else runs.

    "busy" near "cores x wall" says the run was CPU-bound, and "steal" is time the hypervisor gave
    our cores to another machine. With the server's postmaster known (a server of this machine),
    ``server_cpu_s`` is the server's own CPU (``_pin.server_cpu_seconds``: its processes, the ended
    backends included), which the machine's figure mixes with whatever else runs there."""

    def __init__(self, postmaster: int | None = None, children: bool = False) -> None:
        self._postmaster = postmaster
        self._children = children

    def _server_now(self) -> float | None:
        return _pin.server_cpu_seconds(self._postmaster) if self._postmaster is not None else None

    def __enter__(self) -> CpuMeter:
        self._client, self._machine, self._t = self._client_now(), self._machine_now(), time.perf_counter()
        self._server = self._server_now()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._t
        client, machine = self._client_now() - self._client, self._machine_now()
        self.figures: dict[str, Any] = {"client_cpu_s": round(client, 2)}
        if machine is not None and self._machine is not None:
            busy, steal = machine[0] - self._machine[0], machine[1] - self._machine[1]
            cores = os.cpu_count() or 1
            self.figures.update(
                machine_busy_cpu_s=round(busy, 2),
                server_and_other_cpu_s=round(busy - client, 2),
                machine_busy_share=round(busy / (cores * wall), 2) if wall > 0 else None,
                steal_cpu_s=round(steal, 2),
            )
        if self._server is not None:
            time.sleep(0.1)  # the consumer's backends end as its connections close: reaped by then
            server = self._server_now()
            if server is not None:
                self.figures["server_cpu_s"] = round(server - self._server, 2)

    def _client_now(self) -> float:
        t = os.times()
        return t.children_user + t.children_system if self._children else t.user + t.system

    @staticmethod
    def _machine_now() -> tuple[float, float] | None:
        """(busy, steal) CPU seconds since boot, all cores."""
        try:
            with open("/proc/stat") as f:
                ticks = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        hz = os.sysconf("SC_CLK_TCK")
        idle = ticks[3] + ticks[4]  # idle, iowait
        steal = ticks[7] if len(ticks) > 7 else 0
        return (sum(ticks[:8]) - idle - steal) / hz, steal / hz


def cores() -> int:
    """The CPUs this bench may run on (its affinity where the platform tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def floor(
    figures: dict[str, Any], raw_seconds: float, start: tuple[float, float] | None = None
) -> dict[str, Any] | None:
    """A leg's CPU floor: the least wall time its CPU allows on this machine's cores, (client +
    server) / cores, and the best whole ratio to ``raw_seconds`` it leaves (``best_ratio``: what the
    leg would reach with every core busy from its first instant to its last). None without the
    server's own CPU.

    ``start``: (wall seconds, client CPU seconds) of the same command with nothing to do (its
    interpreter, imports, connections, the lake's log read): the server has nothing to work on until
    the command has started, so that part does not overlap. ``floor_with_start_s`` is then that
    command's wall time plus the rest of the CPU over the cores, and ``best_ratio_with_start`` the
    ratio it leaves: the bound the command meets in practice."""
    server = figures.get("server_cpu_s")
    if server is None:
        return None
    n = cores()
    cpu = figures["client_cpu_s"] + server
    seconds = cpu / n
    out: dict[str, Any] = {
        "cores": n,
        "cpu_s": round(cpu, 2),
        "floor_s": round(seconds, 2),
        "best_ratio": round(raw_seconds / seconds, 3) if seconds > 0 else None,
    }
    if start is not None:
        wall, start_cpu = start
        with_start = wall + max(cpu - start_cpu, 0.0) / n
        out["floor_with_start_s"] = round(with_start, 2)
        out["best_ratio_with_start"] = round(raw_seconds / with_start, 3) if with_start > 0 else None
    return out

"""Test hooks: kill this process at a named point, so tests can prove the exactly-once guarantees.

``QUEUELAKE_TEST_KILL_AT=point[:n]`` sends SIGKILL to the process the n-th time (default 1st) it
passes ``point``. Unset in production, where ``checkpoint`` is a dictionary lookup and nothing else.
"""

from __future__ import annotations

import os
import signal
import threading

_counts: dict[str, int] = {}
_lock = threading.Lock()


def _target() -> tuple[str, int] | None:
    spec = os.environ.get("QUEUELAKE_TEST_KILL_AT")
    if not spec:
        return None
    name, _, n = spec.partition(":")
    return name, int(n or 1)


def checkpoint(point: str) -> None:
    target = _target()
    if target is None or target[0] != point:
        return
    with _lock:
        _counts[point] = _counts.get(point, 0) + 1
        if _counts[point] >= target[1]:
            os.kill(os.getpid(), signal.SIGKILL)

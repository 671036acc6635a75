"""Kill points: kill this process at a named point, so tests can prove the exactly-once guarantees.

``QUEUELAKE_TEST_KILL_AT=point[:n]`` sends SIGKILL to the process the n-th time (default 1st) it
passes ``point``. Unset in production, where ``reached`` is two environment lookups and nothing else.
``QUEUELAKE_TEST_KILL_TOKENS=folder`` bounds the kills across processes (Spark tasks, their retries):
a kill happens only when it can delete one file of that folder, so a test makes N files for N kills
at most, and counts the kills by the files gone.

``QUEUELAKE_TEST_HOLD_AT=point:seconds[:n]`` holds the thread passing ``point`` the n-th time (default
1st) that many seconds, after creating the file ``QUEUELAKE_TEST_HOLD_MARK`` names: a test sends its
signals while the work is surely under way there (a fast machine finished a drain inside a fixed wait).
"""

from __future__ import annotations

import os
import signal
import threading
import time

_counts: dict[str, int] = {}
_lock = threading.Lock()


def _target() -> tuple[str, int] | None:
    spec = os.environ.get("QUEUELAKE_TEST_KILL_AT")
    if not spec:
        return None
    name, _, n = spec.partition(":")
    return name, int(n or 1)


def reached(point: str) -> None:
    _hold(point)
    target = _target()
    if target is None or target[0] != point:
        return
    with _lock:
        _counts[point] = _counts.get(point, 0) + 1
        if _counts[point] >= target[1] and _take_token():
            os.kill(os.getpid(), signal.SIGKILL)


def _take_token() -> bool:
    """One kill's token (``QUEUELAKE_TEST_KILL_TOKENS``): True without a folder, else when this
    process deleted a file of it (a deletion succeeds for one process only)."""
    folder = os.environ.get("QUEUELAKE_TEST_KILL_TOKENS")
    if not folder:
        return True
    for name in sorted(os.listdir(folder)):
        try:
            os.unlink(os.path.join(folder, name))
            return True
        except FileNotFoundError:
            continue
    return False


_passes: dict[str, int] = {}


def _hold(point: str) -> None:
    spec = os.environ.get("QUEUELAKE_TEST_HOLD_AT")
    if not spec:
        return
    name, seconds, n = (spec.split(":") + ["1", "1"])[:3]
    with _lock:
        if name != point:
            return
        _passes[point] = _passes.get(point, 0) + 1
        if _passes[point] != int(n):
            return
    mark = os.environ.get("QUEUELAKE_TEST_HOLD_MARK")
    if mark:
        with open(mark, "w"):
            pass
    time.sleep(float(seconds))

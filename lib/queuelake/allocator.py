"""Freed memory kept in the process for the next batch: glibc's malloc told not to hand it back.

Why: a drain worker allocates nearly the same buffers for every batch (the receive's result, numpy
position arrays, the header map's pieces) and frees them when the batch is claimed. glibc serves
blocks above its mmap threshold (dynamic, from 128 KiB) with fresh ``mmap``s and returns freed memory
at the top of a heap to the OS; the next batch then faults in fresh zeroed pages, one per 4 KiB, on
the cores the queue database needs. Measured by ``bench/drain.py`` (200,000 rows, two workers, six
drains each way): 55,000-112,000 page faults and 0.74-0.98 s of system CPU per drain, against
17,000-34,000 faults and 0.42-0.55 s with the two thresholds fixed as here; the drain's whole client
CPU went from 4.4-4.9 s to 3.9-4.4 s.

Peak memory does not grow: what stays in the process is what the previous batch had in use, and a
block above the mmap threshold (32 MiB, glibc's largest) is still mapped and unmapped on its own.
Arrow's own buffers come from its pool (mimalloc), which this leaves alone.

Process-wide, so set once per process that runs drain workers (the command, a local process, a Spark
Python worker); a no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import threading

from queuelake.report import log

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024  # glibc's largest allowed (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024  # free memory a heap keeps at its top before returning it

_lock = threading.Lock()
_done: bool | None = None


def keep_freed_memory() -> bool:
    """Fix glibc's mmap and trim thresholds (see the module docstring) once per process. True when
    they are set; False where the C library is not glibc or refuses (then nothing changed)."""
    global _done
    with _lock:
        if _done is None:
            _done = _set_thresholds()
        return _done


def _set_thresholds() -> bool:
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        set_mmap = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        set_trim = libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    except (OSError, AttributeError) as exc:
        log.debug("allocator: glibc's mallopt is not available (%s); freed memory goes back to the OS", exc)
        return False
    ok = bool(set_mmap) and bool(set_trim)
    log.debug("allocator: glibc keeps freed memory for reuse (mmap threshold 32 MiB, trim 64 MiB): %s", ok)
    return ok

"""A drain's process keeps the memory its batches free for the next ones (``queuelake.allocator``):
glibc's default thresholds handed freed blocks back to the OS, and the next batch faulted in fresh pages,
0.7-1.1 s of system CPU per 200,000 rows on the cores the queue database needs."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

# batch-like work in a fresh process: buffers of a drain batch's sizes, written to, then freed; the
# minor page faults of the rounds after the first (the first maps the memory in any case)
_BATCHES = """
import json, resource, sys
import numpy as np
if sys.argv[1] == "kept":
    from queuelake.allocator import keep_freed_memory
    assert keep_freed_memory()
def batch():
    held = [np.ones(size, dtype=np.uint8) for size in (300_000, 1_200_000, 4_000_000, 9_000_000, 700_000)]
    held.append(np.ones(2_500_000, dtype=np.int32))
    return sum(int(a[-1]) for a in held)
batch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    batch()
print(json.dumps({"faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _BATCHES, mode], capture_output=True, text=True, timeout=120, check=True
    )
    return int(json.loads(done.stdout.strip().splitlines()[-1])["faults"])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_batches_reuse_the_memory_the_last_one_freed() -> None:
    default, kept = _faults("default"), _faults("kept")
    # 20 rounds of ~24 MB: by default each round maps its large blocks afresh (thousands of faults)
    assert default > 20 * 1000, default
    assert kept < default / 10, (kept, default)


def test_set_once_per_process_and_idempotent() -> None:
    from queuelake.allocator import keep_freed_memory

    first = keep_freed_memory()
    assert keep_freed_memory() is first
    assert first is (platform.libc_ver()[0] == "glibc")

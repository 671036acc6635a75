"""Seconds per step of a replay (select, plan, read, headers, send, ledger, ...): where its time
goes, the summary's ``seconds_by_step``."""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterator


class Steps:
    def __init__(self) -> None:
        self.seconds: collections.defaultdict[str, float] = collections.defaultdict(float)

    @contextlib.contextmanager
    def timed(self, step: str) -> Iterator[None]:
        """Adds the block's seconds to ``seconds[step]``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[step] += time.perf_counter() - started

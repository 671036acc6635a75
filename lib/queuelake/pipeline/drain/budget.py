"""The budget a queue's workers share: messages and time left, and a stop flag."""

from __future__ import annotations

import threading
import time

from queuelake import stopping


class Budget:
    """Shared by a queue's workers: message and time budgets, and a stop flag (failure or SIGTERM)."""

    def __init__(self, batch_size: int, max_messages: int | None, deadline: float | None) -> None:
        self.batch_size = batch_size
        self.remaining = max_messages
        self.deadline = deadline
        self.stopped = False
        self._lock = threading.Lock()

    def claim(self) -> int:
        with self._lock:
            if self.stopped or stopping.requested():
                return 0
            if self.deadline is not None and time.monotonic() >= self.deadline:
                return 0
            if self.remaining is None:
                return self.batch_size
            n = min(self.batch_size, self.remaining)
            self.remaining -= n
            return n

    def give_back(self, n: int) -> None:
        with self._lock:
            if self.remaining is not None:
                self.remaining += n

    def stop(self) -> None:
        with self._lock:
            self.stopped = True

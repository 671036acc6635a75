"""A line every so often while a lake call waits on its store, so that a slow store is never silence.

Why: a store that answers late (a commit answered after 25-35 s, log reads after 20 s) left a drain
143 s and a ``find`` 122 s without a line (a review), while each client's own retries and timeouts ran
their course. The clients release the interpreter while they wait (deltalake's commit and pyarrow's
reads do), so a thread beside the call can say what it waits for.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from queuelake.report import log

SAY_EVERY_SECONDS = 15.0


@contextlib.contextmanager
def said_while_waiting(what: str, every: float = SAY_EVERY_SECONDS) -> Iterator[None]:
    """Log ``lake: still <what> (Ns so far)`` every ``every`` seconds until the block ends; nothing
    when it ends sooner (the usual case: one thread started and stopped)."""
    done = threading.Event()
    started = time.monotonic()

    def say() -> None:
        while not done.wait(every):
            log.info("lake: still %s (%.0fs so far)", what, time.monotonic() - started)

    thread = threading.Thread(target=say, name="lake-waiting", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()

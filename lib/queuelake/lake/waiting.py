"""A line every so often while a lake call waits on its store, so that a slow store is never silence.

Why: a store that answers late (a commit answered after 25-35 s, log reads after 20 s) left a drain
143 s and a ``find`` 122 s without a line (a review), while each client's own retries and timeouts ran
their course. The clients release the interpreter while they wait (deltalake's commit and pyarrow's
reads do), so a thread beside the call can say what it waits for.
"""

from __future__ import annotations

import contextlib

from queuelake import report
from queuelake.report import log

SAY_EVERY_SECONDS = 15.0


def said_while_waiting(what: str, every: float = SAY_EVERY_SECONDS) -> contextlib.AbstractContextManager[None]:
    """Log ``lake: still <what> (Ns so far)`` every ``every`` seconds until the block ends; nothing
    when it ends sooner (the usual case: one thread started and stopped)."""
    return report.every(
        every, lambda took, _ended: log.info("lake: still %s (%.0fs so far)", what, took), "lake-waiting"
    )

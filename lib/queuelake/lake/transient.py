"""A whole lake write tried again when the store dropped the connection under it, or throttled it.

Why: object stores drop connections (a reset, a broken pipe) now and then, and the clients' own retries
do not cover every request of a commit: a ``maintain`` whose compactions and index were all done failed
at its last step, the ``runs`` row, on one reset (a review, behind the throttling proxy). Only a write
that can be repeated as a whole goes through here: an append keyed by its application transaction,
which a second attempt after a commit that did land adds nothing to; a compaction or a vacuum, which a
second attempt after the first landed finds less to do (each attempt loads the table afresh)."""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from typing import TypeVar

from queuelake.lake.storage import throttling
from queuelake.report import log

T = TypeVar("T")

# what a dropped connection reads like, from deltalake's object_store or pyarrow's S3 client. "timeout"
# as a word only: object_store names its ``retry_timeout`` in every error after its retries (a 503's
# too), and a table's path may hold it (``body_..._timeout``, a saga's timeout message)
_DROPPED = re.compile(
    r"connection (reset|closed|error)|broken pipe|os error (104|32)|failed to flush response stream|"
    r"error sending request|(?<![\w/.-])timed? ?out\b",
    re.I,
)
# the store said it throttled (its 503 SlowDown), whatever else the error says: waited out longer. As
# words only, not inside a name: a table named after a type (``outbound_service_unavailable_alerts``)
# whose compaction could never succeed was tried 4 times over 19 s (a review)
_THROTTLED = re.compile(
    r"(?<![\w/.-])(SLOW_?DOWN|HTTP status 503|503 Service Unavailable|Service[ _]?Unavailable)(?![\w/.-])", re.I
)
ATTEMPTS = 4


def dropped(exc: BaseException) -> bool:
    """Whether ``exc`` says the store dropped the connection (not a refusal: a 403, a conflict)."""
    return bool(_DROPPED.search(str(exc)))


def repeated(write: Callable[[], T], what: str) -> T:
    """``write()``, again up to ``ATTEMPTS`` times in all when the store dropped the connection under it
    (after 0.5, 1 and 2 s) or throttled past its client's own retries (deltalake's ``DeltaError`` too:
    after 2-4, 4-8 and 8-16 s at random, so that the attempts fall outside a burst of 503s; a
    ``maintain``'s compaction failed behind bursts of 6-10 s, a review); any other error, or the last
    one, is raised."""
    wait = 0.5
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return write()
        except Exception as exc:
            if isinstance(exc, (FileNotFoundError, PermissionError)):  # a missing file, a refusal: never
                raise
            # the words that said so, not the error: a store's error may quote a request's URL (a SAS
            # token in its query), and a log line is not redacted as a command's failure is
            text = str(exc)
            said = _THROTTLED.search(text) or _DROPPED.search(text) or throttling(exc)
            if attempt == ATTEMPTS or said is None:
                raise
            was_dropped = said.re is _DROPPED
            pause = wait if was_dropped else random.uniform(2.0, 4.0) * 2 ** (attempt - 1)
            reason = "a dropped connection" if was_dropped else "a throttled store"
            log.info("lake: writing %s met %s (%s); again in %.1fs", what, reason, said[0], pause)
            time.sleep(pause)
            wait *= 2
    raise AssertionError("unreachable")

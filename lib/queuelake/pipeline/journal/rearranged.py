"""Journal versions that brought no rows: what ``maintain`` (a compaction, a retention delete) and
``erase`` commit. A stage whose checkpoint is behind only such versions has nothing to read, yet its
checkpoint must still move past them: left behind, it would name commits the Delta log drops after its
retention, and the stage's next read would fail. Moving it is one commit of no rows (the stage's
``(app_id, version)``), which needs no Spark where delta-rs may write the checkpoint's table: the run
after a ``maintain`` then starts no session (it started one for nothing, a review)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuelake.errors import LakeError
from queuelake.lake.engines import delta_rs_may_write
from queuelake.lake.port import LakeEngine
from queuelake.pipeline.journal.schema import MESSAGES

if TYPE_CHECKING:
    from queuelake.config import Config


def no_new_rows(lake: LakeEngine, after: int | None, upto: int) -> bool:
    """Whether journal versions (after, upto] added no rows (read from the log alone); False when the
    log cannot say (``after`` None: the whole table; a commit the log no longer has)."""
    if after is None or after >= upto:
        return False
    try:
        return not lake.added_files(MESSAGES, after, upto)
    except LakeError:
        return False


def moves_without_spark(config: Config, lake: LakeEngine, after: int | None, upto: int, table: str) -> bool:
    """Whether a stage whose checkpoint, kept in ``table``, is at journal version ``after`` can move it
    to ``upto`` with no Spark session: nothing new in between, and ``lake`` (the session-less one)
    may write ``table``. The engine is asked first: under delta-spark the log's read is for nothing (a
    review counted one read of every commit in the range per stage)."""
    return delta_rs_may_write(config.lake.engine, lake, [table]) and no_new_rows(lake, after, upto)


def empty_without_spark(config: Config, lake: LakeEngine, upto: int, table: str) -> bool:
    """Whether the journal as of ``upto`` holds no rows at all (its first drains found the queues empty)
    and ``lake`` may write ``table``: a stage that has never read it then has nothing to read, and needs
    no Spark session to say so (an idle first run of a delta-rs-only install failed for want of pyspark)."""
    if not delta_rs_may_write(config.lake.engine, lake, [table]):
        return False
    try:
        return not lake.added_files(MESSAGES, None, upto)
    except LakeError:
        return False

"""The typed body tables as a transform reads them: ``bodies.table("Sales.OrderPlaced")``.

Why its own module: a transform that reads a typed table must see the same journal versions it
consumes, or an order drained in this increment would be missing from the table and never counted
(the transform's checkpoint moves on). So the reader first brings the tables up to the journal
version (the bodies step, when its checkpoint is behind: ``queuelake run`` has already done it, a
lone ``queuelake transform`` does it here), then resolves the type's table by its name as the bodies
stage recorded it (``body_schema_changes``), whatever ``bodies.table_prefix`` or ``bodies.tables`` say.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuelake import stopping
from queuelake.config import Config
from queuelake.errors import PipelineError
from queuelake.lake.port import LakeEngine
from queuelake.pipeline import step_locks
from queuelake.pipeline.bodies import names
from queuelake.pipeline.bodies import run as stage
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.report import log
from queuelake.status import Status

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CATCH_UP_WAITS_SECONDS = 900.0  # how long a transform waits for a bodies step running elsewhere


class BodyTables:
    """What a transform function declaring a ``bodies`` parameter is given."""

    def __init__(self, config: Config, spark: SparkSession, lake: LakeEngine) -> None:
        self._config, self._spark, self._lake = config, spark, lake
        self._current = False
        # the tables the catch-up's bodies step failed to bring up, and why: only a transform reading one
        # of them fails (every transform reading typed tables failed with one type's table: a review)
        self._behind: dict[str, str] = {}

    def _catch_up(self) -> None:
        """The typed tables brought up to the journal, under the bodies lock (``step_locks``), waiting
        for a bodies step running elsewhere: without it, this catch-up ran beside another bodies step
        (typed rows twice) and beside an erase (the erased bodies written back: a review)."""
        if self._current:
            return
        with step_locks.held(self._config, step_locks.BODIES, wait_seconds=CATCH_UP_WAITS_SECONDS) as got:
            if not got:
                if stopping.requested():
                    raise stopping.Interrupted("stopped while waiting for the bodies step running on this lake")
                raise PipelineError(
                    f"a bodies step has been running on this lake for over {CATCH_UP_WAITS_SECONDS // 60:.0f} "
                    "minutes, so the typed tables are behind the journal; the transform runs again next time"
                )
            upto = self._lake.table_version(MESSAGES)
            after = stage.checkpoint(self._lake)
            if upto is not None and (after is None or after < upto):
                result = stage.bodies(self._config, self._spark, self._lake)
                if result.get("status") == Status.INTERRUPTED:
                    raise stopping.Interrupted("stopped while the bodies step caught the typed tables up")
                if result.get("status") != Status.OK:
                    failed = {t["table"]: str(t["error"]) for t in result.get("tables", []) if t.get("error")}
                    # only some typed tables behind: the step failed for them alone (no error of its own,
                    # none of its increment's bookkeeping) in its last slice (a failed slice stops the
                    # slices after it, whose rows every typed table then lacks: a review)
                    alone = (
                        failed
                        and not result.get("error")
                        and stage.INCREMENTS not in failed
                        and result.get("journal_version") == upto
                    )
                    if not alone:
                        why = result.get("error") or "; ".join(f"{t}: {e}" for t, e in sorted(failed.items()))
                        why = why or str(result.get("status"))
                        raise PipelineError(
                            f"the bodies step failed, so the typed tables are behind the journal: {why}"
                        )
                    self._behind = failed
                    log.warning(
                        "bodies: %s behind the journal (the bodies step failed for them); a transform reading"
                        " another typed table goes on",
                        ", ".join(sorted(failed)),
                    )
        self._current = True

    def name_of(self, message_type: str) -> str:
        """The table holding ``message_type`` (a full type name; an assembly-qualified name works too)."""
        self._catch_up()
        type_name = names.type_name(message_type)
        table = stage.claimed(self._lake).get(type_name)
        if table is None:
            raise PipelineError(
                f"no typed table for message type {type_name!r} (none of its bodies was read yet, "
                "or bodies.types / bodies.queues leave it out)"
            )
        if table in self._behind:
            raise PipelineError(
                f"the bodies step failed, so the typed table {table} is behind the journal: {self._behind[table]}"
            )
        return table

    def table(self, message_type: str) -> DataFrame:
        """The type's typed table, current with the journal."""
        return self._lake.read(self.name_of(message_type))

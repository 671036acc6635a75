"""One replay run's result: what was selected, planned, sent and skipped, and how fast."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from queuelake.pipeline.runs import PartResult


@dataclass
class ReplayResult(PartResult):
    replay_id: str | None
    dry_run: bool = False
    journal_version: int | None = None
    matched: int = 0  # journal rows the predicate matches, any outcome, before --limit
    selected_by: str | None = None  # arrow (no Spark) | spark: which evaluated --where
    selected: int = 0  # the landed rows of those that the replay plans to send (the first --limit)
    to_send: int = 0
    rows_sent: int = 0
    total_sent: int = 0
    batches: int = 0
    batches_sent: int = 0
    batches_done_before: int = 0
    failed_batches: list[str] = field(default_factory=list)
    # selected rows an earlier replay sent that have not failed again since (``lineage.already_replayed``),
    # and how many per earlier replay id: sent again unless --skip-replayed, which counts them as skipped
    already_replayed: int = 0
    already_replayed_by: dict[str, int] = field(default_factory=dict)
    skipped: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    destinations: dict[str, int] = field(default_factory=dict)  # the plan's rows per destination
    # the rows this run sent per destination (a stopped run's are fewer than ``destinations``: a review
    # read a stop's planned 22,594 as sent); from Spark tasks cancelled by a stop, not counted per destination
    sent_by_destination: dict[str, int] = field(default_factory=dict)
    message_types: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds_sending: float = 0.0
    rate: float = 0.0
    canary: dict[str, Any] | None = None  # --canary: how the canaries ended (canary.Verdict.summary)
    lineage_recorded: int = 0  # rows this run appended to replay_lineage

    def runs_rows(self, sent_per_destination: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
        """One row per destination, with the messages sent there; a replay that sent nothing still
        gets its one row."""
        per_destination: list[tuple[str | None, int]] = [*sorted((sent_per_destination or {}).items())]
        return [
            {
                "queue": destination,
                "published": count,
                "batches": self.batches_sent,
                "seconds": self.seconds_sending,
                "rate": self.rate,
                "status": self.status,
                "error": self.error,
            }
            for destination, count in per_destination or [(None, 0)]
        ]

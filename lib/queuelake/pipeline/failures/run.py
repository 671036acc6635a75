"""``queuelake failures``' work: the failed copies at the journal's current version, their later
retries, the groups (``read.py``, ``groups.py``)."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

from queuelake import report
from queuelake.lake.engines import journal_engine
from queuelake.lake.port import LakeEngine
from queuelake.lake.round_files import read_error
from queuelake.pipeline.failures import groups as groups_mod
from queuelake.pipeline.failures import read
from queuelake.report import log

PROGRESS_SECONDS = 10.0  # a progress line this often while a pass over the journal goes on


@dataclass
class Found:
    version: int | None
    groups: list[groups_mod.Group] = field(default_factory=list)
    scan: read.Failed | None = None
    later_copies: int = 0
    unmatched_retry_copies: int = 0

    def summary(self) -> dict[str, object]:
        scan = self.scan
        return {
            "journal_version": self.version,
            "groups": len(self.groups),
            "failed_copies": sum(len(g.rows) for g in self.groups),
            "failed_messages": len({r.message for g in self.groups for r in g.rows}),
            "unresolved_messages": sum(len(g.replay_rows()) for g in self.groups),  # each in one group's replay
            "retry_copies_found": self.later_copies,
            "retry_copies_unmatched": self.unmatched_retry_copies,
            "files": scan.files if scan else 0,
            "row_groups": scan.row_groups if scan else 0,
            "row_groups_with_failures": scan.row_groups_with_failures if scan else 0,
            "rows_scanned": scan.rows_scanned if scan else 0,
        }


def failure_groups(lake: LakeEngine, retries: bool = True) -> Found:
    """The failure groups at the journal's current version; ``retries``: also find the later copies
    that retried their messages (a second pass over the ``message_id`` column)."""
    journal = journal_engine(lake)
    where = f"lake table {read.MESSAGES} at {journal.path(read.MESSAGES)}"
    progress = read.Progress()
    try:  # a store that failed a read past its retries: said in one line, as every lake read says it
        with _logged(progress, "failed copies"):
            scan = read.read_failed(journal, progress=progress)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise read_error(exc, where) from None
    found = Found(scan.version, scan=scan)
    if scan.version is None:
        return found
    later: list[read.LaterCopy] = []
    if retries and scan.rows.num_rows:
        ids = {i for i in scan.rows["message_id"].to_pylist() if i}
        try:
            with _logged(progress, "retries of them"):
                later = read.later_copies(journal, scan.version, ids, progress)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise read_error(exc, where) from None
    found.later_copies = len(later)
    grouping = groups_mod.group(scan.rows, later)
    found.groups = grouping.groups
    found.unmatched_retry_copies = grouping.unmatched_retry_copies
    return found


def _logged(progress: read.Progress, looking_for: str) -> contextlib.AbstractContextManager[None]:
    """A line every ``PROGRESS_SECONDS`` while a pass reads the journal's files: how far it is."""

    def say(took: float, ended: threading.Event) -> None:
        if not ended.is_set():
            log.info(
                "failures: looking for %s for %.0fs: %d of %d journal file(s) read, %d row(s), %d found so far",
                looking_for,
                took,
                progress.files_read,
                progress.files,
                progress.rows_scanned,
                progress.found,
            )

    return report.every(PROGRESS_SECONDS, say, "queuelake-failures-progress")

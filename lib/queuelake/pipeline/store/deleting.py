"""A table's rows deleted by many filters, one commit each, with a progress line while they go on.

Why a module of its own: erase and retention name their rows in filters of at most ``MAX_IN_LIST``
values (deltalake's DELETE crashes on longer lists), one delete commit each. A big erase is hundreds
of commits per table, minutes under load, and it logged nothing until a table was done: a review saw
8 minutes of silence while an erase deleted typed rows, and could not tell it from a hang.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence

from queuelake.lake.deletes import Deleted, RowFilter
from queuelake.lake.marks import check_writable
from queuelake.lake.port import LakeEngine
from queuelake.report import log

# a table's deletes to come: its name, the engine that writes it, the filters naming its rows (a commit each)
Planned = tuple[str, LakeEngine, list[RowFilter]]

# at most one progress line this often per table (the first after this long: a table of a few commits
# says nothing until its own summary line)
PROGRESS_SECONDS = 10.0


def deleted_each(engine: LakeEngine, table: str, filters: Sequence[RowFilter], step: str) -> Iterator[Deleted]:
    """Each filter's delete from ``table``, committed in turn and yielded as it commits (a caller
    counting as they come keeps what was done when the command is stopped between two). While more
    remain, a line every ``PROGRESS_SECONDS``: commits done of all, rows removed so far."""
    rows = 0
    last = time.monotonic()
    for number, where in enumerate(filters, 1):
        deleted = engine.delete_rows(table, where)
        rows += deleted.rows
        yield deleted
        now = time.monotonic()
        if number < len(filters) and now - last >= PROGRESS_SECONDS:
            last = now
            log.info(
                "%s %s: %d of %d delete(s) committed, %d row(s) removed so far",
                step,
                table,
                number,
                len(filters),
                rows,
            )


def add(figures: dict[str, int], deleted: Deleted) -> None:
    """``deleted``'s rows and files added to a table's running ``figures``."""
    figures["rows"] = figures.get("rows", 0) + deleted.rows
    figures["files_removed"] = figures.get("files_removed", 0) + deleted.files_removed
    figures["files_rewritten"] = figures.get("files_rewritten", 0) + deleted.files_rewritten


def check_all_writable(tables: Iterable[tuple[str, LakeEngine]], as_engine: str | None = None) -> None:
    """Each of ``tables`` (name, engine) checked writable by its engine (``lake/marks.py``), before any of
    them loses a row. Why: under an explicit ``lake.engine``, a table the other engine created is refused
    at its delete; an erase had then deleted from the tables before it, and left a pending record every
    later erase ran into and failed on the same table (a review). Refused first, nothing changes.
    ``as_engine``: the explicit engine the real run writes the lake's own tables with, for a dry run that
    reads without it (delta-rs, no Spark): it said "ok" of an erase the real one refuses (a review)."""
    from queuelake.lake import catalogue

    for table, engine in tables:
        # ``lake.engine: auto`` (``engines.PerTableLake``) writes each table with the engine that made it:
        # that one is checked (by the run's default, every table the other engine made was refused: a review)
        per_table = getattr(engine, "engine_for", None)
        writer = per_table(table) if per_table is not None else engine
        name = as_engine if as_engine is not None and catalogue.engine_for(table) is None else writer.name
        check_writable(table, writer.path(table), writer.written_by(table), name)

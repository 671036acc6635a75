"""The journal's id index (``message_keys``) on real delta-rs tables: a lookup through it returns exactly
the rows a scan of the journal returns, with no index, a current one, a partial one (journal files drained
since), after a rewrite into disjoint key ranges, after the journal's compaction, and after journal rows
are deleted behind its back (an erase, retention); and it reads fewer journal files than the scan."""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from queuelake.lake.deletes import RowFilter
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.lake.record_tables import MESSAGE_KEYS, MESSAGES
from queuelake.pipeline.key_index import build, rewrite, search

from tests.helpers import journal_rows

T0 = dt.datetime(2026, 11, 1, 9, 0, tzinfo=dt.timezone.utc)
TARGET = "0b6f9d7e-3c1a-4e2b-8f5d-1a2b3c4d5e01"  # a message with a send, an audit copy and an error copy
CONVERSATION = "6f1c3a52-0d2b-4a8e-9b7c-2e5d4f6a8b01"
EXPIRED = "0b6f9d7e-3c1a-4e2b-8f5d-1a2b3c4d5e99"  # an expired row: its id alone, no message id


def _batch(queue: str, start: int, n: int, conversation: str | None = None, ids: list[str] | None = None) -> pa.Table:
    ids = ids or [str(uuid.uuid4()) for _ in range(n)]
    rows = journal_rows.batch(queue, range(start, start + n), T0, message_ids=ids)
    conversations = [conversation or str(uuid.uuid4()) for _ in range(n)]
    index = rows.schema.get_field_index("conversation_id")
    return rows.set_column(index, rows.schema.field(index), pa.array(conversations, pa.string()))


def _expired(queue: str, seq: int) -> pa.Table:
    rows = journal_rows.batch(queue, range(seq, seq + 1), T0, outcome="expired", message_ids=[EXPIRED])
    index = rows.schema.get_field_index("message_id")
    return rows.set_column(index, rows.schema.field(index), pa.nulls(1, pa.string()))


def _drain_round(lake: DeltaRsEngine, round_: int) -> None:
    """Four journal files: Sales (with TARGET's send in round 0), audit, error, and unrelated traffic."""
    base = round_ * 100
    sales_ids = [str(uuid.uuid4()) for _ in range(20)]
    if round_ == 0:
        sales_ids[7] = TARGET
    journal_rows.append(lake, _batch("Sales", base, 20, CONVERSATION if round_ == 0 else None, sales_ids))
    audit_ids = [TARGET if round_ == 1 and i == 3 else str(uuid.uuid4()) for i in range(20)]
    journal_rows.append(lake, _batch("audit", base, 20, CONVERSATION if round_ == 1 else None, audit_ids))
    error_ids = [TARGET if round_ == 2 and i == 0 else str(uuid.uuid4()) for i in range(10)]
    journal_rows.append(lake, _batch("error", base, 10, None, error_ids))
    journal_rows.append(lake, _batch("Billing", base, 30))


def _ids(rows: pa.Table) -> list[tuple[str, int]]:
    return sorted(zip(rows.column("queue").to_pylist(), rows.column("seq").to_pylist(), strict=True))


QUESTIONS = [("message_id", [TARGET]), ("conversation_id", [CONVERSATION]), ("id", [EXPIRED, TARGET])]


def _same_as_scan(lake: DeltaRsEngine) -> list[dict]:
    """Each question's answer through the index equals the scan's; the index figures of each."""
    figures = []
    for column, values in QUESTIONS:
        found, index = search.journal_rows(lake, column, values)
        scanned = lake.lookup(MESSAGES.name, column, values)
        assert _ids(found.rows) == _ids(scanned.rows), (column, index)
        assert found.rows.schema == scanned.rows.schema
        figures.append({**index, "files_read": found.files_scanned, "found": found.rows.num_rows})
    return figures


@pytest.fixture
def lake(tmp_path: Path) -> DeltaRsEngine:
    engine = DeltaRsEngine(str(tmp_path / "lake"))
    for round_ in range(3):
        _drain_round(engine, round_)
    journal_rows.append(engine, _expired("Sales", 1000))
    return engine


def test_no_index_is_the_scan(lake: DeltaRsEngine) -> None:
    figures = _same_as_scan(lake)
    assert [f["used"] for f in figures] == [False] * 3
    assert [f["found"] for f in figures] == [3, 40, 4]  # 3 copies; 20 + 20 in the conversation; expired + 3


def test_current_partial_and_rewritten_index(
    lake: DeltaRsEngine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    built = build.update(lake)
    assert built.journal_rows == 241 and built.files_read == 13
    assert build.update(lake).files_read == 0  # up to date: nothing read again
    current = _same_as_scan(lake)
    assert all(f["used"] and f["unindexed_files"] == 0 for f in current)
    assert current[0]["files_read"] == 3  # the three files holding TARGET's copies, of 13
    _drain_round(lake, 3)  # a partial index: four journal files it does not cover yet
    partial = _same_as_scan(lake)
    assert [f["unindexed_files"] for f in partial] == [4, 4, 4]
    assert 3 <= partial[0]["files_read"] <= 3 + 4  # and the new files the id's log statistics admit
    build.update(lake)  # a second increment: two index files overlap in key range
    monkeypatch.setattr(rewrite, "RANGE_ROWS", 100)  # ~5 ranges for ~500 index rows
    with caplog.at_level(logging.INFO, logger="queuelake"):
        done = rewrite.rewrite(lake)
    assert done.files_written >= 4 and done.rows == lake.read_arrow(MESSAGE_KEYS.name).num_rows
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("message_keys: rewrite")]
    assert len(said) == 1 + done.files_written and "key range(s)" in said[0], said  # it says what it does as it goes
    assert rewrite.rewrite(lake).skipped  # nothing new: not rewritten again
    after = _same_as_scan(lake)
    # the log's statistics of ``key`` leave one index file per id looked up
    opened = [f["index_files"] - f["index_files_pruned"] for f in after]
    assert opened[:2] == [1, 1] and opened[2] <= 2, after
    assert after[0]["index_files"] >= 4
    ranges = sorted(_key_ranges(lake))
    assert all(high < low for (_, high), (low, _) in zip(ranges, ranges[1:], strict=False))


def _key_ranges(lake: DeltaRsEngine) -> list[tuple[str, str]]:
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(lake.path(MESSAGE_KEYS.name)).get_add_actions(flatten=True))
    return list(zip(actions.column("min.key").to_pylist(), actions.column("max.key").to_pylist(), strict=True))


def test_rows_gone_from_the_journal_are_not_found(lake: DeltaRsEngine) -> None:
    build.update(lake)
    gone = RowFilter(
        "\"queue\" = 'audit'", pc.field("queue") == "audit", ("queue",)
    )  # TARGET's audit copy and 20 conversation rows leave; the index still names them
    lake.delete_rows(MESSAGES.name, gone)
    stale = _same_as_scan(lake)
    assert [f["found"] for f in stale] == [2, 20, 3]
    lake.maintain(MESSAGES.name)  # the journal compacted: its files are new to the index, and read
    compacted = _same_as_scan(lake)
    assert [f["found"] for f in compacted] == [2, 20, 3]


def test_where_answers_the_same_with_and_without_the_index(lake: DeltaRsEngine, tmp_path: Path) -> None:
    """``where`` (lake side) by message id and by conversation id: the same places with no index, a
    current one, and a partial one; the summary says what the index read."""
    from queuelake.config import from_dict
    from queuelake.pipeline.where import run

    cfg = from_dict({"lake": {"root": lake.root, "engine": "delta-rs"}, "drain": {"queues": ["Sales"]}}, env={})
    questions = [
        run.Query(by="message", text=TARGET, peek=False),
        run.Query(by="message", text=EXPIRED, peek=False),  # found by the row id alone
        run.Query(by="conversation", text=CONVERSATION, peek=False),
    ]

    def places() -> list[list[tuple]]:
        answers = [run.where(cfg, lake, None, q) for q in questions]
        return [[(p.place, p.message_id, p.location, p.facts.get("seq")) for p in a.places] for a in answers]

    before = places()
    assert [len(p) for p in before] == [3, 1, 40]  # drained, processed, failed; expired; the conversation's rows
    assert before[1][0][0] == "expired"
    build.update(lake)
    assert places() == before
    _drain_round(lake, 4)
    assert places() == before  # the new files are scanned, nothing of them matches
    answer = run.where(cfg, lake, None, questions[0])
    assert answer.journal["index"]["used"] and answer.journal["index"]["unindexed_files"] == 4

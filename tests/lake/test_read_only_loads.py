"""A command that writes no lake table reads each table's log once per version (``storage.loads_reused``):
on a throttling S3 lake a week old, ``tables`` made 450 requests (36 s) and ``find`` 287 (18 s), each asking
deltalake for the same table 3 to 10 times (a review). Counted as deltalake loads, never timed."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

import pytest
from deltalake import write_deltalake
from queuelake import cli
from queuelake.lake import storage
from queuelake.lake.delta_rs.engine import DeltaRsEngine

from tests.helpers import journal_rows
from tests.helpers.small_lake import count_loads


def _lake(root: Path) -> tuple[Path, list[str]]:
    lake = DeltaRsEngine(str(root / "lake"))
    ids: list[str] = []
    for day in range(3):
        rows = journal_rows.batch("Sales", range(day * 10, day * 10 + 10), dt.datetime(2026, 11, day + 1))
        ids += rows.column("message_id").to_pylist()
        journal_rows.append(lake, rows)
    conf = root / "job.yaml"
    conf.write_text(
        json.dumps({"transport": {"connection": "postgresql://unused"}, "lake": {"root": str(root / "lake")}})
    )
    return conf, ids


def test_a_load_is_reused_only_while_asked_and_the_newest_is_fixed(tmp_path: Path, monkeypatch) -> None:
    conf, _ = _lake(tmp_path)
    uri = str(tmp_path / "lake" / "messages")
    loads = count_loads(monkeypatch)
    with storage.loads_reused():
        newest = storage.delta_table(uri)
        assert storage.delta_table(uri) is newest and storage.delta_table(uri, newest.version()) is newest
        assert storage.delta_table(uri, 1) is storage.delta_table(uri, 1) is not newest
        # another process's commit meanwhile (deltalake's own write: not a load of ours)
        write_deltalake(uri, journal_rows.batch("Sales", range(90, 91), dt.datetime(2026, 11, 9)), mode="append")
        assert storage.delta_table(uri).version() == newest.version()  # one snapshot throughout
    assert len([load for load in loads if load == uri]) == 2
    assert storage.delta_table(uri).version() == newest.version() + 1  # outside: each call reads the log
    assert storage.delta_table(uri) is not storage.delta_table(uri)


@pytest.fixture
def logger_kept():
    """The ``queuelake`` logger as it was: ``cli.main`` sets its level, handler and propagation for the process,
    and a later test in this worker that counts records (``caplog``) would see INFO ones."""
    logger = logging.getLogger("queuelake")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield
    logger.handlers[:], logger.propagate = saved[0], saved[2]
    logger.setLevel(saved[1])  # not ``.level =``: that keeps logging's cache of what each level may emit


@pytest.mark.usefixtures("logger_kept")
@pytest.mark.parametrize("command", [["tables"], ["find", "--message-id", "{id}"], ["failures"]])
def test_a_reading_command_loads_each_table_once(tmp_path: Path, monkeypatch, capsys, command: list[str]) -> None:
    conf, ids = _lake(tmp_path)
    loads = count_loads(monkeypatch)
    args = [a.replace("{id}", ids[15]) for a in command]
    assert cli.main([args[0], "-c", str(conf), *args[1:]]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["status"] == "ok", summary
    assert sorted(loads) == sorted(set(loads)), loads  # no table's log read twice
    assert loads, "the command read no table"

"""An output table that does not exist: publish has nothing to do, and says why (no database, no Spark)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from queuelake.config import from_dict
from queuelake.context import open_database
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.pipeline.publish.run import publish


def test_an_output_no_transform_writes_is_named_as_such(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An output no transform writes said "its transform has not run" (a review): a misspelled name
    looked like a transform that had not run yet."""
    cfg = from_dict(
        {
            "transport": {"connection": "postgresql://u@127.0.0.1:1/x"},
            "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
            "transforms": [{"name": "scores", "sql": "SELECT 1 AS key", "output": "outbound_scores"}],
            "publish": {"endpoint": "Lakehouse", "outputs": ["outbound_scores", "outbound_socres"]},
        },
        env={},
    )
    with caplog.at_level(logging.INFO, logger="queuelake"):
        summary = publish(cfg, open_database(cfg), None, DeltaRsEngine(str(tmp_path / "lake")))  # type: ignore[arg-type]
    assert [o["status"] for o in summary["outputs"]] == ["skipped", "skipped"], summary
    said = {r.getMessage().split(":")[0]: r for r in caplog.records if r.getMessage().startswith("publish outbound_")}
    assert "its transform has not run" in said["publish outbound_scores"].getMessage()
    assert said["publish outbound_socres"].levelno == logging.WARNING
    assert "no transform in this config writes it" in said["publish outbound_socres"].getMessage()

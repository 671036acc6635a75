"""A whole lake write tried again when the store dropped the connection, and only then."""

from __future__ import annotations

import pytest
from queuelake.errors import LakeError
from queuelake.lake import transient


def test_a_dropped_connection_is_tried_again_and_a_refusal_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """``maintain`` failed at its ``runs`` row on one connection reset, every compaction done (a review)."""
    monkeypatch.setattr(transient.time, "sleep", lambda _s: None)
    errors = [
        LakeError(
            "lake table runs at s3://b/lake/runs: object storage error: connection error; "
            "Connection reset by peer (os error 104)"
        ),
        OSError("Generic S3 error: error sending request for url"),
    ]
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return "written"

    assert transient.repeated(flaky, "runs") == "written" and len(calls) == 3

    def refused() -> None:
        calls.append(1)
        raise LakeError("lake table runs: object storage error (check the credentials): AccessDenied: no")

    calls.clear()
    with pytest.raises(LakeError, match="AccessDenied"):
        transient.repeated(refused, "runs")
    assert len(calls) == 1

    def always_dropped() -> None:
        calls.append(1)
        raise OSError("Connection reset by peer (os error 104)")

    calls.clear()
    with pytest.raises(OSError):
        transient.repeated(always_dropped, "runs")
    assert len(calls) == transient.ATTEMPTS


def test_the_retry_line_names_the_drop_not_the_error(monkeypatch: pytest.MonkeyPatch, caplog) -> None:  # type: ignore[no-untyped-def]
    """A store's error may quote a request's URL with a SAS token; log lines are not redacted as a
    command's failure is: the line says what dropped, not the error's text (a review)."""
    monkeypatch.setattr(transient.time, "sleep", lambda _s: None)
    errors = [OSError("error sending request for url (https://a.blob.core.windows.net/lake/runs?sig=SECRET)")]

    def flaky() -> str:
        if errors:
            raise errors.pop(0)
        return "written"

    with caplog.at_level("INFO", logger="queuelake"):
        assert transient.repeated(flaky, "runs") == "written"
    assert "met a dropped connection (error sending request)" in caplog.text and "SECRET" not in caplog.text


def test_the_runs_row_of_a_command_survives_a_dropped_connection(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A real delta-rs ``runs`` table whose first append the store drops: the row is written once."""
    from queuelake.lake.delta_rs.engine import DeltaRsEngine
    from queuelake.pipeline.runs import append_runs

    monkeypatch.setattr(transient.time, "sleep", lambda _s: None)
    real, failures = DeltaRsEngine.append, [OSError("Connection reset by peer (os error 104)")]

    def append(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if failures:
            raise failures.pop()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(DeltaRsEngine, "append", append)
    lake = DeltaRsEngine(str(tmp_path / "lake"))
    append_runs(lake, "r-1", "maintain", [{"table": "messages", "status": "ok"}])
    assert lake.read_arrow("runs").column("run_id").to_pylist() == ["r-1"]

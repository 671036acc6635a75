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


def test_a_throttled_write_is_tried_again_after_a_longer_jittered_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """deltalake's own ``DeltaError`` after its retries into a burst of 503s (a maintain's compaction, a
    review): tried again, after waits long enough to leave a burst of several seconds."""
    waits: list[float] = []
    monkeypatch.setattr(transient.time, "sleep", waits.append)

    class DeltaError(Exception):  # deltalake's, by name: not an OSError
        pass

    errors = [
        DeltaError("Generic S3 error: Error after 10 retries ... AWS Error SlowDown: Please reduce your request rate"),
        DeltaError("Failed to read delta log object: HTTP status 503 Service Unavailable"),
    ]

    def flaky() -> str:
        if errors:
            raise errors.pop(0)
        return "compacted"

    assert transient.repeated(flaky, "messages's compaction") == "compacted"
    assert len(waits) == 2 and 2.0 <= waits[0] <= 4.0 and 4.0 <= waits[1] <= 8.0, waits

    def not_found() -> None:
        raise DeltaError("Not a Delta table: No snapshot or version 0 found")

    waits.clear()
    with pytest.raises(DeltaError, match="Not a Delta table"):
        transient.repeated(not_found, "t")
    assert waits == []


# deltalake's own words after its retries into a burst of 503s (deltalake 1.6, object_store): they name
# its retry_timeout, which read as a dropped connection's "timeout" and got the short waits (a review)
REAL_503 = (
    "Kernel error -> Generic S3 error\n          \x1b[31m\u21b3\x1b[0m Error performing GET "
    "http://127.0.0.1:35847/b/t/_delta_log/_last_checkpoint in 237.16ms, after 2 retries, max_retries\n"
    "           \x1b[31m\u21b3\x1b[0m 2, retry_timeout\n            \x1b[31m\u21b3\x1b[0m 20s  - Server "
    "returned non-2xx status code\n             \x1b[31m\u21b3\x1b[0m 503 Service Unavailable\n"
    "              \x1b[31m\u21b3\x1b[0m <Error><Code>SlowDown</Code></Error>"
)


def test_deltalakes_real_503_is_waited_out_as_throttling(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(transient.time, "sleep", waits.append)
    with pytest.raises(OSError):
        transient.repeated(lambda: (_ for _ in ()).throw(OSError(REAL_503)), "messages's compaction")
    assert len(waits) == 3 and 2.0 <= waits[0] <= 4.0 and 4.0 <= waits[1] <= 8.0 and waits[2] >= 8.0, waits


def test_timeout_in_a_path_is_no_dropped_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A typed table of a saga's timeout message (``body_..._timeout``) failing for its own reason."""
    waits: list[float] = []
    monkeypatch.setattr(transient.time, "sleep", waits.append)
    with pytest.raises(LakeError):
        transient.repeated(
            lambda: (_ for _ in ()).throw(LakeError("lake table body_ordersaga_timeout: schema mismatch")), "t"
        )
    assert waits == []
    assert transient.dropped(OSError("operation timed out")) and transient.dropped(OSError("request timeout"))


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


@pytest.mark.parametrize(
    "error",
    [
        FileNotFoundError("s3://b/lake/outbound_service_unavailable_alerts/part-0001.parquet"),
        OSError("Generic error: Object at location lake/outbound_service_unavailable_alerts/part-1.parquet not found"),
        OSError("lake table body_acme_slowdownrequested: column x exists as int64, not string"),
        OSError("Not found: lake/SlowDown/part-0.parquet"),
    ],
)
def test_throttling_words_in_a_name_are_no_throttling(monkeypatch: pytest.MonkeyPatch, error: OSError) -> None:
    """A table named after a type (``outbound_service_unavailable_alerts``) whose compaction could never
    succeed was tried 4 times over 19 s as a throttled store (a review)."""
    waits: list[float] = []
    monkeypatch.setattr(transient.time, "sleep", waits.append)
    with pytest.raises(OSError):
        transient.repeated(lambda: (_ for _ in ()).throw(error), "outbound_service_unavailable_alerts's compaction")
    assert waits == []

"""The lake's own retries of a read the S3 client failed with the transient error its retries skip
(``storage.TRANSIENT_READ``): whole reads are read again, streams resume after the last batch given,
any other error is raised at once. (``test_s3_throttling`` meets the real error through moto.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from queuelake.lake import storage

FLUSH = OSError(f"AWS Error INTERNAL_FAILURE during GetObject operation: {storage.TRANSIENT_READ} (eof: 0, bad: 1)")


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []
    monkeypatch.setattr(storage.time, "sleep", waits.append)
    return waits


def test_a_stream_resumes_after_the_last_batch_it_gave(no_waits: list[float]) -> None:
    failures = iter([3, 3, 7])  # fail before the 4th batch twice, then before the 8th

    def stream() -> Iterator[int]:
        fail_at = next(failures, None)
        for i in range(10):
            if i == fail_at:
                raise FLUSH
            yield i

    assert list(storage.batches_retrying(stream, "a file")) == list(range(10))
    assert no_waits == [0.3, 0.6, 1.2]


def test_other_errors_and_the_last_retry_are_raised(no_waits: list[float]) -> None:
    def broken() -> Iterator[int]:
        yield 0
        raise OSError("AWS Error ACCESS_DENIED")

    seen: list[int] = []
    with pytest.raises(OSError, match="ACCESS_DENIED"):
        seen.extend(storage.batches_retrying(broken, "a file"))
    assert seen == [0] and no_waits == []

    def always() -> int:
        raise FLUSH

    with pytest.raises(OSError, match=storage.TRANSIENT_READ):
        storage.read_retrying(always, "a file")
    assert len(no_waits) == storage.READ_RETRIES and max(no_waits) == 5.0


def test_a_throttling_the_clients_retries_gave_up_on_is_read_again_a_few_times(no_waits: list[float]) -> None:
    """pyarrow's S3 retries wait with no jitter: behind 2 s bursts of 503 every 6 s a request begun at a
    burst's start had one attempt outside them, and a 503 there failed ``maintain`` and ``find`` (a
    review). Such a read is begun again after a jittered wait, ``THROTTLED_RETRIES`` times."""
    replies = [OSError("AWS Error SLOW_DOWN during ListObjectsV2 operation: Please reduce your request rate.")] * 2

    def listing() -> str:
        if replies:
            raise replies.pop()
        return "listed"

    assert storage.read_retrying(listing, "a lake root") == "listed"
    assert len(no_waits) == 2 and all(1.0 <= w <= 3.0 for w in no_waits)

    def unavailable() -> int:
        raise OSError("AWS Error UNKNOWN (HTTP status 503) during HeadObject operation: No response body.")

    no_waits.clear()
    with pytest.raises(OSError, match="HTTP status 503"):
        storage.read_retrying(unavailable, "a file")
    assert len(no_waits) == storage.THROTTLED_RETRIES


@pytest.mark.parametrize(
    "error",
    [
        OSError("AWS Error SERVICE_UNAVAILABLE during GetObject operation: Please reduce your request rate."),
        OSError(
            "Kernel error -> Generic S3 error\n \x1b[31m↳\x1b[0m Error performing GET http://s3/lake/messages/"
            "_delta_log/_last_checkpoint in 7.8ms - HTTP error\n \x1b[31m↳\x1b[0m request or response body error"
        ),
        OSError("Generic S3 error: Error getting list response body: error decoding response body"),
        OSError("Generic S3 error: error reading a body from connection: Connection reset by peer (os error 104)"),
    ],
    ids=["pyarrow-service-unavailable", "body-reset-mid-get", "body-reset-mid-list", "body-read"],
)
def test_a_reset_in_a_replys_body_or_a_503_in_any_spelling_is_read_again(no_waits: list[float], error: OSError) -> None:
    """pyarrow's GetObject 503 says ``SERVICE_UNAVAILABLE`` (the pattern wanted a space), and object_store
    retries no reply whose body was cut by a reset: one reset in a hundred requests failed most commands
    (a review's proxy). Each is read again after a jittered wait, and said so when it is left."""
    replies = [error]

    def read() -> str:
        if replies:
            raise replies.pop()
        return "read"

    assert storage.read_retrying(read, "a file") == "read"
    assert len(no_waits) == 1
    assert "run the command again" in str(storage.storage_error(error, "lake table messages"))


def test_deltalakes_own_error_after_its_retries_is_read_again(no_waits: list[float]) -> None:
    """deltalake raises ``DeltaError`` (not an ``OSError``) when its log read gives up on a throttling or a
    reset body: a review's erase and maintain failed on it behind 6-10 s bursts, never read again."""
    from deltalake.exceptions import DeltaError

    replies = [DeltaError("Generic DeltaTable error: Error getting list response body: connection reset")]

    def read() -> str:
        if replies:
            raise replies.pop()
        return "read"

    assert storage.read_retrying(read, "a log") == "read" and len(no_waits) == 1
    with pytest.raises(DeltaError):  # not a throttling: at once
        storage.read_retrying(lambda: (_ for _ in ()).throw(DeltaError("Invalid table version: 9")), "a log")
    assert len(no_waits) == 1


@pytest.mark.parametrize(
    "error",
    [
        FileNotFoundError("s3://lake/body_shop_slowdownrequested/part-0.parquet: No such file"),
        OSError("When reading 'lake/body_shop_slowdownrequested/x': AWS Error ACCESS_DENIED (HTTP status 403)"),
        OSError("AWS Error UNKNOWN (HTTP status 501) during GetObject operation: Not Implemented"),
    ],
    ids=["missing-file-named-slowdown", "path-holds-slowdown", "not-implemented"],
)
def test_what_is_not_throttling_is_raised_at_once(no_waits: list[float], error: OSError) -> None:
    """Throttling is looked for in the store's own words, not in the path before them (a missing file
    of a type named ``...SlowDownRequested`` was read 4 times: a review); a 501 is no throttling."""

    def failing() -> None:
        raise error

    with pytest.raises(OSError):
        storage.read_retrying(failing, "a file")
    assert no_waits == []


def test_whether_a_table_exists_on_azure_or_gcs_is_asked_with_the_lakes_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pyarrow's file systems here are not given Azure's or GCS's credentials (the lake's storage options):
    for those roots deltalake answers, with them, as before ``is_delta_table`` read the log itself (a review)."""
    from deltalake import DeltaTable

    asked: list[tuple[str, object]] = []
    monkeypatch.setattr(
        DeltaTable, "is_deltatable", staticmethod(lambda uri, opts=None: asked.append((uri, opts)) or True)
    )
    uri = "abfss://lake@account.dfs.core.windows.net/root/messages"
    assert storage.is_delta_table(uri, {"azure_storage_account_key": "k"})
    assert asked == [(uri, {"AZURE_STORAGE_ACCOUNT_KEY": "k"})], asked

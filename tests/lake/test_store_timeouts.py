"""Timeouts of the lake's S3 clients, and the warning when the store does not answer (no server here)."""

from __future__ import annotations

import logging
import socket

import pytest
from queuelake.errors import LakeError
from queuelake.lake import reachability, storage

_S3 = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret-value-never-shown"}


def test_one_timeout_key_sets_every_clients_timeout() -> None:
    opts = storage.lake_options("s3://b/lake", {**_S3, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
    assert opts["timeout"] == "60s"  # object_store's own 30 s failed a slow commit (a review)
    assert storage.lake_options("/tmp/lake", {}) == {}  # a local lake: no store to wait for
    # the config's key wins, in any case; connect_timeout passes as object_store spells it
    mine = storage.lake_options("s3://b/lake", {**_S3, "TIMEOUT": "45s", "Connect_Timeout": "2s"})
    assert (mine["timeout"], mine["connect_timeout"]) == ("45s", "2s") and "TIMEOUT" not in mine
    conf = storage.s3a_conf(mine)
    assert conf["fs.s3a.connection.request.timeout"] == "45s"
    assert conf["fs.s3a.connection.establish.timeout"] == "2s"
    fs, _ = storage.filesystem("s3://b/lake", mine)
    assert fs.__reduce__()[1][0]["request_timeout"] == 45.0  # pyarrow gave up after 3 s without a byte
    assert fs.__reduce__()[1][0]["connect_timeout"] == 2.0


def test_a_request_that_times_out_is_tried_again_by_default(caplog: pytest.LogCaptureFixture) -> None:
    """object_store begins no retry once ``retry_timeout`` has passed: at 60 s both, a request that timed
    out was never tried again (a review)."""
    opts = storage.lake_options("s3://b/lake", _S3)
    assert storage.duration_seconds(opts["timeout"], "t") < storage.duration_seconds(opts["retry_timeout"], "r")
    assert not [r for r in caplog.records if "retry_timeout" in r.getMessage()]
    with caplog.at_level(logging.WARNING):
        storage.lake_options("s3://b/lake", {**_S3, "timeout": "3m"})
    assert "timeout 180s is not shorter than retry_timeout 180s" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # every client's options pass here: said once, not per client
        storage.lake_options("s3://b/lake", {**_S3, "timeout": "3m"})
    assert "retry_timeout" not in caplog.text


@pytest.mark.parametrize(
    ("value", "written"), [("30", "30s"), ("1.5", "1500ms"), ("2m", "120s"), ("500ms", "500ms"), (" 45s ", "45s")]
)
def test_every_client_reads_a_duration_alike(value: str, written: str) -> None:
    """A bare ``30`` was 30 s to pyarrow, 30 ms to S3A and refused by deltalake (a review): each duration
    key is written once, in a spelling they all read alike."""
    opts = storage.lake_options("s3://b/lake", {**_S3, "timeout": value, "CONNECT_TIMEOUT": value})
    assert (opts["timeout"], opts["connect_timeout"]) == (written, written)
    conf = storage.s3a_conf(opts)
    assert conf["fs.s3a.connection.request.timeout"] == conf["fs.s3a.connection.establish.timeout"] == written
    fs, _ = storage.filesystem("s3://b/lake", opts)
    assert fs.__reduce__()[1][0]["request_timeout"] == storage.duration_seconds(value, "timeout")


@pytest.mark.parametrize(("value", "seconds"), [("120s", 120.0), ("500ms", 0.5), ("2m", 120.0), ("30", 30.0)])
def test_durations_as_object_store_writes_them(value: str, seconds: float) -> None:
    assert storage.duration_seconds(value, "timeout") == seconds


@pytest.mark.parametrize("value", ["soon", "-5s", "10 minutes", ""])
def test_a_duration_that_is_not_one_is_refused_naming_its_key(value: str) -> None:
    with pytest.raises(LakeError, match="lake.storage_options timeout must be a duration"):
        storage.s3a_conf(storage.lake_options("s3://b/lake", {**_S3, "timeout": value or " "}))


def test_the_endpoint_a_store_is_reached_at() -> None:
    assert reachability.endpoint_of({"AWS_ENDPOINT_URL": "http://minio:9000"})[:2] == ("minio", 9000)
    said = reachability.endpoint_of({"AWS_ENDPOINT_URL": "https://user:s3cr3t-pass@minio.internal/"})
    assert said == ("minio.internal", 443, "https://minio.internal:443")  # no password in a log line
    assert reachability.endpoint_of({"AWS_ENDPOINT_URL": "https://s3.example.com"})[:2] == ("s3.example.com", 443)
    assert reachability.endpoint_of({"AWS_ENDPOINT": "127.0.0.1:9"})[:2] == ("127.0.0.1", 9)
    assert reachability.endpoint_of({"AWS_REGION": "eu-west-1"})[:2] == ("s3.eu-west-1.amazonaws.com", 443)
    assert reachability.endpoint_of({})[:2] == ("s3.us-east-1.amazonaws.com", 443)
    # an IPv6 address said in brackets; a port out of range probes nothing (it raised in the engine's set-up)
    assert reachability.endpoint_of({"AWS_ENDPOINT_URL": "http://[::1]:9000"}) == ("::1", 9000, "http://[::1]:9000")
    assert reachability.endpoint_of({"AWS_ENDPOINT_URL": "http://minio:99999"})[:2] == ("", 0)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_no_probe_through_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind a proxy a direct connection says nothing about the store (and a firewall may refuse it)."""
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    opts = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{_closed_port()}"}
    assert not reachability.behind_a_proxy(opts)
    assert reachability.probe_in_background({**opts, "proxy_url": "http://proxy:3128"}) is None
    monkeypatch.setenv("https_proxy", "http://proxy:3128")
    assert reachability.probe_in_background(opts) is None


def test_a_store_that_refuses_connections_is_said_at_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unreachable endpoint left the command silent for 34-51 s of its clients' retries (a review)."""
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    port = _closed_port()
    opts = storage.lake_options("s3://b/lake", {**_S3, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"})
    with caplog.at_level(logging.WARNING, logger="queuelake"):
        thread = reachability.probe_in_background(opts)
        assert thread is not None
        thread.join(10)
        assert reachability.probe_in_background(opts) is None  # once per endpoint and process
    said = [r.getMessage() for r in caplog.records if "does not answer" in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert f"http://127.0.0.1:{port}" in said[0] and "180s" in said[0]
    assert "secret-value-never-shown" not in caplog.text


def test_a_store_that_answers_is_not_warned_about(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        with caplog.at_level(logging.WARNING, logger="queuelake"):
            thread = reachability.probe_in_background(storage.lake_options("s3://b/lake", {"AWS_ENDPOINT_URL": url}))
            assert thread is not None
            thread.join(10)
    assert "does not answer" not in caplog.text

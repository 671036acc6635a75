"""A queue database that does not answer ends a connection attempt (``drivers.CONNECT_TIMEOUT_SECONDS``)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import pytest
from queuelake.config_sections import TransportConfig
from queuelake.dialects.dialect import DIALECTS
from queuelake.transport import db, drivers


def _given_up(connect: Callable[[str], object], waiting: str) -> None:
    """``connect`` to a server that takes the connection and never answers fails with a timeout, within
    60 s (``CONNECT_TIMEOUT_SECONDS`` is 2 here); ``waiting`` says what was still waiting otherwise."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        outcome: list[BaseException | None] = []

        def attempt() -> None:
            try:
                connect(f"postgresql://u@127.0.0.1:{silent.getsockname()[1]}/x")
                outcome.append(None)
            except Exception as exc:  # noqa: BLE001 - the driver's own error type
                outcome.append(exc)

        thread = threading.Thread(target=attempt, daemon=True)
        thread.start()
        thread.join(60)
    assert outcome, f"{waiting} after 60 s"
    assert outcome[0] is not None and "timeout" in str(outcome[0]).lower(), outcome


@pytest.mark.parametrize("driver", ["psycopg", "adbc"])
def test_a_server_that_never_answers_fails_the_connection(
    fresh_pg_uri: str, driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that takes the connection and never answers: libpq waited for ever (a review's run hung).
    The real server still connects with the timeout added."""
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.setattr(drivers, "CONNECT_TIMEOUT_SECONDS", 2)
    chosen, rules = drivers.driver(driver), DIALECTS["postgresql"]
    chosen.open(fresh_pg_uri, "queuelake-test", rules).close()
    _given_up(lambda uri: chosen.open(uri, "queuelake-test", rules).close(), "the connection attempt was still waiting")


def test_the_drains_shared_adbc_connections_give_up_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The drain's receive path (``db.SharedAdbc``, ADBC's default under ``receive_driver: auto``) opened
    its database without the timeout: still waiting after 70 s (a review)."""
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.setattr(drivers, "CONNECT_TIMEOUT_SECONDS", 2)
    _given_up(
        lambda uri: db.SharedAdbc(TransportConfig(connection=uri)).start().connect().close(),
        "the shared ADBC database was still opening",
    )


def test_a_service_names_its_own_connect_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``service=`` entry of pg_service.conf may set one: appending 30 s overrode it (a review)."""
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.delenv("PGSERVICE", raising=False)
    assert drivers.with_connect_timeout("service=queues") == "service=queues"
    assert drivers.with_connect_timeout("host=db dbname=q").endswith("connect_timeout=30")

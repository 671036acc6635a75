"""The embedded PostgreSQL's failed start is the queue database's error, in one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from queuelake.errors import TransportError, error_kind
from queuelake.transport import embedded


def test_a_start_that_pg_ctl_failed_is_a_transport_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A postmaster killed during its start (crash recovery): pgserver's ``CalledProcessError`` for
    ``pg_ctl start`` was the command's error, ``unexpected`` (a review)."""
    import pgserver

    def refused(*args: object, **kwargs: object) -> None:
        raise subprocess.CalledProcessError(1, ["/opt/pginstall/bin/pg_ctl", "-D", str(tmp_path), "start"])

    monkeypatch.setattr(pgserver, "get_server", refused)
    with pytest.raises(TransportError, match="did not start") as failed:
        embedded.start_embedded(tmp_path)
    assert error_kind(failed.value) == "transport"
    assert "pg_ctl exited with 1" in str(failed.value) and "run the command again" in str(failed.value)

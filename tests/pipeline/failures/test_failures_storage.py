"""``failures`` on a store that failed a read past its retries says so in one line (no store here)."""

from __future__ import annotations

from pathlib import Path

import pytest
from queuelake.errors import LakeError
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.pipeline.failures import read
from queuelake.pipeline.failures.run import failure_groups


def test_a_read_the_store_failed_names_the_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It ended in pyarrow's bare ``OSError: AWS Error NETWORK_CONNECTION during GetObject``, naming no
    table (a review)."""

    def refused(*args: object, **kwargs: object) -> object:
        raise OSError("AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 28, Timeout was reached")

    monkeypatch.setattr(read, "read_failed", refused)
    with pytest.raises(LakeError, match=r"lake table messages at .*: object storage error.*Timeout was reached"):
        failure_groups(DeltaRsEngine(str(tmp_path / "lake")))

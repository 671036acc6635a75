"""The test tiers (tests/conftest.py): a test's tier follows from what it uses, and the fast tier refuses what
would make it slow, so ``make test-fast`` stays the loop to run while working."""

from __future__ import annotations

import importlib

import psycopg
import pytest

from tests.conftest import tiers_of


def test_this_test_is_fast_and_may_not_start_a_process_or_connect(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("fast") is not None
    processes = importlib.import_module("subprocess")  # not a module-level name: the guard must catch it
    with pytest.raises(AssertionError, match="is in the fast tier .* but starts a process"):
        processes.Popen(["true"])
    with pytest.raises(AssertionError, match="connects to PostgreSQL"):
        psycopg.connect("postgresql://nobody@localhost:1/none")


def test_tiers_follow_the_fixtures_and_the_module(request: pytest.FixtureRequest) -> None:
    """Checked on the session's own items where they were collected (``pytest tests/product`` collects
    test_exits, which uses a database through a fixture and starts the CLI)."""
    by_name = {item.nodeid: item for item in request.session.items}
    assert tiers_of(request.node) == {"fast"}
    for nodeid, item in by_name.items():
        names = set(getattr(item, "fixturenames", ()))
        tiers = tiers_of(item)
        if names & {"pg_uri", "fresh_pg_uri", "pg_server_uri"}:
            assert "db" in tiers, nodeid
        if "spark" in names:
            assert "spark" in tiers, nodeid
        assert ("fast" in tiers) == (tiers == {"fast"}), nodeid
        assert {m.name for m in item.iter_markers()} >= tiers, nodeid

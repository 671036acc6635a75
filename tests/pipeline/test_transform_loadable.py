"""Transforms that cannot load are found before anything runs (no Spark, no database)."""

from __future__ import annotations

from pathlib import Path

import pytest
from queuelake.config import from_dict
from queuelake.pipeline.transform import unloadable

REPO = Path(__file__).resolve().parents[2]


def test_a_missing_module_or_sql_file_is_found_without_running_anything(tmp_path: Path) -> None:
    """``run`` learnt of a transform's missing module after its drain and bodies steps (a review)."""
    cfg = from_dict(
        {
            "transforms": [
                {"name": "ok_sql", "sql": str(REPO / "sql/transforms/messages_per_endpoint.sql"), "output": "a"},
                {"name": "ok_fn", "function": "queuelake.pipeline.transform:load_function", "output": "b"},
                {"name": "gone_sql", "sql": str(tmp_path / "nope.sql"), "output": "c"},
                {"name": "gone_fn", "function": "my_jobs.scores:build", "output": "d"},
                {"name": "gone_sub", "function": "queuelake.nothing_here:f", "output": "e"},
            ]
        },
        env={},
    )
    problems = unloadable(cfg)
    assert [p.split(":")[0] for p in problems] == [
        "transform 'gone_sql'",
        "transform 'gone_fn'",
        "transform 'gone_sub'",
    ]
    assert "nope.sql does not exist" in problems[0] and "module 'my_jobs.scores'" in problems[1]


def test_a_parent_package_whose_import_raises_is_said_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding ``pkg.scores`` imports ``pkg``; one that read a variable not set raised KeyError out of
    ``run`` before its drain (a review): the other steps run, the transform step fails that one."""
    package = tmp_path / "needs_setting"
    package.mkdir()
    (package / "__init__.py").write_text("import os\nSETTING = os.environ['NEEDS_SETTING_VALUE']\n")
    (package / "scores.py").write_text("def build(spark, journal):\n    return journal\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("NEEDS_SETTING_VALUE", raising=False)
    cfg = from_dict({"transforms": [{"name": "s", "function": "needs_setting.scores:build", "output": "o"}]}, env={})
    assert unloadable(cfg) == ["transform 's': importing 'needs_setting.scores' raised KeyError: 'NEEDS_SETTING_VALUE'"]


def test_the_demo_function_an_older_demo_wrote_is_read_from_where_it_moved(caplog: pytest.LogCaptureFixture) -> None:
    """Configs the demo wrote before round 37 name ``queuelake.examples.orders:customer_totals``, which moved
    to ``queuelake.commands.demo.orders``: their scheduled runs failed after an upgrade (a review)."""
    import logging

    from queuelake.commands.demo import orders
    from queuelake.pipeline.transform import load_function

    old = "queuelake.examples.orders:customer_totals"
    cfg = from_dict({"transforms": [{"name": "customer_totals", "function": old, "output": "o"}]}, env={})
    assert unloadable(cfg) == []
    with caplog.at_level(logging.WARNING, logger="queuelake"):
        assert load_function(old) is orders.customer_totals
    assert "has moved to queuelake.commands.demo.orders" in caplog.text


def test_an_output_that_is_one_of_queuelakes_own_tables_is_found_before_anything_runs() -> None:
    """``transforms[].output: messages`` was accepted: the transform ran, then failed on the journal's columns."""
    cfg = from_dict(
        {"transforms": [{"name": "t", "function": "queuelake.pipeline.transform:load_function", "output": "runs"}]},
        env={},
    )
    assert unloadable(cfg) == ["transform 't': its output runs is one of queuelake's own tables"]

"""The demo never deletes what it did not create. Its run end to end (report, what it leaves, the next
commands as printed) is test_fresh_clone's, on `make demo` from a fresh clone: one demo run, not two."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from queuelake.commands.demo import end_to_end
from queuelake.errors import QueuelakeError

from tests.helpers.cli import CliResult, run_cli


def queuelake(args: list[str], cwd: Path, timeout: float = 600) -> CliResult:
    return run_cli(args, cwd=cwd, timeout=timeout)


@pytest.mark.parametrize("existing", ["lake", ".queuelake/pgdata", "queuelake-demo.yaml"])
def test_demo_refuses_what_it_did_not_create(tmp_path: Path, existing: str) -> None:
    path = tmp_path / existing
    if existing.endswith(".yaml"):
        path.write_text("mine: true\n", encoding="utf-8")
    else:
        path.mkdir(parents=True)
        (path / "precious.txt").write_text("not the demo's", encoding="utf-8")
    proc = queuelake(["demo", "--workdir", str(tmp_path), "--messages", "10"], tmp_path, timeout=120)
    assert proc.returncode == 1
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["status"] == "failed"
    assert str(path) in summary["error"] and "did not create" in summary["error"] and "--workdir" in summary["error"]
    assert path.exists() and (existing.endswith(".yaml") or (path / "precious.txt").is_file())
    assert not (tmp_path / "lake" / "messages").exists()  # it did nothing else either


def test_a_rerun_replaces_only_what_an_earlier_demo_made(tmp_path: Path) -> None:
    end_to_end.prepare_workdir(tmp_path)  # the first run records what it makes
    (tmp_path / "lake" / "messages").mkdir(parents=True)
    (tmp_path / "queuelake-demo.yaml").write_text("{}", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("the user's", encoding="utf-8")
    end_to_end.prepare_workdir(tmp_path)  # a rerun: the earlier demo's lake and config go, nothing else
    assert not (tmp_path / "lake").exists() and not (tmp_path / "queuelake-demo.yaml").exists()
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "the user's"
    # a marker that does not list the lake (a user's lake next to a demo's database) still refuses
    (tmp_path / ".queuelake" / "demo-created.json").write_text('{"created": [".queuelake/pgdata"]}', encoding="utf-8")
    (tmp_path / "lake").mkdir()
    with pytest.raises(QueuelakeError, match="did not create"):
        end_to_end.prepare_workdir(tmp_path)
    assert (tmp_path / "lake").is_dir()


def test_demo_config_is_the_built_in_one_in_the_workdir(tmp_path: Path) -> None:
    cfg = end_to_end.demo_config(tmp_path, engine="delta-rs")
    assert cfg.lake.root == str(tmp_path / "lake") and cfg.lake.engine == "delta-rs"
    assert cfg.transport.embedded == str(tmp_path / ".queuelake" / "pgdata")
    assert cfg.drain.queues == end_to_end.DRAINED and cfg.transforms[0].destinations == ["Billing"]

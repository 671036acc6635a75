"""The demo runs end to end on the embedded default and its report matches the seeded traffic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_end_to_end(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "queuelake", "demo", "--workdir", str(tmp_path), "--messages", "600"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["status"] == "ok"
    report = "\n".join(lines[:-1])
    assert "Drained into the journal" in report and "Published:" in report
    # what landed, per queue and outcome, is exactly what was seeded
    journal = {queue.split(".")[-1].strip('"'): counts for queue, counts in summary["journal"].items()}
    assert journal == summary["expected"]
    assert summary["expected"]["Sales"]["expired"] > 0 and summary["expected"]["Sales"]["quarantined"] > 0
    assert summary["expected"]["error"]["landed"] > 0 and summary["expected"]["audit"]["landed"] > 0
    # the worked example published events to both subscribers and commands to Billing
    to = summary["published"]["to"]
    billing = to['"public"."Billing"']
    shipping = to['"public"."Shipping"']
    events = "Publish Lakehouse.Events.CustomerTotalsUpdated"
    assert billing[events] == shipping[events] > 0
    assert summary["published"]["copies"] == sum(n for types in to.values() for n in types.values())
    assert (tmp_path / "lake" / "messages" / "_delta_log").is_dir()

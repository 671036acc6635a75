"""Makes the README's conversation pictures, docs/conversation-3.svg and docs/conversation-300.svg, from
real drained traffic: a throwaway PostgreSQL (the ``embedded`` extra), the two conversations of
``queuelake.commands.demo.traffic`` seeded into Sales, Shipping, audit and error as endpoints and
ServiceControl write them, ``queuelake drain``, then ``queuelake conversation`` for each.

Usage (from the repository root, with queuelake installed): python scripts/conversation-pictures.py [--out-dir docs]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from queuelake.commands.demo import conversations, traffic
from queuelake.config import from_dict
from queuelake.context import connect
from queuelake.transport import installer
from queuelake.transport.table_refs import queue_ref

DRAINED = ["Sales", "Shipping", "audit", "error"]
START = dt.datetime(2026, 11, 2, 9, 30, tzinfo=dt.timezone.utc)
PICTURES = {
    "conversation-3.svg": ("5d0c2a7e-8f41-4b6a-9d3e-2f6b1c7a0003", conversations.order_conversation()),
    "conversation-300.svg": ("5d0c2a7e-8f41-4b6a-9d3e-2f6b1c7a0300", conversations.bulk_conversation(300)),
}


def queuelake(*args: str, cwd: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "queuelake", *args], capture_output=True, text=True, cwd=cwd)
    sys.stderr.write(proc.stderr)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    if proc.returncode != 0:
        raise SystemExit(f"queuelake {args[0]} failed: {summary}")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default="docs", type=Path)
    out_dir = parser.parse_args().out_dir.resolve()
    with tempfile.TemporaryDirectory(prefix="queuelake-pictures-") as folder:
        work = Path(folder)
        settings = {
            "transport": {"connection": None, "embedded": str(work / "pgdata")},
            "lake": {"root": str(work / "lake"), "engine": "delta-rs"},
            "drain": {"queues": DRAINED},
        }
        (work / "job.yaml").write_text(json.dumps(settings))
        cfg = from_dict(settings, env={})
        with connect(cfg) as conn:
            installer.install(conn, installer.plan(cfg))
            for seed, (conversation_id, steps) in enumerate(PICTURES.values(), start=1):
                for queue, messages in conversations.conversation_traffic(steps, conversation_id, START, seed).items():
                    traffic.seed(conn, queue_ref(queue, cfg.transport), messages)
        queuelake("drain", "-c", str(work / "job.yaml"), cwd=work)
        for name, (conversation_id, _) in PICTURES.items():
            summary = queuelake(
                "conversation", "-c", str(work / "job.yaml"), conversation_id, "--out", str(out_dir / name), cwd=work
            )
            print(json.dumps(summary))


if __name__ == "__main__":
    main()

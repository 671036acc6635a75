"""Benchmark: a first backlog through ``queuelake run`` on default settings, with peak memory.

A new user's first scheduled run meets the backlog their system already has. This seeds --messages
OrderPlaced events into a throwaway PostgreSQL (``--copies 3``: every message id three times, as a
system's traffic seeded three times, each copy its own row), then runs ``queuelake run`` as a new
process on the demo's stages (drain, bodies, the worked example's transform, publish to Billing and a
subscriber) with no Spark settings at all: the default local session (``spark.driver.memory`` 1g).

Reported per size: the whole command's seconds, each stage's seconds and rows per second, the slices
bodies and the transform took (``spark.slice_rows``), and the peak resident memory of the command's
process tree (the Python driver and the JVM it starts, sampled every 0.2 s with psutil), so that
memory can be compared between sizes: it should follow the slice, not the backlog.

``--rewritten`` drains the backlog first, then runs ``maintain`` (a compaction) and an ``erase`` of one
row (which purges the compaction's removed files): the measured ``run`` is then the stages' first run on
a journal whose history was rewritten, which each slice reads from the compacted files by batch id.

``--body-kb N`` pads each body to about N KB on average (a spread of 0.2 to 1.8 times, and one body in
2,000 of 200 KB, as real systems' documents), where the demo's are about 1 KB: bodies of a few KB are
what ran the bodies stage out of memory on defaults before its slices' samples and cache were bounded
by bytes.

    python bench/backlog.py [--messages 1000000 5000000] [--copies 1 3] [--body-kb 3] [--rewritten] [--workdir DIR]

Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import psutil
from queuelake.commands.demo import traffic
from queuelake.commands.demo.orders import DISCOUNT_QUEUE
from queuelake.config import from_dict
from queuelake.transport import db, installer, subscriptions
from queuelake.transport.embedded import start_embedded, with_database
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.table_refs import bridge_ref, queue_ref

ROOT = Path(__file__).resolve().parents[1]
SUBSCRIBER = "Reporting"


def _config(uri: str, lake: Path) -> dict:
    return {
        "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
        "lake": {"root": str(lake)},
        "drain": {"queues": ["Sales"]},
        "transforms": [
            {
                "name": "customer_totals",
                "function": "queuelake.commands.demo.orders:customer_totals",
                "output": "outbound_customer_totals",
                "destinations": [DISCOUNT_QUEUE],
            }
        ],
        "publish": {"endpoint": "Lakehouse", "outputs": ["outbound_customer_totals"]},
    }


_WORDS = "order customer shipment invoice pallet warehouse harbour crate label customs route depot".split()
BIG_BODY_EVERY = 2_000
BIG_BODY_BYTES = 200_000


def _padded(body: bytes, rng: random.Random, body_kb: float) -> bytes:
    """``body`` with a ``Remarks`` text making it about ``body_kb`` KB (see the module's docstring)."""
    size = BIG_BODY_BYTES if rng.randrange(BIG_BODY_EVERY) == 0 else int(body_kb * 1024 * rng.uniform(0.2, 1.8))
    words: list[str] = []
    length = len(body)
    while length < size:
        words.append(rng.choice(_WORDS))
        length += len(words[-1]) + 1
    return body[:-1] + b',"Remarks":"' + " ".join(words).encode() + b'"}'


def _messages(count: int, copies: int, body_kb: float | None = None) -> Iterator[OutgoingMessage]:
    rng = random.Random(29)
    for message in traffic.order_events(count // copies, seed=17):
        if body_kb:
            message = OutgoingMessage(message.headers, _padded(message.body or b"{}", rng, body_kb), id=message.id)
        yield message
        for _ in range(copies - 1):
            yield OutgoingMessage(message.headers, message.body, id=str(uuid.uuid4()))


class TreePeak:
    """The peak of the summed resident memory of a process and its descendants, sampled."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.peak = 0
        self.peak_jvm = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
                sizes = []
                for p in procs:
                    try:
                        sizes.append((p.memory_info().rss, "java" in p.name()))
                    except psutil.Error:
                        continue
                self.peak = max(self.peak, sum(s for s, _ in sizes))
                self.peak_jvm = max(self.peak_jvm, sum(s for s, is_java in sizes if is_java))
            except psutil.Error:
                pass
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _prepare_rewritten(conf: Path, env: dict[str, str], work: Path) -> float:
    """The backlog drained, the journal compacted and one row erased, each a command of its own; seconds."""
    started = time.perf_counter()
    for args in (["drain"], ["maintain"], ["erase", "--where", "seq = 1"]):
        done = subprocess.run(
            [sys.executable, "-m", "queuelake", *args, "-c", str(conf)],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise SystemExit(f"{args[0]} failed ({done.returncode}): {done.stderr[-1500:]}")
        print(f"{args[0]}: {done.stdout.strip().splitlines()[-1][:300]}", file=sys.stderr, flush=True)
    return round(time.perf_counter() - started, 1)


def one(
    server_uri: str, messages: int, copies: int, work: Path, body_kb: float | None = None, rewritten: bool = False
) -> dict:
    import psycopg

    name = f"backlog_{messages}_{copies}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(server_uri, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    uri = with_database(server_uri, name)
    lake = work / name
    conf = work / f"{name}.json"
    conf.write_text(json.dumps(_config(uri, lake)))
    cfg = from_dict({**_config(uri, lake), "transport": {"connection": uri}}, env={})
    seeded = time.perf_counter()
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=[DISCOUNT_QUEUE, SUBSCRIBER]))
        table = bridge_ref(cfg.transport.subscription_table, cfg.transport)
        subscriptions.subscribe(conn, table, SUBSCRIBER, SUBSCRIBER, "Lakehouse.Events.CustomerTotalsUpdated")
        conn.commit()
        traffic.seed(conn, queue_ref("Sales", cfg.transport), _messages(messages, copies, body_kb), chunk=50_000)
    print(f"seeded {messages} ({copies} copies) in {time.perf_counter() - seeded:.0f}s", file=sys.stderr, flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib"), "QUEUELAKE_CONNECTION": uri}
    prepared = _prepare_rewritten(conf, env, work) if rewritten else None
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "queuelake", "run", "-c", str(conf)],
        env=env,
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    peak = TreePeak(proc.pid)
    out, err = proc.communicate()
    peak.stop()
    seconds = time.perf_counter() - started
    lines = out.strip().splitlines()
    summary = json.loads(lines[-1]) if lines else {}
    stages = {}
    for stage in ("drain", "bodies", "transform", "publish"):
        part = summary.get(stage) or {}
        rows = {
            "drain": part.get("landed"),
            "bodies": part.get("rows_read"),
            "transform": sum(t.get("rows_in", 0) for t in part.get("transforms", [])),
            "publish": sum(o.get("published", 0) for o in part.get("outputs", [])),
        }[stage]
        stage_seconds = part.get("step_seconds")
        stages[stage] = {
            "status": part.get("status"),
            "rows": rows,
            "seconds": stage_seconds,
            "rows_per_s": round(rows / stage_seconds) if rows and stage_seconds else None,
        }
    stages["bodies"]["slices"] = (summary.get("bodies") or {}).get("slices")
    stages["transform"]["slices"] = [t.get("slices") for t in (summary.get("transform") or {}).get("transforms", [])]
    shutil.rmtree(lake, ignore_errors=True)
    with psycopg.connect(server_uri, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    return {
        "messages": messages,
        "copies": copies,
        "body_kb": body_kb,
        "rewritten_first_seconds": prepared,
        "exit": proc.returncode,
        "status": summary.get("status"),
        "error": summary.get("error")
        or next((s.get("error") for s in summary.values() if isinstance(s, dict) and s.get("error")), None),
        "seconds": round(seconds, 1),
        "peak_tree_mb": round(peak.peak / 2**20),
        "peak_jvm_mb": round(peak.peak_jvm / 2**20),
        "stages": stages,
        "stderr_tail": err[-1500:] if proc.returncode else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--copies", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--body-kb", type=float, default=None, help="bodies of about this many KB (default ~1)")
    parser.add_argument("--rewritten", action="store_true", help="drain, maintain and erase before the run measured")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="queuelake-backlog-"))
    work.mkdir(parents=True, exist_ok=True)
    data = tempfile.mkdtemp(prefix="queuelake-backlog-pg-")
    server = start_embedded(data)
    results = []
    try:
        for copies in args.copies:
            for messages in args.messages:
                result = one(server.get_uri("postgres"), messages, copies, work, args.body_kb, args.rewritten)
                print(json.dumps(result), file=sys.stderr, flush=True)
                results.append(result)
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)
    print("messages copies exit  seconds  tree_MB  jvm_MB  drain/s  bodies/s  transform/s  publish/s  slices")
    for r in results:
        s = r["stages"]
        print(
            f"{r['messages']:>8} {r['copies']:>6} {r['exit']:>4} {r['seconds']:>8} {r['peak_tree_mb']:>8} "
            f"{r['peak_jvm_mb']:>7} {s['drain']['rows_per_s']!s:>8} {s['bodies']['rows_per_s']!s:>9} "
            f"{s['transform']['rows_per_s']!s:>12} {s['publish']['rows_per_s']!s:>10}  "
            f"{s['bodies']['slices']}/{s['transform']['slices']}"
        )
    print(json.dumps({"bench": "backlog", "results": results}))


if __name__ == "__main__":
    main()

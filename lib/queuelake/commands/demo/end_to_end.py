"""The demo (``queuelake demo``, declared in ``command.py`` beside it): the embedded default end to end,
on a laptop, in a couple of minutes.

An embedded PostgreSQL (pgserver), local Spark and a lake, all in the work folder. It installs an
NServiceBus topology (Sales, Billing, Shipping endpoints; audit and error queues; subscriptions),
seeds traffic with expired, malformed and failed messages, runs drain, bodies (the typed tables),
transform (which reads the typed ``OrderPlaced`` table) and publish, and
prints a report and the next commands to try.

It never deletes what it did not create: in a folder holding a ``lake``, a ``.queuelake`` database
or a ``queuelake-demo.yaml`` that an earlier demo did not record as its own, it refuses. What it
makes stays (the database is stopped with the process, its data folder kept), so ``queuelake status
-c queuelake-demo.yaml``, ``drain`` and the notebooks work on it afterwards: the next command starts
the embedded server again from that folder.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from queuelake.commands.demo import traffic
from queuelake.config import Config, from_dict, load, read_yaml
from queuelake.context import open_database
from queuelake.errors import DemoError
from queuelake.lake.engines import journal_engine
from queuelake.lake.port import LakeEngine
from queuelake.local_config import LOCAL_YAML
from queuelake.nsb import headers as hdr
from queuelake.pipeline.journal.schema import MESSAGES
from queuelake.report import log
from queuelake.status import Status
from queuelake.transport import installer, subscriptions
from queuelake.transport.queues import OutgoingMessage

DRAINED = ["Sales", "audit", "error"]
ENDPOINTS = ["Sales", "Billing", "Shipping"]
CONFIG_NAME = "queuelake-demo.yaml"
# the repository root when this runs from a checkout (lib/queuelake/commands/demo/ below it): its Delta jars
# and notebooks are used where they are there (an installed wheel has neither)
CHECKOUT = Path(__file__).resolve().parents[4]
# what the demo creates in its work folder, and the record that it did (so a rerun may replace them)
LAKE, DATABASE, MARKER = "lake", ".queuelake/pgdata", ".queuelake/demo-created.json"


def demo_settings(workdir: Path, engine: str = "auto") -> dict[str, Any]:
    """The built-in local config (``queuelake.local_config``) with absolute paths into the
    work folder, so the written file works from any folder."""
    data = read_yaml(LOCAL_YAML)
    data["transport"]["embedded"] = str(workdir / DATABASE)
    data["lake"].update(root=str(workdir / LAKE), engine=engine)
    data["drain"].update(queues=DRAINED, batch_size=2000)
    from queuelake.commands.demo.orders import APPLY_DISCOUNT, TOTALS_UPDATED

    # a business expectation, as an example (README "Your own expectations"): the lake emits only the
    # two message types agreed with the subscribers; a failure blocks the round and nothing is sent
    agreed = [TOTALS_UPDATED, APPLY_DISCOUNT]
    data["publish"]["expectations"] = {
        "outbound_customer_totals": [
            {"expect_column_values_to_be_in_set": {"column": "message_type", "value_set": agreed}},
        ]
    }
    return data


def demo_config(workdir: Path, engine: str = "auto") -> Config:
    return from_dict(demo_settings(workdir, engine), env={})


def prepare_workdir(workdir: Path) -> None:
    """Refuse a folder holding a lake, database or config the demo did not create; replace only what
    an earlier demo recorded as its own (and only when its database is not running)."""
    workdir.mkdir(parents=True, exist_ok=True)
    marker = workdir / MARKER
    ours: set[str] = set()
    if marker.is_file():
        try:
            ours = set(json.loads(marker.read_text(encoding="utf-8")).get("created", []))
        except (ValueError, AttributeError):
            ours = set()
    present = [name for name in (LAKE, DATABASE, CONFIG_NAME) if (workdir / name).exists()]
    foreign = [name for name in present if name not in ours]
    if foreign:
        listed = ", ".join(str(workdir / name) for name in foreign)
        raise DemoError(
            f"demo: {listed} already exist(s) and the demo did not create them; it never deletes what it did not "
            "create: run it in an empty folder (--workdir DIR), or move those away yourself"
        )
    if (workdir / DATABASE / "postmaster.pid").exists() and _running(workdir / DATABASE):
        raise DemoError(
            f"demo: the earlier demo's database in {workdir / DATABASE} is running (a command is using it): "
            "wait for it to finish, or run the demo in another folder (--workdir DIR)"
        )
    for name in present:  # an earlier demo's own: start clean so the counts match the seed
        path = workdir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
        log.info("demo: removed %s (made by an earlier demo here)", path)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"created": [LAKE, DATABASE, CONFIG_NAME]}), encoding="utf-8")


def _running(pg_data: Path) -> bool:
    """Is the postmaster named in the data folder's postmaster.pid alive?"""
    try:
        import psutil

        pid = int((pg_data / "postmaster.pid").read_text(encoding="utf-8").splitlines()[0])
        return bool(psutil.pid_exists(pid))
    except (OSError, ValueError, IndexError, ImportError):
        return False


def use_checkout_jars() -> list[str]:
    """Put the Delta jars ``jvm/fetch-jars.sh`` left in this checkout's ``jvm/jars`` on the demo's
    Spark, unless QUEUELAKE_DELTA_JARS names others: ``demo --engine delta-spark`` then works after
    ``make test`` (which fetches them) with nothing to set. Only for that engine: under ``auto`` the
    jars would switch the demo's engine. Returns the jars it put there (none: it put none)."""
    from queuelake.spark import JARS_ENV, local_jars

    jars = CHECKOUT / "jvm" / "jars"
    found = local_jars(str(jars)) if jars.is_dir() else []
    if not os.environ.get(JARS_ENV) and any(os.path.basename(j).startswith("delta-spark") for j in found):
        os.environ[JARS_ENV] = str(jars)
        log.info("demo: using the Delta jars in %s", jars)
        return found
    return []


def next_commands(config_file: Path, lake_root: Path) -> list[str]:
    """What to try on the demo's database and lake afterwards (the README's next steps), as they work
    when pasted into a plain shell from any folder: absolute paths, and this interpreter's own
    ``queuelake`` and ``python`` (a shell without the venv activated has neither on its PATH, or
    another Python without the notebooks' packages). The notebook is offered when this is a checkout."""
    bin_dir = Path(sys.executable).parent  # not resolved: a venv's python is a link out of the venv
    script = bin_dir / "queuelake"
    python = shlex.quote(sys.executable)
    queuelake = shlex.quote(str(script)) if script.is_file() else f"{python} -m queuelake"
    config = shlex.quote(str(config_file.resolve()))
    commands = [f"{queuelake} status -c {config}", f"{queuelake} drain -c {config}"]
    notebook = CHECKOUT / "notebooks" / "journal_overview.py"
    if notebook.is_file():
        root = shlex.quote(str(lake_root.resolve()))
        commands.append(f"QUEUELAKE_LAKE_ROOT={root} {python} {shlex.quote(str(notebook))}")
    return commands


def demo_roles(per_queue: int) -> tuple[list[int], list[int]]:
    """Which of the ``per_queue`` OrderPlaced events failed (an error copy) and which were processed (an audit
    copy), by index: half of them processed, a twentieth (at least 3) failed. No message has both: one
    processed at Billing and then failed there, with no retry between, is traffic no endpoint makes, and
    `failures` listed as open what `conversation` drew as retried (a review). Whatever ``--messages`` says,
    the first event failed (a TimeoutException at Billing) and the second was processed: the docs' examples
    name them (docs/where.md, find.md, failures.md, conversations.md; tests/product/test_docs_examples.py)."""
    processed = per_queue // 2
    failing = min(max(per_queue // 20, 3), per_queue - processed)
    failed = [0, *range(2, failing + 1)][:failing]
    audited = [1, *range(failing + 1, failing + processed)][:processed]
    return failed, audited


def seed_traffic(cfg: Config, per_queue: int) -> dict[str, Counter[str]]:
    """What we put in, by queue and by expected outcome, so the report can be checked against it."""
    expected: dict[str, Counter[str]] = {q: Counter() for q in DRAINED}
    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2)
    events = list(traffic.order_events(per_queue, seed=2026, start=start))
    sales: list[OutgoingMessage] = list(events)
    expected["Sales"]["landed"] += len(events)
    for i in range(max(per_queue // 50, 3)):  # expired: TTBR already past when drained
        h = traffic.order_headers(str(uuid.uuid4()), start, intent="Send")
        sales.append(OutgoingMessage(hdr.encode(h), b'{"stale": true}', id=str(uuid.uuid4()), ttbr_ms=-1000 * (i + 1)))
        expected["Sales"]["expired"] += 1
    for raw in traffic.MALFORMED_HEADERS.values():  # malformed: quarantined with the raw text
        sales.append(OutgoingMessage(raw, b"{}", id=str(uuid.uuid4())))
        expected["Sales"]["quarantined"] += 1
    failed, audited = demo_roles(per_queue)
    audit = [  # processed after it was sent (the n-th event is sent n/4 s after the start)
        traffic.audit_copy(events[n], "Billing", start + dt.timedelta(seconds=n), 20 + (n * 37) % 900) for n in audited
    ]
    expected["audit"]["landed"] += len(audit)
    failures = [
        ("System.TimeoutException", "The payment gateway did not answer in time", "Billing"),
        ("System.InvalidOperationException", "Card declined", "Billing"),
        ("Shipping.AddressNotFoundException", "No such street in Rotterdam", "Shipping"),
    ]
    error = []
    for i, n in enumerate(failed):
        exc, text, queue = failures[i % len(failures)]
        error.append(traffic.failed_copy(events[n], queue, exc, text, start + dt.timedelta(minutes=i, seconds=n)))
    expected["error"]["landed"] += len(error)
    database = open_database(cfg)
    with database.connect("queuelake-demo-seed") as conn:
        for name, messages in (("Sales", sales), ("audit", audit), ("error", error)):
            traffic.seed(conn, database.queue(name), messages)
    return expected


def install_topology(cfg: Config) -> None:
    database = open_database(cfg)
    with database.connect("queuelake-demo-install") as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=ENDPOINTS, delayed_endpoints=ENDPOINTS))
        table = database.subscriptions
        for address, endpoint, topic in [
            ("Billing", "Billing", "Sales.Messages.Events.OrderPlaced"),
            ("Shipping", "Shipping", "Sales.Messages.Events.OrderPlaced"),
            ("Shipping", "Shipping", "Lakehouse.Events.ICustomerEvent"),
            ("Billing", "Billing", "Lakehouse.Events.CustomerTotalsUpdated"),
        ]:
            subscriptions.subscribe(conn, table, address, endpoint, topic)
        conn.commit()


def journal_counts(lake: LakeEngine) -> dict[str, dict[str, int]]:
    table = lake.read_arrow(MESSAGES, columns=["queue", "outcome"])
    out: dict[str, dict[str, int]] = {}
    for row in table.group_by(["queue", "outcome"]).aggregate([("outcome", "count")]).to_pylist():
        out.setdefault(row["queue"], {})[row["outcome"]] = row["outcome_count"]
    return out


def delivered(cfg: Config) -> dict[str, dict[str, int]]:
    """What sits in the endpoints' queues now, by message type (read without receiving)."""
    out: dict[str, dict[str, int]] = {}
    database = open_database(cfg)
    with database.connect("queuelake-demo-report") as conn:
        for name in ("Billing", "Shipping"):
            ref = database.queue(name)
            rows = conn.raw.execute(f"SELECT headers FROM {ref.qualified}").fetchall()
            counts: Counter[str] = Counter()
            for (raw,) in rows:
                d = hdr.decode(raw)
                counts[f"{d.message_intent} {d.message_type}"] += 1
            out[ref.canonical] = dict(counts)
        conn.rollback()
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from queuelake.commands.sessions import lake_for
    from queuelake.pipeline.bodies.run import bodies
    from queuelake.pipeline.drain.run import drain
    from queuelake.pipeline.publish.run import publish
    from queuelake.pipeline.transform import transform
    from queuelake.spark import get_spark, has_delta_jvm

    workdir = Path(args.workdir).resolve()
    lake_root = workdir / LAKE
    prepare_workdir(workdir)
    config_file = workdir / CONFIG_NAME
    settings = demo_settings(workdir, getattr(args, "engine", "auto"))
    header = "# Written by `queuelake demo`: its embedded PostgreSQL and lake, for the commands it printed.\n"
    config_file.write_text(header + yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
    try:
        cfg = load(config_file, env={})
        if cfg.lake.engine == "delta-spark" and (jars := use_checkout_jars()):
            # in the config it writes too: the commands it prints (``run`` on a schedule) start their own
            # Spark, without the demo's environment (a review: every later bodies and transform failed)
            spark_settings = settings.setdefault("spark", {})
            spark_settings.setdefault("conf", {})["spark.jars"] = ",".join(jars)
            config_file.write_text(header + yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
        spark = get_spark(cfg.spark)
        # before opening the lake, whose own error about the missing classes is the engine's, not the demo's
        # way out (a review: the demo's advice was never reached)
        if cfg.lake.engine == "delta-spark" and not has_delta_jvm(spark):
            raise DemoError(
                "demo --engine delta-spark: Delta's JVM classes are not on Spark's classpath; point "
                "QUEUELAKE_DELTA_JARS at the jars (bash jvm/fetch-jars.sh fills jvm/jars), or use --engine delta-rs"
            )
        lake = lake_for(cfg, spark)  # before seeding: a missing engine fails before anything is made
        log.info("demo: starting an embedded PostgreSQL in %s", workdir / DATABASE)
        install_topology(cfg)
        expected = seed_traffic(cfg, args.messages)
        database = open_database(cfg)  # the queue database's handle, for the drain and the publish
        drained = drain(cfg, database, lake)
        typed = bodies(cfg, spark, lake)  # as ``queuelake run`` does: before the transform that reads them
        transformed = transform(cfg, spark, lake)
        published = publish(cfg, database, spark, lake)
        counts = journal_counts(journal_engine(lake))
        to_whom = delivered(cfg)
        commands = next_commands(config_file, lake_root)
        tables = lake.tables()  # through the port: the Delta tables under the root
        report = _report(
            counts, to_whom, lake_root, tables, lake.name, drained, typed, transformed, published, commands
        )
        print(report)
        steps = {"drain": drained, "bodies": typed, "transform": transformed, "publish": published}
        # a failed step's summary: without it the command's summary said "error": null (a review)
        failed = {name: step for name, step in steps.items() if step["status"] != Status.OK}
        return {
            "status": Status.FAILED if failed else Status.OK,
            # as ``run`` names them, each with its summary: the command's error is lifted from it
            **({"failed_steps": list(failed), **failed} if failed else {}),
            "lake": str(lake_root),
            "config": str(config_file),
            "database": str(workdir / DATABASE),
            "next": commands,
            "engine": lake.name,
            "expected": {q: dict(c) for q, c in expected.items()},
            "journal": counts,
            "typed_tables": {t["table"]: t.get("rows_out", 0) for t in typed["tables"]},
            "published": {"rows": published["published"], "copies": published["copies"], "to": to_whom},
        }
    finally:
        from queuelake import context

        for server in context._servers.values():
            server.cleanup()  # type: ignore[attr-defined]  # stops it; cleanup_mode "stop" keeps the data
        context._servers.clear()


def _report(
    counts, to_whom, lake_root: Path, tables: list[str], engine: str, drained, typed, transformed, published, commands
) -> str:
    lines = ["", "queuelake demo", "=" * 60, "", "Drained into the journal (queue: outcome counts)"]
    for queue, outcomes in sorted(counts.items()):
        text = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
        lines.append(f"  {queue:<24} {text}")
    lines.append(f"  total {drained['dequeued']} messages at {sum(q['rate'] for q in drained['queues']):.0f} msg/s")
    lines += ["", f"Typed body tables (queuelake bodies; {typed.get('unparsed', 0)} bodies unparsed -> body_unparsed)"]
    for t in typed["tables"]:
        lines.append(f"  {t['type_name']:<44} {t.get('rows_out', 0):>5} rows -> {t['table']}")
    lines += ["", "Transforms"]
    for t in transformed["transforms"]:
        lines.append(
            f"  {t['transform']}: {t.get('rows_in', 0)} new landed rows in, "
            f"{t.get('rows_out', 0)} rows out -> {t['output']}"
        )
    lines += [
        "",
        f"Published: {published['published']} rows as {published['copies']} messages, {published['rejected']} rejected",
    ]
    for queue, types in to_whom.items():
        for kind, n in sorted(types.items()):
            lines.append(f"  {n:>5} x {kind:<60} -> {queue}")
    lines += ["", f"Lake tables ({engine}) under {lake_root}:"]
    lines += [f"  {lake_root / name}" for name in tables]
    lines += ["", "The database and the lake stay. Next, try:"]
    lines += [f"  {command}" for command in commands]
    lines.append("")
    return "\n".join(lines)

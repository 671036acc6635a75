"""Benchmark: ``queuelake where`` as a whole command (a new process, interpreter start and imports
included) on a journal of ``--rows`` rows with a typed body table, and queue tables of ``--waiting``
waiting rows, for the three questions it answers: a business key (``--field OrderId --value N``), a
message id and a conversation id.

Set-up (timed apart, not measured as ``where``):
- the journal: ``_journal.py``'s rows (conversations of 1 to 300 messages, audit copies, failures and
  retries, ~200 B bodies), landed through the lake port as the drain lands them (a file per batch of
  ``--batch-size``), each body carrying an integer ``OrderId`` numbered as the orders were placed
  (by the time they were sent), as a shop numbers its orders;
- the typed table of ``Sales.Messages.Events.OrderPlaced``, written in bulk as ``queuelake bodies``
  leaves it (one row per message, the business copy; identity columns, then the body's fields), one
  append per increment of ``--increment-rows`` journal rows, with its ``body_schema_changes`` and
  ``body_increments`` rows, so that ``where`` finds it as it finds the stage's tables; draining and
  typing 10,000,000 messages through PostgreSQL and Spark would take hours on two cores and measure
  those stages, not ``where``;
- the queues (Sales, Billing, Shipping, audit, error) on an embedded PostgreSQL (or ``--dsn``), the
  ``--waiting`` rows spread over Sales, Billing and Shipping, written by one ``INSERT ... SELECT``
  each (NServiceBus header JSON, JSON bodies of later orders); one of them a ShipOrder for the
  searched order, in its conversation, waiting in Shipping.

The target: a message with a failed copy and a retry (as ``bench/find.py`` picks it), its order and
its conversation. Timed, each ``--repeat`` times, ``queuelake where -c <conf> ... --json`` (the
queue tables read, default time limit), in three states of the journal's id index (``message_keys``,
``pipeline/key_index``), built by maintain's own step (``build.update``, ``rewrite.rewrite``): none;
``--behind`` journal files behind (drained since the last maintain: scanned as today); current.
Also timed: the index's build over the whole journal, its rewrite into disjoint key ranges, and the
increment of the last ``--behind`` files (what a step of ``run`` would cost). Reported per question and
state: the whole command's median and range,
the lake's and the queues' part (the summary's ``timings``), and what was read: of the typed table,
the files its log lists and the row groups whose Parquet statistics admit the value (what pyarrow's
dataset filter reads; the others are skipped unread); of the journal, the files its log lists, pruned
by the log's statistics (and the index), whose id column was scanned, and read whole
(``lake/lookup.py``), and of the index its files read and the unindexed journal files; of the queues,
the tables read and the candidate rows returned.

    python bench/where.py [--rows 10000000] [--waiting 1000000] [--repeat 3] [--batch-size 10000]
                          [--increment-rows 1000000] [--behind 10] [--dsn URI] [--workdir DIR] [--keep]

Prints a table of medians and ranges, then one JSON line. Needs about 270 MB of disk per million
journal rows and ~600 MB of database per million waiting rows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _journal
import _tree  # noqa: F401  (first: the queuelake measured is this tree's)
import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from _commands import import_seconds, queuelake
from queuelake.config import from_dict
from queuelake.lake import record_tables, stage_tables
from queuelake.lake.engines import open_lake
from queuelake.pipeline.bodies.names import derived
from queuelake.pipeline.key_index import build, rewrite
from queuelake.transport import db, installer

ORDER_BASE = 1_000_000  # the first order's number: every OrderId has seven digits
BUSINESS = ("Sales", "Billing", "Shipping")
QUEUES = [*BUSINESS, "audit", "error"]
TYPED = derived("body_", _journal.ORDER_PLACED)
TYPE_VERSION = "1.0.0.0"
SHIP_ORDER = "Shipping.Messages.Commands.ShipOrder, Shipping.Messages, Version=1.0.0.0"
BODY_FIELDS = pa.schema(
    [
        pa.field("OrderId", pa.int64()),
        pa.field("CustomerId", pa.string()),
        pa.field("Total", pa.float64()),
        pa.field("Currency", pa.string()),
        pa.field("Notes", pa.string()),
    ]
)
TYPED_SCHEMA = pa.schema([*stage_tables.BODY_IDENTITY, *BODY_FIELDS])


# ------------------------------------------------------------------------------------------ the lake


def order_ids(plan: _journal.Skeleton) -> np.ndarray:
    """Per message number, its OrderId: orders numbered in the order they were placed (sent)."""
    sends = plan.kind == 0
    messages, sent = plan.message[sends], plan.sent_us[sends]
    out = np.zeros(int(plan.message.max()) + 1, dtype=np.int64)
    out[messages[np.argsort(sent, kind="stable")]] = np.arange(len(messages), dtype=np.int64) + ORDER_BASE + 1
    return out


def with_bodies(table: pa.Table, orders: np.ndarray, part_message: np.ndarray) -> pa.Table:
    """The batch with bodies that carry the integer OrderId (``_journal`` writes ``order-<n>`` text)."""
    body = pc.binary_join_element_wise(
        '{"OrderId":',
        pc.cast(pa.array(orders[part_message]), pa.string()),
        ',"CustomerId":"customer-0042","Total":123.45,"Currency":"EUR","Notes":"',
        pa.array(["x" * 120] * table.num_rows),
        '"}',
        "",
    ).cast(pa.binary())
    return table.set_column(table.schema.get_field_index("body"), "body", body)


def typed_rows(table: pa.Table, orders: np.ndarray, part_message: np.ndarray, kind: np.ndarray) -> pa.Table:
    """The batch's business copies (its sends) as the typed table's rows."""
    keep = np.flatnonzero(kind == 0)
    rows = table.take(pa.array(keep))
    n = len(keep)
    null_ts = pa.nulls(n, pa.timestamp("us", tz="UTC"))
    columns = {
        "message_id": rows.column("message_id"),
        "queue": rows.column("queue"),
        "message_type": pa.array([_journal.ORDER_PLACED] * n),
        "type_version": pa.array([TYPE_VERSION] * n),
        "conversation_id": rows.column("conversation_id"),
        "time_sent": rows.column("time_sent"),
        "originating_endpoint": rows.column("originating_endpoint"),
        "processing_endpoint": pa.nulls(n, pa.string()),
        "processing_started": null_ts,
        "processing_ended": null_ts,
        "OrderId": pa.array(orders[part_message[keep]]),
        "CustomerId": pa.array(["customer-0042"] * n),
        "Total": pa.array([123.45] * n),
        "Currency": pa.array(["EUR"] * n),
        "Notes": pa.array(["x" * 120] * n),
    }
    return pa.table(columns, schema=TYPED_SCHEMA)


def build_lake(lake: Any, rows: int, batch_size: int, increment_rows: int) -> tuple[_journal.Skeleton, np.ndarray]:
    """The journal (as ``_journal.build`` lands it, bodies with integer OrderIds) and the typed table,
    appended per increment as the bodies stage appends it."""
    messages = record_tables.MESSAGES
    lake.create_table(messages.name, messages.schema)
    lake.create_table(TYPED, TYPED_SCHEMA)
    plan = _journal.skeleton(rows)
    orders = order_ids(plan)
    seqs = [0] * len(_journal.QUEUES)
    versions = [0] * len(_journal.QUEUES)
    journal_version = 0
    pending: list[pa.Table] = []
    pending_rows = 0
    increments: list[dict[str, Any]] = []

    def flush() -> None:
        nonlocal pending, pending_rows
        if not pending:
            return
        typed = pa.concat_tables(pending)
        lake.append(TYPED, typed, f"queuelake.bodies/{TYPED}", journal_version)
        after = increments[-1]["journal_version"] if increments else None
        increments.append({"journal_after": after, "journal_version": journal_version, "rows": pending_rows})
        pending, pending_rows = [], 0

    for q, start, stop in _journal.batches(plan, batch_size):
        part_message, kind = plan.message[start:stop], plan.kind[start:stop]
        table = with_bodies(_journal.batch_table(plan, start, stop, seqs[q] + 1), orders, part_message)
        seqs[q] += stop - start
        versions[q] += 1
        staged = lake.stage(messages.name, table)
        lake.commit_staged(messages.name, staged, f"queuelake.drain/{_journal.QUEUES[q]}/0", versions[q])
        journal_version += 1
        pending.append(typed_rows(table, orders, part_message, kind))
        pending_rows += stop - start
        if pending_rows >= increment_rows:
            flush()
    flush()
    _bodies_records(lake, increments)
    return plan, orders


def _bodies_records(lake: Any, increments: list[dict[str, Any]]) -> None:
    """``body_schema_changes`` (the table created) and ``body_increments`` (how far the journal is typed)."""
    now = pa.scalar(int(time.time() * 1_000_000), pa.timestamp("us", tz="UTC")).as_py()
    created = {
        "type_name": _journal.ORDER_PLACED,
        "table": TYPED,
        "type_version": TYPE_VERSION,
        "change": "created",
        "journal_version": increments[0]["journal_version"],
        "run_id": "bench",
        "changed_at": now,
    }
    changes = stage_tables.BODY_SCHEMA_CHANGES
    lake.append(changes.name, pa.Table.from_pylist([created], schema=changes.schema), "queuelake.bodies", 1)
    rows = [
        {
            "run_id": "bench",
            "journal_after": inc["journal_after"],
            "journal_version": inc["journal_version"],
            "rows_read": inc["rows"],
            "tables": [TYPED],
            "recorded_at": now,
        }
        for inc in increments
    ]
    table = stage_tables.BODY_INCREMENTS
    lake.append(table.name, pa.Table.from_pylist(rows, schema=table.schema), "queuelake.bodies", 1)


def targets(plan: _journal.Skeleton, orders: np.ndarray) -> dict[str, Any]:
    """A message with a failed copy and a retry, its order and its conversation."""
    retried = plan.message[plan.kind == 3]
    message = int(retried[0]) if len(retried) else int(plan.message[plan.kind == 2][0])
    conversation = int(plan.conversation[np.flatnonzero(plan.message == message)[0]])
    return {
        "message_id": _journal.guids(np.array([message]), 1)[0].as_py(),
        "conversation_id": _journal.guids(np.array([conversation]), 2)[0].as_py(),
        "order_id": int(orders[message]),
        "journal_rows": int(np.count_nonzero(plan.message == message)),
        "conversation_rows": int(np.count_nonzero(plan.conversation == conversation)),
    }


def typed_reads(root: Path, order_id: int) -> dict[str, int]:
    """Of the typed table's live files, how many (and how many row groups) have Parquet statistics
    that admit ``order_id``: the row groups pyarrow's dataset filter reads; the rest are skipped."""
    from deltalake import DeltaTable

    dt = DeltaTable(str(root / TYPED))
    files = row_groups = admitted_files = admitted_groups = rows_admitted = 0
    column = TYPED_SCHEMA.get_field_index("OrderId")
    for uri in dt.file_uris():
        meta = pq.ParquetFile(uri.removeprefix("file://")).metadata
        files += 1
        hit = False
        for g in range(meta.num_row_groups):
            row_groups += 1
            stats = meta.row_group(g).column(column).statistics
            if stats is None or not stats.has_min_max or stats.min <= order_id <= stats.max:
                admitted_groups += 1
                rows_admitted += meta.row_group(g).num_rows
                hit = True
        admitted_files += hit
    return {
        "files": files,
        "row_groups": row_groups,
        "files_read": admitted_files,
        "row_groups_read": admitted_groups,
        "rows_in_groups_read": rows_admitted,
    }


# ---------------------------------------------------------------------------------------- the queues

HEADERS_SQL = """
json_build_object(
    'NServiceBus.MessageId', m.id::text,
    'NServiceBus.MessageIntent', 'Send',
    'NServiceBus.ConversationId', m.conversation::text,
    'NServiceBus.CorrelationId', m.id::text,
    'NServiceBus.OriginatingEndpoint', 'Sales',
    'NServiceBus.OriginatingMachine', 'web-01',
    'NServiceBus.ReplyToAddress', 'Sales',
    'NServiceBus.ContentType', 'application/json',
    'NServiceBus.EnclosedMessageTypes', %(type)s::text,
    'NServiceBus.Version', '9.2.3',
    'NServiceBus.TimeSent', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS:US') || ' Z'
)::text
"""


def fill_queues(uri: str, waiting: int, first_order: int, target: dict[str, Any]) -> dict[str, int]:
    """``waiting`` rows over Sales, Billing and Shipping (each a new order's message), and the searched
    order's ShipOrder waiting in Shipping, in its conversation."""
    per = {q: waiting // len(BUSINESS) + (i < waiting % len(BUSINESS)) for i, q in enumerate(BUSINESS)}
    order = first_order
    with psycopg.connect(uri, autocommit=True) as conn:
        for queue, n in per.items():
            conn.execute(
                f"""INSERT INTO "public"."{queue}" (id, expires, headers, body)
                SELECT m.id, NULL, {HEADERS_SQL},
                       convert_to('{{"OrderId":' || m.n || ',"CustomerId":"customer-' || (m.n %% 5000)
                                  || '","Total":99.5,"Currency":"EUR","Notes":"' || repeat('x', 120) || '"}}', 'UTF8')
                FROM (SELECT gen_random_uuid() AS id, gen_random_uuid() AS conversation, %(first)s::bigint + g AS n
                      FROM generate_series(0, %(n)s::bigint - 1) AS g) AS m""",
                {"type": _journal.ENCLOSED[0], "first": order, "n": n},
            )
            order += n
        conn.execute(
            f"""INSERT INTO "public"."Shipping" (id, expires, headers, body)
            SELECT m.id, NULL, {HEADERS_SQL}, convert_to(%(body)s, 'UTF8')
            FROM (SELECT gen_random_uuid() AS id, %(conversation)s::uuid AS conversation) AS m""",
            {
                "type": SHIP_ORDER,
                "conversation": target["conversation_id"],
                "body": json.dumps({"OrderId": target["order_id"], "Carrier": "bench"}),
            },
        )
        for queue in QUEUES:
            conn.execute(f'VACUUM ANALYZE "public"."{queue}"')
    return per


def queue_sizes(uri: str) -> dict[str, Any]:
    with psycopg.connect(uri) as conn:
        rows = {q: int(conn.execute(f'SELECT count(*) FROM "public"."{q}"').fetchone()[0]) for q in QUEUES}  # type: ignore[index]
        size = conn.execute(
            "SELECT sum(pg_total_relation_size(format('%%I.%%I', 'public', t)))::bigint FROM unnest(%s::text[]) AS t",
            (QUEUES,),
        ).fetchone()[0]  # type: ignore[index]
    return {"rows": rows, "mb": round(int(size or 0) / 1e6)}


# ------------------------------------------------------------------------------------------ timing


def questions(target: dict[str, Any]) -> dict[str, list[str]]:
    return {
        "key": ["--field", "OrderId", "--value", str(target["order_id"])],
        "message": ["--message-id", target["message_id"]],
        "conversation": ["--conversation-id", target["conversation_id"]],
    }


def timed(conf: Path, flags: list[str], repeat: int) -> dict[str, Any]:
    runs = [queuelake(["where", "-c", str(conf), *flags, "--json"]) for _ in range(repeat)]
    seconds = [r.seconds for r in runs]
    median = sorted(runs, key=lambda r: r.seconds)[len(runs) // 2]
    s = median.summary
    assert s.get("status") == "ok", s
    return {
        "seconds": round(statistics.median(seconds), 3),
        "range": [round(min(seconds), 3), round(max(seconds), 3)],
        "all": [round(x, 3) for x in seconds],
        "timings": s.get("timings", {}),
        "found": s["found"],
        "places": s["places"],
        "journal": s["journal"],
        "typed": s.get("typed", {}),
        "queues": s["queues"],
        "not_searched": s["not_searched"],
        "peak_rss_mb": round(median.peak_rss_mb or 0),
    }


def index_steps(lake: Any, behind: int) -> dict[str, Any]:
    """The index as maintain builds it, ``behind`` journal files short of the journal (drained since)."""
    upto = lake.table_version(record_tables.MESSAGES.name) - behind
    return {
        "build": timed_step(lambda: build.update(lake, upto=upto).summary()),
        "rewrite": timed_step(lambda: rewrite.rewrite(lake).summary()),
    }


def timed_step(step: Any) -> dict[str, Any]:
    started = time.perf_counter()
    result = step()
    return {"seconds": round(time.perf_counter() - started, 3), "result": result}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="journal rows")
    parser.add_argument("--waiting", type=int, default=1_000_000, help="rows waiting in the queue tables")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=10_000, help="journal rows per drain batch (file)")
    parser.add_argument("--increment-rows", type=int, default=1_000_000, help="journal rows per bodies increment")
    parser.add_argument("--behind", type=int, default=10, help="journal files the partial index leaves out")
    parser.add_argument("--dsn", default=None, help="a PostgreSQL to use (default: an embedded one)")
    parser.add_argument("--workdir", default=None, help="where the lake goes (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the lake")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="queuelake-where-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return bench(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def bench(args: argparse.Namespace, work: Path) -> int:
    server = None
    uri = args.dsn
    if uri is None:
        from queuelake.transport.embedded import start_embedded

        server = start_embedded(work / "pg")
        uri = server.get_uri("postgres")
    root = work / "lake"
    settings = {
        "transport": {"connection": uri},
        "lake": {"root": str(root), "engine": "delta-rs"},
        "drain": {"queues": QUEUES},
    }
    conf = work / "where.yaml"
    conf.write_text(json.dumps(settings))
    cfg = from_dict(settings, env={})
    started = time.perf_counter()
    lake = open_lake(cfg.lake)
    plan, orders = build_lake(lake, args.rows, args.batch_size, args.increment_rows)
    lake_seconds = time.perf_counter() - started
    target = targets(plan, orders)
    journal_mb = sum(p.stat().st_size for p in (root / "messages").glob("*.parquet")) / 1e6
    typed_files = typed_reads(root, target["order_id"])
    print(
        f"journal: {args.rows:,} rows, {journal_mb:.0f} MB; typed table {TYPED}: {int((plan.kind == 0).sum()):,} rows, "
        f"{typed_files['files']} files; built in {lake_seconds:.1f} s",
        flush=True,
    )
    started = time.perf_counter()
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg, extra_queues=list(BUSINESS)))
        conn.commit()
    fill_queues(uri, args.waiting, int(orders.max()) + 1, target)
    sizes = queue_sizes(uri)
    queue_seconds = time.perf_counter() - started
    print(f"queues: {sizes['rows']} rows waiting, {sizes['mb']} MB; filled in {queue_seconds:.1f} s", flush=True)
    print(
        f"target: order {target['order_id']}, message {target['message_id']}, conversation {target['conversation_id']}"
    )

    floor = statistics.median(import_seconds() for _ in range(args.repeat))
    load_before = os.getloadavg()[0]

    def ask() -> dict[str, Any]:
        return {name: timed(conf, flags, args.repeat) for name, flags in questions(target).items()}

    states: dict[str, Any] = {"none": ask()}
    index = index_steps(lake, args.behind)
    states["behind"] = ask()
    index["increment"] = timed_step(lambda: build.update(lake).summary())
    states["current"] = ask()
    results = states["current"]
    load_after = os.getloadavg()[0]
    print(
        f"index (message_keys): build of journal versions up to {index['build']['result']['journal_version']} "
        f"{index['build']['seconds']:.1f} s ({index['build']['result']['index_rows_written']:,} keys), "
        f"rewrite {index['rewrite']['seconds']:.1f} s ({index['rewrite']['result']['files_written']} files), "
        f"increment of the last {args.behind} journal files {index['increment']['seconds']:.2f} s"
    )
    print(f"a process that only imports queuelake's command line: {floor:.2f} s (median of {args.repeat})")
    print(f"load average (1 min) {load_before:.1f} before, {load_after:.1f} after the timed commands")
    header = (
        f"{'index, question':<21}{'whole s':>8} {'range':>13} {'lake s':>7} {'queues s':>9} {'found':>6}  "
        f"{'journal files: pruned / id scanned / read':<72} {'rows scanned':>13}  {'typed row groups read':<22} "
        f"{'queue tables / rows':<20}"
    )
    print(header)
    for state, name, r in [(state, name, r) for state, rs in states.items() for name, r in rs.items()]:
        j, q, t = r["journal"], r["queues"], r["timings"]
        typed = f"{typed_files['row_groups_read']} of {typed_files['row_groups']}" if name == "key" else "-"
        pruned, scanned, read = (j.get(k, 0) for k in ("files_pruned", "files_scanned", "files_read"))
        files = f"{pruned} / {scanned} / {read} of {j.get('files', 0)}"
        ix = j.get("index") or {}
        if ix.get("used"):
            files += f" (index {ix['index_files_read']}/{ix['index_files']}, {ix['unindexed_files']} unindexed)"
        print(
            f"{state + ' ' + name:<21}{r['seconds']:>8.2f} {r['range'][0]:>6.2f}-{r['range'][1]:<6.2f} "
            f"{t.get('lake', 0):>7.2f} "
            f"{t.get('queues', 0):>9.2f} {r['found']:>6}  {files:<72} {j.get('rows_scanned', 0):>13,}  {typed:<22} "
            f"{q.get('tables', 0)} / {q.get('rows_read', 0)}"
        )
        if r["not_searched"]:
            print(f"  not searched: {r['not_searched']}")
    out = {
        "rows": args.rows,
        "waiting": args.waiting,
        "repeat": args.repeat,
        "batch_size": args.batch_size,
        "increment_rows": args.increment_rows,
        "journal_mb": round(journal_mb),
        "typed_table": TYPED,
        "typed_rows": int((plan.kind == 0).sum()),
        "typed_files": typed_files,
        "lake_build_seconds": round(lake_seconds, 1),
        "queues": sizes,
        "queue_fill_seconds": round(queue_seconds, 1),
        "target": target,
        "import_seconds": round(floor, 3),
        "load_average": [round(load_before, 1), round(load_after, 1)],
        "where": results,
        "where_by_index_state": states,
        "index": index,
    }
    assert results["key"]["places"].get("waiting", 0) >= 1, results["key"]  # the ShipOrder in Shipping
    assert results["message"]["places"].get("failed", 0) >= 1, results["message"]
    assert results["conversation"]["found"] >= target["conversation_rows"], results["conversation"]
    print(json.dumps(out))
    if server is not None:
        server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``queuelake status``: depth, oldest age and schema warnings of every queue the config touches."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import TYPE_CHECKING, Any

from queuelake.commands.command import Command

if TYPE_CHECKING:
    from queuelake import config as config_mod
    from queuelake.transport.database import QueueDatabase
    from queuelake.transport.db import Connection
    from queuelake.transport.table_refs import TableRef


def status(args: argparse.Namespace) -> dict[str, Any]:
    """Every queue the config touches, with its depth: the drained queues, the Send destinations of
    the transforms, the delayed stores of ``transport.delayed_endpoints``, and each subscriber found
    in the subscription table (where published events go). Each entry says why it is listed (``role``)."""
    from queuelake import config as config_mod
    from queuelake.context import open_database
    from queuelake.errors import QueuelakeError
    from queuelake.report import log
    from queuelake.status import Status
    from queuelake.transport import queues, schema

    cfg = config_mod.load(args.config)
    out: list[dict[str, Any]] = []
    database = open_database(cfg)
    with database.connect("queuelake-status") as conn:
        queues.configure_estimate_session(conn)  # a table another program holds locked: named, not waited on
        now = queues.db_utc_now(conn)
        for ref, role in _touched(conn, cfg, database):
            entry: dict[str, Any] = {"queue": ref.canonical, "role": role}
            if not schema.table_exists(conn, ref):
                entry.update(exists=False, warnings=[f"{ref.canonical}: table does not exist"])
                log.warning("%s (%s): table does not exist", ref.canonical, role)
                out.append(entry)
                continue
            try:
                if role == "delayed":  # a delayed store has no sequence to peek: count it
                    entry.update(exists=True, depth=queues.count_rows(conn, ref), warnings=[])
                else:
                    entry.update(exists=True, depth=queues.peek(conn, ref), warnings=schema.warnings(conn, ref))
                    entry["oldest_age_seconds"] = _oldest_age(queues.oldest_headers(conn, ref), now)
                if role in ("destination", "subscriber", "delayed"):  # what publish and replay would skip
                    problem = schema.delivery_problem(conn, ref, delayed=role == "delayed")
                    if problem is not None:
                        entry["warnings"].append(f"{problem}; publish and replay skip it")
            except QueuelakeError as exc:  # one table another program altered: said, the others still listed
                if conn.lost:
                    raise
                entry.update(exists=True, depth=None, error=str(exc))
                entry["warnings"] = [*entry.get("warnings", []), f"{ref.canonical}: cannot be read: {exc}"]
            conn.rollback()
            for warning in entry["warnings"]:
                log.warning(warning)
            log.info("%s (%s): about %s message(s) waiting", ref.canonical, role, entry["depth"])
            out.append(entry)
        pending = _unresolved_claims(conn, database)
        bridges = _missing_bridge_tables(conn, cfg)
    summary: dict[str, Any] = {"queues": out, "unresolved_claims": pending}
    needed = [e for e in out if e["role"] in ("drained", "destination")]
    missing = [e["queue"] for e in needed if not e["exists"]] + bridges
    unreadable = [e["queue"] for e in needed if e.get("error")]
    if unreadable:  # its drain or publish fails on it as well: a cron job's check must not read "ok"
        summary["unreadable_tables"] = unreadable
        summary["status"] = Status.FAILED
        summary["error"] = f"{len(unreadable)} table(s) the config needs cannot be read: {', '.join(unreadable)}"
        summary["error_kind"] = "transport"
        log.error("status: %s", summary["error"])
    if missing:
        # a cron job that checks status must not read "ok" over tables its drain or publish will fail on
        summary["missing_tables"] = missing
        summary["status"] = Status.FAILED
        summary["error"] = (
            f"{len(missing)} table(s) the config needs do not exist: {', '.join(missing)} (queuelake install)"
        )
        summary["error_kind"] = "transport"
        log.error("status: %s", summary["error"])
    return summary


def _missing_bridge_tables(conn: Connection, cfg: config_mod.Config) -> list[str]:
    """The bridge tables ``install`` creates (publish ledger, drain claims) that are not there. The
    subscription table is not among them: a system without pub/sub has none, and status lists it."""
    from queuelake.transport import schema
    from queuelake.transport.table_refs import bridge_ref

    t = cfg.transport
    refs = [bridge_ref(t.ledger_table, t), bridge_ref(t.claims_table, t)]
    missing = [ref.canonical for ref in refs if not schema.table_exists(conn, ref)]
    conn.rollback()
    return missing


def _touched(conn: Connection, cfg: config_mod.Config, database: QueueDatabase) -> list[tuple[TableRef, str]]:
    """(table, role) of every queue the config touches, each once, in the order status lists them."""
    from queuelake.errors import QueuelakeError
    from queuelake.report import log
    from queuelake.transport import schema, subscriptions

    found: dict[str, tuple[TableRef, str]] = {}

    def add(ref: TableRef, role: str) -> None:
        found.setdefault(ref.canonical, (ref, role))

    for name in cfg.drain.queues:
        add(database.queue(name), "drained")
    for transform in cfg.transforms:
        for name in transform.destinations:
            add(database.queue(name), "destination")
    for endpoint in cfg.transport.delayed_endpoints:
        add(database.queue(endpoint).delayed(), "delayed")
    routing = database.subscriptions
    if schema.table_exists(conn, routing):
        for address in subscriptions.all_subscribers(conn, routing):
            try:
                add(database.queue(address), "subscriber")
            except QueuelakeError as exc:  # another program's row: say so, list the rest
                log.warning("%s: subscriber address %r is not a queue address (%s)", routing.canonical, address, exc)
    conn.rollback()
    return list(found.values())


def _unresolved_claims(conn: Connection, database: QueueDatabase) -> list[dict[str, Any]]:
    """Batches a killed drain left between its DB commit and its Delta commit: their rows are out of
    the queue and staged in the lake; the next drain of the queue commits them. Old ones mean that
    queue has not been drained since."""
    from queuelake.report import log
    from queuelake.transport import claims, schema

    table = database.claims
    if not schema.table_exists(conn, table):
        log.warning("%s does not exist: run `queuelake install` before draining", table.canonical)
        return []
    out = []
    for c in claims.summary(conn, table):
        out.append({"queue": c.queue, "claims": c.claims, "rows": c.rows, "oldest": c.oldest})
        log.warning(
            "%s: %d unresolved drain claim(s), %d rows; the next drain resolves them", c.queue, c.claims, c.rows
        )
    conn.rollback()
    return out


def _oldest_age(raw: str | None, now: dt.datetime) -> float | None:
    """Age of the oldest message by its TimeSent header; None when empty or unknown."""
    from queuelake.errors import HeaderError
    from queuelake.nsb import headers as hdr
    from queuelake.nsb.times import parse_time
    from queuelake.report import log

    if raw is None:
        return None
    try:
        # only TimeSent matters here: another malformed header must not hide the age
        value = hdr.decode_map(raw).get(hdr.TIME_SENT)
        sent = parse_time(value, hdr.TIME_SENT) if value else None
    except HeaderError:
        return None
    if sent is None:
        return None
    age = (now - sent).total_seconds()
    if age < 0:  # a sender whose clock runs ahead: the message is not older than now (a review saw -3600)
        log.info("the oldest message's TimeSent is %.0fs ahead of this clock (its sender's runs fast): age 0", -age)
        return 0.0
    return round(age, 3)


COMMAND = Command(name="status", help="depth, oldest age and schema warnings per queue", run=status)

"""Which copies of a message the typed tables hold, against a real PostgreSQL queue, a real drain, real
Spark and real Delta: the copies ``bodies.include_failed`` / ``include_audit`` leave out are not written,
and a message whose copies are all read is one row, even when its error copies name its type
differently from its audit copy.

Why: the Arrow pass (``select.plan``) counted the configured copies (``rows_in``, and the message ids
that repeat, which decide whether the one-row-per-message window runs) while Spark read every landed
copy. An error copy, then its audit copy after a ServiceControl retry, was written twice, and
``rows_in`` did not count what was written (a generated system: ``1120 row(s) in, 1400 written``)."""

from __future__ import annotations

import datetime as dt
import shutil
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.lake.engines import open_lake
from queuelake.nsb import headers as hdr
from queuelake.pipeline.bodies import run as bodies_run
from queuelake.pipeline.where import keys
from queuelake.transport import db, installer
from queuelake.transport.queues import OutgoingMessage

from tests.helpers.bodies import rows, send
from tests.helpers.bodies_corpus import corpus as c
from tests.helpers.stages import drain

STOCK = "body_stock_contracts_stockcounted"
ERROR = '"public"."error"'
AUDIT = '"public"."audit"'
SALES = '"public"."Sales"'


def _config(uri: str, root: Path, **bodies: object):
    return from_dict(
        {
            "transport": {"connection": uri},
            "lake": {"root": str(root), "engine": "delta-rs"},
            "drain": {"queues": ["Sales", "audit", "error"], "batch_size": 50},
            "bodies": bodies,
        },
        env={},
    )


def _stock(i: int) -> OutgoingMessage:
    return c.message(c.STOCK, b'{"Sku": "sku-%d", "Count": %d}' % (i, i), "application/json", i)


def _failed(message: OutgoingMessage, n: int, types: str | None = None) -> OutgoingMessage:
    when = c.START + dt.timedelta(minutes=n)
    copy = traffic.failed_copy(message, "Stock", "System.InvalidOperationException", "boom", when)
    if types is None:
        return copy
    headers = hdr.decode_map(copy.headers)  # the error copy names the type as an older sender did
    headers[hdr.ENCLOSED_MESSAGE_TYPES] = types
    return OutgoingMessage(hdr.encode(headers), copy.body, id=str(uuid.uuid4()))


def _audited(message: OutgoingMessage) -> OutgoingMessage:
    return traffic.audit_copy(message, "Stock", c.START + dt.timedelta(hours=1), 30)


def _by_sku(lake) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in rows(lake, STOCK):
        out.setdefault(row["Sku"], []).append(row)
    return out


@pytest.mark.slow
def test_only_the_configured_copies_are_written_one_row_per_message(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    cfg = _config(fresh_pg_uri, tmp_path / "lake")
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    m = [_stock(i) for i in range(6)]
    older = "Stock.Contracts.StockCounted, Stock.Contracts, Version=1.0.0.0"  # no culture, no key
    # sku-0: failed, retried, audited; sku-1: failed twice, then audited; sku-2: failed, still in error;
    # sku-3: audited only; sku-4: failed under another spelling of its type, then audited; sku-5: its
    # business copy and its audit copy
    failures = [_failed(m[0], 0), _failed(m[1], 1), _failed(m[1], 2), _failed(m[2], 3), _failed(m[4], 4, older)]
    send(cfg, "error", failures)
    send(cfg, "audit", [_audited(m[0]), _audited(m[1]), _audited(m[3]), _audited(m[4]), _audited(m[5])])
    send(cfg, "Sales", [m[5]])
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["status"] == "ok"
    journal = tmp_path / "lake" / "messages"

    # error copies left out (``include_failed: false``): audit copies, no error copies; one row per
    # message, counted as read
    out = bodies_run.bodies(_config(fresh_pg_uri, tmp_path / "lake", include_failed=False), spark, lake)
    assert out["status"] == "ok", out
    held = _by_sku(lake)
    assert sorted(held) == ["sku-0", "sku-1", "sku-3", "sku-4", "sku-5"], held
    assert all(len(copies) == 1 for copies in held.values()), held
    assert {s: r[0]["queue"] for s, r in held.items()} == {
        "sku-0": AUDIT, "sku-1": AUDIT, "sku-3": AUDIT, "sku-4": AUDIT, "sku-5": SALES,
    }  # fmt: skip
    (stock,) = [t for t in out["tables"] if t["table"] == STOCK]
    assert (stock["rows_in"], stock["rows_out"]) == (6, 5), stock  # sku-5 twice in, once out
    assert not any(t["rows_out"] > t["rows_in"] for t in out["tables"]), out["tables"]

    # a table an earlier release wrote with a second row for a message (its error copy): ``where``
    # still names the message once (the stage leaves such rows: docs/typed-bodies.md says how to drop them)
    table = lake.read_arrow(STOCK)
    first = table.filter(pc.equal(table["Sku"], "sku-0"))
    copy = first.set_column(first.schema.get_field_index("queue"), "queue", pa.array([ERROR], pa.string()))
    lake.append(STOCK, copy, "tests/an-earlier-release", 1)
    assert len(_by_sku(lake)["sku-0"]) == 2
    found = keys.find_key(lake, "Sku", "sku-0", 10)
    assert found.message_ids == [first["message_id"][0].as_py()], found

    # the defaults, on the same journal, with the error copies: every message once, the business copy,
    # else the audit copy, preferred to an error copy, whichever way the error copy spells the type; a
    # message that only failed (sku-2) is typed from its error copy, so a key search finds it
    failed = _config(fresh_pg_uri, tmp_path / "with_failed")
    assert failed.bodies.include_failed
    shutil.copytree(journal, tmp_path / "with_failed" / "messages")
    lake = open_lake(failed.lake, spark)
    out = bodies_run.bodies(failed, spark, lake)
    assert out["status"] == "ok", out
    held = _by_sku(lake)
    assert sorted(held) == [f"sku-{i}" for i in range(6)] and all(len(r) == 1 for r in held.values()), held
    assert held["sku-2"][0]["queue"] == ERROR and held["sku-4"][0]["queue"] == AUDIT
    assert {r["message_type"] for r in lake.read_arrow(STOCK).to_pylist()} == {c.STOCK}
    (stock,) = [t for t in out["tables"] if t["table"] == STOCK]
    assert (stock["rows_in"], stock["rows_out"]) == (11, 6), stock
    assert keys.find_key(lake, "Sku", "sku-2", 10).message_ids == [held["sku-2"][0]["message_id"]]

    # without audit copies: the business copy alone (the error copies still left out)
    business = _config(fresh_pg_uri, tmp_path / "business", include_audit=False, include_failed=False)
    shutil.copytree(journal, tmp_path / "business" / "messages")
    lake = open_lake(business.lake, spark)
    out = bodies_run.bodies(business, spark, lake)
    assert out["status"] == "ok", out
    assert [(r["Sku"], r["queue"]) for r in rows(lake, STOCK)] == [("sku-5", SALES)]
    (stock,) = [t for t in out["tables"] if t["table"] == STOCK]
    assert (stock["rows_in"], stock["rows_out"]) == (1, 1), stock

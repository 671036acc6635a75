"""``queuelake health`` on real drained traffic: audit and error copies of several endpoints with known
processing and send times, seeded into PostgreSQL, drained by the real drain into a delta-rs journal;
the hourly and daily figures asserted exactly (nearest-rank percentiles), failures and retries counted,
an increment that recomputes only the day it touches, queue depth from the drain's ``runs`` rows, and
the OpenMetrics text parsed by ``prometheus_client``'s parsers.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from queuelake.commands.demo import traffic
from queuelake.config import Config, from_dict
from queuelake.config_sections import LakeConfig
from queuelake.lake.engines import open_lake
from queuelake.lake.stage_tables import ENDPOINT_DAILY, ENDPOINT_HEALTH
from queuelake.nsb import headers as hdr
from queuelake.nsb.retry import REPLAY_ID, RETRY_UNIQUE_MESSAGE_ID
from queuelake.pipeline.health import depth, metrics
from queuelake.pipeline.health.run import _latest_day, read_daily, read_latest, update
from queuelake.transport import db, installer
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.table_refs import queue_ref

from tests.helpers.cli import run_cli
from tests.helpers.stages import drain

UTC = dt.timezone.utc
DAY = dt.datetime(2026, 11, 2, tzinfo=UTC)
NEXT = DAY + dt.timedelta(days=1)
ODD = 'Sales "EU" \\ West\nline'  # an endpoint name a label value must escape
PLACED = "Sales.Messages.Events.OrderPlaced"
BILL = "Billing.Messages.Commands.BillOrder"


def _sent(when: dt.datetime, types: str = traffic.ORDER_PLACED, extra: dict[str, str] | None = None) -> OutgoingMessage:
    message_id = str(uuid.uuid4())
    headers = {**traffic.order_headers(message_id, when, types=types), **(extra or {})}
    return OutgoingMessage(hdr.encode(headers), b"{}", id=message_id)


def _traffic() -> tuple[list[OutgoingMessage], list[OutgoingMessage], list[OutgoingMessage]]:
    """(business copies, audit copies, error copies) with the times the assertions below expect."""
    sales, audit, error = [], [], []
    nine = DAY + dt.timedelta(hours=9)
    # Billing, OrderPlaced, 09:xx: sent at 09:00+i min, started (i+1) s later, taking 10*(i+1) ms
    for i in range(10):
        sent = nine + dt.timedelta(minutes=i)
        m = _sent(sent)
        sales.append(m)
        audit.append(traffic.audit_copy(m, "Billing", sent + dt.timedelta(seconds=i + 1), 10 * (i + 1)))
    # Billing, OrderPlaced, 10:xx: 200, 300, 400 ms, started when sent
    for i, millis in enumerate((200, 300, 400)):
        m = _sent(nine + dt.timedelta(hours=1, minutes=i))
        audit.append(traffic.audit_copy(m, "Billing", nine + dt.timedelta(hours=1, minutes=i), millis))
    # Shipping, BillOrder, 09:xx: 4 processed (one a ServiceControl retry, one a queuelake replay), 2 failed
    for i in range(4):
        extra = {RETRY_UNIQUE_MESSAGE_ID: str(uuid.uuid4())} if i == 0 else {REPLAY_ID: "r-1"} if i == 1 else {}
        m = _sent(nine + dt.timedelta(minutes=30 + i), traffic.BILL_ORDER, extra)
        audit.append(traffic.audit_copy(m, "Shipping", nine + dt.timedelta(minutes=30 + i), 1000))
    for i in range(2):
        m = _sent(nine + dt.timedelta(minutes=40 + i), traffic.BILL_ORDER)
        error.append(
            traffic.failed_copy(m, "Shipping", "System.TimeoutException", "no", nine + dt.timedelta(minutes=45))
        )
    # the next day, 00:30: one message processed by an endpoint with an awkward name
    m = _sent(NEXT + dt.timedelta(minutes=20))
    audit.append(traffic.audit_copy(m, ODD, NEXT + dt.timedelta(minutes=30), 250))
    return sales, audit, error


def _config(uri: str, root: Path, engine: str = "delta-rs") -> Config:
    settings = {
        "transport": {"connection": uri},
        "lake": {"root": str(root), "engine": engine},
        "drain": {"queues": ["Sales", "audit", "error"], "batch_size": 50},
    }
    return from_dict(settings, env={})


def _seed(cfg: Config, queues: dict[str, list[OutgoingMessage]]) -> None:
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        for name, messages in queues.items():
            traffic.seed(conn, queue_ref(name, cfg.transport), messages)


def _rows(table: pa.Table, **where: object) -> list[dict]:
    return [r for r in table.to_pylist() if all(r[k] == v for k, v in where.items())]


@pytest.fixture
def drained(fresh_pg_uri: str, tmp_path: Path) -> tuple[Config, Path]:
    cfg = _config(fresh_pg_uri, tmp_path / "lake")
    sales, audit, error = _traffic()
    _seed(cfg, {"Sales": sales, "audit": audit, "error": error})
    lake = open_lake(cfg.lake)
    assert drain(cfg, lake)["status"] == "ok"
    return cfg, tmp_path


def test_hourly_and_daily_figures_are_exact(drained: tuple[Config, Path]) -> None:
    cfg, _ = drained
    lake = open_lake(cfg.lake)
    result = update(lake)
    assert [d.isoformat() for d in result.days] == ["2026-11-02", "2026-11-03"]
    assert result.copies == 20  # 17 audit + 2 error + 1 the next day; the 10 business copies are not read
    health = lake.read_arrow(ENDPOINT_HEALTH.name)
    [billing9] = _rows(health, period="hour", endpoint="Billing", period_start=DAY + dt.timedelta(hours=9))
    assert billing9["message_type"] == PLACED
    assert (billing9["processed"], billing9["failed"], billing9["retries"]) == (10, 0, 0)
    # processing 10..100 ms: nearest rank p50 = 5th, p95 = p99 = 10th
    assert (billing9["processing_p50_ms"], billing9["processing_p95_ms"], billing9["processing_p99_ms"]) == (
        50,
        100,
        100,
    )
    # critical = (i+1) s + 10*(i+1) ms
    assert (billing9["critical_p50_ms"], billing9["critical_p95_ms"], billing9["critical_p99_ms"]) == (
        5050,
        10100,
        10100,
    )
    [billing10] = _rows(health, period="hour", endpoint="Billing", period_start=DAY + dt.timedelta(hours=10))
    assert (billing10["processed"], billing10["processing_p50_ms"], billing10["processing_p95_ms"]) == (3, 300, 400)
    assert billing10["critical_p50_ms"] == 300
    [billing_day] = _rows(health, period="day", endpoint="Billing")
    assert billing_day["period_start"] == DAY and billing_day["processed"] == 13
    # 13 values: 10..100 and 200, 300, 400: p50 = 7th = 70, p95 = 13th = 400
    assert (billing_day["processing_p50_ms"], billing_day["processing_p95_ms"]) == (70, 400)
    [shipping] = _rows(health, period="hour", endpoint="Shipping")
    assert shipping["message_type"] == BILL
    assert (shipping["processed"], shipping["failed"], shipping["retries"]) == (4, 2, 2)
    assert shipping["processing_p99_ms"] == 1000 and shipping["critical_p50_ms"] == 1000
    [odd] = _rows(health, period="hour", endpoint=ODD)
    assert odd["period_start"] == NEXT and odd["critical_p50_ms"] == 10 * 60 * 1000 + 250

    daily = lake.read_arrow(ENDPOINT_DAILY.name).sort_by([("day", "ascending"), ("endpoint", "ascending")])
    assert [
        (r["day"].isoformat(), r["endpoint"], r["processed"], r["failed"], r["retries"]) for r in daily.to_pylist()
    ] == [
        ("2026-11-02", "Billing", 13, 0, 0),
        ("2026-11-02", "Shipping", 4, 2, 2),
        ("2026-11-03", ODD, 1, 0, 0),
    ]
    [billing] = _rows(daily, endpoint="Billing")
    assert billing["peak_hour"] == DAY + dt.timedelta(hours=9) and billing["peak_hour_processed"] == 10
    assert billing["critical_p95_ms"] == 10100  # 13 critical times: the 13th


def test_an_increment_recomputes_only_the_days_it_touches(drained: tuple[Config, Path]) -> None:
    cfg, _ = drained
    lake = open_lake(cfg.lake)
    first = update(lake)
    again = update(lake)
    assert again.days == [] and again.written == []  # nothing new in the journal
    late = _sent(DAY + dt.timedelta(hours=9, minutes=50))
    _seed(cfg, {"audit": [traffic.audit_copy(late, "Billing", DAY + dt.timedelta(hours=9, minutes=50), 5000)]})
    assert drain(cfg, lake, ["audit"])["status"] == "ok"
    after = update(lake)
    assert after.counted_after == first.journal_version
    assert [d.isoformat() for d in after.days] == ["2026-11-02"]
    health = lake.read_arrow(ENDPOINT_HEALTH.name)
    [billing9] = _rows(health, period="hour", endpoint="Billing", period_start=DAY + dt.timedelta(hours=9))
    assert billing9["processed"] == 11 and billing9["processing_p99_ms"] == 5000 and billing9["processing_p50_ms"] == 60
    assert len(_rows(health, period="hour", endpoint=ODD)) == 1  # the other day kept, not doubled
    assert health.num_rows == first.hourly_rows
    assert lake.last_version(ENDPOINT_HEALTH.name, "queuelake.health") == after.journal_version


def test_a_dropped_connection_under_a_health_append_is_written_again(
    drained: tuple[Config, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The appends are keyed by the journal version: one the store dropped is tried again, not failed
    (a review: health's was the one lake append outside ``transient.repeated``)."""
    from queuelake.lake import transient
    from queuelake.lake.delta_rs.engine import DeltaRsEngine

    cfg, _ = drained
    monkeypatch.setattr(transient.time, "sleep", lambda _s: None)
    real, attempts = DeltaRsEngine.append, []

    def append(self, table, *args, **kwargs):  # type: ignore[no-untyped-def]
        attempts.append(table)
        if attempts.count(table) == 1:
            raise OSError("Generic S3 error: Connection reset by peer (os error 104)")
        return real(self, table, *args, **kwargs)

    monkeypatch.setattr(DeltaRsEngine, "append", append)
    lake = open_lake(cfg.lake)
    result = update(lake)
    assert sorted(attempts) == sorted([ENDPOINT_HEALTH.name, ENDPOINT_DAILY.name] * 2), attempts
    assert sorted(result.written) == sorted([ENDPOINT_HEALTH.name, ENDPOINT_DAILY.name])
    assert lake.read_arrow(ENDPOINT_DAILY.name).num_rows == 3 and result.daily_rows == 3


def test_a_time_sent_never_set_counts_the_message_without_a_critical_time(drained: tuple[Config, Path]) -> None:
    """An audit copy whose TimeSent is .NET's ``DateTime.MinValue`` (a header value that lands typed): its
    critical time would be 2,025 years (past 2**53 microseconds, which failed every later ``health``).
    It counts as processed, with its processing time, and no critical time."""
    cfg, _ = drained
    lake = open_lake(cfg.lake)
    update(lake)
    when = DAY + dt.timedelta(hours=9, minutes=55)
    never = _sent(dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc))
    _seed(cfg, {"audit": [traffic.audit_copy(never, "Billing", when, 7000)]})
    # and a failure at the last instant a time can name (its day has no next day)
    # (.NET's DateTime.MaxValue, 23:59:59.9999999: its last microsecond was counted nowhere)
    last = dt.datetime.max.replace(tzinfo=dt.timezone.utc)
    _seed(cfg, {"error": [traffic.failed_copy(_sent(when), "Shipping", "System.TimeoutException", "no", last)]})
    assert drain(cfg, lake, ["audit", "error"])["status"] == "ok"
    assert dt.date(9999, 12, 31) in update(lake).days
    daily = lake.read_arrow(ENDPOINT_DAILY.name).to_pylist()
    assert [(r["endpoint"], r["failed"]) for r in daily if r["day"] == dt.date(9999, 12, 31)] == [("Shipping", 1)]
    health = lake.read_arrow(ENDPOINT_HEALTH.name)
    [billing9] = _rows(health, period="hour", endpoint="Billing", period_start=DAY + dt.timedelta(hours=9))
    assert billing9["processed"] == 11 and billing9["processing_p99_ms"] == 7000
    assert billing9["critical_p99_ms"] is not None and billing9["critical_p99_ms"] < 3_600_000, billing9


def test_queue_depth_comes_from_the_drains_runs_rows(fresh_pg_uri: str, tmp_path: Path) -> None:
    cfg = _config(fresh_pg_uri, tmp_path / "lake")
    _seed(cfg, {"Sales": [_sent(DAY + dt.timedelta(seconds=i)) for i in range(5)]})
    lake = open_lake(cfg.lake)
    assert drain(cfg, lake, ["Sales"], max_messages=2)["status"] == "ok"
    points = depth.depth_over_time(lake)
    sales = queue_ref("Sales", cfg.transport).canonical
    before = _rows(points, queue=sales, when="before")
    after = _rows(points, queue=sales, when="after")
    assert [p["depth"] for p in before] == [5] and [p["depth"] for p in after] == [3]
    current = depth.current_depth(lake)
    assert _rows(current, queue=sales)[0]["depth"] == 3


def test_the_openmetrics_text_parses(drained: tuple[Config, Path]) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
    from prometheus_client.parser import text_string_to_metric_families

    cfg, _ = drained
    lake = open_lake(cfg.lake)
    update(lake)
    hours, latest_day = read_latest(lake)
    text = metrics.render(hours, latest_day, depth.current_depth(lake))
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert {f.name for f in openmetrics_families(text)} == set(families)  # valid OpenMetrics too
    for family in families.values():
        assert family.type == "gauge"
    hour = families["queuelake_health_hour_start_timestamp_seconds"].samples
    assert hour[0].value == NEXT.timestamp()
    critical = {
        (s.labels["endpoint"], s.labels["quantile"]): s.value
        for s in families["queuelake_endpoint_critical_time_seconds"].samples
    }
    assert critical == {(ODD, q): 600.25 for q in ("0.5", "0.95", "0.99")}  # the odd name round-trips
    processed = families["queuelake_endpoint_processed_messages"].samples
    assert [(s.labels, s.value) for s in processed] == [({"endpoint": ODD, "message_type": PLACED}, 1.0)]
    daily = families["queuelake_endpoint_daily_processed_messages"].samples
    assert [(s.labels["endpoint"], s.value) for s in daily] == [(ODD, 1.0)]
    depths = {s.labels["queue"]: s.value for s in families["queuelake_queue_depth_messages"].samples}
    assert depths == {queue_ref(q, cfg.transport).canonical: 0.0 for q in ("Sales", "audit", "error")}
    assert text.endswith("# EOF\n")


def test_a_day_in_the_future_does_not_become_the_latest(drained: tuple[Config, Path]) -> None:
    """One failed copy whose TimeOfFailure says DateTime.MaxValue made 9999-12-31 the latest day: the
    gauges and ``--days`` showed that day alone (a review). They count back from today now; the day is
    still a row of the table, shown with every day."""
    cfg, _ = drained
    m = _sent(DAY + dt.timedelta(hours=9))
    far = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    _seed(cfg, {"error": [traffic.failed_copy(m, "Billing", "System.Exception", "clock", far)]})
    lake = open_lake(cfg.lake)
    assert drain(cfg, lake)["status"] == "ok"
    update(lake)
    hours, latest_day = read_latest(lake)
    assert set(latest_day["day"].to_pylist()) == {NEXT.date()}
    assert hours["period_start"].to_pylist() == [NEXT + dt.timedelta(hours=0)]
    recent = read_daily(lake, 3650)
    assert sorted(set(recent["day"].to_pylist())) == [DAY.date(), NEXT.date()]
    assert dt.date(9999, 12, 31) in read_daily(lake)["day"].to_pylist()


def test_the_latest_day_is_never_after_tomorrow() -> None:
    today = dt.date(2026, 12, 1)
    days = pa.chunked_array([pa.array([dt.date(2026, 11, 30), dt.date(9999, 12, 31), None, today], pa.date32())])
    assert _latest_day(days, today=today) == today
    tomorrow = pa.chunked_array([pa.array([today, today + dt.timedelta(days=1)], pa.date32())])
    assert _latest_day(tomorrow, today=today) == today + dt.timedelta(days=1)  # a clock a little ahead
    assert _latest_day(pa.chunked_array([pa.array([dt.date(9999, 12, 31)], pa.date32())]), today=today) is None


def test_a_name_that_is_not_a_metric_name_is_refused() -> None:
    out = metrics.Exposition()
    with pytest.raises(ValueError):
        out.gauge("bad-name", "x", [])
    with pytest.raises(ValueError):
        out.gauge("fine", "x", [({"bad label": "v"}, 1.0)])
    assert metrics.escape_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_the_command_prints_the_daily_table_and_writes_the_gauges(drained: tuple[Config, Path]) -> None:
    cfg, work = drained
    from prometheus_client.parser import text_string_to_metric_families

    conf = work / "health.yaml"
    conf.write_text(
        json.dumps({"transport": {"connection": "${QUEUELAKE_CONNECTION}"}, "lake": {"root": str(cfg.lake.root)}})
    )
    gauges = work / "health.prom"
    result = run_cli(
        ["health", "-c", str(conf), "--metrics", str(gauges)], cfg.transport.connection, cwd=work
    ).checked()
    assert result.summary["days_recomputed"] == ["2026-11-02", "2026-11-03"]
    assert result.summary["tables_written"] == ["endpoint_health", "endpoint_daily"]
    lines = result.before_summary.splitlines()
    assert lines[0].split()[:5] == ["day", "endpoint", "processed", "failed", "retries"]
    assert any(line.startswith("2026-11-02  Shipping") and " 4 " in line for line in lines)
    assert any(f.name == "queuelake_queue_depth_messages" for f in text_string_to_metric_families(gauges.read_text()))
    on_stdout = run_cli(["health", "-c", str(conf), "--metrics", "-"], cfg.transport.connection, cwd=work)
    assert on_stdout.returncode == 0 and on_stdout.summary["days_recomputed"] == []
    assert on_stdout.stdout.endswith("# EOF\n")  # stdout is the exposition alone
    assert {f.name for f in text_string_to_metric_families(on_stdout.stdout)} >= {
        "queuelake_endpoint_processed_messages"
    }
    # a mistyped folder: an arguments error naming the option, before any work (it failed "unexpected",
    # with Python's own text, once the tables were written: a review)
    typo = run_cli(["health", "-c", str(conf), "--metrics", str(work / "nope" / "h.prom")], "x", cwd=work)
    assert typo.returncode == 1 and typo.summary["error_kind"] == "arguments", typo
    assert "--metrics" in typo.summary["error"] and "does not exist" in typo.summary["error"], typo
    assert "health:" not in typo.stderr, "it did its work before refusing the option"


def test_on_delta_spark(drained: tuple[Config, Path], spark) -> None:
    from tests.helpers.jvm import require_delta_jvm

    require_delta_jvm(spark)
    cfg, _ = drained
    lake = open_lake(LakeConfig(root=cfg.lake.root, engine="delta-spark"), spark)
    result = update(lake)
    assert result.written == ["endpoint_health", "endpoint_daily"]
    daily = lake.read(ENDPOINT_DAILY.name).orderBy("day", "endpoint").collect()
    assert [(r["endpoint"], r["processed"]) for r in daily] == [("Billing", 13), ("Shipping", 4), (ODD, 1)]
    hours = lake.read(ENDPOINT_HEALTH.name).where("period = 'hour' AND endpoint = 'Billing'").orderBy("period_start")
    assert [r["processing_p95_ms"] for r in hours.collect()] == [100.0, 400.0]
    assert pc.sum(read_latest(lake)[1]["processed"]).as_py() == 1


def test_a_generic_types_releases_count_as_one_type() -> None:
    """``Envelope<Order>`` keeps its argument's assembly version in the journal's message type: each
    release of that assembly was a type of its own in the health tables (found by a review)."""
    from queuelake.lake.record_tables import MESSAGES
    from queuelake.pipeline.health import compute

    detail = "Culture=neutral, PublicKeyToken=null"
    types = [f"MyNs.Envelope`1[[MyNs.Order, MyAsm, Version={v}, {detail}]]" for v in ("1.0.0.0", "2.0.0.0")]
    at = dt.datetime(2026, 11, 28, 9, tzinfo=dt.timezone.utc)
    n = 4
    columns = {
        "outcome": ["landed"] * n,
        "message_type": [*types, "Sales.OrderPlaced", None],
        "processing_endpoint": ["Billing"] * n,
        "processing_started": [at] * n,
        "processing_ended": [at] * n,
        "time_sent": [at] * n,
    }
    schema = MESSAGES.schema
    rows = pa.table(
        {c: pa.array(columns.get(c, [None] * n), schema.field(c).type) for c in compute.COLUMNS if c != "headers"}
    ).append_column("headers", pa.nulls(n, schema.field("headers").type))
    counted = compute.copies(rows)
    assert counted["message_type"].to_pylist() == [
        "MyNs.Envelope`1[[MyNs.Order, MyAsm]]",
        "MyNs.Envelope`1[[MyNs.Order, MyAsm]]",
        "Sales.OrderPlaced",
        compute.UNKNOWN,
    ]

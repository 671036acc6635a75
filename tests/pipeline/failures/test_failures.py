"""``queuelake failures`` on real drained failures: error copies of two endpoints, seeded into PostgreSQL
and drained by the real drain into a delta-rs journal. One failure thrown by two builds (other line
numbers, paths, async state machine numbers, addresses) groups together; another call path of the
same exception, message type and endpoint splits off, as does another exception. Asserted: the groups,
their counts, first and last seen, the messages a later copy retried (processed or failed again), a
group's message ids, and that each group's ``replay --where`` passes replay's checks, is evaluated
without Spark, and selects exactly the group's rows, also after more failures of the group were drained
(the printed predicate is frozen), and in a replay's dry run.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from pathlib import Path

import pytest
from queuelake.commands.demo import traffic
from queuelake.config import Config, from_dict
from queuelake.lake.engines import journal_engine, open_lake
from queuelake.nsb import headers as hdr
from queuelake.nsb.retry import (
    REPLAY_ID,
    REPLAY_KIND,
    REPLAY_SOURCE,
    REPLAY_SOURCE_ID,
    RETRY_UNIQUE_MESSAGE_ID,
    unique_message_id,
)
from queuelake.pipeline.failures import fingerprint as fp
from queuelake.pipeline.failures import show
from queuelake.pipeline.failures.groups import Group
from queuelake.pipeline.failures.run import failure_groups
from queuelake.pipeline.replay.arrow_predicate import arrow_predicate
from queuelake.pipeline.replay.arrow_selection import select_keys
from queuelake.pipeline.replay.plan import ReplayOptions
from queuelake.pipeline.replay.predicate import check_columns, check_predicate
from queuelake.transport import db, installer
from queuelake.transport.queues import OutgoingMessage
from queuelake.transport.table_refs import queue_ref

from tests.helpers.cli import run_cli
from tests.helpers.stages import drain, replay

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
TIMEOUT = "System.TimeoutException"
NO_ADDRESS = "Shipping.AddressNotFoundException"
ERROR = '"public"."error"'
ORDER_TYPE = "Sales.Messages.Events.OrderPlaced"


def _build_a(line: int, folder: str, state: int, address: str) -> str:
    """Group A's stack trace as build ``folder`` prints it."""
    return "\n".join(
        [
            f"   at Billing.Handler.<Handle>d__{state}.MoveNext() in {folder}Billing{_sep(folder)}Handler.cs"
            f":line {line}",
            "--- End of stack trace from previous location ---",
            f"   at NServiceBus.Pipeline.Invoke(Context c) in {folder}Core{_sep(folder)}Pipeline.cs:line {line + 100}",
            f"   at Native.Call({address})",
        ]
    )


def _sep(folder: str) -> str:
    return "\\" if "\\" in folder else "/"


BUILD_1 = [_build_a(42, "C:\\build\\1\\src\\", 12, "0x7ffe12ab00")]
BUILD_2 = [_build_a(57, "/home/ci/build7/src/", 7, "0x00000001c0")]
OTHER_PATH = "   at Billing.PaymentGateway.Charge() in C:\\build\\1\\src\\Billing\\Gateway.cs:line 9"
SHIPPING = "   at Shipping.AddressBook.Find(Guid 3f2504e0-4f89-11d3-9a0c-0305e82c3301) in /src/Book.cs:line 3"


def _order(i: int, types: str = traffic.ORDER_PLACED) -> OutgoingMessage:
    message_id = str(uuid.UUID(int=i + 1))
    return OutgoingMessage(hdr.encode(traffic.order_headers(message_id, T0, types=types)), b"{}", id=message_id)


def _failed(m: OutgoingMessage, endpoint: str, exception: str, minute: int, stack: str) -> OutgoingMessage:
    return traffic.failed_copy(m, endpoint, exception, f"failed {m.id}", T0 + dt.timedelta(minutes=minute), stack)


def _with(m: OutgoingMessage, extra: dict[str, str]) -> OutgoingMessage:
    return OutgoingMessage(hdr.encode({**hdr.decode_map(m.headers), **extra}), m.body, id=m.id)


ORDERS = [_order(i) for i in range(9)]
BILLS = [_order(100 + i, traffic.BILL_ORDER) for i in range(2)]


def _first_failures() -> list[OutgoingMessage]:
    """A: orders 0-4 (three from build 1, two from build 2); B: orders 5-6 (another call path);
    C: two BillOrders failing at Shipping with another exception."""
    out = [_failed(ORDERS[i], "Billing", TIMEOUT, 10 + i, (BUILD_1 if i < 3 else BUILD_2)[0]) for i in range(5)]
    out += [_failed(ORDERS[i], "Billing", TIMEOUT, 20 + i, OTHER_PATH) for i in (5, 6)]
    out += [_failed(m, "Shipping", NO_ADDRESS, 30 + i, SHIPPING) for i, m in enumerate(BILLS)]
    return out


def _config(uri: str, root: Path, queues: tuple[str, ...] = ("error", "audit")) -> Config:
    settings = {
        "transport": {"connection": uri},
        "lake": {"root": str(root), "engine": "delta-rs"},
        "drain": {"queues": list(queues), "batch_size": 4},
    }
    return from_dict(settings, env={})


def _installed(uri: str, root: Path, queues: tuple[str, ...]) -> Config:
    """A config draining ``queues``, its queue tables made."""
    cfg = _config(uri, root, queues)
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
    return cfg


def _seed(cfg: Config, queue: str, messages: list[OutgoingMessage]) -> None:
    with db.connect(cfg.transport) as conn:
        traffic.seed(conn, queue_ref(queue, cfg.transport), messages)


def _selects(cfg: Config, where: str) -> set[tuple[str, int, str]]:
    """The journal rows replay's Arrow selection takes for ``where``, after replay's checks."""
    lake = journal_engine(open_lake(cfg.lake))
    version = lake.table_version("messages")
    assert version is not None
    schema = lake.schema("messages", version)
    check_columns(check_predicate(where), schema.names)
    predicate = arrow_predicate(where, schema)
    assert predicate is not None, f"replay would need Spark for {where!r}"
    keys, _ = select_keys(lake.added_files("messages", None, version), schema, predicate)
    return set(zip(keys["queue"].to_pylist(), keys["seq"].to_pylist(), keys["id"].to_pylist()))


def _rows(g: Group) -> set[tuple[str, int, str]]:
    return {r.key for r in g.replay_rows()}


def _by_exception(groups: list[Group]) -> dict[tuple[str | None, int], Group]:
    return {(g.exception_type, len(g.rows)): g for g in groups}


@pytest.fixture
def cfg(fresh_pg_uri: str, tmp_path: Path) -> Config:
    cfg = _config(fresh_pg_uri, tmp_path / "lake")
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
    _seed(cfg, "error", _first_failures())
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    return cfg


def test_fingerprint_strips_what_builds_change() -> None:
    assert fp.fingerprint(BUILD_1[0]) == fp.fingerprint(BUILD_2[0]) != fp.fingerprint(OTHER_PATH)
    assert fp.frames(BUILD_1[0]) == [
        "Billing.Handler.<Handle>d__N.MoveNext()",
        "NServiceBus.Pipeline.Invoke(Context c)",
        "Native.Call(<hex>)",
    ]
    assert fp.frames(SHIPPING) == ["Shipping.AddressBook.Find(Guid <guid>)"]
    assert fp.frames("   at a.B.c(B.java:12)\n\tat a.B.lambda$run$3(B.java:40)") == [
        "a.B.c(B.java)",
        "a.B.lambda$run$N(B.java)",
    ]
    assert fp.frames("System.Exception: order 4711 failed\n ---> Inner: x") == []
    assert fp.fingerprint(None) == fp.fingerprint("no frames here") == fp.NO_FRAMES


def test_groups_counts_times_and_exact_replay_predicates(cfg: Config) -> None:
    found = failure_groups(open_lake(cfg.lake))
    assert [len(g.rows) for g in found.groups] == [5, 2, 2]
    a, b, c = found.groups[0], *sorted(found.groups[1:], key=lambda g: g.exception_type or "")
    assert (b.exception_type, c.exception_type) == (NO_ADDRESS, TIMEOUT)
    b, c = c, b  # b: the other call path of A's exception; c: Shipping's
    assert (a.exception_type, a.message_type, a.endpoint) == (TIMEOUT, "Sales.Messages.Events.OrderPlaced", "Billing")
    assert (b.exception_type, b.endpoint) == (TIMEOUT, "Billing") and b.fingerprint != a.fingerprint
    assert (c.endpoint, c.message_type) == ("Shipping", "Billing.Messages.Commands.BillOrder")
    assert len({a.id, b.id, c.id}) == 3 and all(len(g.id) == 10 for g in (a, b, c))
    assert (a.first_seen, a.last_seen) == (T0 + dt.timedelta(minutes=10), T0 + dt.timedelta(minutes=14))
    assert (c.first_seen, c.last_seen) == (T0 + dt.timedelta(minutes=30), T0 + dt.timedelta(minutes=31))
    assert a.message_ids() == [ORDERS[i].id for i in range(5)]
    assert b.message_ids() == [ORDERS[5].id, ORDERS[6].id]
    assert (a.summary()["retried"], a.summary()["retry_failures"], a.summary()["messages"]) == (0, 0, 5)
    for g in (a, b, c):
        assert _selects(cfg, g.where) == _rows(g), g.where
    assert len(_rows(a) | _rows(b) | _rows(c)) == 9
    frozen_a, a_rows = a.where, _rows(a)

    # later: order 0 retried and processed (an audit copy), order 1 retried and failed again the same
    # way (line numbers of build 2), order 7 failing for the first time: all in group A
    source = {r.message_id: f"{r.queue}@{r.seq}" for r in a.rows}
    retry = {REPLAY_ID: "r-1", REPLAY_KIND: "retry"}
    processed = traffic.audit_copy(
        _with(ORDERS[0], {**retry, REPLAY_SOURCE: source[ORDERS[0].id]}), "Billing", T0 + dt.timedelta(hours=1), 20
    )
    again = _failed(
        _with(ORDERS[1], {**retry, REPLAY_SOURCE: source[ORDERS[1].id]}), "Billing", TIMEOUT, 61, BUILD_2[0]
    )
    _seed(cfg, "audit", [processed])
    _seed(cfg, "error", [again, _failed(ORDERS[7], "Billing", TIMEOUT, 62, BUILD_1[0])])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"

    later = failure_groups(open_lake(cfg.lake))
    assert [len(g.rows) for g in later.groups] == [7, 2, 2]
    a2 = later.groups[0]
    assert a2.id == a.id  # stable
    s = a2.summary()
    assert (s["copies"], s["messages"], s["retry_failures"]) == (7, 6, 1)
    assert (s["retried"], s["retried_processed"], s["retried_failed_again"]) == (2, 1, 1)
    assert a2.last_seen == T0 + dt.timedelta(minutes=62)
    # by each one's latest failure; order 0, processed by its retry, is resolved: a replay leaves it
    assert a2.message_ids() == [ORDERS[i].id for i in (2, 3, 4, 1, 7)] and s["resolved"] == 1
    # the predicate printed before still selects the same rows: the later failures are not added
    assert _selects(cfg, frozen_a) == a_rows
    # the new one: each unresolved message's latest failure (order 1's retry failure, not its first)
    assert _selects(cfg, a2.where) == _rows(a2) and len(_rows(a2)) == 5
    assert not _rows(a2) <= a_rows

    # replay's dry run, without Spark, selects the group
    def no_spark():  # type: ignore[no-untyped-def]
        raise AssertionError("the group's predicate needed Spark")

    summary = replay(cfg, None, open_lake(cfg.lake), ReplayOptions(a2.where, dry_run=True), start_spark=no_spark)
    assert (summary["selected_by"], summary["selected"]) == ("arrow", 5), summary


def _envelope(version: str) -> str:
    """A generic message type as NServiceBus names it, its argument from release ``version``."""
    details = "Culture=neutral, PublicKeyToken=null"
    argument = f"Sales.Messages.Order, Sales.Messages, Version={version}, {details}"
    return f"Sales.Messages.Envelope`1[[{argument}]], Sales.Messages, Version=1.0.0.0, {details}"


def test_a_generic_types_releases_failing_alike_are_one_group(cfg: Config) -> None:
    """Two releases of a generic message type (its argument's assembly version moved) failing the same
    way are one group, as they are one typed table; its --where selects both releases' rows (they were
    two groups before, whose --where each named one exact type)."""
    releases = [_order(200 + i, _envelope("1.0.0.0" if i % 2 else "2.0.0.0")) for i in range(4)]
    _seed(cfg, "error", [_failed(m, "Billing", TIMEOUT, 40 + i, OTHER_PATH) for i, m in enumerate(releases)])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    found = failure_groups(open_lake(cfg.lake))
    envelopes = [g for g in found.groups if g.message_type and g.message_type.startswith("Sales.Messages.Envelope")]
    assert len(envelopes) == 1, [g.message_type for g in envelopes]
    (g,) = envelopes
    assert g.message_type == "Sales.Messages.Envelope`1[[Sales.Messages.Order, Sales.Messages]]"
    assert g.message_ids() == [m.id for m in releases]
    assert "message_type IN (" in g.where
    assert _selects(cfg, g.where) == _rows(g) and len(_rows(g)) == 4


def test_servicecontrol_retries_resolve_failures_and_leave_the_replay(cfg: Config) -> None:
    """ServiceControl retries keep the MessageId and name no journal row: their copies carry
    ``ServiceControl.Retry.UniqueMessageId``. A retry processed later (an audit copy) resolves the
    message's failure: it counts as retried and processed, and the group's replay --where leaves it (it
    would be processed twice); one that failed again counts so and stays; a group whose every message
    was processed since selects no row."""

    later = T0 + dt.timedelta(hours=2)
    processed = traffic.audit_copy(_sc_retry(ORDERS[2], "Billing"), "Billing", later, 30)
    again = _failed(_sc_retry(ORDERS[3], "Billing"), "Billing", TIMEOUT, 120, BUILD_1[0])
    shipped = [traffic.audit_copy(_sc_retry(m, "Shipping"), "Shipping", later, 10) for m in BILLS]
    _seed(cfg, "audit", [processed, *shipped])
    _seed(cfg, "error", [again])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"

    found = failure_groups(open_lake(cfg.lake))
    a = next(g for g in found.groups if g.exception_type == TIMEOUT and len(g.rows) == 6)
    s = a.summary()
    assert (s["retried"], s["retried_processed"], s["retried_failed_again"]) == (2, 1, 1), s
    assert (s["messages"], s["resolved"], s["retry_failures"]) == (5, 1, 1), s
    assert a.message_ids() == [ORDERS[i].id for i in (0, 1, 4, 3)]  # order 2 resolved; order 3 by its retry
    assert _selects(cfg, a.where) == _rows(a) and len(_rows(a)) == 4
    c = next(g for g in found.groups if g.exception_type == NO_ADDRESS)
    assert (c.summary()["resolved"], c.replay_rows()) == (2, [])
    assert _selects(cfg, c.where) == set()
    assert found.summary()["unresolved_messages"] == 4 + 2  # A's four and B's two
    assert found.summary()["retry_copies_unmatched"] == 0


def _sc_retry(m: OutgoingMessage, endpoint: str) -> OutgoingMessage:
    """``m`` as ServiceControl retries its failure at ``endpoint``: with that failure's unique id."""
    failed = hdr.decode_map(_failed(m, endpoint, TIMEOUT, 0, "").headers)
    return _with(m, {RETRY_UNIQUE_MESSAGE_ID: unique_message_id(failed) or ""})


def test_a_servicecontrol_retry_resolves_only_the_failure_of_its_endpoint(cfg: Config) -> None:
    """A published event has one MessageId in every subscriber. It fails at Billing (group A) and, later,
    at Shipping; ServiceControl retries Billing's failure and Billing processes it. The retry's unique
    id (MessageId + Billing) resolves Billing's failure alone: A's replay leaves the event, Shipping's
    replay still sends it (matched by MessageId and time, the retry took Shipping's failure, the later
    one, and Billing's stayed: Billing processed the event twice, Shipping never). Shipping's failure
    then fails again on a retry whose machine's clock is a minute behind: the error queue's order, not
    that clock, says which failure is the latest (and which one the failed retry retried). A retry copy
    whose unique id names no failure resolves nothing: counted as unmatched, not guessed."""
    event = ORDERS[8]
    at_billing = _failed(event, "Billing", TIMEOUT, 40, BUILD_1[0])
    at_shipping = _failed(event, "Shipping", NO_ADDRESS, 50, SHIPPING)
    _seed(cfg, "error", [at_billing, at_shipping])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    _seed(cfg, "audit", [traffic.audit_copy(_sc_retry(event, "Billing"), "Billing", T0 + dt.timedelta(hours=2), 30)])
    # Shipping's retry fails again at 10:49 by its machine's clock, after the 10:50 failure it retried
    _seed(cfg, "error", [_failed(_sc_retry(event, "Shipping"), "Shipping", NO_ADDRESS, 49, SHIPPING)])
    # a retry copy of order 6 naming the unique id of a failure at Sales, which never failed it
    _seed(cfg, "audit", [traffic.audit_copy(_sc_retry(ORDERS[6], "Sales"), "Sales", T0 + dt.timedelta(hours=2), 5)])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"

    found = failure_groups(open_lake(cfg.lake))
    a = next(g for g in found.groups if g.endpoint == "Billing" and len(g.rows) == 6)
    shipping = next(g for g in found.groups if g.endpoint == "Shipping" and g.message_type == ORDER_TYPE)
    # Billing processed the event: A's replay leaves it; Shipping did not: its group's replay sends it
    assert event.id not in a.message_ids() and a.message_ids() == [ORDERS[i].id for i in range(5)]
    assert shipping.message_ids() == [event.id]
    s = a.summary()
    assert (s["messages"], s["resolved"], s["retried_processed"], s["unresolved"]) == (6, 1, 1, 5), s
    assert _selects(cfg, a.where) == _rows(a)
    t = shipping.summary()
    assert (t["copies"], t["messages"], t["resolved"], t["retried_processed"]) == (2, 1, 0, 0), t
    assert (t["retried"], t["retried_failed_again"], t["retry_failures"]) == (1, 1, 1), t
    first, again = sorted(shipping.rows, key=lambda r: r.seq)
    assert again.at < first.at  # the skewed clock
    assert shipping.retried_failed_again == {first.key}  # the retry that failed again retried the first
    assert shipping.replay_rows() == [again]
    assert _selects(cfg, shipping.where) == {again.key}
    b = next(g for g in found.groups if g.fingerprint == fp.fingerprint(OTHER_PATH))
    assert b.summary()["resolved"] == 0 and ORDERS[6].id in b.message_ids()
    summary = found.summary()
    assert (summary["retry_copies_found"], summary["retry_copies_unmatched"]) == (3, 1), summary
    assert summary["failed_messages"] == 9 + 2  # the event at Billing and at Shipping: two failed messages


def test_a_message_is_replayed_by_the_group_of_its_latest_failure(cfg: Config) -> None:
    """ServicePulse counts a failed message in the group of its latest failed attempt. Orders 0 and 1
    failed with a timeout (group A); their retries failed with a NullReference (group N); order 0's next
    retry was processed. Order 0 is resolved: no group's replay sends it (A's did: a processed message
    sent again); order 1 is N's to send, not A's too. A lists both, as history, saying where their
    latest failure is; each count says what it counts."""
    a = next(g for g in failure_groups(open_lake(cfg.lake)).groups if len(g.rows) == 5)
    source = {r.message_id: f"{r.queue}@{r.seq}" for r in a.rows}
    retry = {REPLAY_ID: "r-1", REPLAY_KIND: "retry"}
    npe = "System.NullReferenceException"
    failed_again = [
        _failed(_with(ORDERS[i], {**retry, REPLAY_SOURCE: source[ORDERS[i].id]}), "Billing", npe, 60 + i, OTHER_PATH)
        for i in (0, 1)
    ]
    _seed(cfg, "error", failed_again)
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    n = next(g for g in failure_groups(open_lake(cfg.lake)).groups if g.exception_type == npe)
    second = {r.message_id: f"{r.queue}@{r.seq}" for r in n.rows}
    retry2 = {REPLAY_ID: "r-2", REPLAY_KIND: "retry", REPLAY_SOURCE: second[ORDERS[0].id]}
    _seed(cfg, "audit", [traffic.audit_copy(_with(ORDERS[0], retry2), "Billing", T0 + dt.timedelta(hours=2), 20)])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"

    found = failure_groups(open_lake(cfg.lake))
    a = next(g for g in found.groups if g.id == a.id)
    n = next(g for g in found.groups if g.exception_type == npe)
    # order 0 was processed (resolved), order 1 failed last in N: A's replay sends neither
    assert a.message_ids() == [ORDERS[i].id for i in (2, 3, 4)]
    s = a.summary()
    assert (s["copies"], s["messages"], s["retried"], s["retried_failed_again"]) == (5, 5, 2, 2), s
    assert (s["latest_failure_elsewhere"], s["resolved"], s["unresolved"]) == (2, 0, 3), s
    assert _selects(cfg, a.where) == _rows(a) and len(_rows(a)) == 3
    t = n.summary()
    assert (t["messages"], t["resolved"], t["unresolved"], t["latest_failure_elsewhere"]) == (2, 1, 1, 0), t
    assert n.message_ids() == [ORDERS[1].id]
    assert _selects(cfg, n.where) == _rows(n) and len(_rows(n)) == 1
    summary = found.summary()
    assert (summary["failed_messages"], summary["unresolved_messages"]) == (9, 3 + 2 + 2 + 1), summary

    def no_spark():  # type: ignore[no-untyped-def]
        raise AssertionError("the group's predicate needed Spark")

    dry = replay(cfg, None, open_lake(cfg.lake), ReplayOptions(a.where, dry_run=True), start_spark=no_spark)
    assert dry["selected"] == 3, dry

    lines = {line.split()[0]: line for line in show.message_lines(a)[1:]}
    assert f"failed again; latest failure in {n.id} (processed)" in lines[ORDERS[0].id]
    assert lines[ORDERS[1].id].split("  ")[3].strip() == f"failed again; latest failure in {n.id}"
    listed = {o["message_id"]: o for o in map(json.loads, show.message_json(a))}
    assert (listed[ORDERS[0].id]["resolved"], listed[ORDERS[0].id]["in_replay"]) == (True, False)
    assert listed[ORDERS[1].id]["latest_failure_group"] == n.id and not listed[ORDERS[1].id]["resolved"]
    assert (listed[ORDERS[2].id]["latest_failure_group"], listed[ORDERS[2].id]["in_replay"]) == (a.id, True)
    table = {line.split()[0]: line.split() for line in show.group_lines(found.groups)[1:]}
    assert table[a.id][1:5] == ["5", "5", "3", "2"]  # copies, msgs, open, retried
    assert table[n.id][1:5] == ["2", "2", "1", "1"]


@pytest.mark.parametrize("names_its_id", [True, False], ids=["source-id", "sent-before-source-ids"])
def test_a_recreated_error_tables_new_failure_is_not_taken_for_the_old_one_retried(
    cfg: Config, names_its_id: bool
) -> None:
    """The error table dropped and re-created numbers its rows from 1 again: a new failure at
    ``error@1`` was shown resolved (the retry of the old ``error@1`` was taken for its retry) and left
    out of the replay, while the group's --where selected the old, resolved row too (a review). The
    retry's copy names its source's row id; a copy without one (sent before) retried the row failed
    before it; the --where leaves the namesake out by its id."""
    found = failure_groups(open_lake(cfg.lake))
    a = found.groups[0]
    first = next(r for r in a.rows if r.message_id == ORDERS[0].id)
    assert first.seat == (ERROR, 1)
    source = {REPLAY_ID: "r-1", REPLAY_KIND: "retry", REPLAY_SOURCE: f"{first.queue}@{first.seq}"}
    if names_its_id:
        source[REPLAY_SOURCE_ID] = first.id
    _seed(cfg, "audit", [traffic.audit_copy(_with(ORDERS[0], source), "Billing", T0 + dt.timedelta(hours=1), 20)])
    with db.connect(cfg.transport) as conn:
        conn.raw.execute(f"DROP TABLE {ERROR}")
        conn.commit()
        installer.install(conn, installer.plan(cfg))
    _seed(cfg, "error", [_failed(ORDERS[8], "Billing", TIMEOUT, 70, BUILD_1[0])])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"

    a2 = failure_groups(open_lake(cfg.lake)).groups[0]
    assert a2.id == a.id and len(a2.rows) == 6
    new = next(r for r in a2.rows if r.message_id == ORDERS[8].id)
    assert new.seat == first.seat and new.key != first.key
    s = a2.summary()
    assert (s["messages"], s["resolved"], s["unresolved"], s["retried_processed"]) == (6, 1, 5, 1), s
    assert a2.message_ids() == [ORDERS[i].id for i in (1, 2, 3, 4, 8)]
    assert "id NOT IN" in a2.where
    assert _selects(cfg, a2.where) == _rows(a2) and new.key in _rows(a2) and first.key not in _rows(a2)


def _recreate_error_table(cfg: Config) -> None:
    with db.connect(cfg.transport) as conn:
        conn.raw.execute(f"DROP TABLE {ERROR}")
        conn.commit()
        installer.install(conn, installer.plan(cfg))


def test_a_retry_failing_again_in_a_recreated_table_is_the_later_failure(cfg: Config) -> None:
    """A message failed at the old ``error@5``; the table re-created; its retry failed again at the new
    ``error@1``, and a retry of that was processed. Its failures were ordered by seq alone (one queue:
    "one counter"), so the old row was its latest failure, unresolved, and the group's replay sent an
    already processed message again (a review). They are ordered as the drain took them."""
    x = next(r for r in failure_groups(open_lake(cfg.lake)).groups[0].rows if r.message_id == ORDERS[4].id)
    _recreate_error_table(cfg)
    source = {REPLAY_ID: "r-1", REPLAY_KIND: "retry", REPLAY_SOURCE: f"{x.queue}@{x.seq}", REPLAY_SOURCE_ID: x.id}
    _seed(cfg, "error", [_failed(_with(ORDERS[4], source), "Billing", TIMEOUT, 70, BUILD_1[0])])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    a = failure_groups(open_lake(cfg.lake)).groups[0]
    b = next(r for r in a.rows if r.message_id == ORDERS[4].id and r.key != x.key)
    assert b.seq < x.seq and [r.key for r in a.latest_rows() if r.message_id == ORDERS[4].id] == [b.key]
    again = {REPLAY_ID: "r-2", REPLAY_KIND: "retry", REPLAY_SOURCE: f"{b.queue}@{b.seq}", REPLAY_SOURCE_ID: b.id}
    _seed(cfg, "audit", [traffic.audit_copy(_with(ORDERS[4], again), "Billing", T0 + dt.timedelta(hours=3), 20)])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    a = failure_groups(open_lake(cfg.lake)).groups[0]
    assert ORDERS[4].id not in a.message_ids() and a.summary()["resolved"] == 1, a.summary()
    assert _selects(cfg, a.where) == _rows(a) and x.key not in _rows(a)


def test_a_printed_where_never_takes_a_row_a_recreated_table_lands_later(cfg: Config) -> None:
    """The --where is frozen when printed; the error table re-created after, a new failure of the group
    landed at ``error@1`` and the old predicate selected it too (a review)."""
    a = failure_groups(open_lake(cfg.lake)).groups[0]
    frozen, chosen = a.where, _rows(a)
    assert "drained_at <= '" in frozen and _selects(cfg, frozen) == chosen
    _recreate_error_table(cfg)
    _seed(cfg, "error", [_failed(ORDERS[8], "Billing", TIMEOUT, 70, BUILD_1[0])])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    assert _selects(cfg, frozen) == chosen


def test_failures_of_one_groups_columns_in_two_error_queues(fresh_pg_uri: str, tmp_path: Path) -> None:
    """A group's rows in one error queue, and a failure with the same exception, message type and
    endpoint (another call path: another group) in a second: every ``failures`` ended in an IndexError
    (round 48's namesake check made an empty entry for the other queue; a review)."""
    cfg = _installed(fresh_pg_uri, tmp_path / "lake", ("error", "error2", "audit"))
    _seed(cfg, "error", _first_failures())
    _seed(cfg, "error2", [_failed(ORDERS[8], "Billing", TIMEOUT, 80, OTHER_PATH)])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    groups = failure_groups(open_lake(cfg.lake)).groups
    assert len(groups) >= 2
    for g in groups:
        assert _selects(cfg, g.where) == _rows(g), g.id


def test_a_group_without_a_processing_endpoint_shows_the_one_its_failed_queue_names() -> None:
    """A copy that failed before a handler ran has a FailedQ but no ProcessingEndpoint: the table showed
    "-" as its endpoint (found by a review)."""
    from queuelake.pipeline.failures.groups import Row

    at = dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc)
    row = Row('"public"."error"', 1, "m-1", at, "Sales@[dbo]@[nservicebus]", "boom", False)
    bare = Group(("System.Exception", "Sales.Order", None, "f" * 16), [row])
    named = Group(("System.Exception", "Sales.Order", "Billing", "e" * 16), [row])
    nothing = Group(("System.Exception", "Sales.Order", None, "d" * 16), [dataclasses.replace(row, failed_queue=None)])
    table = {line.split()[0]: line.split() for line in show.group_lines([bare, named, nothing])[1:]}
    assert (table[bare.id][9], table[named.id][9], table[nothing.id][9]) == ("(Sales)", "Billing", "-")


def test_control_characters_in_a_group_are_shown_as_escapes() -> None:
    """Header values are other programs' text: a line break in an endpoint's name split a group over
    lines, an ESC in an exception type reached the terminal (a review)."""
    from queuelake.pipeline.failures.groups import Row

    at = dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc)
    row = Row('"public"."error"', 1, "m-1", at, "Sales", "boom\x1b[2J", False)
    odd = Group(("Sys\tTab\x1b[31mRED", "Ctl.Type\nInjected", "Billing\nX", "c" * 16), [row])
    lines = show.group_lines([odd]) + show.message_lines(odd)
    assert len(show.group_lines([odd])) == 2 and not any(c in "".join(lines) for c in "\x1b\t\n")
    assert "Billing\\nX" in lines[1] and "Sys\\tTab\\x1b[31mRED" in lines[1], lines


def test_quotes_in_keys_go_to_spark_escaped() -> None:
    from queuelake.pipeline.failures.groups import literal

    assert literal("it's a \\ path") == "'it\\'s a \\\\ path'"


def test_the_command(cfg: Config, tmp_path: Path) -> None:
    conf = tmp_path / "failures.yaml"
    conf.write_text(
        json.dumps({"transport": {"connection": "${QUEUELAKE_CONNECTION}"}, "lake": {"root": str(cfg.lake.root)}})
    )
    listed = run_cli(["failures", "-c", str(conf)], cfg.transport.connection, cwd=tmp_path).checked()
    lines = listed.before_summary.splitlines()
    assert lines[0].split()[:3] == ["group", "copies", "msgs"]
    assert len(lines) == 4 and listed.summary["groups"] == 3 and listed.summary["failed_copies"] == 9
    first = listed.summary["group_ids"][0]
    assert lines[1].startswith(first) and "Billing" in lines[1] and TIMEOUT in lines[1]
    as_json = run_cli(["failures", "-c", str(conf), "--json"], cfg.transport.connection, cwd=tmp_path).checked()
    objects = [json.loads(line) for line in as_json.before_summary.splitlines()]
    assert '": ' not in as_json.before_summary and '", "' not in as_json.before_summary  # compact, as all output
    assert [o["copies"] for o in objects] == [5, 2, 2] and objects[0]["group"] == first
    where_file = tmp_path / "group.where"
    one = run_cli(
        ["failures", "-c", str(conf), "--group", first[:6], "--where-out", str(where_file)],
        cfg.transport.connection,
        cwd=tmp_path,
    ).checked()
    assert where_file.read_text() == one.summary["replay_where"] + "\n"
    assert one.summary["message_ids"] == [ORDERS[i].id for i in range(5)]
    assert one.summary["group"] == first and one.summary["replay_where"].startswith("outcome = 'landed' AND ")
    [group] = [g for g in failure_groups(open_lake(cfg.lake)).groups if g.id == first]
    assert _selects(cfg, one.summary["replay_where"]) == _rows(group) and {q for q, _, _ in _rows(group)} == {ERROR}
    assert len(one.before_summary.splitlines()) == 6  # the header and five messages
    dry = run_cli(
        ["replay", "-c", str(conf), "--where-file", str(where_file), "--dry-run"],
        cfg.transport.connection,
        cwd=tmp_path,
    ).checked()
    assert dry.summary["selected"] == 5 and dry.summary["selected_by"] == "arrow"
    unknown = run_cli(["failures", "-c", str(conf), "--group", "ffffffffff"], cfg.transport.connection, cwd=tmp_path)
    alone = run_cli(
        ["failures", "-c", str(conf), "--where-out", str(where_file)], cfg.transport.connection, cwd=tmp_path
    )
    assert alone.returncode != 0 and "give --group ID too" in alone.stderr
    assert unknown.returncode != 0 and "no group" in unknown.stderr


def test_a_retry_drained_from_its_queue_before_an_endpoint_handled_it_leaves_the_failure_open(
    fresh_pg_uri: str, tmp_path: Path
) -> None:
    """A queuelake retry of order 0 sent to Billing's queue and drained from there (the drain beside the
    endpoint took it first): no endpoint processed it, yet it counted as processed, and the failure as
    resolved, left out of the group's replay (a review's month). Only an audit copy is processed."""
    cfg = _installed(fresh_pg_uri, tmp_path / "lake", ("error", "audit", "Billing"))
    _seed(cfg, "error", _first_failures())
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    first = next(r for r in failure_groups(open_lake(cfg.lake)).groups[0].rows if r.message_id == ORDERS[0].id)
    retry = {REPLAY_ID: "r-1", REPLAY_KIND: "retry", REPLAY_SOURCE: f"{first.queue}@{first.seq}"}
    _seed(cfg, "Billing", [_with(ORDERS[0], {**retry, REPLAY_SOURCE_ID: first.id})])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    a = failure_groups(open_lake(cfg.lake)).groups[0]
    s = a.summary()
    assert (s["retried"], s["retried_processed"], s["resolved"]) == (1, 0, 0), s
    assert ORDERS[0].id in a.message_ids() and _selects(cfg, a.where) == _rows(a)


def test_a_retry_carrying_its_failures_processing_ended_is_not_processed(fresh_pg_uri: str, tmp_path: Path) -> None:
    """NServiceBus 4 and 5 stamp ProcessingEnded on a message that failed too, and a retry keeps every
    header ServiceControl keeps: such a retry drained from its destination queue counted as processed, its
    failure resolved (a review). A copy whose ProcessingEnded is its failure's own is not processed; an
    audit copy of the retry (a new ProcessingEnded) is."""
    cfg = _installed(fresh_pg_uri, tmp_path / "lake", ("error", "audit", "Billing"))
    stamped = {hdr.PROCESSING_ENDED: "2026-11-02 09:30:00:000000 Z"}
    failures = _first_failures()
    failures[0] = _with(failures[0], stamped)
    _seed(cfg, "error", failures)
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    first = next(r for r in failure_groups(open_lake(cfg.lake)).groups[0].rows if r.message_id == ORDERS[0].id)
    retry = {
        REPLAY_ID: "r-1",
        REPLAY_KIND: "retry",
        REPLAY_SOURCE: f"{first.queue}@{first.seq}",
        REPLAY_SOURCE_ID: first.id,
    }
    _seed(cfg, "Billing", [_with(ORDERS[0], {**retry, **stamped})])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    s = failure_groups(open_lake(cfg.lake)).groups[0].summary()
    assert (s["retried"], s["retried_processed"], s["resolved"]) == (1, 0, 0), s
    processed = {
        hdr.PROCESSING_ENDED: "2026-11-02 11:00:00:000000 Z",
        "NServiceBus.ProcessingStarted": "2026-11-02 10:59:59:000000 Z",
    }
    _seed(cfg, "audit", [_with(ORDERS[0], {**retry, **processed})])
    assert drain(cfg, open_lake(cfg.lake))["status"] == "ok"
    s = failure_groups(open_lake(cfg.lake)).groups[0].summary()
    assert (s["retried"], s["retried_processed"], s["resolved"]) == (1, 1, 1), s

"""The replay's plan as Arrow columns (``Planned``): where each selected row goes or why not, which
batch it is in, the counts, and the ``Row`` objects of one batch. No database: the destinations are
judged by a stand-in for the table check (the one thing here that needs PostgreSQL, tested with it in
``test_replay.py``)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from queuelake.config import from_dict
from queuelake.pipeline.replay.plan import Cut
from queuelake.pipeline.replay.planned import NO_ENDPOINT, NO_FAILED_QUEUE, Planned, rows_of
from queuelake.pipeline.replay.rows import EMPTY_KEYS
from queuelake.transport.table_refs import queue_ref

CONFIG = from_dict({"transport": {"connection": "postgresql://x@localhost/y"}, "lake": {"root": "/l"}}, env={})

# (failed_queue, is_failure, is_audit, processing_endpoint, queue) -> (kind, address, reason) without --to
CASES = [
    (("Billing", True, False, None, "error"), ("retry", "Billing", None)),
    (("Billing@machine", True, True, "Sales", "error"), ("retry", "Billing@machine", None)),
    ((None, True, False, "Sales", "error"), ("retry", None, NO_FAILED_QUEUE)),
    (("  ", True, False, None, "error"), ("retry", None, NO_FAILED_QUEUE)),
    (("", True, False, None, "error"), ("retry", None, NO_FAILED_QUEUE)),
    ((None, False, True, "Sales", "audit"), ("replay", "Sales", None)),
    ((None, False, True, None, "audit"), ("replay", None, NO_ENDPOINT)),
    ((None, False, True, "", "audit"), ("replay", None, NO_ENDPOINT)),
    ((None, False, False, "", "Orders"), ("replay", "Orders", None)),
    ((None, False, False, None, "Orders"), ("replay", "Orders", None)),
    (("Billing", None, None, "Sales", "Orders"), ("replay", "Sales", None)),  # nulls read as false
]


def keys(rows: list[tuple]) -> pa.Table:
    """Selected landed rows with the given routing columns, in order."""
    n = len(rows)
    data = {c: [None] * n for c in EMPTY_KEYS.names}
    for i, (failed_queue, failure, audit, endpoint, queue) in enumerate(rows):
        data["queue"][i] = queue
        data["seq"][i] = i
        data["id"][i] = f"id-{i}"
        data["outcome"][i] = "landed"
        data["message_id"][i] = f"m-{i}"
        data["message_type"][i] = "T" if i % 3 else None
        data["failed_queue"][i] = failed_queue
        data["processing_endpoint"][i] = endpoint
        data["is_failure"][i] = failure
        data["is_audit"][i] = audit
        data["file"][i] = f"part-{i // 4}.parquet"
        data["row_index"][i] = i % 4
    return pa.Table.from_pydict(data, schema=EMPTY_KEYS)


class Verdicts:
    """Stands in for ``rows.Verdicts``: an address is deliverable unless its name says otherwise."""

    def __init__(self) -> None:
        self.cache: dict[str, tuple] = {}
        self.asked: list[tuple[str, str]] = []

    def __call__(self, conn, address: str, kind: str):
        self.asked.append((address, kind))
        if address == "NoSuchQueue":
            verdict = (None, f"{address!r}: the table does not exist")
        else:
            verdict = (queue_ref(address, CONFIG.transport), None)
        self.cache[address] = verdict
        return verdict

    def say_drained(self) -> None:
        """No address here is drained."""

    def parsed(self, address: str):
        return queue_ref(address, CONFIG.transport)


def test_each_row_goes_where_the_per_row_rules_say() -> None:
    planned = Planned.of(keys([row for row, _ in CASES]), None)
    got = list(
        zip(
            planned.table.column("kind").to_pylist(),
            planned.table.column("address").to_pylist(),
            planned.table.column("reason").to_pylist(),
            strict=True,
        )
    )
    assert got == [expected for _, expected in CASES]


def test_an_audited_message_goes_to_the_queue_named_as_its_dotted_endpoint() -> None:
    """An endpoint named ``Sales.Orders`` receives from the table ``Sales.Orders`` in the default schema;
    its name taken as a PostgreSQL address split it into schema ``Sales`` and table ``Orders`` (a
    review: "queue table "Sales"."Orders" does not exist", or another endpoint's queue if it did)."""
    from queuelake.transport.table_refs import endpoint_queue_address

    rows = [(None, False, True, "Sales.Orders", "audit"), (None, False, True, "Billing", "audit")]
    rows += [(None, False, False, None, '"public"."Orders"')]
    planned = Planned.of(keys(rows), None, lambda e: endpoint_queue_address(e, CONFIG.transport))
    assert planned.table.column("address").to_pylist() == ['"Sales.Orders"', "Billing", '"public"."Orders"']
    [dotted, plain, _] = [queue_ref(a, CONFIG.transport) for a in planned.table.column("address").to_pylist()]
    assert (dotted.address.schema, dotted.address.table) == ("public", "Sales.Orders")
    assert (plain.address.schema, plain.address.table) == ("public", "Billing")
    sqlserver = from_dict(
        {
            "transport": {"connection": "Driver=x;Server=y", "dialect": "sqlserver", "driver": "pyodbc"},
            "lake": {"root": "/l"},
        },
        env={},
    )
    assert endpoint_queue_address("Sales.Orders", sqlserver.transport) == "Sales.Orders"  # its table runs to the @


def test_to_sends_every_row_there() -> None:
    planned = Planned.of(keys([row for row, _ in CASES]), "TestEndpoint")
    failures = [bool(row[1]) for row, _ in CASES]
    assert planned.table.column("kind").to_pylist() == ["redirect" if f else "replay" for f in failures]
    assert set(planned.table.column("address").to_pylist()) == {"TestEndpoint"}
    assert planned.table.column("reason").null_count == len(CASES)


def test_destinations_are_judged_once_each_and_batches_hold_only_what_is_sent() -> None:
    rows = [("Billing", True, False, None, "error")] * 5 + [("NoSuchQueue", True, False, None, "error")] * 2
    rows += [(None, True, False, None, "error"), (None, False, False, None, "Orders")]
    rows += [("Shipping", True, False, None, "error")] * 3
    planned = Planned.of(keys(rows), None)
    verdicts = Verdicts()
    planned.resolve(None, verdicts)  # type: ignore[arg-type]
    # one verdict per distinct address, named by its first row's kind
    assert sorted(verdicts.asked) == [
        ("Billing", "retry"),
        ("NoSuchQueue", "retry"),
        ("Orders", "replay"),
        ("Shipping", "retry"),
    ]
    reasons = planned.table.column("reason").to_pylist()
    assert reasons[5] == reasons[6] == "'NoSuchQueue': the table does not exist"
    assert reasons[7] == NO_FAILED_QUEUE and reasons[8] is None
    assert planned.unsendable().column("seq").to_pylist() == [5, 6, 7]
    billing, shipping = '"public"."Billing"', '"public"."Shipping"'
    assert planned.counts()[0] == {billing: 5, shipping: 3, '"public"."Orders"': 1}

    wanted = {
        ("error", 0, "id-0"),
        ("error", 9, None),
        ("error", 11, "id-11"),
        ("error", 10, "id-9"),
        ("elsewhere", 1, None),
    }
    assert planned.positions_of(wanted) == {  # a row id tells rows of one (queue, seq) apart; None: any
        ("error", 0, "id-0"): [0],
        ("error", 9, None): [9],
        ("error", 11, "id-11"): [11],
    }
    assert [Cut(12, 4).batch_of(p) for p in (0, 9, 11)] == [0, 2, 2]
    assert [Cut(12, 4, canary=2).batch_of(p) for p in (0, 1, 2, 5, 6, 11)] == [0, 0, 1, 1, 2, 3]
    assert Cut(12, 4, canary=2).batches == 4 and Cut(2, 4, canary=2).batches == 1 and Cut(0, 4, 2).batches == 0
    planned.exclude({("Orders", 8, "id-8"), ("error", 10, None)})
    destinations, types = planned.counts()
    assert destinations == {billing: 5, shipping: 2}
    assert types == {billing: {"T": 3, "(unknown)": 2}, shipping: {"T": 1, "(unknown)": 1}}

    batches = [planned.batch(k, Cut(12, 4)) for k in range(3)]
    assert [[r.seq for r in b] for b in batches] == [[0, 1, 2, 3], [4], [9, 11]]
    first = batches[0][0]
    assert (first.queue, first.id, first.message_id, first.kind, first.address) == (
        "error",
        "id-0",
        "m-0",
        "retry",
        "Billing",
    )
    assert (first.file, first.index, first.target, first.reason) == (
        "part-0.parquet",
        0,
        planned.targets[billing],
        None,
    )
    # a Spark task's share: compact Arrow that turns into the same rows
    assert rows_of(planned.slice(2, Cut(12, 4)), planned.targets) == batches[2]

    # what a run that sent a batch sent: to NoSuchQueue too (dropped since, not recorded skipped: sent
    # while it was there), not what was recorded skipped (seq 8, 10) nor what has no destination (seq 7)
    sent = [planned.sent(k, Cut(12, 4)) for k in range(3)]
    assert [part.column("seq").to_pylist() for part in sent] == [[0, 1, 2, 3], [4, 5, 6], [9, 11]]
    assert sent[1].column("target").to_pylist() == [billing, '"public"."NoSuchQueue"', '"public"."NoSuchQueue"']


@pytest.mark.parametrize("to", [None, "TestEndpoint"])
def test_an_empty_selection_plans_nothing(to: str | None) -> None:
    planned = Planned.of(EMPTY_KEYS.empty_table(), to)
    planned.resolve(None, Verdicts())  # type: ignore[arg-type]
    assert planned.num_rows == 0 and planned.counts() == ({}, {}) and planned.batch(0, Cut(0, 10)) == []


def test_a_header_present_but_empty_is_said_to_be_empty() -> None:
    """An empty FailedQ or ProcessingEndpoint is skipped with the reason of a missing one: the reason
    names both cases (it said "no NServiceBus.FailedQ header" of a header that was there, a review)."""
    assert "or an empty one" in NO_FAILED_QUEUE and "or with an empty one" in NO_ENDPOINT

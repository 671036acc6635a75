"""The grouping's conversions of a batch to Python values give what Arrow's own would: the times (built
from the epoch, not by ``to_pylist``), the shared texts, and the fingerprints worked out once per text."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from queuelake.lake import table_entry
from queuelake.pipeline.failures import groups
from queuelake.pipeline.failures.fingerprint import fingerprint, fingerprints

EDGES = [
    dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc),
    dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc),
    dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc),
    dt.datetime(2026, 12, 2, 5, 1, 2, 345678, tzinfo=dt.timezone.utc),
    dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc),
    None,
]


def test_utc_times_come_out_as_arrow_gives_them_at_the_edges_of_their_type() -> None:
    column = pa.array(EDGES, table_entry.UTC_TS)
    got = groups._values(column)
    want = column.to_pylist()
    assert got == want
    assert [None if v is None else (v.isoformat(), v.tzname()) for v in got] == [
        None if v is None else (v.isoformat(), v.tzname()) for v in want
    ]


def test_other_columns_are_arrows_own_values() -> None:
    naive = pa.array([dt.datetime(2026, 1, 1), None], pa.timestamp("us"))
    assert groups._values(naive) == naive.to_pylist()
    assert groups._values(pa.array([1, None, 3], pa.int64())) == [1, None, 3]


def test_shared_texts_keep_values_and_nulls_and_share_one_string_each() -> None:
    shared: dict[str, str] = {}
    first = groups._shared(pa.array(["Billing", None, "Bill" + "ing", "Sales"]), shared)
    second = groups._shared(pa.array(["Sa" + "les", None]), shared)
    assert first == ["Billing", None, "Billing", "Sales"] and second == ["Sales", None]
    assert first[0] is first[2] and second[0] is first[3]


def test_fingerprints_are_each_texts_fingerprint() -> None:
    stacks = [
        "System.Exception: order 1\n   at Shop.Handler.Handle() in C:\\b\\Handler.cs:line 12",
        None,
        "System.Exception: order 2\n   at Shop.Handler.Handle() in D:\\other\\Handler.cs:line 40",
        "System.Exception: order 1\n   at Shop.Handler.Handle() in C:\\b\\Handler.cs:line 12",
        "",
        "no frames at all",
    ]
    assert fingerprints(stacks) == [fingerprint(s) for s in stacks]
    assert len(set(fingerprints(stacks)[:4])) == 2  # the build's path and line do not count; None has no frames

"""Replay's --where evaluated without Spark selects exactly what Spark selects.

The journal here is written with tiny row groups and values at the edges of their types (nulls, the
first and last instants, text beyond ASCII, text that sorts around the literals), so that row groups
are skipped by their statistics and row indexes cross row-group bounds. Every predicate the Arrow
path takes is also run through Spark, and the two key sets (queue, seq, file, row index, is_failure,
is_audit) must be equal; what the Arrow path must leave to Spark is checked to come back as None.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import WriterProperties, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from queuelake.config import from_dict
from queuelake.lake import record_tables
from queuelake.lake.engines import journal_engine, open_lake
from queuelake.pipeline.replay.arrow_predicate import arrow_predicate
from queuelake.pipeline.replay.plan import ReplayOptions
from queuelake.pipeline.replay.selection import Selection

UTC = dt.timezone.utc
FIRST = dt.datetime(1, 1, 1, tzinfo=UTC)
LAST = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
TIMES = [
    None,
    FIRST,
    dt.datetime(2026, 10, 31, 23, 59, 59, 999999, tzinfo=UTC),
    dt.datetime(2026, 11, 1, tzinfo=UTC),
    dt.datetime(2026, 11, 1, 8, 30, tzinfo=UTC),
    LAST,
]
TEXTS = [None, "", "A", "System.TimeoutException", "System.Timeout", "Zz", "Ünïcödé", "a%b_c", "Billing"]
QUEUES = ["audit", "error", "Billing"]


def journal_rows(n: int) -> pa.Table:
    rows = []
    for i in range(n):
        rows.append(
            {
                "queue": QUEUES[i % len(QUEUES)],
                "seq": i * 7 % 50 - 3,
                "id": f"id-{i:04d}",
                "batch_id": "b",
                "drained_at": dt.datetime(2026, 11, 2, tzinfo=UTC),
                "outcome": "landed" if i % 5 else "expired",
                "exception_type": TEXTS[i % len(TEXTS)],
                "failed_queue": TEXTS[(i // 2) % len(TEXTS)],
                "message_type": TEXTS[(i // 3) % len(TEXTS)],
                "time_of_failure": TIMES[i % len(TIMES)],
                "processing_started": TIMES[(i // 2) % len(TIMES)],
                "expires": TIMES[(i // 5) % len(TIMES)],
            }
        )
    return pa.Table.from_pylist(rows, schema=record_tables.MESSAGES.schema)


@pytest.fixture(scope="module")
def selection(tmp_path_factory: pytest.TempPathFactory, spark) -> Selection:
    root = tmp_path_factory.mktemp("lake")
    cfg = from_dict(
        {
            "transport": {"connection": "postgresql://nobody@localhost:1/none"},
            "lake": {"root": str(root), "engine": "delta-rs"},
            "drain": {"queues": ["error"]},
        },
        env={},
    )
    small = WriterProperties(max_row_group_size=4, write_batch_size=4)
    data = journal_rows(120)
    for start in range(0, 120, 40):  # three files of ten row groups each
        write_deltalake(str(Path(root) / "messages"), data.slice(start, 40), mode="append", writer_properties=small)
    return Selection(journal_engine(open_lake(cfg.lake, spark)), ReplayOptions(predicate="true"), spark, None, "UTC")


def both(selection: Selection, predicate: str) -> tuple[list[tuple], list[tuple]]:
    """(Arrow's keys, Spark's keys), each as sorted tuples with the file named by its base name."""
    from queuelake.pipeline.replay.arrow_selection import select_keys

    version = selection.journal.table_version("messages")
    assert version is not None
    schema = selection.journal.schema("messages", version)
    translated = arrow_predicate(predicate, schema)
    assert translated is not None, predicate
    arrow, _ = select_keys(selection.journal_files(version), schema, translated)
    selection.options = ReplayOptions(predicate=predicate)
    spark = selection.select_in_spark(version)

    def rows(t: pa.Table) -> list[tuple]:
        out = []
        for r in t.to_pylist():
            r["file"] = r["file"].rsplit("/", 1)[-1]
            out.append(tuple(r[c] for c in t.column_names))
        return sorted(out, key=repr)

    return rows(arrow), rows(spark)


PREDICATES = [
    "true",
    "false",
    "exception_type = 'System.TimeoutException'",
    "'System.TimeoutException' = exception_type",
    "`Exception_Type` = 'System.TimeoutException'",
    "exception_type != 'A'",
    "exception_type <> ''",
    "NOT exception_type = 'A'",
    "exception_type IN ('A', 'Zz', 'nothing')",
    "exception_type NOT IN ('A', 'Zz')",
    "exception_type LIKE 'System.%'",
    "exception_type LIKE '_z'",
    "message_type LIKE 'a%b_c'",
    "exception_type IS NULL",
    "failed_queue IS NOT NULL AND NOT (queue = 'audit')",
    "exception_type > 'System.Timeout' AND exception_type < 'Zz'",
    "message_type >= 'Ünïcödé'",
    "seq BETWEEN 2 AND 5",
    "seq > 40 OR queue = 'error'",
    "5 < seq",
    "seq = -3",
    "seq < 9223372036854775807",  # bigint's ends, 19 digits: Spark reads them as bigint too
    "seq > -9223372036854775808 AND seq <> 9223372036854775807",
    "time_of_failure >= '2026-11-01'",
    "time_of_failure < '2026-11-01T08:30:00Z'",
    "time_of_failure > '2026-11-01 09:29:59+01:00'",
    "time_of_failure >= '0001-01-01'",
    "time_of_failure = '0001-01-01T00:00:00Z'",
    "expires >= '9999-12-31T23:59:59.999999Z'",
    "expires BETWEEN '2026-10-31T23:59:59.999999' AND '2026-11-01 08:30'",
    "processing_started IS NOT NULL OR time_of_failure IS NULL",
    "outcome = 'landed' AND (queue = 'Billing' OR queue = 'audit')",
    "queue = 'nothing at all'",
]


@pytest.mark.parametrize("predicate", PREDICATES)
def test_arrow_selects_what_spark_selects(selection: Selection, predicate: str) -> None:
    arrow, spark = both(selection, predicate)
    assert arrow == spark


ATOMS = [p for p in PREDICATES if p not in ("true", "false")]
TREES = st.recursive(
    st.sampled_from(ATOMS), lambda inner: st.tuples(st.sampled_from(["AND", "OR", "NOT"]), inner, inner), max_leaves=4
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.recursive(
        st.sampled_from(ATOMS),
        lambda inner: st.tuples(st.sampled_from(["AND", "OR", "NOT"]), inner, inner),
        max_leaves=4,
    )
)
def test_combinations_select_alike(selection: Selection, tree) -> None:
    def text(node) -> str:
        if isinstance(node, str):
            return f"({node})"
        op, a, b = node
        return f"(NOT {text(a)})" if op == "NOT" else f"({text(a)} {op} {text(b)})"

    arrow, spark = both(selection, text(tree))
    assert arrow == spark


@pytest.mark.parametrize(
    "predicate",
    [
        "lower(queue) = 'error'",  # a function
        "headers['NServiceBus.MessageId'] = 'x'",  # the map
        "seq = '5'",  # text as a number
        "exception_type = 5",  # a number as text
        "seq = 1.5",  # not a whole number
        "seq + 1 > 2",  # arithmetic
        "exception_type = 'a\\'b'",  # Spark reads escapes in text
        "exception_type = 'it''s'",  # Spark joins adjacent literals
        "time_of_failure > '2026-11-1'",  # a form of time text only Spark reads
        "time_of_failure > 'yesterday'",
        "exception_type <=> 'A'",  # null-safe equality
        "exception_type ILIKE 'a%'",
        "no_such_column = 'x'",  # Spark names the missing column
        "messages.queue = 'error'",
        "body IS NULL",  # binary
        "exception_type",  # not a boolean
    ],
)
def test_what_only_spark_reads_is_left_to_it(predicate: str) -> None:
    assert arrow_predicate(predicate, record_tables.MESSAGES.schema) is None


def test_seq_takes_every_bigint() -> None:
    """SQL Server's RowVersion is a bigint that reaches 19 digits; 18 were the most taken, and ``erase``
    refused ``seq = <19 digits>`` as a predicate it could not translate."""
    schema = record_tables.MESSAGES.schema
    table = pa.table({"seq": pa.array([-(2**63), 5, 2**63 - 2, 2**63 - 1], pa.int64())})
    for predicate, want in (
        ("seq = 9223372036854775807", [2**63 - 1]),
        ("seq >= 1234567890123456789", [2**63 - 2, 2**63 - 1]),
        ("seq = -9223372036854775808", [-(2**63)]),
    ):
        translated = arrow_predicate(predicate, schema)
        assert translated is not None, predicate
        assert table.filter(translated.expression).column("seq").to_pylist() == want, predicate
    assert arrow_predicate("seq = 9223372036854775808", schema) is None  # past bigint: Spark's decimal
    assert arrow_predicate("seq = 12345678901234567890", schema) is None


def test_a_time_without_zone_is_read_in_the_session_zone() -> None:
    translated = arrow_predicate("time_of_failure >= '2026-11-01 09:00'", record_tables.MESSAGES.schema, "Europe/Paris")
    assert translated is not None
    assert "2026-11-01 08:00:00" in str(translated.expression)
    assert arrow_predicate("time_of_failure >= '2026-11-01 09:00'", record_tables.MESSAGES.schema, "+01:00") is None


def test_statistics_skip_row_groups(selection: Selection) -> None:
    """A predicate no row group's bounds admit reads no row group at all."""
    from queuelake.pipeline.replay.arrow_selection import select_keys

    version = selection.journal.table_version("messages")
    assert version is not None
    schema = selection.journal.schema("messages", version)
    for predicate, most in (("seq > 1000", 0), ("queue = 'nothing'", 0), ("seq BETWEEN 40 AND 46", 29)):
        translated = arrow_predicate(predicate, schema)
        assert translated is not None
        keys, scan = select_keys(selection.journal_files(version), schema, translated)
        assert scan.row_groups == 30 and scan.row_groups_read <= most, (predicate, scan)

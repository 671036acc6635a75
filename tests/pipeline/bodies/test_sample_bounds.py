"""What bounds the bodies stage's memory besides its slice's rows: the samples' bytes
(``schema_plan.sample_fractions``), Spark's batch sizes for large bodies (``batch_sizes``), and the
bodies' bytes read from the journal files' footers (``LakeFile.column_bytes``). A review's first backlog of 2.9 KB
bodies ran the default driver out of memory in its first slice."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from queuelake.lake.round_files import LakeFile
from queuelake.pipeline.bodies import batch_sizes, schema_plan

KB = 1024


def _sampled_bytes(strata: dict, sizes: dict, rows: int) -> float:
    fractions = schema_plan.sample_fractions(strata, sizes, rows)
    return sum(fractions[f"{n}|{v or ''}"] * sizes[(n, v)] for (n, v) in strata)


def test_samples_of_multi_kb_bodies_stay_within_the_byte_budget() -> None:
    # the review's slice: 12 types of about 41,000 rows each, 2.9 KB a body: 5,000 rows a type was 174 MB
    strata = {(f"T{i}", "1.0.0.0"): 41_000 for i in range(12)}
    sizes = {key: count * 2_900 for key, count in strata.items()}
    assert _sampled_bytes(strata, sizes, 5_000) <= schema_plan.SAMPLE_BYTES * 1.001
    fractions = schema_plan.sample_fractions(strata, sizes, 5_000)
    assert all(f * 41_000 > 1_000 for f in fractions.values())  # still a good many bodies each


def test_small_bodies_are_sampled_by_rows_as_before() -> None:
    strata = {("Small", None): 100_000, ("Few", "2.0.0.0"): 300}
    sizes = {("Small", None): 100_000 * 200, ("Few", "2.0.0.0"): 300 * 200}
    fractions = schema_plan.sample_fractions(strata, sizes, 5_000)
    assert fractions == {"Small|": 0.05, "Few|2.0.0.0": 1.0}


def test_a_type_of_huge_bodies_keeps_its_fewest_rows() -> None:
    strata = {("Docs", None): 10_000, **{(f"T{i}", None): 10_000 for i in range(99)}}
    sizes = {("Docs", None): 10_000 * 2_000_000, **{(f"T{i}", None): 10_000 * 1_000 for i in range(99)}}
    fractions = schema_plan.sample_fractions(strata, sizes, 5_000)
    assert round(fractions["Docs|"] * 10_000) == schema_plan.MIN_SAMPLE_ROWS


def test_spark_batches_hold_about_the_batch_bytes_for_large_bodies() -> None:
    assert batch_sizes.rows_per_batch(1 * KB, 4096) == 4096  # small bodies: Spark's own default
    assert batch_sizes.rows_per_batch(100 * KB, 4096) == batch_sizes.BATCH_BYTES // (100 * KB)
    assert batch_sizes.rows_per_batch(50 * 2**20, 10_000) == batch_sizes.FEWEST_ROWS
    assert batch_sizes.rows_per_batch(0, 10_000) == 10_000


def test_the_plan_reads_the_bodies_bytes_from_the_footers(tmp_path: Path) -> None:
    # a nested column before the body: the footer's leaf columns are not the table's columns
    table = pa.table(
        {
            "enclosed_message_types": pa.array([["A", "B"]] * 1000, pa.list_(pa.string())),
            "body": pa.array([b"%06d" % i + b"x" * 2994 for i in range(1000)], pa.binary()),
        }
    )
    pq.write_table(table, tmp_path / "f.parquet", row_group_size=300, compression="snappy")
    opened = LakeFile(pq.ParquetFile(tmp_path / "f.parquet"))
    assert opened.metadata.num_row_groups == 4
    assert 3_000_000 <= opened.column_bytes("body") < 3_100_000
    assert opened.column_bytes("no_such_column") == 0


def test_what_small_types_leave_of_the_budget_goes_to_the_large_one() -> None:
    """An even split left a large type 231 rows beside 99 small types that used a sliver of theirs."""
    strata = {("Big", None): 41_000, **{(f"T{i}", None): 50 for i in range(99)}}
    sizes = {("Big", None): 41_000 * 2_900, **{(f"T{i}", None): 50 * 500 for i in range(99)}}
    fractions = schema_plan.sample_fractions(strata, sizes, 5_000)
    assert all(fractions[f"T{i}|"] == 1.0 for i in range(99))  # every small body
    assert fractions["Big|"] * 41_000 >= 5_000 * 0.999  # its rows' bound, not a sliver of the bytes
    assert _sampled_bytes(strata, sizes, 5_000) <= schema_plan.SAMPLE_BYTES


def test_a_batch_setting_of_no_limit_is_bounded_by_bytes_too(monkeypatch) -> None:
    class Conf:
        def __init__(self) -> None:
            self.values = {"spark.sql.execution.arrow.maxRecordsPerBatch": "-1"}

        def get(self, key: str, default: object = None) -> object:
            return self.values.get(key, default)

        def set(self, key: str, value: str) -> None:
            self.values[key] = value

        def unset(self, key: str) -> None:
            self.values.pop(key, None)

    class Session:
        conf = Conf()

    session = Session()
    with batch_sizes.sized_for(session, 100 * KB) as changed:  # type: ignore[arg-type]
        assert changed["spark.sql.execution.arrow.maxRecordsPerBatch"] == batch_sizes.BATCH_BYTES // (100 * KB)
    assert session.conf.values == {"spark.sql.execution.arrow.maxRecordsPerBatch": "-1"}  # put back


def test_later_copies_keep_the_business_copy_and_never_lose_a_row_held_twice() -> None:
    import datetime as dt

    from queuelake.pipeline.bodies.select import later_copies

    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    keys = pa.table(
        {
            "message_id": ["m1", "m1", "m1", "m2", "m2", "m3"],
            "drained_at": [t0, t0, t0 + dt.timedelta(seconds=1), t0, t0, t0],
            "queue": ["audit", "Sales", "error", "Sales", "Sales", "Sales"],
            "seq": [7, 3, 9, 4, 4, 5],
            "id": ["a7", "s3", "e9", "s4", "s4", "s5"],
            "copy_rank": [1, 0, 2, 0, 0, 0],
        }
    )
    later = later_copies(keys)
    # m1: the business copy stays, its audit and error copies go; m2, held twice, is not dropped
    assert sorted(later.to_pylist(), key=lambda r: r["seq"]) == [
        {"queue": "audit", "seq": 7, "id": "a7"},
        {"queue": "error", "seq": 9, "id": "e9"},
    ]

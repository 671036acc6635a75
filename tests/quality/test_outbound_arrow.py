"""The Arrow pre-check of the outbound contract never passes a round that Spark's checks reject.

Publish skips its Spark validation when ``arrow_may_reject`` says no row can fail; so for any
table, Spark rejecting a row must imply the pre-check saying "may reject". And a clean round must
pass the pre-check, else the fast path would never be taken.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from queuelake.quality.outbound import arrow_may_reject, with_reasons

WHEN = dt.datetime(2026, 11, 23, tzinfo=dt.timezone.utc)
blanks = st.sampled_from(["", " ", "\t", "  x  ", "A.B, Asm", ";;", " ; ", "A.B, Asm;", "\xa0", " \u3000 ;", "\t;"])
row = st.fixed_dictionaries(
    {
        "key": st.one_of(st.none(), st.sampled_from(["k1", "k2", "k3", "k4", "k5", "k6"])),
        "message_type": st.one_of(st.none(), blanks),
        "intent": st.one_of(st.none(), st.sampled_from(["Send", "Publish", "send", "Reply", ""])),
        "destination": st.one_of(st.none(), blanks),
        "body": st.one_of(st.none(), st.sampled_from([b"", b"{}", b"x"])),
        "ttbr_ms": st.one_of(st.none(), st.sampled_from([-1, 0, 1, 60_000])),
        "deliver_at": st.one_of(st.none(), st.just(WHEN)),
    }
)
SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("message_type", pa.string()),
        ("intent", pa.string()),
        ("destination", pa.string()),
        ("body", pa.binary()),
        ("ttbr_ms", pa.int64()),
        ("deliver_at", pa.timestamp("us", tz="UTC")),
    ]
)


def write_files(folder: Path, rows: list[dict], drop: list[str], files: int = 2, statistics: bool = True) -> list[str]:
    """The rows split over ``files`` Parquet files (duplicate keys may sit in different files);
    ``statistics`` False: footers without column statistics (the pre-check must then read bodies)."""
    schema = pa.schema([f for f in SCHEMA if f.name not in drop])
    table = pa.Table.from_pylist([{k: v for k, v in r.items() if k not in drop} for r in rows], schema=schema)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    cut = len(rows) // files
    for i in range(files):
        part = table.slice(i * cut, cut if i < files - 1 else len(rows) - i * cut)
        path = folder / f"part-{i}.parquet"
        pq.write_table(part, path, write_statistics=statistics)
        paths.append(str(path))
    return paths


def spark_rejects(spark, paths: list[str]) -> int:
    from pyspark.sql import functions as F

    return with_reasons(spark.read.parquet(*paths)).where(F.size("reasons") > 0).count()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(row, min_size=2, max_size=10),
    drop=st.sampled_from([[], ["destination"], ["ttbr_ms"], ["deliver_at"], ["ttbr_ms", "deliver_at"]]),
    statistics=st.booleans(),
)
def test_precheck_flags_every_round_spark_rejects(spark, tmp_path_factory, rows, drop, statistics) -> None:
    paths = write_files(tmp_path_factory.mktemp("round"), rows, drop, statistics=statistics)
    if spark_rejects(spark, paths):
        assert arrow_may_reject(paths, pq.ParquetFile)


def clean_rows(n: int) -> list[dict]:
    return [
        {
            "key": f"k{i}",
            "message_type": "A.B, Asm",
            "intent": "Send" if i % 2 else "Publish",
            "destination": "Billing" if i % 2 else None,
            "body": b"{}",
            "ttbr_ms": 60_000 if i % 3 == 0 else None,
            "deliver_at": WHEN if i % 3 == 1 else None,
        }
        for i in range(n)
    ]


def test_clean_round_passes_and_each_fault_is_caught(spark, tmp_path: Path) -> None:
    rows = clean_rows(12)
    paths = write_files(tmp_path / "clean", rows, [])
    assert spark_rejects(spark, paths) == 0
    assert not arrow_may_reject(paths, pq.ParquetFile)
    faults = {
        "null key": {"key": None},
        "duplicate key across files": {"key": "k0"},
        "blank type": {"message_type": " "},
        "no type between the separators": {"message_type": " ; ;"},
        "bad intent": {"intent": "Reply"},
        "send without destination": {"intent": "Send", "destination": ""},
        "empty body": {"body": b""},
        "delay and ttbr": {"ttbr_ms": 5, "deliver_at": WHEN},
        "zero ttbr": {"ttbr_ms": 0},
    }
    faults["null body"] = {"body": None}
    for name, change in faults.items():
        bad = [dict(r) for r in rows]
        bad[-1].update(change)
        for statistics in (True, False):
            paths = write_files(tmp_path / f"{name.replace(' ', '_')}-{statistics}", bad, [], statistics=statistics)
            assert spark_rejects(spark, paths) >= 1, name  # a duplicate rejects both rows
            assert arrow_may_reject(paths, pq.ParquetFile), (name, statistics)


def test_bodies_are_read_only_where_the_footer_cannot_vouch_for_them(tmp_path: Path) -> None:
    """The bodies are most of a round's bytes. A row group whose body statistics show no null and a
    non-empty minimum cannot hold an empty or null body, so the pre-check reads only the narrow
    columns there; without statistics, or with an empty body among them, it reads the bodies."""
    read: list[list[str]] = []

    class Recording(pq.ParquetFile):
        def iter_batches(self, *args, columns=None, **kwargs):  # type: ignore[override]
            read.append(list(columns or []))
            return super().iter_batches(*args, columns=columns, **kwargs)

    clean = write_files(tmp_path / "clean", clean_rows(12), [])
    assert not arrow_may_reject(clean, Recording)
    assert read and all("body" not in columns and "key" in columns for columns in read)

    read.clear()
    bare = write_files(tmp_path / "bare", clean_rows(12), [], statistics=False)
    assert not arrow_may_reject(bare, Recording)
    assert read and all("body" in columns for columns in read)

    read.clear()
    empty = [dict(r) for r in clean_rows(12)]
    empty[-1]["body"] = b""
    assert arrow_may_reject(write_files(tmp_path / "empty", empty, []), Recording)
    assert "body" in read[-1]  # the file holding the empty body was read with its bodies


def test_a_round_above_the_key_cap_is_left_to_spark_without_reading_it(tmp_path: Path) -> None:
    """The pre-check holds a round's keys for the duplicate check; a round larger than its cap goes
    to Spark's checks (which spill) before a row is read, so the driver's memory is bounded by the
    cap, not by the round. Counted from the files' footers: a file that is not Parquet at all past
    the cap is never opened."""
    paths = write_files(tmp_path / "clean", clean_rows(12), [], files=3)  # 4 rows per file
    assert not arrow_may_reject(paths, pq.ParquetFile, max_rows=12)
    assert arrow_may_reject(paths, pq.ParquetFile, max_rows=11)

    opened: list[str] = []

    def counting(uri: str) -> pq.ParquetFile:
        opened.append(uri)
        return pq.ParquetFile(uri)

    not_parquet = tmp_path / "not-parquet"
    not_parquet.write_bytes(b"never read")
    assert arrow_may_reject([*paths, str(not_parquet)], counting, max_rows=10)
    assert opened == paths  # the third file's footer tipped it over; nothing after was opened


def test_whitespace_of_every_kind_names_no_type(spark, tmp_path: Path) -> None:
    """Spark's ``trim`` takes spaces only: a tab, a no-break space or an ideographic space passed the check
    and went out as an empty EnclosedMessageTypes once publish tidied it (a review)."""
    from pyspark.sql import functions as F

    odd = ["\t", "\t;", "\xa0", " \u3000 ;", "\x85", "\x0b;"]
    rows = clean_rows(len(odd))
    for row_, message_type in zip(rows, odd, strict=True):
        row_["message_type"] = message_type
    paths = write_files(tmp_path / "odd", rows, [], files=1)
    reasons = with_reasons(spark.read.parquet(*paths)).select(F.explode("reasons")).collect()
    assert [r[0] for r in reasons] == ["message_type is empty"] * len(odd), reasons
    assert arrow_may_reject(paths, pq.ParquetFile)

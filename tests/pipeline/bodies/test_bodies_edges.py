"""Values at the edges of their column's type, through the real drain, Spark and a delta-rs table."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from queuelake.lake.engines import open_lake
from queuelake.pipeline.bodies import parse
from queuelake.pipeline.bodies import run as bodies_run
from queuelake.transport import db, installer

from tests.helpers.bodies import config, rows, send
from tests.helpers.bodies_corpus import corpus as c
from tests.helpers.stages import drain

UTC = dt.timezone.utc


@pytest.mark.slow
def test_times_outside_what_dotnet_and_pyarrow_hold_are_null_and_recorded(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """``0001-01-01T00:00:00+05:00`` is year 0 in UTC and ``9999-12-31T23:59:59-05:00`` year 10000:
    Spark parsed and stored them, and then every pyarrow read of the table failed ("year 0 is out of
    range"), as would an endpoint parsing what publish sent of them (a review). Such a field is null
    and its row recorded as partly parsed; the first and last instants .NET holds are kept."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", "delta-rs")
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    kind = c.aqn("Edge.Contracts.Dates", "Edge.Contracts", "1.0.0.0")
    bodies = [
        {"N": 1, "At": "0001-01-01T00:00:00Z", "Other": "2024-05-01T13:45:10Z"},
        {"N": 2, "At": "0001-01-01T00:00:00+05:00", "Other": "2024-05-01T13:45:10Z"},
        {"N": 3, "At": "9999-12-31T23:59:59.999999Z", "Other": "9999-12-31T23:59:59-05:00"},
    ]
    send(cfg, "Sales", [c.message(kind, json.dumps(b).encode(), "application/json", i) for i, b in enumerate(bodies)])
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["status"] == "ok"
    out = bodies_run.bodies(cfg, spark, lake)
    assert out["status"] == "ok" and out["unparsed"] == 2, out
    got = sorted(rows(lake, "body_edge_contracts_dates"), key=lambda r: r["N"])  # pyarrow reads every row
    assert [(r["N"], r["At"], r["Other"]) for r in got] == [
        (1, dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(2024, 5, 1, 13, 45, 10, tzinfo=UTC)),
        (2, None, dt.datetime(2024, 5, 1, 13, 45, 10, tzinfo=UTC)),
        (3, dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), None),
    ]
    recorded = lake.read_arrow("body_unparsed").to_pylist()
    # each names its field (one text for every field before: a review)
    assert sorted(r["reason"] for r in recorded) == [parse.out_of_range("At"), parse.out_of_range("Other")], recorded


@pytest.mark.slow
def test_a_value_that_does_not_fit_its_column_names_its_field(spark) -> None:
    """A partly parsed row's reason was one text for every field (a review): "a value does not fit its
    column's type". It names the field now, a nested one by its path, a list by its name; a name no
    JSON path can spell keeps the text that names none. The row is still written, the field null."""
    from pyspark.sql.types import ArrayType, LongType, StructField, StructType

    schema = StructType(
        [
            StructField("N", LongType()),
            StructField("Total", LongType()),
            StructField("Meta", StructType([StructField("X", LongType()), StructField("it's", LongType())])),
            StructField("L", ArrayType(LongType())),
        ]
    )
    bodies = [
        {"N": 1, "Total": "abc"},
        {"N": 2, "Meta": {"X": "q"}},
        {"N": 3, "Meta": "text"},
        {"N": 4, "L": [1, "z"]},
        {"N": 5, "Total": None, "Meta": {"it's": "bad"}},
        {"N": 6, "Total": 5, "Meta": {"X": 1}},
    ]
    rows = spark.createDataFrame(
        [(json.dumps(b), "json", None) for b in bodies], "text string, format string, reason string"
    )
    got = parse.parsed(rows, schema, xml=False).select("p.N", "verdict", "written").orderBy("N").collect()
    assert [(r["verdict"], r["written"]) for r in got] == [
        (parse.does_not_fit("Total"), True),
        (parse.does_not_fit("Meta.X"), True),
        (parse.does_not_fit("Meta"), True),
        (parse.does_not_fit("L"), True),
        (parse.PARTLY, True),
        (None, True),
    ], got


@pytest.mark.slow
def test_a_string_past_the_json_parsers_default_limit_is_read(spark) -> None:
    """A valid body holding a string of more than 20,000,000 characters (Jackson's default limit) is read,
    not recorded as malformed JSON: the journal holds it whole (a review found a 50 MB body so)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("OrderId", StringType()), StructField("Notes", StringType())])
    text = json.dumps({"OrderId": "o-1", "Notes": "y" * 21_000_000})
    rows = spark.createDataFrame([(text, "json", None)], "text string, format string, reason string")
    got = parse.parsed(rows, schema, xml=False).select("p.OrderId", F.length("p.Notes").alias("n"), "verdict").first()
    assert (got["OrderId"], got["n"], got["verdict"]) == ("o-1", 21_000_000, None)

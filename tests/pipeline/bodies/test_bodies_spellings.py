"""One message type sent in PascalCase (Newtonsoft's default) and camelCase (System.Text.Json's web
defaults): one column per name, and every row's values in it.

Why: the schema merges names that differ in case only into one column, spelled as first seen, and Spark's
``from_json`` matches names exactly, so every camelCase row was written with its fields null, and
counted as parsed (found by a review). A field is now read under each spelling the samples showed, and
filled from the first the body holds. Real drain, Spark and Delta in the slow test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import MapType, StringType, StructField, StructType
from queuelake.lake.engines import open_lake
from queuelake.pipeline.bodies import evolve, parse
from queuelake.pipeline.bodies import run as bodies_run
from queuelake.pipeline.bodies.infer import key_spellings
from queuelake.pipeline.where import keys
from queuelake.transport import db, installer

from tests.helpers.bodies import config, rows, send
from tests.helpers.bodies_corpus import corpus as c
from tests.helpers.stages import drain

STOCK = "body_stock_contracts_stockcounted"
PASCAL = {"Sku": "P-1", "Count": 3, "Lines": [{"Bin": "A", "Qty": 1}]}
CAMEL = {"sku": "c-1", "count": 4, "lines": [{"bin": "B", "qty": 2}]}


def test_the_names_the_samples_spelled_more_than_one_way_are_read_under_each_spelling() -> None:
    spellings: dict[str, set[str]] = {}
    data_keys: set[str] = set()
    key_spellings([json.dumps(PASCAL), json.dumps(CAMEL), "not json"], spellings, data_keys)
    assert evolve.spelled(spellings) == {
        "bin": ["Bin", "bin"],
        "count": ["Count", "count"],
        "lines": ["Lines", "lines"],
        "qty": ["Qty", "qty"],
        "sku": ["Sku", "sku"],
    }
    # a dictionary's keys are data, never a field's spellings: they are read as sent
    keyed, data = {}, set()  # type: ignore[var-annotated]
    key_spellings(
        [json.dumps({**CAMEL, "Scores": {"0f8fad5b-d9cb-469f-a165-70867728950e": 1, "Count": 2}})], keyed, data
    )
    assert "count" in data and keyed["count"] == {"count"}
    # so are a key of a map the table holds, even one that looks like a name
    props = StructType([StructField("Sku", StringType()), StructField("Props", MapType(StringType(), StringType()))])
    seen, data = {}, set()
    key_spellings([json.dumps({**CAMEL, "Props": {"Count": "x"}}), json.dumps(PASCAL)], seen, data, props)
    assert "count" in data and seen["count"] == {"Count", "count"}  # PASCAL's own Count, not the map's


@pytest.mark.slow
def test_pascal_and_camel_case_senders_fill_the_same_columns(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    cfg = config(fresh_pg_uri, tmp_path / "lake", "delta-rs")
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    bodies = [PASCAL, CAMEL, {**CAMEL, "sku": "c-2"}, {**PASCAL, "Sku": "P-2"}]
    send(
        cfg, "Sales", [c.message(c.STOCK, json.dumps(b).encode(), "application/json", i) for i, b in enumerate(bodies)]
    )
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["status"] == "ok"
    out = bodies_run.bodies(cfg, spark, lake)
    assert out["status"] == "ok" and out["unparsed"] == 0, out
    written = sorted((r["Sku"], r["Count"], [dict(x) for x in r["Lines"]]) for r in rows(lake, STOCK))
    assert written == [
        ("P-1", 3, [{"Bin": "A", "Qty": 1}]),
        ("P-2", 3, [{"Bin": "A", "Qty": 1}]),
        ("c-1", 4, [{"Bin": "B", "Qty": 2}]),
        ("c-2", 4, [{"Bin": "B", "Qty": 2}]),
    ]
    # a business key asked in either spelling finds the camelCase sender's message
    for field in ("Sku", "sku", "SKU"):
        assert len(keys.find_key(lake, field, "c-2", 10).message_ids) == 1, field
    assert keys.body_matches(json.dumps(CAMEL).encode(), "Lines.Qty", "2")


@pytest.mark.slow
def test_a_few_camel_case_bodies_among_many_are_sampled_and_typed(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """Three camelCase bodies among 200 PascalCase ones, with a sample of 10: none was sampled, their
    spelling was not respelled, and their rows were written with every field null (found by a review).
    The samples now hold a body of each casing of each type version."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", "delta-rs", sample_rows=10)
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    bodies = [{**PASCAL, "Sku": f"P-{i}"} for i in range(200)] + [{**CAMEL, "sku": f"c-{i}"} for i in range(3)]
    messages = [c.message(c.STOCK, json.dumps(b).encode(), "application/json", i) for i, b in enumerate(bodies)]
    send(cfg, "Sales", messages)
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["status"] == "ok"
    out = bodies_run.bodies(cfg, spark, lake)
    assert out["status"] == "ok" and out["rows_written"] == 203, out
    typed = rows(lake, STOCK)
    assert [r["Sku"] for r in typed if r["Sku"] is None or r["Count"] is None] == []
    assert sorted(r["Sku"] for r in typed if r["Count"] == 4) == ["c-0", "c-1", "c-2"]


@pytest.mark.slow
def test_a_type_whose_table_cannot_be_read_fails_alone(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """A typed table another writer lifted past what this reader supports (a protocol feature it does
    not know): its schema read raised out of ``bodies`` before any type was written, the healthy types
    were not typed and ``run`` stopped (found by a review). It now fails that type alone."""

    cfg = config(fresh_pg_uri, tmp_path / "lake", "delta-rs")
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    lake = open_lake(cfg.lake, spark)
    other = c.aqn("Other.Contracts.Counted", "Other.Contracts", "1.0.0.0")

    def both(first: int) -> None:
        messages = [c.message(c.STOCK, json.dumps(PASCAL).encode(), "application/json", first)]
        messages.append(c.message(other, b'{"N": 1}', "application/json", first + 1))
        send(cfg, "Sales", messages)
        assert drain(cfg, lake)["status"] == "ok"

    both(0)
    assert bodies_run.bodies(cfg, spark, lake)["status"] == "ok"
    log = tmp_path / "lake" / STOCK / "_delta_log"
    feature = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["futureFeature"]}
    feature["writerFeatures"] = ["futureFeature"]
    lifted = log / f"{len(list(log.glob('*.json'))):020d}.json"
    lifted.write_text(json.dumps({"protocol": feature}) + "\n" + json.dumps({"commitInfo": {"operation": "X"}}) + "\n")
    both(10)
    out = bodies_run.bodies(cfg, spark, lake)
    assert out["status"] == "failed", out
    by_table = {t["table"]: t for t in out["tables"]}
    assert by_table[STOCK]["status"] == "failed" and "futureFeature" in by_table[STOCK]["error"]
    assert by_table["body_other_contracts_counted"]["status"] == "ok"
    assert len(rows(lake, "body_other_contracts_counted")) == 2  # the healthy type typed
    lifted.unlink()  # the other writer's change undone: the next run types what was left, once
    assert bodies_run.bodies(cfg, spark, lake)["status"] == "ok"
    assert len(rows(lake, STOCK)) == 2 and len(rows(lake, "body_other_contracts_counted")) == 2


@pytest.mark.slow
def test_property_names_spark_reads_specially_are_typed_like_any_other(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """A property named with a backquote, and one named ``_corrupt_record`` (the name the parse gave its
    own column for unparsable bodies), through a change of a column's type (the table rewritten). Before,
    the first failed its type at the rewrite and at every read of the table after (the name was quoted
    with its backquote not doubled); the second failed its type's every increment (two fields of one
    name): both reviews. A transform reading typed tables ran the failing type's catch-up and failed too."""
    day, lake = _typed_days(fresh_pg_uri, tmp_path, spark, "Edge.Contracts.OddKeys")
    table = "body_edge_contracts_oddkeys"

    day(0, {"`q`": 5, "_corrupt_record": "mine", "Normal": 1})
    day(10, {"`q`": 6, "_corrupt_record": "yours", "Normal": "text now"})  # Normal becomes text: a rewrite
    written = sorted((r["`q`"], r["body__corrupt_record"], r["Normal"]) for r in rows(lake, table))  # column_of
    assert written == [(5, "mine", "1"), (6, "yours", "text now")]


@settings(max_examples=300, deadline=None)
@given(key=st.text(alphabet=st.sampled_from(list(" ,;{}()=\t\n_x0123456789aAfFzZé\x00")), max_size=14))
def test_every_body_field_has_a_column_that_gives_it_back(key: str) -> None:
    """A column for every field name, none holding a character Delta refuses without column mapping,
    and the field read back from it exactly (two fields never share a column)."""
    column = parse.column_of(key)
    assert column and not parse.BAD_NAME.search(column)
    assert parse.key_of(column) == key


@pytest.mark.slow
def test_root_properties_no_column_can_be_named_after_are_typed_under_encoded_names(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """The body's own properties named with a space, `,;{}()=`, a tab, a newline, or no name at all were
    dropped with no record (nested ones are map keys; a review). Each is now a column named as
    ``XmlConvert.EncodeName`` names it, through a rewrite of the table, read back by Spark too."""
    day, lake = _typed_days(fresh_pg_uri, tmp_path, spark, "Edge.Contracts.SpacedKeys")
    table = "body_edge_contracts_spacedkeys"

    odd_keys = {"Order Id": 5, "": "none", "a,b": 1, "k=v": "x", "t\tab": True, "(p)": 2.5, "a_x0020_b": "lit"}
    day(0, {**odd_keys, "Normal": 1})
    day(10, {**odd_keys, "Order Id": 6, "Normal": "text now"})  # Normal becomes text: a rewrite
    got = rows(lake, table)
    expected = {
        "Order_x0020_Id": [5, 6],
        "_x0000_": ["none", "none"],
        "a_x002C_b": [1, 1],
        "k_x003D_v": ["x", "x"],
        "t_x0009_ab": [True, True],
        "_x0028_p_x0029_": [2.5, 2.5],
        "a_x005F_x0020_b": ["lit", "lit"],
        "Normal": ["1", "text now"],
    }
    for column, values in expected.items():
        assert sorted(r[column] for r in got) == values, (column, got[0].keys())
    read = lake.read(table).select("Order_x0020_Id", "_x0000_")  # Spark's read of the table
    assert sorted(tuple(r) for r in read.collect()) == [(5, "none"), (6, "none")]


def test_a_body_whose_keys_need_encoding_still_has_its_keys_respelled() -> None:
    """The body's own keys are columns even when one needs encoding (a space): such a key made every
    key of the body a dictionary's, never respelled, and a camelCase sender's values were lost."""
    into: dict[str, set[str]] = {}
    data_keys: set[str] = set()
    key_spellings(['{"Order Id": 1, "Total": 5, "Lines": {"a b": 1}}', '{"order id": 2, "total": 6}'], into, data_keys)
    assert into["order id"] == {"Order Id", "order id"} and into["total"] == {"Total", "total"}
    assert data_keys == {"a b"}  # a nested object with such a key is still a dictionary


@pytest.mark.slow
def test_camel_case_senders_fill_encoded_columns_too(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """``{"order id": 2, "total": 6}`` after ``{"Order Id": 1, "Total": 5}``: both values of both
    columns (the second row's were null, with no record: a review)."""
    day, lake = _typed_days(fresh_pg_uri, tmp_path, spark, "Edge.Contracts.MixedCamel")
    day(0, {"Order Id": 1, "Total": 5})
    day(10, {"order id": 2, "total": 6})
    got = rows(lake, "body_edge_contracts_mixedcamel")
    assert sorted((r["Order_x0020_Id"], r["Total"]) for r in got) == [(1, 5), (2, 6)], got


def _typed_days(pg_uri: str, tmp_path: Path, spark, type_name: str, **bodies: object):  # type: ignore[no-untyped-def]
    """A delta-rs lake on a fresh queue schema, and ``day(first, *bodies, unparsed=0)``: send the bodies
    as ``type_name`` (message numbers from ``first``), drain them and type them, all but ``unparsed`` of
    them parsed whole. ``bodies``: the config's ``bodies`` keys."""
    cfg = config(pg_uri, tmp_path / "lake", "delta-rs", **bodies)
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    message_type = c.aqn(type_name, "Edge.Contracts", "1.0.0.0")
    lake = open_lake(cfg.lake, spark)

    def day(first: int, *bodies: dict[str, object], unparsed: int = 0) -> None:
        messages = [
            c.message(message_type, json.dumps(b).encode(), "application/json", first + i) for i, b in enumerate(bodies)
        ]
        send(cfg, "Sales", messages)
        assert drain(cfg, lake)["status"] == "ok"
        out = bodies_run.bodies(cfg, spark, lake)
        assert out["status"] == "ok" and out["unparsed"] == unparsed, out

    return day, lake


@pytest.mark.slow
def test_a_camel_case_root_value_beside_a_dictionary_holding_its_name_is_typed(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    """``{"source": "app", ...}`` after ``{"Source": "web", "Meta": {..., "source": "crm"}}``: the
    root's value was written null, with no record, because a dictionary used the name (a review). The
    dictionary's own keys stay as sent."""
    day, lake = _typed_days(fresh_pg_uri, tmp_path, spark, "Edge.Contracts.MetaCamel")
    day(0, {"Source": "web", "Total": 5, "Meta": {"Order Id": "x", "source": "crm"}})
    day(10, {"source": "app", "total": 6, "meta": {"Order Id": "y", "source": "erp"}})
    got = rows(lake, "body_edge_contracts_metacamel")
    assert sorted((r["Source"], r["Total"]) for r in got) == [("app", 6), ("web", 5)], got
    assert sorted(sorted(dict(r["Meta"]).items()) for r in got) == [
        [("Order Id", "x"), ("source", "crm")],
        [("Order Id", "y"), ("source", "erp")],
    ]


def test_a_value_under_another_spelling_that_does_not_fit_is_recorded(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """``{"total": "abc"}`` where ``Total`` is a number, in a camelCase body read through the root's
    other spellings: written null with no record, while the same value under ``Total`` was recorded as
    partly parsed (a review). Both are now. One sampled row: the type stays a number."""
    day, lake = _typed_days(fresh_pg_uri, tmp_path, spark, "Edge.Contracts.AltUnfit", sample_rows=1)
    day(0, {"Source": "web", "Total": 5, "Meta": {"source": "crm", "total": "1"}})  # a dictionary uses both names
    good = [{"source": f"app{i}", "total": i, "meta": {"source": "erp", "total": "2"}} for i in range(20)]
    day(10, *good, {"source": "appBAD", "total": "abc", "meta": {"source": "erp", "total": "2"}}, unparsed=1)
    got = {r["Source"]: r["Total"] for r in rows(lake, "body_edge_contracts_altunfit")}
    assert got["appBAD"] is None and got["app7"] == 7 and got["web"] == 5, got
    recorded = rows(lake, "body_unparsed")
    assert len(recorded) == 1 and "partly parsed" in recorded[0]["reason"], recorded

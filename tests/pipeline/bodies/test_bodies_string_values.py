"""A string column holds what the body held: an object stored in a string column (a field that is text
in one body and an object in another), and text that reads like JSON, keep their keys as sent, while a
camelCase body's fields are still read into the PascalCase columns.

Why: the keys spelled differently by two senders were respelled on the body's text with a regular
expression, which cannot tell an object's keys from the keys of an object a string column holds: a
camelCase sender's ``{"payload": {"id": 7}}`` was stored as ``{"Id":7}`` because ``Id`` is a column
elsewhere (found by a review). Real drain, Spark and each lake engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType
from queuelake.lake.engines import open_lake
from queuelake.pipeline.bodies import parse
from queuelake.pipeline.bodies import run as bodies_run
from queuelake.transport import db, installer

from tests.helpers.bodies import config, rows, send
from tests.helpers.bodies_corpus import corpus as c
from tests.helpers.stages import drain

HOLDER = c.aqn("Edge.Contracts.Holder", "Edge.Contracts", "1.0.0.0")
TABLE = "body_edge_contracts_holder"
CAMEL_PAYLOAD = {"id": 7, "Note": "x", "list": [{"id": 8, "ref": {"id": 9}}]}
# text values that hold keys, quotes escaped, a backslash before a quote, a value reading like a key
TEXTS = [
    '{"id":7}',
    '"id": 1, {"id" : 2}, ,"id":',
    'a\\",{"id":1}\\',
    '"Id":',
    '{ "payload" : {"ref": [{"id": 1}]} }',
]
BODIES = [
    {"Id": 1, "Payload": "plain", "Ref": {"Id": 5, "Tags": [{"Id": 1}]}, "Items": [{"Id": 1, "Data": "d"}]},
    {"id": 2, "payload": CAMEL_PAYLOAD, "ref": {"id": 6, "tags": [{"id": 9}]}, "items": [{"id": 3, "data": {"id": 4}}]},
    *[{"Id": 10 + i, "Payload": text, "Items": [{"Id": i, "Data": text}]} for i, text in enumerate(TEXTS)],
]


@pytest.mark.slow
def test_a_string_column_keeps_the_keys_of_what_the_body_held(
    fresh_pg_uri: str, tmp_path: Path, spark, lake_engine: str
) -> None:
    cfg = config(fresh_pg_uri, tmp_path / "lake", lake_engine)
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    messages = [c.message(HOLDER, json.dumps(b).encode(), "application/json", i) for i, b in enumerate(BODIES)]
    send(cfg, "Sales", messages)
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["status"] == "ok"
    out = bodies_run.bodies(cfg, spark, lake)
    assert out["status"] == "ok" and out["unparsed"] == 0 and out["rows_written"] == len(BODIES), out
    got = {r["Id"]: r for r in rows(lake, TABLE)}
    # the camelCase body's own fields are in the PascalCase columns, nested ones and lists too
    assert got[2]["Ref"] == {"Id": 6, "Tags": [{"Id": 9}]}
    # the object a string column holds keeps its keys as sent (Spark writes it compact)
    assert got[2]["Payload"] == json.dumps(CAMEL_PAYLOAD, separators=(",", ":"))
    assert [dict(item) for item in got[2]["Items"]] == [{"Id": 3, "Data": '{"id":4}'}]
    # text is stored byte for byte, a key name in it or not
    for i, text in enumerate(TEXTS):
        assert got[10 + i]["Payload"] == text, i
        assert [dict(item) for item in got[10 + i]["Items"]] == [{"Id": i, "Data": text}], i
    assert got[1]["Payload"] == "plain" and got[1]["Ref"] == {"Id": 5, "Tags": [{"Id": 1}]}


@pytest.mark.slow
def test_a_field_is_read_under_each_of_its_spellings_at_its_own_depth(spark) -> None:
    """Each field is filled from its first spelling the body holds, depth by depth (a Pascal body holding
    a camel object, a name spelled one way at the root and another inside), a dictionary's keys are read
    as sent, a body holding both spellings keeps the column's own, and a value under another spelling
    that does not fit its column is recorded by its path."""
    from pyspark.sql.types import MapType

    inner = StructType([StructField("Id", LongType()), StructField("Data", StringType())])
    schema = StructType(
        [
            StructField("N", LongType()),
            StructField("Id", LongType()),
            StructField("Ref", StructType([StructField("id", LongType()), StructField("Items", ArrayType(inner))])),
            StructField("Meta", MapType(StringType(), LongType())),
            StructField("Prénom", StringType()),
        ]
    )
    spellings = {
        "id": ["ID", "Id", "id"],
        "ref": ["Ref", "ref"],
        "items": ["Items", "items"],
        "data": ["Data", "data"],
        "prénom": ["Prénom", "prénom"],
    }
    bodies = [
        {"N": 1, "Id": 1, "Ref": {"id": 2, "Items": [{"Id": 3, "Data": "x"}]}},
        {"N": 2, "id": 1, "ref": {"Id": 2, "items": [{"id": 3, "data": {"id": 4}}]}, "Meta": {"id": 5, "Id": 6}},
        {"N": 3, "ID": 1, "Ref": {"ID": 2, "items": [{"ID": 3, "Data": '{"id":4}'}]}},
        {"N": 4, "Id": 1, "id": 9, "ref": {"id": 2, "Id": 8}},
        {"N": 5, "id": 1, "ref": {"Id": "not a number"}},
    ]
    texts = [json.dumps(b) for b in bodies] + ['{"N": 6, "pr\\u00e9nom": "a", "id": 1}']  # System.Text.Json's escape
    frame = spark.createDataFrame([(text, "json", None) for text in texts], "text string, format string, reason string")
    got = parse.parsed(frame, schema, xml=False, spellings=spellings)
    out = {r["N"]: r for r in got.select("p.*", "verdict").collect()}
    assert out[1]["Id"] == 1 and out[1]["Ref"].asDict(recursive=True) == {"id": 2, "Items": [{"Id": 3, "Data": "x"}]}
    assert out[2]["Id"] == 1 and out[2]["Ref"].asDict(recursive=True) == {
        "id": 2,
        "Items": [{"Id": 3, "Data": '{"id":4}'}],
    }
    assert out[2]["Meta"] == {"id": 5, "Id": 6}
    assert out[3]["Id"] == 1 and out[3]["Ref"].asDict(recursive=True) == {
        "id": 2,
        "Items": [{"Id": 3, "Data": '{"id":4}'}],
    }
    assert out[4]["Id"] == 1 and out[4]["Ref"]["id"] == 2  # both spellings: the column's own
    assert out[6]["Prénom"] == "a"
    assert [out[n]["verdict"] for n in (1, 2, 3, 4, 6)] == [None] * 5
    assert out[5]["Ref"]["id"] is None and out[5]["verdict"] == parse.does_not_fit("Ref.id")


@pytest.mark.slow
def test_a_wide_type_with_two_spellings_parses_its_bodies_once(spark) -> None:
    """A type of many fields, one name of which came in two casings, is parsed by one ``from_json`` whose
    fields each row then takes: built on the parse itself, each field's expression held a copy of the
    whole parse, schema and all, and one body of 5,000 keys ran the JVM out of memory (a review). Counted
    in the plan Spark analyses, never timed."""
    fields = [StructField(f"F{i}", LongType()) for i in range(300)]
    schema = StructType([StructField("OrderId", StringType()), *fields])
    body = {"orderid": "o-1", **{f"F{i}": i for i in range(300)}}
    frame = spark.createDataFrame([(json.dumps(body), "json", None)], "text string, format string, reason string")
    got = parse.parsed(frame, schema, xml=False, spellings={"orderid": ["OrderId", "orderid"]})
    plan = got.select(*(f"p.{f.name}" for f in schema.fields), "verdict")._jdf.queryExecution().analyzed().toString()
    assert plan.count("from_json(") <= 3, plan.count("from_json(")  # the parse and the checks: not one a field
    row = got.select("p.*", "verdict").first()
    assert row["OrderId"] == "o-1" and row["F299"] == 299 and row["verdict"] is None


def test_spellings_nested_in_spellings_are_read_only_as_deep_as_a_bounded_schema_allows() -> None:
    """Each spelling of a struct's name holds a copy of the struct: a tree 38 objects deep whose every
    name came in two casings would need 2^38 fields. A body of ordinary depth is read under every
    spelling all the way down; such a tree to the depth that fits ``MAX_SPELLED_FIELDS``."""
    node: StructType = StructType([StructField("Name", StringType())])
    for _ in range(38):
        node = StructType([StructField("Name", StringType()), StructField("Child", node)])
    others = parse._others({"name": ["Name", "name"], "child": ["Child", "child"]}, "_corrupt_record")
    depth = parse._spelled_depth(node, others)
    assert 5 < depth < 38
    read, named, build = parse._spelled(node, others, depth)
    assert build is not None and isinstance(read, StructType) and isinstance(named, StructType)
    assert parse._spelled_size(node, others, depth) <= parse._spelled_size(node, others, 0) + parse.MAX_SPELLED_FIELDS
    address = StructType([StructField("City", StringType())])
    line = StructType([StructField("Sku", StringType()), StructField("Address", address)])
    order = StructType(
        [StructField("Customer", StructType([StructField("Address", address)])), StructField("Lines", ArrayType(line))]
    )
    wide = parse._others({n.lower(): [n, n.lower()] for n in ("Customer", "Address", "City", "Sku", "Lines")}, "x")
    assert parse._spelled_depth(order, wide) == 64  # an ordinary type: every depth
    # a type with many fields of its own still has them read under their other spellings
    many = StructType(
        [StructField(f"Part{i}", StructType([StructField(f"F{j}", LongType()) for j in range(20)])) for i in range(300)]
    )
    every = parse._others({f"part{i}": [f"Part{i}", f"part{i}"] for i in range(300)}, "x")
    assert parse._spelled_depth(many, every) == 64

"""Dictionary properties, generic types and numbers at the edges in bodies: an object whose keys are
data (``Dictionary<Guid, Stock>``) is a ``map<string, T>`` column, not a struct with a field per key ever seen.

Why: as a struct, each run's new keys were new fields; the typed table was rewritten every run and its
schema grew without bound, until Spark failed every run at 3,000-6,000 keys (found by a review). The fast
tests check the inference; the slow one runs three rounds through a real drain, Spark and Delta, from a
table that first saw the dictionary as a struct (keys like property names) to a map (one rewrite that
keeps every value), then rounds of new keys that change nothing."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType
from queuelake.lake.engines import open_lake
from queuelake.pipeline.bodies import evolve
from queuelake.pipeline.bodies import run as bodies_run
from queuelake.pipeline.bodies.infer import MAX_STRUCT_FIELDS, finish, infer, key_spellings
from queuelake.transport import db, installer

from tests.helpers.bodies import config, rows, send
from tests.helpers.bodies_corpus import corpus as c
from tests.helpers.stages import drain

STOCK = "body_stock_contracts_stockcounted"
QTY = StructType([StructField("Qty", LongType(), True)])


def _stock(by_warehouse: dict, i: int = 1) -> str:
    return json.dumps({"Sku": f"sku-{i}", "ByWarehouse": by_warehouse})


def _guids(n: int) -> list[str]:
    return [str(uuid.uuid4()) for _ in range(n)]


@pytest.mark.parametrize(
    "keys",
    [
        _guids(3),
        [k.replace("-", "") for k in _guids(2)],  # Guid.ToString("N")
        ["{" + k.upper() + "}" for k in _guids(2)],  # Guid.ToString("B")
        ["1", "17", "2024"],  # Dictionary<int, T>
        ["2026-11-28", "2026-11-29"],  # Dictionary<DateOnly, T>
        ["New York", "Boston"],  # Dictionary<string, T> by city: a space no column name holds (it was dropped)
        ["", "main"],
        [f"SKU-{i}" for i in range(MAX_STRUCT_FIELDS + 1)],  # more keys than a class has properties
    ],
)
def test_an_object_keyed_by_data_is_a_map(keys: list[str]) -> None:
    schema, conflicts = infer([_stock({k: {"Qty": n} for n, k in enumerate(keys)})], "json", False)
    assert schema["ByWarehouse"].dataType == MapType(StringType(), QTY, True)
    assert schema["Sku"].dataType == StringType() and not conflicts


def test_property_names_stay_a_struct_and_a_body_is_never_a_map() -> None:
    schema, _ = infer([_stock({"Main": {"Qty": 1}, "Overflow": {"Qty": 2}})], "json", False)
    assert isinstance(schema["ByWarehouse"].dataType, StructType)
    root, _ = infer([json.dumps({k: 1 for k in _guids(2)})], "json", False)  # the message's own fields
    assert isinstance(root, StructType) and len(root.fields) == 2


def test_samples_of_new_keys_merge_into_one_map_and_values_widen() -> None:
    texts = [_stock({k: {"Qty": 1}}, i) for i, k in enumerate(_guids(50))]
    texts.append(_stock({str(uuid.uuid4()): {"Qty": 1.5, "Bin": "A"}}))
    schema, _ = infer(texts, "json", False)
    value = schema["ByWarehouse"].dataType
    assert isinstance(value, MapType)
    fields = [(f.name, f.dataType.simpleString()) for f in value.valueType.fields]
    assert fields == [("Qty", "double"), ("Bin", "string")]


def test_a_struct_grown_past_the_cap_across_samples_becomes_a_map() -> None:
    """Keys that read like names (product codes), a few per body: no body alone is a dictionary, the
    samples together are."""
    texts = [_stock({f"P{i}x{j}": {"Qty": j} for j in range(3)}, i) for i in range(MAX_STRUCT_FIELDS)]
    schema, _ = infer(texts, "json", False)
    assert schema["ByWarehouse"].dataType == MapType(StringType(), QTY, True)


def test_a_tables_struct_that_is_a_dictionary_is_planned_as_a_map_with_one_rewrite() -> None:
    existing = StructType(
        [StructField("Sku", StringType()), StructField("ByWarehouse", StructType([StructField("Main", QTY)]))]
    )
    found, conflicts = infer([_stock({k: {"Qty": 2} for k in _guids(2)})], "json", False)
    out = evolve.plan(STOCK, existing, {"1.0.0.0": (found, conflicts)}, xml=False)
    assert out.rewrite and out.schema["ByWarehouse"].dataType == MapType(StringType(), QTY, True)
    assert [(c.column, c.kind, c.new) for _, c in out.changes] == [("ByWarehouse", "widened", "map")]
    again = evolve.plan(STOCK, out.schema, {"1.0.0.0": (found, conflicts)}, xml=False)
    assert not again.rewrite and not again.changes  # a round of new keys changes nothing


def test_a_map_deeper_than_the_log_can_hold_is_text() -> None:
    deep: dict = {"Leaf": 1}
    for _ in range(60):
        deep = {str(uuid.uuid4()): deep}
    schema, _ = infer([json.dumps({"Root": deep})], "json", False)
    stored = finish(schema)
    node, levels = stored["Root"].dataType, 0
    while isinstance(node, MapType):
        node, levels = node.valueType, levels + 1
    assert isinstance(node, StringType) and levels >= 30


@pytest.mark.slow
def test_rounds_of_new_keys_keep_one_map_column(fresh_pg_uri: str, tmp_path: Path, spark, lake_engine: str) -> None:
    cfg = config(fresh_pg_uri, tmp_path / "lake", lake_engine)
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    lake = open_lake(cfg.lake, spark)
    n = 0

    def round_of(bodies: list[dict]) -> dict:
        nonlocal n
        messages = []
        for body in bodies:
            n += 1
            messages.append(c.message(c.STOCK, _stock(body, n).encode(), "application/json", n))
        send(cfg, "Sales", messages)
        assert drain(cfg, lake)["status"] == "ok"
        out = bodies_run.bodies(cfg, spark, lake)
        assert out["status"] == "ok", out
        return out

    # round 1: two warehouses named like properties: a struct, as before this change
    round_of([{"Main": {"Qty": 1}}, {"Main": {"Qty": 2}, "Overflow": {"Qty": 3}}])
    assert str(lake.schema(STOCK).field("ByWarehouse").type).startswith("struct<")
    # round 2: warehouses by id: the column becomes a map, round 1's values kept as its entries
    guids = _guids(40)
    round_of([{g: {"Qty": i}} for i, g in enumerate(guids)])
    column = lake.schema(STOCK).field("ByWarehouse").type
    assert str(column) == "map<string, struct<Qty: int64>>", column
    written = {r["Sku"]: r["ByWarehouse"] for r in rows(lake, STOCK)}
    assert len(written) == 42
    assert dict(written["sku-2"]) == {"Main": {"Qty": 2}, "Overflow": {"Qty": 3}}
    assert dict(written["sku-3"]) == {guids[0]: {"Qty": 0}}
    # rounds 3 and 4: more new keys each, and no schema change at all
    for _ in range(2):
        before = lake.schema(STOCK)
        round_of([{g: {"Qty": 7}} for g in _guids(30)])
        assert lake.schema(STOCK).equals(before)
    assert len(rows(lake, STOCK)) == 102
    changes = [r for r in lake.read_arrow("body_schema_changes").to_pylist() if r["column"] == "ByWarehouse"]
    assert [(r["change"], r["new_type"]) for r in changes] == [("widened", "map")]


@pytest.mark.parametrize("version", ["1.0.0.0", "2.0.0.0"])
def test_a_generic_types_releases_share_one_table(version: str) -> None:
    """``Envelope<Order>`` keeps its argument's assembly version in its full name: each release of the
    argument's assembly made another typed table (found by a review)."""
    from queuelake.pipeline.bodies import names

    detail = f"Version={version}, Culture=neutral, PublicKeyToken=null"
    aqn = f"MyNs.Envelope`2[[MyNs.Order, MyAsm, {detail}],[System.Int32, mscorlib, {detail}]], MyAsm, {detail}"
    assert names.type_name(aqn) == "MyNs.Envelope`2[[MyNs.Order, MyAsm],[System.Int32, mscorlib]]"
    assert names.type_version(aqn) == version
    assert names.type_name(f"MyNs.Order, MyAsm, {detail}") == "MyNs.Order"


def test_a_number_past_a_doubles_range_is_a_double_not_an_empty_schema() -> None:
    """orjson refuses ``1e400``: a type whose every sampled body held one was stored with no column at all,
    its rows counted as written (found by a review). It is a double (infinity, as Spark reads it)."""
    schema, conflicts = infer(['{"OrderId": 4, "X": 1e400}', '{"OrderId": 5, "X": -1e400}'], "json", False)
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [("OrderId", "bigint"), ("X", "double")]
    assert not conflicts
    assert infer(["{not json", "[1, 2]"], "json", False)[0].fields == []


def test_what_net_serializers_write_and_orjson_refuses_is_typed() -> None:
    """Unquoted ``NaN`` and ``Infinity`` (Newtonsoft's FloatFormatHandling.Symbol) and an integer past
    64 bits: orjson refuses each, and round 42's fallback took only ``1e400``, so such a type lost every
    body column again (found by a review)."""
    body = '{"OrderId": 1, "Score": NaN, "Up": Infinity, "Down": -Infinity, "Ref": 184467440737095516160}'
    schema, conflicts = infer([body], "json", False)
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        ("OrderId", "bigint"),
        ("Score", "double"),
        ("Up", "double"),
        ("Down", "double"),
        ("Ref", "string"),
    ]
    assert not conflicts


def test_what_orjson_rightly_refuses_stays_refused() -> None:
    """The standard library's parser, the fallback for ``1e400``, also took a lone surrogate escape (a
    column name no Arrow or Parquet name can hold: every run failed after the type's write) and nesting
    past 1,024 levels (it raised RecursionError, which failed the type every run). Both are bodies
    that do not parse, as before the fallback (found by a review)."""
    deep = '{"Id": 1, "Tree": ' + "[" * 1100 + "]" * 1100 + "}"
    surrogate = '{"Id": 1, "Note\\ud83d": "x"}'
    both = '{"Id": 1, "X": 1e400, "Note\\ud83d": "x"}'
    for body in (deep, surrogate, both):
        assert infer([body], "json", False)[0].fields == [], body[:40]
    schema, _ = infer(['{"Id": 1, "Note": "ok"}', surrogate, deep], "json", False)
    assert [f.name for f in schema.fields] == ["Id", "Note"]


def test_a_lone_surrogate_in_a_value_is_still_a_string() -> None:
    """A .NET string cut inside an emoji is written as a lone surrogate escape: the body was refused
    whole, and a type whose samples all held one was stored without those fields (a review)."""
    bodies = ['{"Id": 1, "Name": "\\ud800x"}', '{"Id": 2, "Name": "ok\\udfff", "Tags": [{"T": "\\udc00"}]}']
    schema, _ = infer(bodies, "json", False)
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        ("Id", "bigint"),
        ("Name", "string"),
        ("Tags", "array<struct<T:string>>"),
    ]
    nested_name = '{"Id": 3, "Meta": {"K\\ud800": 1}}'  # a name none can hold, however deep
    assert infer([nested_name], "json", False)[0].fields == []


@pytest.mark.parametrize("fmt", ["json", "xml"])
def test_a_value_nested_999_deep_is_typed_not_a_recursion_error(fmt: str) -> None:
    """Followed to its end, a body 999 objects deep raised RecursionError, and its type failed every run (a
    review): past ``MAX_VALUE_DEPTH`` a value is its text, as ``finish`` makes it some 40 objects down."""
    if fmt == "json":
        body = '{"Id": 1, "D": ' + '{"a": ' * 999 + "1" + "}" * 999 + "}"
    else:
        body = "<M><Id>1</Id><D>" + "<a>" * 999 + "1" + "</a>" * 999 + "</D></M>"
    schema, _ = infer([body], fmt, False)
    stored = finish(schema)
    assert [f.name for f in stored.fields] == ["Id", "D"]
    spellings: dict[str, set[str]] = {}
    key_spellings([body] if fmt == "json" else [], spellings, set())


@pytest.mark.slow
def test_bodies_with_lone_surrogates_and_999_deep_values_keep_their_fields(
    fresh_pg_uri: str, tmp_path: Path, spark
) -> None:
    cfg = config(fresh_pg_uri, tmp_path / "lake", "delta-rs")
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    lake = open_lake(cfg.lake, spark)
    deep = '{"a": ' * 990 + "1" + "}" * 990  # followed to its end, it raised RecursionError: the type failed
    texts = [
        '{"Sku": "a\\ud800", "Qty": 1}',
        '{"Sku": "b", "Qty": 2, "Note": "\\udfffz"}',
        f'{{"Qty": 3, "D": {deep}}}',
    ]
    send(cfg, "Sales", [c.message(c.STOCK, t.encode(), "application/json", i) for i, t in enumerate(texts, 1)])
    assert drain(cfg, lake)["status"] == "ok"
    out = bodies_run.bodies(cfg, spark, lake)
    assert out["status"] == "ok", out
    got = sorted((r["Qty"], r["Sku"], r["Note"]) for r in rows(lake, STOCK))
    # the lone half is a "?", as Spark (Java's UTF-8 encoder) writes it; the journal keeps the raw body
    assert got == [(1, "a?", None), (2, "b", "?z"), (3, None, None)], got
    column = lake.schema(STOCK).field("D").type  # some 40 objects as structs, the rest as its JSON text
    assert str(column).startswith("struct<a: struct<a: struct<"), column
    assert not lake.exists("body_unparsed") or not lake.read_arrow("body_unparsed").num_rows

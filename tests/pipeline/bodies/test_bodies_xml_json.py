"""One message type written by XmlSerializer and by JSON serializers lands in one typed table (turn 4):
endpoints migrate from XmlSerializer to JSON one by one, so the same type arrives in both. XML lists
are wrappers (``<Lines><OrderLine>...</OrderLine></Lines>``, one item, several, ``<Lines />``),
primitive lists ``<Tags><string>a</string></Tags>``, null ``xsi:nil``, names under namespaces; the
typed table must hold ``Lines`` as a list of structs with the values for XML rows and JSON rows alike.
The pure-Python side of the same conventions is ``test_bodies_xml_infer.py``."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from queuelake.lake.engines import open_lake
from queuelake.pipeline.bodies import run as bodies_run
from queuelake.transport import db, installer

from tests.helpers.bodies import config, rows, send
from tests.helpers.bodies_corpus import corpus as c
from tests.helpers.jvm import require_delta_jvm
from tests.helpers.stages import drain

SUBMITTED = c.aqn("Shop.Messages.OrderSubmitted", "Shop.Messages", "1.0.0.0")
TABLE = "body_shop_messages_ordersubmitted"
XMLNS = (
    'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:xsd="http://www.w3.org/2001/XMLSchema" '
    'xmlns="http://tempuri.net/Shop.Messages"'
)


def line(sku: str, qty: int, tags: list[str] | None) -> str:
    if tags is None:
        tag_xml = '<Tags xsi:nil="true" />'
    elif not tags:
        tag_xml = "<Tags />"
    else:
        tag_xml = "<Tags>" + "".join(f"<string>{t}</string>" for t in tags) + "</Tags>"
    return f"<OrderLine><Sku>{sku}</Sku><Qty>{qty}</Qty>{tag_xml}</OrderLine>"


def xml_body(order: str, lines: str, note: str = '<Note xsi:nil="true" />') -> bytes:
    return (
        f'<?xml version="1.0"?>\n<OrderSubmitted {XMLNS}>\n  <OrderId>{order}</OrderId>\n  {lines}\n  {note}\n'
        "</OrderSubmitted>"
    ).encode()


# message -> (body, content type, expected Lines, expected Note)
BODIES: dict[str, tuple[bytes, str, list | None, str | None]] = {
    "x-one": (
        xml_body("x-one", "<Lines>" + line("A", 1, ["red"]) + "</Lines>"),
        "text/xml",
        [{"Sku": "A", "Qty": 1, "Tags": ["red"]}],
        None,
    ),
    "x-several": (
        xml_body(
            "x-several", "<Lines>" + line("B", 2, ["x", "y"]) + line("C", 3, []) + line("D", 4, None) + "</Lines>"
        ),
        "text/xml",
        [
            {"Sku": "B", "Qty": 2, "Tags": ["x", "y"]},
            {"Sku": "C", "Qty": 3, "Tags": []},
            {"Sku": "D", "Qty": 4, "Tags": None},
        ],
        None,
    ),
    "x-empty": (xml_body("x-empty", "<Lines />", "<Note>rush</Note>"), "text/xml", [], "rush"),
    "x-nil": (xml_body("x-nil", '<Lines xsi:nil="true" />'), "text/xml", None, None),
    "x-prefixed": (  # a prefixed namespace on every element: names are the local names
        (
            b'<s:OrderSubmitted xmlns:s="http://tempuri.net/Shop.Messages" '
            b'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><s:OrderId>x-prefixed</s:OrderId>'
            b"<s:Lines><s:OrderLine><s:Sku>E</s:Sku><s:Qty>5</s:Qty><s:Tags><s:string>z</s:string></s:Tags>"
            b"</s:OrderLine></s:Lines></s:OrderSubmitted>"
        ),
        "text/xml",
        [{"Sku": "E", "Qty": 5, "Tags": ["z"]}],
        None,
    ),
    "j-plain": (
        orjson.dumps({"OrderId": "j-plain", "Lines": [{"Sku": "F", "Qty": 6, "Tags": ["q"]}], "Note": "hi"}),
        "application/json",
        [{"Sku": "F", "Qty": 6, "Tags": ["q"]}],
        "hi",
    ),
    "j-bom": (
        c.BOM
        + orjson.dumps(
            {"OrderId": "j-bom", "Lines": [{"Sku": "G", "Qty": 7, "Tags": []}, {"Sku": "H", "Qty": 8, "Tags": ["r"]}]},
            option=orjson.OPT_INDENT_2,
        ),
        "application/json; charset=utf-8",
        [{"Sku": "G", "Qty": 7, "Tags": []}, {"Sku": "H", "Qty": 8, "Tags": ["r"]}],
        None,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["delta-rs", "delta-spark"])
def test_xml_and_json_bodies_of_one_type_land_in_the_same_columns(
    fresh_pg_uri: str, tmp_path: Path, spark, engine: str
) -> None:
    if engine == "delta-spark":
        require_delta_jvm(spark)
    cfg = config(fresh_pg_uri, tmp_path / "lake", engine)
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    send(cfg, "Sales", [c.message(SUBMITTED, body, ct, i) for i, (body, ct, _, _) in enumerate(BODIES.values())])
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["status"] == "ok"
    out = bodies_run.bodies(cfg, spark, lake)
    assert out["status"] == "ok", out
    assert out["unparsed"] == 0, lake.read_arrow("body_unparsed").to_pylist()

    lines = lake.schema(TABLE).field("Lines").type
    assert str(lines) == ("list<element: struct<Sku: string, Qty: int64, Tags: list<element: string>>>"), (
        lines
    )  # array<struct<Sku:string,Qty:bigint,Tags:array<string>>>
    got = {r["OrderId"]: r for r in rows(lake, TABLE)}
    assert sorted(got) == sorted(BODIES)
    for order, (_, _, want_lines, want_note) in BODIES.items():
        assert got[order]["Lines"] == want_lines, order
        assert got[order]["Note"] == want_note, order
    changes = lake.read_arrow("body_schema_changes").to_pylist()
    assert not [ch for ch in changes if ch["table"] == TABLE and ch["change"] == "conflict"], changes


@pytest.mark.slow
def test_a_single_item_wrapper_already_in_the_table_becomes_a_list(fresh_pg_uri: str, tmp_path: Path, spark) -> None:
    """An increment of XML bodies that all hold one item (nothing says list: ``struct<OrderLine: ...>``),
    then one whose XML shows several and JSON lists: the table is rewritten once with the old rows'
    item as a list of one, the change recorded as a widening, not a conflict."""
    cfg = config(fresh_pg_uri, tmp_path / "lake", "delta-rs")
    with db.connect(cfg.transport) as conn:
        installer.install(conn, installer.plan(cfg))
        conn.commit()
    send(cfg, "Sales", [c.message(SUBMITTED, BODIES["x-one"][0], "text/xml", 0)])
    lake = open_lake(cfg.lake, spark)
    assert drain(cfg, lake)["status"] == "ok"
    assert bodies_run.bodies(cfg, spark, lake)["status"] == "ok"
    assert str(lake.schema(TABLE).field("Lines").type).startswith("struct<OrderLine: struct<Sku: string")
    later = ["x-several", "j-plain"]
    send(cfg, "Sales", [c.message(SUBMITTED, BODIES[k][0], BODIES[k][1], 10 + i) for i, k in enumerate(later)])
    assert drain(cfg, lake)["status"] == "ok"
    out = bodies_run.bodies(cfg, spark, lake)
    assert out["status"] == "ok", out
    got = {r["OrderId"]: r["Lines"] for r in rows(lake, TABLE)}
    assert got == {k: BODIES[k][2] for k in ["x-one", *later]}
    changes = [ch for ch in lake.read_arrow("body_schema_changes").to_pylist() if ch["table"] == TABLE]
    assert [ch["change"] for ch in changes if ch["column"] == "Lines"] == ["widened"], changes

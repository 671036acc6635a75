"""XmlSerializer's conventions in the bodies stage, in Python alone (no Spark): the inferred schema
(``infer``) and the JSON each XML body becomes for it (``xml_serializer``), so a type written by
XmlSerializer and by a JSON serializer reconciles into one schema (turn 4). The Spark run of the same
is ``test_bodies_xml_json.py``."""

from __future__ import annotations

import json

from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType
from queuelake.pipeline.bodies.infer import infer, merge_xml
from queuelake.pipeline.bodies.xml_serializer import to_json_text

NS = (
    'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xmlns:xsd="http://www.w3.org/2001/XMLSchema" '
    'xmlns="http://tempuri.net/Shop.Messages"'
)
LINE = StructType(
    [
        StructField("Sku", StringType()),
        StructField("Qty", LongType()),
        StructField("Tags", ArrayType(StringType())),
    ]
)


def body(inner: str) -> str:
    return f'<?xml version="1.0"?>\n<OrderSubmitted {NS}>\n  <OrderId>o-1</OrderId>\n  {inner}\n</OrderSubmitted>'


def line(sku: str, qty: int, tags: str = "<Tags><string>a</string></Tags>") -> str:
    return f"<OrderLine><Sku>{sku}</Sku><Qty>{qty}</Qty>{tags}</OrderLine>"


ONE = body(f"<Lines>{line('A', 1)}</Lines>")
SEVERAL = body(
    f"<Lines>{line('B', 2, '<Tags><string>x</string><string>y</string></Tags>')}{line('C', 3, '<Tags />')}</Lines>"
)
EMPTY = body('<Lines />\n  <Note xsi:nil="true" />')
NIL = body('<Lines xsi:nil="true" />')


def field(schema: StructType, name: str):
    return schema[name].dataType


def as_json(text: str, schema: StructType):
    out = to_json_text(text, schema)
    return None if out is None else json.loads(out)


def test_wrappers_of_several_items_and_primitive_items_are_lists() -> None:
    schema, conflicts = infer([ONE, SEVERAL, EMPTY, NIL], "xml", False)
    assert not conflicts
    assert schema.names == ["OrderId", "Lines", "Note"]
    assert field(schema, "Lines") == ArrayType(LINE)
    # one sample alone: the primitive item name (<string>) says list; several items say list
    assert field(infer([ONE], "xml", False)[0], "Lines")["OrderLine"].dataType["Tags"].dataType == ArrayType(
        StringType()
    )
    assert field(infer([SEVERAL], "xml", False)[0], "Lines") == ArrayType(LINE)


def test_json_rows_and_single_item_xml_rows_reconcile() -> None:
    """A single complex item looks like an object alone (``struct<OrderLine: ...>``); a JSON sample (or
    another XML one) showing the list makes it a list, both ways round, with no conflict."""
    alone, _ = infer([ONE], "xml", False)
    assert field(alone, "Lines").names == ["OrderLine"]  # nothing says list: kept as XML shows it
    json_rows, _ = infer(['{"OrderId": "j", "Lines": [{"Sku": "J", "Qty": 5, "Tags": ["q"]}]}'], "json", False)
    for a, b in ((json_rows, alone), (alone, json_rows)):
        conflicts: list = []
        merged = merge_xml(a, b, "", conflicts)
        assert field(merged, "Lines") == ArrayType(LINE) and not conflicts, merged
    # an empty wrapper is null: it takes the list type of the others
    empty_only, _ = infer([EMPTY], "xml", False)
    assert field(merge_xml(empty_only, json_rows, "", []), "Lines") == ArrayType(LINE)


def test_each_xml_body_becomes_the_json_of_the_schema() -> None:
    schema = StructType(
        [StructField("OrderId", StringType()), StructField("Lines", ArrayType(LINE)), StructField("Note", StringType())]
    )
    assert as_json(ONE, schema) == {"OrderId": "o-1", "Lines": [{"Sku": "A", "Qty": 1, "Tags": ["a"]}]}
    assert as_json(SEVERAL, schema)["Lines"] == [
        {"Sku": "B", "Qty": 2, "Tags": ["x", "y"]},
        {"Sku": "C", "Qty": 3, "Tags": []},
    ]
    assert as_json(EMPTY, schema) == {"OrderId": "o-1", "Lines": [], "Note": None}  # <Lines />: an empty list
    assert as_json(NIL, schema) == {"OrderId": "o-1", "Lines": None}  # xsi:nil: null
    # a prefixed namespace: local names; not well-formed: None (the row is reported malformed)
    prefixed = (
        '<s:OrderSubmitted xmlns:s="urn:x"><s:Lines><s:OrderLine><s:Sku>P</s:Sku><s:Qty>9</s:Qty></s:OrderLine>'
        "</s:Lines></s:OrderSubmitted>"
    )
    assert as_json(prefixed, schema) == {"Lines": [{"Sku": "P", "Qty": 9}]}
    assert to_json_text("<OrderSubmitted><Lines>", schema) is None
    # a single item written as the element itself (repeated elements, [XmlElement]), or whose only child
    # is an item's field: one item, not a wrapper
    unwrapped = "<OrderSubmitted><Lines><Sku>A</Sku><Qty>1</Qty></Lines><Lines><Sku>B</Sku></Lines></OrderSubmitted>"
    assert as_json(unwrapped, schema) == {"Lines": [{"Sku": "A", "Qty": 1}, {"Sku": "B"}]}
    assert as_json("<O><Lines><Sku>A</Sku></Lines></O>", schema) == {"Lines": [{"Sku": "A"}]}


def test_nested_lists_and_the_rest_of_the_xml_conventions() -> None:
    grid = "<G><Rows><ArrayOfInt><int>1</int><int>2</int></ArrayOfInt><ArrayOfInt><int>3</int></ArrayOfInt></Rows></G>"
    schema, _ = infer([grid, "<G><Rows><ArrayOfInt><int>4</int></ArrayOfInt></Rows></G>"], "xml", False)
    assert field(schema, "Rows") == ArrayType(ArrayType(LongType()))
    assert as_json(grid, schema) == {"Rows": [[1, 2], [3]]}
    # children of different names (polymorphic [XmlArrayItem]s) stay an object; attributes, zip codes,
    # repeated elements (from_xml's convention) as before
    mixed, _ = infer(
        ['<C><Items><Book id="1">b</Book><Dvd>d</Dvd></Items><Zip>01123</Zip><T>1</T><T>2</T></C>'], "xml", False
    )
    assert field(mixed, "Items").names == ["Book", "Dvd"]
    assert field(mixed, "Items")["Book"].dataType.names == ["_id", "_VALUE"]
    assert field(mixed, "Zip") == StringType() and field(mixed, "T") == ArrayType(LongType())
    # a column that is a string (a conflict) holds the element's JSON, as a JSON body's object would
    loose = StructType([StructField("Location", StringType())])
    out = to_json_text("<S><Location><Aisle>3</Aisle><Bins><int>1</int></Bins></Location></S>", loose)
    assert json.loads(out or "") == {"Location": {"Aisle": 3, "Bins": [1]}}


def _json_depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((_json_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_json_depth(v) for v in value), default=0)
    return 0


def test_a_body_nested_past_what_delta_rs_parses_keeps_the_rest_as_json_text() -> None:
    """A category tree 60 objects deep (and lists of them): the stored schema stays within serde_json's
    128 levels, which delta-rs parses it with (it panicked at 45 objects); below the cut, a value's JSON
    text."""
    from queuelake.pipeline.bodies.infer import MAX_SCHEMA_DEPTH, finish

    for wrap in (lambda child: {"Name": "node", "Child": child}, lambda child: {"Children": [child]}):
        deep: dict = {"Name": "leaf"}
        for _ in range(60):
            deep = wrap(deep)
        schema, _ = infer([json.dumps({"Root": deep})], "json", False)
        stored = finish(schema)
        assert _json_depth(json.loads(stored.json())) <= MAX_SCHEMA_DEPTH < 128
        node, levels = stored["Root"].dataType, 0
        while not isinstance(node, StringType):
            node = node.elementType if isinstance(node, ArrayType) else node.fields[-1].dataType
            levels += 1
        assert levels >= 30, levels  # deep enough for any real tree, then text


def test_a_type_in_json_and_xml_plans_no_change_for_a_table_holding_both(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """What one format shows and the other lacks (an XML attribute, a field only the XML rows carry)
    was recorded as "added" on every increment and rewrote the whole typed table each run, on both
    engines (a review: ``body_schema_changes`` held 15 false rows after two days). The table created
    from both formats' schema plans nothing when the same bodies come again."""
    from queuelake.config_sections import BodiesConfig
    from queuelake.lake.delta_rs.engine import DeltaRsEngine
    from queuelake.pipeline.bodies import evolve, schema_plan

    lake = DeltaRsEngine(str(tmp_path))
    table = "body_shop_messages_ordersubmitted"
    texts = {
        "json": [json.dumps({"OrderId": f"o-{i}", "Lines": [{"Sku": "a", "Qty": i, "Tags": []}]}) for i in range(5)],
        "xml": [
            body(
                f'<Customer Level="gold"><Name>n{i}</Name></Customer><Notes>x</Notes>'
                f"<Lines>{'<OrderLine><Sku>b</Sku><Qty>1</Qty><Tags /></OrderLine>'}</Lines>"
            )
            for i in range(5)
        ],
    }
    first = schema_plan.evolution(lake, table, {"1.0.0.0": texts}, BodiesConfig())
    assert {"Notes", "Customer", "Lines"} <= set(first.schema.fieldNames()), first.schema
    evolve.apply(lake, first)
    again = schema_plan.evolution(lake, table, {"1.0.0.0": texts}, BodiesConfig())
    assert not again.rewrite and again.changes == [], again.changes

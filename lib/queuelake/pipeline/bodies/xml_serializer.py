"""XmlSerializer bodies as JSON text shaped by the table's schema, converted on the executors.

Why not ``from_xml``: it reads a list as repeated elements, so XmlSerializer's wrapper
(``<Lines><OrderLine>...</OrderLine></Lines>``) comes out as ``struct<OrderLine: array<...>>``, never
the ``array<struct<...>>`` a JSON body of the same type gives; nor can it tell ``<Lines />`` (an empty
list) from ``xsi:nil`` (null). The inferred schema (``infer``) already says which fields are lists, so
each XML body is rewritten as the JSON a JSON serializer would have written for it, and one
``from_json`` with one schema reads XML and JSON rows alike: the same columns, the same values.

Guided by the schema: a list field's element is a wrapper when its children share one name that is
not a field of the item (``<Lines><OrderLine/>...``, ``<Tags><string/>...``), its items the children;
an empty element is an empty list, ``xsi:nil`` null; several elements of the name are the items
themselves (from_xml's repeated elements, which the inference also reads as a list). Texts become the
column's JSON type (numbers, booleans; timestamps stay text for ``from_json``), a value that does not
fit stays text so ``from_json`` reports the row as partly parsed. A column that is a string
(a conflict) gets the element's JSON, as a JSON body's object would. Names are local names: namespaces
(a default one, prefixes) do not name fields; fields are matched case-insensitively, as inferred.

Runs in an Arrow UDF (``json_of_xml``): on the executors, a batch of texts at a time
(``spark.sql.execution.arrow.maxRecordsPerBatch``), so memory is bounded by a batch, never the table;
only XML rows are passed in (JSON rows arrive as nulls). The executors import this module, so they
need the queuelake package, as a Databricks wheel task or a local session has it.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.types import ArrayType, BooleanType, DataType, DoubleType, LongType, StringType, StructType

from queuelake.pipeline.bodies.infer import (
    _DOUBLE,
    _LONG,
    VALUE_TAG,
    _local,
    _text_type,
    is_nil,
    own_attributes,
    wrapped_items,
)

if TYPE_CHECKING:
    from pyspark.sql import Column

_SPECIAL_DOUBLES = {"INF": math.inf, "-INF": -math.inf, "NaN": math.nan}


def to_json_text(text: str | None, schema: StructType) -> str | None:
    """The body as JSON text for ``schema`` (None: no text, or not well-formed XML)."""
    if text is None:
        return None
    try:
        root = ET.fromstring(text.encode("utf-8"))
    except ET.ParseError:
        return None
    return json.dumps(_value(root, schema), ensure_ascii=False, separators=(",", ":"))


def _grouped(children: list[ET.Element]) -> dict[str, list[ET.Element]]:
    """Children by lower-case local name, in first-seen order (a repeated name: its occurrences)."""
    out: dict[str, list[ET.Element]] = {}
    for child in children:
        out.setdefault(_local(child.tag).lower(), []).append(child)
    return out


def _value(element: ET.Element, dtype: DataType) -> Any:
    if is_nil(element):
        return None
    if isinstance(dtype, StructType):
        return _struct(element, dtype)
    if isinstance(dtype, ArrayType):  # an item that is itself a list (``<ArrayOfInt>``)
        items = _items(element, dtype.elementType)
        return [_value(item, dtype.elementType) for item in (items if items is not None else [element])]
    if len(element) or own_attributes(element):
        return _generic(element)  # an object where the column is a scalar: its JSON (a string keeps it)
    return _scalar(element.text, dtype)


def _struct(element: ET.Element, dtype: StructType) -> dict[str, Any]:
    fields = {f.name.lower(): f for f in dtype.fields}
    out: dict[str, Any] = {}
    for name, value in own_attributes(element):
        f = fields.get("_" + name.lower())
        if f is not None:
            out[f.name] = _scalar(value, f.dataType)
    children = list(element)
    for name, occurrences in _grouped(children).items():
        f = fields.get(name)
        if f is not None:
            out[f.name] = _field(occurrences, f.dataType)
    value_field = fields.get(VALUE_TAG.lower())
    if not children and value_field is not None and (element.text or "").strip():
        out[value_field.name] = _scalar(element.text, value_field.dataType)
    return out


def _field(occurrences: list[ET.Element], dtype: DataType) -> Any:
    """A field's value from the elements of its name in the parent."""
    if isinstance(dtype, ArrayType):
        if len(occurrences) == 1:
            element = occurrences[0]
            if is_nil(element):
                return None
            items = _items(element, dtype.elementType)
            if items is not None:
                return [_value(item, dtype.elementType) for item in items]
        return [_value(element, dtype.elementType) for element in occurrences]
    if len(occurrences) > 1:  # a list where the column is not: from_json keeps its text or reports it
        return [_value(element, dtype) for element in occurrences]
    return _value(occurrences[0], dtype)


def _items(element: ET.Element, item: DataType) -> list[ET.Element] | None:
    """The items when ``element`` is the wrapper of a list of ``item`` (``[]``: ``<Lines />``); None:
    ``element`` is one item itself."""
    children = list(element)
    if own_attributes(element):
        return None
    if not children:
        return None if (element.text or "").strip() else []
    name = _local(children[0].tag).lower()
    if any(_local(child.tag).lower() != name for child in children[1:]):
        return None
    if isinstance(item, StructType) and any(f.name.lower() == name for f in item.fields):
        return None  # ``<Lines><Sku>A</Sku></Lines>``: an item's own field, not an item
    return children


def _scalar(text: str | None, dtype: DataType) -> Any:
    value = (text or "").strip()
    if not value:
        return None  # an empty element: null, as from_xml's nullValue "" read it
    if isinstance(dtype, LongType) and _LONG.fullmatch(value):
        return int(value)
    if isinstance(dtype, DoubleType):
        if _DOUBLE.fullmatch(value):
            return float(value)
        if value in _SPECIAL_DOUBLES:
            return _SPECIAL_DOUBLES[value]
    if isinstance(dtype, BooleanType) and value in ("true", "false", "1", "0"):
        return value in ("true", "1")
    # text and timestamps as they are; a number or boolean that does not fit its column stays text,
    # and from_json marks the row partly parsed (that field null)
    return value


def _generic(element: ET.Element) -> Any:
    """The element as JSON without a schema, by the inference's reading (for string columns)."""
    if is_nil(element):
        return None
    items = wrapped_items(element)
    if items is not None:
        return [_generic(item) for item in items]
    attributes = own_attributes(element)
    children = list(element)
    if not children and not attributes:
        return _typed(element.text)
    out: dict[str, Any] = {"_" + name: _typed(value) for name, value in attributes}
    for occurrences in _grouped(children).values():
        name = _local(occurrences[0].tag)
        out[name] = _generic(occurrences[0]) if len(occurrences) == 1 else [_generic(e) for e in occurrences]
    if not children and (element.text or "").strip():
        out[VALUE_TAG] = _typed(element.text)
    return out


def _typed(text: str | None) -> Any:
    found = _text_type(text)
    return _scalar(text, found if isinstance(found, (LongType, DoubleType, BooleanType)) else StringType())


def _converter(schema_json: str) -> Any:
    """The Arrow UDF's body: texts (null for rows that are not XML) to JSON texts, a batch at a time."""

    def convert(texts: pa.Array) -> pa.Array:
        schema = StructType.fromJson(json.loads(schema_json))
        return pa.array([to_json_text(text, schema) for text in texts.to_pylist()], pa.string())

    return convert


def json_of_xml(text: Column, schema: StructType) -> Column:
    """``text`` (an XmlSerializer body, or null) as JSON text for ``schema``, on the executors."""
    from pyspark.sql.functions import arrow_udf

    return arrow_udf(_converter(schema.json()), StringType())(text)  # type: ignore[call-overload]

"""Schemas from bodies: a Spark type inferred from sampled JSON or XML texts, and the rules that
merge it with a table's columns (schema evolution), each change named.

Why in Python on a sample, not Spark's JSON reader: the sample is bounded (``bodies.sample_rows``
per type and version), so inference costs the same for ten rows or ten million; and the rules are
ours, the same for JSON and XML and for merging with a table: a field seen for the first time adds a
column (in first-seen order, not sorted); a whole number then a fraction widens long to double; any
other disagreement (text and number, an object and a list, ...) makes the column a string, which
Spark fills with the value's original JSON text, and is recorded as a conflict.

Types: JSON true/false -> boolean, whole numbers -> long (beyond 64 bits: string), other numbers and
the texts "NaN", "Infinity" and "-Infinity" (how .NET writes such doubles) -> double, ISO 8601
date-times with a zone (``2024-05-01T13:45:10.1234567Z``, ``...+02:00``: what System.Text.Json,
Newtonsoft and the XmlSerializer write for UTC DateTime and DateTimeOffset) -> timestamp, other text ->
string, objects -> structs, lists -> arrays. A field only ever null is a string. An object whose keys
are data, not a class's properties (a ``Dictionary<Guid, T>``, ``<int, T>``,
``<DateTime, T>``: a key that is a GUID or starts with a digit, is empty or holds a space or another
character a column name cannot; or any dictionary once its keys pass
``MAX_STRUCT_FIELDS``) is a ``map<string, T>``, ``T`` merged from every value: as a struct, each run's
new keys were new fields, and a typed table grew a column per key until Spark failed (a review's
``Dictionary<Guid, Stock>`` failed every run at 3,000-6,000 keys). A table's struct that turns out to be
such a dictionary becomes a map (one rewrite).

XML (``from_xml``'s conventions): child elements are fields, a repeated element an array, attributes
``_name`` fields, an element with attributes and text keeps the text in ``_VALUE``;
values are typed from their text (a number with a leading zero stays text: a zip code).

XmlSerializer's collections (turn 4): a ``List<OrderLine> Lines`` is a wrapper ``<Lines>`` holding one
element per item (``<OrderLine>``, or the ``[XmlArrayItem]`` name), ``<Lines />`` when empty; a
primitive list holds ``<string>``, ``<int>``, ... items. Types migrate from XmlSerializer to JSON, so
the same type's JSON rows show ``Lines`` as a list: the XML must say list too, or the column is a
conflict (a string) for every row. A wrapper is recognised without a schema when all its children
share one name and repeat, or the name is one of XmlSerializer's primitive item names (or
``ArrayOf...``, a list of lists); a wrapper of a single complex item looks like an object
(``struct<OrderLine: ...>``) and becomes a list when another sample (XML or JSON) shows the field as
a list (``repeated_as_arrays``). An empty element is null here, so it takes the type other samples
show (``xml_serializer`` writes it as an empty list where the column is a list). ``xsi:nil`` is null.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

import orjson
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})")
_LONG = re.compile(r"-?(0|[1-9]\d{0,18})")
_DOUBLE = re.compile(r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")
# characters a Delta column name cannot hold without column mapping (which would lift the protocol):
# a nested object keyed with one is a map; the body's own fields keep them (``parse.encoded``)
_BAD_NAME = re.compile(r"[ ,;{}()\n\t=]")
_XSI = "{http://www.w3.org/2001/XMLSchema-instance}"
# a dictionary's key, never a property's name: a GUID (``N``, ``D`` or ``B`` format) or a number, a date, ...
_DATA_KEY = re.compile(r"\d.*|\{?[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}\}?", re.DOTALL)
# more fields than a class has properties: the object is a dictionary keyed by data (product codes, names)
MAX_STRUCT_FIELDS = 400
# the element names XmlSerializer gives a primitive list's items (List<string> -> <string>); a list of
# lists' items are ``ArrayOf<Item>``
XML_ITEM_NAMES = frozenset(
    "string int long short byte unsignedByte unsignedShort unsignedInt unsignedLong decimal double float "
    "boolean dateTime date time duration guid char TimeSpan DateTimeOffset base64Binary anyType QName".split()
)
VALUE_TAG = "_VALUE"
CORRUPT = "_corrupt_record"


@dataclass(frozen=True)
class Change:
    """One schema change: ``column`` (a dotted path), its ``kind`` (added, widened, conflict) and types."""

    column: str
    kind: str
    old: str | None
    new: str


def _path(parent: str, name: str) -> str:
    return f"{parent}.{name}" if parent else name


def merge(a: DataType, b: DataType, path: str, changes: list[Change]) -> DataType:
    """``a`` evolved to hold ``b`` too; what changed is appended to ``changes``."""
    if isinstance(b, NullType) or a == b:
        return a
    if isinstance(a, NullType):
        return b
    if isinstance(a, (StructType, MapType)) and isinstance(b, (StructType, MapType)):
        if isinstance(a, MapType) or isinstance(b, MapType):
            return _merged_maps(a, b, path, changes)
        fields = list(a.fields)
        have = {f.name.lower(): i for i, f in enumerate(fields)}
        for f in b.fields:
            i = have.get(f.name.lower())
            if i is None:
                fields.append(StructField(f.name, f.dataType, True))
                have[f.name.lower()] = len(fields) - 1
                changes.append(Change(_path(path, f.name), "added", None, _show(f.dataType)))
            else:
                old = fields[i]
                fields[i] = StructField(old.name, merge(old.dataType, f.dataType, _path(path, old.name), changes), True)
        if path and len(fields) > MAX_STRUCT_FIELDS:
            changes.append(Change(path, "widened", _show(a), "map"))
            return as_map(StructType(fields), path, changes)
        return StructType(fields)
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return ArrayType(merge(a.elementType, b.elementType, path + "[]", changes), True)
    if isinstance(a, LongType) and isinstance(b, DoubleType):
        changes.append(Change(path, "widened", _show(a), _show(b)))
        return b
    if isinstance(a, DoubleType) and isinstance(b, LongType):
        return a
    if isinstance(a, StringType):
        return a  # a string column holds any value's text
    changes.append(Change(path, "conflict", _show(a), "string"))
    return StringType()


def _show(t: DataType) -> str:
    text = t.simpleString()
    return text if len(text) <= 200 else text[:197] + "..."  # a struct of 400 fields is no column type to read


def keyed_by_data(keys: list[str]) -> bool:
    """True for an object's keys that are a dictionary's data, not a class's property names: a key no
    property is named (a GUID, a number, empty, or with a character a column name cannot hold: as a
    struct's field it was dropped), or more keys than a class has properties."""
    return len(keys) > MAX_STRUCT_FIELDS or any(not k or _DATA_KEY.fullmatch(k) or _BAD_NAME.search(k) for k in keys)


def as_map(t: StructType | MapType, path: str, changes: list[Change]) -> MapType:
    """``t`` as a ``map<string, V>``: a struct's fields are the map's entries, ``V`` their types merged."""
    if isinstance(t, MapType):
        return t
    value: DataType = NullType()
    for f in t.fields:
        value = merge(value, f.dataType, path + "{}", changes)
    return MapType(StringType(), value, True)


def _merged_maps(a: StructType | MapType, b: StructType | MapType, path: str, changes: list[Change]) -> MapType:
    """A map holding ``a`` and ``b`` (either a map, the other a struct the dictionary was seen as before)."""
    if isinstance(a, StructType) and a.fields:
        changes.append(Change(path, "widened", _show(a), "map"))
    left, right = as_map(a, path, changes), as_map(b, path, changes)
    return MapType(StringType(), merge(left.valueType, right.valueType, path + "{}", changes), True)


# ---------------------------------------------------------------- JSON


# How .NET writes a double that is no number: Newtonsoft by default (FloatFormatHandling.String), and
# System.Text.Json with AllowNamedFloatingPointLiterals, as JSON strings. Taken for text, one NaN made a
# double field a string column, every value its text (a review).
NON_FINITE = frozenset({"NaN", "Infinity", "-Infinity"})


# How deep a sampled value is followed: anything nested deeper is typed as its JSON text. ``finish``
# keeps about 40 objects (``MAX_SCHEMA_DEPTH``) anyway; following a body 999 objects deep to its end
# raised RecursionError, which failed its type's every ``bodies`` (a review)
MAX_VALUE_DEPTH = 100


def json_type(value: Any, path: str, changes: list[Change], depth: int = 0) -> DataType:
    if value is None:
        return NullType()
    if isinstance(value, bool):
        return BooleanType()
    if isinstance(value, int):
        return LongType() if -(2**63) <= value < 2**63 else StringType()
    if isinstance(value, float):
        return DoubleType()
    if isinstance(value, str):
        if value in NON_FINITE:  # Newtonsoft's double.NaN and infinities; Spark's from_json reads them so
            return DoubleType()
        return TimestampType() if _TIMESTAMP.fullmatch(value) else StringType()
    if isinstance(value, (list, dict)) and depth >= MAX_VALUE_DEPTH:
        return StringType()
    if isinstance(value, list):
        element: DataType = NullType()
        for item in value:
            element = merge(element, json_type(item, path + "[]", changes, depth + 1), path + "[]", changes)
        return ArrayType(element, True)
    if isinstance(value, dict):
        if path and keyed_by_data(list(value)):
            entry: DataType = NullType()
            for item in value.values():
                entry = merge(entry, json_type(item, path + "{}", changes, depth + 1), path + "{}", changes)
            return MapType(StringType(), entry, True)
        members = ((k, json_type(v, _path(path, k), changes, depth + 1)) for k, v in value.items())
        return _struct(members, path, changes)
    return StringType()


def _struct(members: Any, path: str, changes: list[Change]) -> StructType:
    fields: list[StructField] = []
    seen: dict[str, int] = {}
    for name, dtype in members:
        if path and (not name or _BAD_NAME.search(name)):
            continue  # not reached: such an object is a map (``keyed_by_data``)
        i = seen.get(name.lower())
        if i is None:
            seen[name.lower()] = len(fields)
            fields.append(StructField(name, dtype, True))
        else:  # a repeated XML element, or JSON names differing in case only (one column)
            old = fields[i]
            fields[i] = StructField(old.name, merge(old.dataType, dtype, _path(path, name), changes), True)
    return StructType(fields)


_NOT_JSON = object()


def _loads(text: str) -> Any:
    """The JSON value of ``text`` (``_NOT_JSON``: none). orjson first; the standard library where orjson
    refuses what .NET serializers write and Spark reads: a number past a double's range (``1e400``), an
    integer past 64 bits, ``NaN`` and ``Infinity`` unquoted (Newtonsoft's FloatFormatHandling.Symbol).
    orjson rejected the whole body, and a type whose every sampled body held one was stored with no
    column at all, its rows counted as written (found by two reviews). What orjson rightly refuses stays
    refused: a lone surrogate escape in a *name* (a key no Arrow or Parquet name can hold; it failed the
    type's every run) and nesting past 1,024 levels (Python's recursion limit). A lone surrogate in a
    *value* (a .NET string cut inside an emoji) is still a string: orjson refused the body, and a type whose
    sampled bodies all held one was stored without those fields, its rows counted as written (a review).
    Spark's parser reads such a value, and writes the lone half as a ``?`` (Java's UTF-8 encoder)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON
    return _NOT_JSON if _lone_surrogate_in_a_name(value) else value


def _lone_surrogate_in_a_name(value: Any) -> bool:
    """True when some object's key, at any depth, holds a lone surrogate (UTF-8 cannot encode it)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                try:
                    key.encode("utf-8")
                except UnicodeEncodeError:
                    return True
                pending.append(inner)
        elif isinstance(item, list):
            pending.extend(item)
    return False


def json_root(text: str, keep_type_member: bool) -> StructType | None:
    """The type of one JSON body (None: not a JSON object)."""
    value = _loads(text)
    if not isinstance(value, dict):
        return None
    if not keep_type_member:
        value.pop("$type", None)  # Newtonsoft's type name: the table is the type
    return json_type(value, "", [])  # type: ignore[return-value]


# ---------------------------------------------------------------- XML


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _text_type(text: str | None) -> DataType:
    value = (text or "").strip()
    if not value:
        return NullType()
    if value in ("true", "false"):
        return BooleanType()
    if _LONG.fullmatch(value):
        return LongType()
    if _DOUBLE.fullmatch(value):
        return DoubleType()
    if _TIMESTAMP.fullmatch(value):
        return TimestampType()
    return StringType()


def is_nil(element: ET.Element) -> bool:
    return element.get(_XSI + "nil") in ("true", "1")


def own_attributes(element: ET.Element) -> list[tuple[str, str]]:
    """The element's attributes but namespaced ones (``xsi:nil``, ``xsi:type``: XML's, not the type's)."""
    return [(name, value) for name, value in element.attrib.items() if not name.startswith("{")]


def wrapped_items(element: ET.Element) -> list[ET.Element] | None:
    """The items when ``element`` is an XmlSerializer collection wrapper as far as one body can tell
    (children of one name that repeat, or named like a primitive or nested list's items); else None."""
    children = list(element)
    if not children or own_attributes(element):
        return None
    name = _local(children[0].tag)
    if any(_local(child.tag) != name for child in children[1:]):
        return None
    if len(children) > 1 or name in XML_ITEM_NAMES or name.startswith("ArrayOf"):
        return children
    return None


def wrapper_field(t: DataType, element: DataType) -> StructField | None:
    """The item's field when ``t`` (an XML body's view of a field that is a list of ``element``
    elsewhere) is a wrapper of one item (``struct<OrderLine: ...>``); None: ``t`` is the item itself
    (a list of repeated elements holding one, from_xml's convention), as when ``element`` has a field of
    that name (``<Lines><Sku>A</Sku></Lines>``)."""
    if not isinstance(t, StructType) or len(t.fields) != 1 or t.fields[0].name.startswith("_"):
        return None
    name = t.fields[0].name.lower()
    if isinstance(element, StructType) and any(f.name.lower() == name for f in element.fields):
        return None
    return t.fields[0]


def _as_item(t: DataType, element: DataType) -> DataType:
    """One item's type of a list of ``element`` that an XML body showed as ``t``."""
    f = wrapper_field(t, element)
    if f is None:
        return t
    return f.dataType.elementType if isinstance(f.dataType, ArrayType) else f.dataType


def merge_xml(a: DataType, b: DataType, path: str, changes: list[Change]) -> DataType:
    """``merge`` for XML samples: a field that is a list in either is a list in both first."""
    return merge(repeated_as_arrays(a, b), repeated_as_arrays(b, a), path, changes)


def xml_type(element: ET.Element, path: str, changes: list[Change], root: bool = False, depth: int = 0) -> DataType:
    if is_nil(element):
        return NullType()
    if depth >= MAX_VALUE_DEPTH and len(element):
        return StringType()
    items = None if root else wrapped_items(element)
    if items is not None:
        item: DataType = NullType()
        for child in items:
            item = merge_xml(item, xml_type(child, path + "[]", changes, depth=depth + 1), path + "[]", changes)
        return ArrayType(item, True)
    attributes = [("_" + name, _text_type(value)) for name, value in own_attributes(element)]
    children = list(element)
    if not children and not attributes:
        return _text_type(element.text)
    members: list[tuple[str, DataType]] = list(attributes)
    counts: dict[str, int] = {}
    for child in children:
        counts[_local(child.tag)] = counts.get(_local(child.tag), 0) + 1
    for child in children:
        name = _local(child.tag)
        child_type = xml_type(child, _path(path, name), changes, depth=depth + 1)
        members.append((name, ArrayType(child_type, True) if counts[name] > 1 else child_type))
    if not children and (element.text or "").strip():
        members.append((VALUE_TAG, _text_type(element.text)))
    # a name seen once here and repeated elsewhere becomes one array (``repeated_as_arrays``): from_xml
    # reads a single element into a list of one
    return _struct(members, path, changes)


def xml_root(text: str) -> StructType | None:
    """The type of one XML body: its root element's children and attributes (None: not XML)."""
    try:
        root = ET.fromstring(text.encode("utf-8"))
    except ET.ParseError:
        return None
    found = xml_type(root, "", [], root=True)
    return found if isinstance(found, StructType) else StructType([StructField(VALUE_TAG, found, True)])


# ---------------------------------------------------------------- samples to one schema


def infer(texts: list[str], fmt: str, keep_type_member: bool) -> tuple[StructType, list[Change]]:
    """One schema for the sampled bodies of a type (and version), and the conflicts among them."""
    schema: DataType = StructType([])
    changes: list[Change] = []
    for text in texts:
        found = json_root(text, keep_type_member) if fmt == "json" else xml_root(text)
        if found is not None:
            schema = merge_xml(schema, found, "", changes) if fmt == "xml" else merge(schema, found, "", changes)
    assert isinstance(schema, StructType)
    return schema, [c for c in changes if c.kind == "conflict"]


def key_spellings(
    texts: list[str], into: dict[str, set[str]], data_keys: set[str], schema: DataType | None = None
) -> None:
    """Every spelling of every object key in the JSON ``texts``, by lower case name, added to ``into``
    (``evolve.spelled`` keeps the names spelled more than one way); a dictionary's data keys, in lower
    case, to ``data_keys`` instead (they are no field's spellings). A dictionary is an object whose keys
    look like data (``keyed_by_data``), or one where the table's ``schema`` holds a map."""
    for text in texts:
        _spellings(_loads(text), schema, into, data_keys, root=True)


def _spellings(
    value: Any, t: DataType | None, into: dict[str, set[str]], data_keys: set[str], root: bool = False, depth: int = 0
) -> None:
    if depth >= MAX_VALUE_DEPTH:  # deeper keys are inside a value typed as its text (``json_type``)
        return
    if isinstance(value, list):
        element = t.elementType if isinstance(t, ArrayType) else None
        for item in value:
            _spellings(item, element, into, data_keys, depth=depth + 1)
    elif isinstance(value, dict):
        # a dictionary: its keys are data, its values may hold names. Never the body itself: its keys are
        # columns, a name with a space too (``parse.encoded``); one such key made every root key data, and
        # ``{"order id": 2, "total": 6}`` after ``{"Order Id": 1, "Total": 5}`` kept neither (a review)
        data = isinstance(t, MapType) or (not root and keyed_by_data(list(value)))
        fields = {f.name.lower(): f.dataType for f in t.fields} if isinstance(t, StructType) else {}
        for key, item in value.items():
            if data:
                data_keys.add(key.lower())
            else:
                into.setdefault(key.lower(), set()).add(key)
            inner = t.valueType if isinstance(t, MapType) else fields.get(key.lower())
            _spellings(item, inner, into, data_keys, depth=depth + 1)


# How deep the Delta schema's JSON may nest (a struct field costs 3 levels: its type, the fields list,
# the field; a list 2): delta-rs parses it with serde_json, whose limit is 128, and panicked on a body
# nested 45 objects deep (a category tree), failing the type's every ``bodies`` with no summary
MAX_SCHEMA_DEPTH = 120


def finish(t: DataType, depth: int = 1) -> DataType:
    """Storable: a type never seen with a value is a string; a struct with no fields too; a value nested
    past ``MAX_SCHEMA_DEPTH`` is its JSON text (a string column holds any value's text)."""
    if isinstance(t, NullType):
        return StringType()
    if isinstance(t, ArrayType):
        if depth + 2 > MAX_SCHEMA_DEPTH:
            return StringType()
        return ArrayType(finish(t.elementType, depth + 2), True)
    if isinstance(t, MapType):
        if depth + 2 > MAX_SCHEMA_DEPTH:
            return StringType()
        return MapType(StringType(), finish(t.valueType, depth + 2), True)
    if isinstance(t, StructType):
        if not t.fields or depth + 3 > MAX_SCHEMA_DEPTH:
            return StringType()
        return StructType([StructField(f.name, finish(f.dataType, depth + 3), True) for f in t.fields])
    return t


def repeated_as_arrays(t: DataType, other: DataType) -> DataType:
    """XML: a field that is a list in ``other`` (another sample) is a list here too, not a conflict:
    the one element it showed is the list's one item, or XmlSerializer's wrapper around it."""
    if isinstance(t, StructType) and isinstance(other, StructType):
        theirs = {f.name.lower(): f.dataType for f in other.fields}
        fields = []
        for f in t.fields:
            o = theirs.get(f.name.lower())
            dtype = f.dataType
            if isinstance(o, ArrayType) and not isinstance(dtype, ArrayType):
                dtype = ArrayType(repeated_as_arrays(_as_item(dtype, o.elementType), o.elementType), True)
            elif o is not None:
                dtype = repeated_as_arrays(dtype, o)
            fields.append(StructField(f.name, dtype, True))
        return StructType(fields)
    if isinstance(t, ArrayType) and isinstance(other, ArrayType):
        return ArrayType(repeated_as_arrays(t.elementType, other.elementType), True)
    return t

"""Bodies to typed columns in Spark: ``from_json`` with the table's schema, and each row's verdict.
XML bodies are first rewritten as JSON text for that schema (``xml_serializer``: XmlSerializer's list
wrappers, empty lists and ``xsi:nil``, which ``from_xml`` cannot read as a JSON body's list), so a type
whose endpoints moved from XML to JSON lands both in the same columns with the same values.

A row is written to its type's table when it parsed, or parsed in part (its JSON is a valid object,
but a value did not fit its column's type: a shape the sampled rows did not show; that field is
null). A row that did not parse at all, or only in part, is recorded in ``body_unparsed`` with the
reason; it never stops its type's table or any other.

Body fields become top-level columns after the identity columns; a field named like one of them
(case-insensitively, ``Queue``, ``message_id``) is stored as ``body_<field>``. A field whose name a
Delta column cannot hold without column mapping (which would lift the table's protocol past what other
readers take: a space, ``,;{}()=``, a tab, a newline, or no name at all) is stored under its name
encoded as .NET's ``XmlConvert.EncodeName`` does it: each such character as ``_xHHHH_`` (``Order Id`` is
``Order_x0020_Id``, the empty name ``_x0000_``), a ``_xHHHH`` the name holds itself escaped as
``_x005F_xHHHH``, so that the column gives its field back exactly (``key_of``). Such fields were dropped
with no record (a review).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from queuelake.lake.stage_tables import BODY_IDENTITY
from queuelake.pipeline.bodies.infer import CORRUPT
from queuelake.pipeline.bodies.xml_serializer import json_of_xml

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

IDENTITY = BODY_IDENTITY.names
# characters a Delta column name cannot hold without column mapping
BAD_NAME = re.compile(r"[ ,;{}()\n\t=]")
_ESCAPED_CHAR = re.compile(r"_x([0-9A-Fa-f]{4})_")
_ESCAPE_LIKE = re.compile(r"_(x[0-9A-Fa-f]{4})")
_EMPTY = "_x0000_"
_RESERVED = {n.lower() for n in IDENTITY} | {CORRUPT}
PARTLY = "partly parsed: a value does not fit its column's type (a shape the sampled bodies did not show)"
# fields (in the schema's order, nested ones after their parent) a partly parsed row's reason may name:
# each is one more JSON path looked up in such a row, and past this many the reason names none
NAMED_FIELDS = 64


def does_not_fit(field: str) -> str:
    """The reason of a row whose ``field`` (a path: ``Meta.Total``) held a value its column's type cannot
    take: the field named, as ``out_of_range`` names a time's (a review: one text for every field)."""
    return (
        f"partly parsed: {field} does not fit its column's type "
        "(a shape the sampled bodies did not show; its column holds null)"
    )


def out_of_range(field: str) -> str:
    """The reason of a row whose ``field`` held a time no reader holds: the field named, a type may have many
    (a review: the reason was one text for every field)."""
    return f"partly parsed: {field} is a time outside 0001-01-01 .. 9999-12-31 UTC (its column holds null)"


# the first and the last microsecond .NET's DateTime (and pyarrow's datetime) can hold, in UTC
_FIRST_MICROS, _LAST_MICROS = -62_135_596_800_000_000, 253_402_300_799_999_999


def _escaped(name: str) -> bool:
    """True for a reserved name with any number of ``body_`` before it (``queue``, ``body_queue``, ...)."""
    lowered = name.lower()
    while lowered.startswith("body_") and lowered[5:]:
        lowered = lowered[5:]
    return lowered in _RESERVED


def column_of(key: str) -> str:
    """The column of a body's field: ``body_`` before a name the typed table's own columns use, and before
    a field that already reads like such a column (``body_queue``), so that two fields never share one
    column (a body with ``Queue`` and ``body_queue`` failed its type's every ``bodies``: two columns
    ``body_queue``); a name no column can hold, encoded (``encoded``)."""
    return f"body_{key}" if _escaped(key) else encoded(key)


def key_of(column: str) -> str:
    """The body field of a column (``column_of``'s inverse)."""
    if column.lower().startswith("body_") and _escaped(column[5:]):
        return column[5:]
    return decoded(column)


def encoded(key: str) -> str:
    """``key`` as a column name: itself when a column can hold it and it holds no ``_xHHHH_``; else each
    character a column cannot hold as ``_xHHHH_`` and each ``_xHHHH`` of its own as ``_x005F_xHHHH``
    (``XmlConvert.EncodeName``'s scheme); the empty name as ``_x0000_``."""
    if not key:
        return _EMPTY
    if not BAD_NAME.search(key) and not _ESCAPED_CHAR.search(key):
        return key
    key = _ESCAPE_LIKE.sub(r"_x005F_\1", key)
    return BAD_NAME.sub(lambda m: f"_x{ord(m.group(0)):04X}_", key)


def decoded(column: str) -> str:
    """``encoded``'s inverse."""
    if column == _EMPTY:
        return ""
    if "_x" not in column:
        return column
    return _ESCAPED_CHAR.sub(lambda m: chr(int(m.group(1), 16)), column)


def to_keys(columns: StructType) -> StructType:
    """A table's body columns as the bodies' own field names."""
    return StructType([StructField(key_of(f.name), f.dataType, True) for f in columns.fields])


def to_columns(keys: StructType) -> StructType:
    return StructType([StructField(column_of(f.name), f.dataType, True) for f in keys.fields])


def parsed(
    rows: DataFrame,
    schema: StructType,
    xml: bool = True,
    respell: dict[str, str] | None = None,
    alternates: dict[str, list[str]] | None = None,
) -> DataFrame:
    """``rows`` (the selection's columns) with ``p``: the body as ``schema`` (field names as in the
    body), ``verdict`` (null: written; else the reason it goes to ``body_unparsed``) and ``written``.
    ``xml``: the rows may hold XML bodies (False: none do, so no Python UDF runs). ``respell``: JSON keys
    written in the schema's spelling first (``evolve.respellings``: ``orderId`` -> ``OrderId``).
    ``alternates``: a root field's other spellings left unrespelled (``evolve.root_alternates``), whose
    values fill the field where the body has none under its own spelling."""
    from pyspark.sql import functions as F

    taken = {f.name.lower() for f in schema.fields}
    corrupt_name = CORRUPT  # a name no body field has (a body's own ``_corrupt_record`` failed its type: a review)
    while corrupt_name.lower() in taken:
        corrupt_name = "_" + corrupt_name
    with_corrupt = StructType([*schema.fields, StructField(corrupt_name, StringType(), True)])
    options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": corrupt_name}
    is_xml = F.col("format") == "xml"
    source = F.col("text")
    for spelling, name in sorted((respell or {}).items()):
        source = F.regexp_replace(source, _key_pattern(spelling), f"$1{_replacement(name)}$2")
    if xml:  # null in, null out for JSON rows: a Python UDF is not skipped inside a CASE
        source = F.when(is_xml, json_of_xml(F.when(is_xml, F.col("text")), schema)).otherwise(source)
    df = rows.withColumn("_json", source)
    p = F.when(F.col("format").isin("json", "xml"), F.from_json(F.col("_json"), with_corrupt, options))
    p, alternate_unfit = _with_alternates(p, schema, alternates or {}, corrupt_name, options)
    df = df.withColumn("p", p)
    corrupt = F.col("p").getField(corrupt_name)
    if alternate_unfit is not None:  # a value under another spelling that did not fit: partly parsed too
        corrupt = F.when(alternate_unfit, F.lit("alternate")).otherwise(corrupt)
    partly = F.from_json(F.col("_json"), "map<string,string>").isNotNull()  # a JSON object
    malformed = F.concat(F.lit("malformed "), F.upper(F.col("format")))
    verdict = (
        F.when(F.col("reason").isNotNull(), F.col("reason"))
        .when(F.col("p").isNull(), malformed)
        .when(
            corrupt.isNotNull(), F.when(partly, F.coalesce(*_unfit_fields(schema), F.lit(PARTLY))).otherwise(malformed)
        )
    )
    for field, outside in _times_outside(schema):  # the first such field of the row named
        verdict = verdict.when(outside, F.lit(out_of_range(field)))
    written = F.col("reason").isNull() & F.col("p").isNotNull() & (corrupt.isNull() | partly)
    return df.withColumn("verdict", verdict).withColumn("written", written)


def _with_alternates(
    p: Column, schema: StructType, alternates: dict[str, list[str]], corrupt_name: str, options: dict[str, str]
) -> tuple[Column, Column | None]:
    """``p`` with each root field taken from its other spellings where its own is absent: each spelling
    read by a parse of its own (one struct per rank of spelling, so that no struct holds two names
    differing in case only, which Spark's field access could not tell apart). Also whether a value under
    another spelling did not fit its field's type (None: no alternates): it was written null with no
    record while its twin under the field's own spelling was recorded as partly parsed (a review)."""
    from functools import reduce

    from pyspark.sql import functions as F

    if not alternates:
        return p, None
    types = {f.name: f.dataType for f in schema.fields}
    ranks = max(len(spellings) for spellings in alternates.values())
    structs = []
    for rank in range(ranks):
        fields = [StructField(s[rank], types[name], True) for name, s in alternates.items() if rank < len(s)]
        fields.append(StructField(corrupt_name, StringType(), True))
        structs.append(F.when(F.col("format") == "json", F.from_json(F.col("_json"), StructType(fields), options)))
    for name, spellings in sorted(alternates.items()):
        found = [structs[rank].getField(spelling) for rank, spelling in enumerate(spellings)]
        p = p.withField(_quoted(name), F.coalesce(p.getField(name), *found))
    unfit = [F.coalesce(s.getField(corrupt_name).isNotNull(), F.lit(False)) for s in structs]
    return p, reduce(lambda a, b: a | b, unfit)


def _unfit_fields(schema: StructType) -> list[Column]:
    """Per field (depth first, at most ``NAMED_FIELDS``): its reason where the body holds a value for it
    (a JSON path into the row's ``_json``, whose keys are in the schema's spelling) and the parse left
    it null, the value that did not fit; else null. An element of a list names its list; a value found
    only under another spelling (``alternates``), or a name no JSON path can spell, names none."""
    from pyspark.sql import functions as F

    out: list[Column] = []

    def walk(fields: list[StructField], parents: list[str], parsed: Column) -> None:
        for field in fields:
            names = [*parents, field.name]
            if len(out) >= NAMED_FIELDS:
                return
            if any(c in name for name in names for c in "'[]\\"):
                continue
            path = "$" + "".join(f"['{name}']" for name in names)
            value = parsed.getField(field.name)
            present = F.get_json_object(F.col("_json"), path).isNotNull()
            out.append(F.when(present & value.isNull(), F.lit(does_not_fit(".".join(names)))))
            if isinstance(field.dataType, StructType):
                walk(field.dataType.fields, names, value)

    walk(schema.fields, [], F.col("p"))
    return out


def _quoted(name: str) -> str:
    """A field name as ``withField`` takes it: a path, so a name with a dot or a backquote is quoted."""
    return "`" + name.replace("`", "``") + "`"


def _outside(field: str) -> Column:
    from pyspark.sql import functions as F

    micros = F.unix_micros(F.col("p").getField(field))
    return (micros < F.lit(_FIRST_MICROS)) | (micros > F.lit(_LAST_MICROS))


def _times_outside(schema: StructType) -> list[tuple[str, Column]]:
    """True for a row whose body's time (a top-level timestamp field) lies outside what .NET's DateTime
    and pyarrow hold: ``0001-01-01T00:00:00+05:00`` is year 0 in UTC, Spark parses and Parquet stores it,
    and then no Python reader of the table could read it, nor an endpoint parse what publish sent of
    it (a review). Such a field is written null (``typed``) and the row recorded as partly parsed. Each
    top-level timestamp field with its check."""
    return [(f.name, _outside(f.name)) for f in schema.fields if isinstance(f.dataType, TimestampType)]


def _key_pattern(spelling: str) -> str:
    """A JSON object's key ``spelling`` and no other text: an unescaped quote after ``{`` or ``,`` (and
    spaces) opens a key, never a string value's text, where every quote is escaped. A character past
    ASCII matches as written (UTF-8) and as its ``\\uXXXX`` escape in either case (System.Text.Json's
    default encoder writes ``pr\\u00E9nom``); Java's regex syntax for this is Python's."""
    return r'([{,]\s*)"' + "".join(_key_char(c) for c in spelling) + r'"(\s*:)'


def _key_char(char: str) -> str:
    if char in '"\\' or ord(char) < 0x20:
        return re.escape(json.dumps(char)[1:-1])  # as JSON escapes it
    if ord(char) < 0x80:
        return re.escape(char)
    units = char.encode("utf-16-be")  # a character past the BMP: its surrogate pair
    escaped = "".join(rf"\\u(?i:{units[i]:02x}{units[i + 1]:02x})" for i in range(0, len(units), 2))
    return f"(?:{re.escape(char)}|{escaped})"


def _replacement(name: str) -> str:
    """``name`` as a quoted JSON key (UTF-8 as it is) in a Java regex replacement (``$`` and ``\\``
    escaped)."""
    return json.dumps(name, ensure_ascii=False).replace("\\", "\\\\").replace("$", "\\$")


def typed(df: DataFrame, schema: StructType) -> DataFrame:
    """The rows to write: identity columns, then the body's fields as columns."""
    from pyspark.sql import functions as F

    body = [
        (
            F.when(_outside(f.name), F.lit(None)).otherwise(F.col("p").getField(f.name))
            if isinstance(f.dataType, TimestampType)
            else F.col("p").getField(f.name)
        ).alias(column_of(f.name))
        for f in schema.fields
    ]
    return df.where(F.col("written")).select(*[F.col(c) for c in IDENTITY], *body)


def unparsed(df: DataFrame, journal_version: int) -> DataFrame:
    """The rows for ``body_unparsed``."""
    from pyspark.sql import functions as F

    return df.where(F.col("verdict").isNotNull()).select(
        "message_id",
        "queue",
        "seq",
        "id",
        "message_type",
        "type_name",
        "content_type",
        F.col("verdict").alias("reason"),
        F.substring(F.col("text"), 1, 200).alias("body_start"),
        F.lit(journal_version).cast("long").alias("journal_version"),
        F.current_timestamp().alias("recorded_at"),
    )

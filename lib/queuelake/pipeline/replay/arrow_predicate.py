"""A simple ``--where`` evaluated without Spark, as a pyarrow expression over the journal's columns.

Why: a retry's predicate is nearly always a few comparisons of journal columns with literals
(``exception_type = '...' AND time_of_failure >= '2026-11-01'``), and starting Spark for it was
most of a small replay's time: the whole command cost 20-35 s when the work was ten rows. Such a
predicate is translated here into a pyarrow expression that selects the rows and, through the
Parquet statistics of each row group, skips the row groups that cannot match.

The translation accepts a small language in which Spark SQL and pyarrow mean the same thing, and
returns None for anything else, which then goes to Spark as before (so no predicate means something
different here than there):

- ``AND``, ``OR``, ``NOT``, parentheses, ``TRUE``/``FALSE``; SQL's three-valued logic (a comparison
  with a null is null, and a row whose predicate is null is not selected) holds in both;
- ``=``, ``!=``/``<>``, ``<``, ``<=``, ``>``, ``>=``, ``BETWEEN``, ``IN (...)``, ``LIKE`` and
  ``IS [NOT] NULL``, each between one journal column and literals;
- text columns with text literals (compared by UTF-8 bytes in both), ``seq`` with whole numbers,
  time columns with ISO-8601 text (``2026-11-01``, ``2026-11-01T08:30:00Z``, ``...+01:00``), read in
  the session's time zone when it names none, as Spark casts it.

Left to Spark: functions, arithmetic, the map, list and binary columns, backslashes in the text
(Spark reads escapes there), numbers as text and text as numbers, anything sqlglot cannot parse.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

_TEXT = pa.string()
_TIME_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?)?(?:Z|[+-]\d{2}:\d{2})?")
_INTEGER = re.compile(r"[0-9]{1,19}")  # a bigint: SQL Server RowVersions reach 19 digits


@dataclass(frozen=True)
class ArrowPredicate:
    """The predicate as a pyarrow expression, and the journal columns it reads."""

    expression: ds.Expression
    columns: frozenset[str]


class _Untranslatable(Exception):
    """Outside the language both engines read alike: Spark evaluates it."""


def arrow_predicate(predicate: str, schema: pa.Schema, time_zone: str = "UTC") -> ArrowPredicate | None:
    """``predicate`` (already checked by ``check_predicate``) as a pyarrow expression over ``schema``,
    or None when Spark must evaluate it."""
    import sqlglot
    from sqlglot import errors

    if "\\" in predicate:
        return None
    try:
        tree = sqlglot.parse_one(predicate, read="spark")
    except (errors.ParseError, errors.TokenError):
        return None
    translator = _Translator(schema, time_zone)
    try:
        expression = translator.boolean(tree)
    except _Untranslatable:
        return None
    return ArrowPredicate(expression, frozenset(translator.columns))


_COMPARISONS: dict[str, tuple[Callable[[ds.Expression, object], ds.Expression], str]] = {
    # sqlglot node name: (the comparison, the one with its sides swapped)
    "EQ": (lambda f, v: f == v, "EQ"),
    "NEQ": (lambda f, v: f != v, "NEQ"),
    "GT": (lambda f, v: f > v, "LT"),
    "GTE": (lambda f, v: f >= v, "LTE"),
    "LT": (lambda f, v: f < v, "GT"),
    "LTE": (lambda f, v: f <= v, "GTE"),
}


class _Translator:
    def __init__(self, schema: pa.Schema, time_zone: str) -> None:
        self.fields = {f.name.lower(): f for f in schema}
        self.time_zone = time_zone
        self.columns: set[str] = set()

    def boolean(self, node: object) -> ds.Expression:
        from sqlglot import exp

        if isinstance(node, exp.Paren):
            return self.boolean(node.this)
        if isinstance(node, exp.And):
            return self.boolean(node.this) & self.boolean(node.expression)
        if isinstance(node, exp.Or):
            return self.boolean(node.this) | self.boolean(node.expression)
        if isinstance(node, exp.Not):
            return ~self.boolean(node.this)
        if isinstance(node, exp.Boolean):
            return ds.scalar(bool(node.this))
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            return self.column(node.this)[0].is_null()
        if isinstance(node, exp.Between):
            field, type_ = self.column(node.this)
            return (field >= self.literal(node.args["low"], type_)) & (field <= self.literal(node.args["high"], type_))
        if isinstance(node, exp.In) and not node.args.get("query") and not node.args.get("unnest"):
            field, type_ = self.column(node.this)
            values = [self.literal(v, type_) for v in node.expressions]
            if not values:
                raise _Untranslatable
            # equalities, not is_in: is_in says false for a null column, and NOT IN would then select it
            out = field == values[0]
            for value in values[1:]:
                out = out | (field == value)
            return out
        if isinstance(node, exp.Like) and not node.args.get("escape"):
            field, type_ = self.column(node.this)
            if type_ != _TEXT:
                raise _Untranslatable
            pattern = self.literal(node.expression, type_)
            return pc.match_like(field, pattern.as_py())
        name = type(node).__name__
        if name in _COMPARISONS and isinstance(node, exp.Binary):
            left, right = node.this, node.expression
            op = name
            if isinstance(left, (exp.Literal, exp.Neg)) and isinstance(right, exp.Column):
                left, right, op = right, left, _COMPARISONS[name][1]
            field, type_ = self.column(left)
            return _COMPARISONS[op][0](field, self.literal(right, type_))
        raise _Untranslatable

    def column(self, node: object) -> tuple[ds.Expression, pa.DataType]:
        from sqlglot import exp

        if not isinstance(node, exp.Column) or node.table or not isinstance(node.this, exp.Identifier):
            raise _Untranslatable
        field = self.fields.get(str(node.this.this).lower())  # Spark resolves names case-insensitively
        if field is None:
            raise _Untranslatable  # Spark says which column is missing
        type_ = field.type
        if not (type_ == _TEXT or type_ == pa.int64() or pa.types.is_timestamp(type_)):
            raise _Untranslatable
        self.columns.add(field.name)
        return ds.field(field.name), type_

    def literal(self, node: object, type_: pa.DataType) -> pa.Scalar:
        from sqlglot import exp

        sign = 1
        if isinstance(node, exp.Neg) and type_ == pa.int64():
            node, sign = node.this, -1
        if not isinstance(node, exp.Literal):
            raise _Untranslatable
        text = str(node.this)
        if type_ == _TEXT:
            if not node.is_string:
                raise _Untranslatable
            return pa.scalar(text, _TEXT)
        if type_ == pa.int64():
            if node.is_string or not _INTEGER.fullmatch(text):
                raise _Untranslatable
            value = sign * int(text)
            if not -(2**63) <= value < 2**63:  # Spark reads a larger number as a decimal
                raise _Untranslatable
            return pa.scalar(value, pa.int64())
        if not node.is_string:
            raise _Untranslatable
        return pa.scalar(self.instant(text), type_)

    def instant(self, text: str) -> dt.datetime:
        """ISO-8601 text as Spark casts it to a timestamp; only the forms both read alike."""
        if not _TIME_TEXT.fullmatch(text):
            raise _Untranslatable
        try:
            value = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        except ValueError:
            raise _Untranslatable from None
        if value.tzinfo is None:
            try:
                value = value.replace(tzinfo=zoneinfo.ZoneInfo(self.time_zone))
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                raise _Untranslatable from None
        try:
            return value.astimezone(dt.timezone.utc)
        except OverflowError:
            raise _Untranslatable from None

"""``erase --where``: the predicate checked as replay's is, then as one ``RowFilter`` for the lake.

Why here and not in Spark: an erase deletes, so the predicate must mean one thing wherever it is
evaluated. It is accepted only in the small language both pyarrow and the delete's SQL engine
(DataFusion, inside delta-rs) read alike, the language replay already evaluates without Spark
(``pipeline/replay/arrow_predicate.py``): comparisons, ``IN``, ``BETWEEN``, ``LIKE`` and ``IS NULL``
of journal columns with literals, joined by ``AND``/``OR``/``NOT``. The pyarrow form counts and lists
the rows (dry run, derived tables' keys); the SQL form, rendered from the same parsed tree with the
columns spelt as the journal spells them and times as UTC instants, is what the delete runs.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from queuelake.errors import ArgumentError
from queuelake.lake.deletes import RowFilter
from queuelake.pipeline.replay.arrow_predicate import arrow_predicate
from queuelake.pipeline.replay.predicate import check_predicate
from queuelake.timetext import iso_utc


def matches_every_row(predicate: str) -> bool:
    """Whether ``predicate`` holds for any row whatever its values (``TRUE``, ``1 = 1``, ``NOT FALSE``,
    ``x > 3 OR 1 = 1``): sqlglot's simplifier folds it to the literal TRUE. An erase of the whole journal
    must be asked for as such (``--all``), never be a typo's side effect (issue 59)."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.optimizer.simplify import simplify

    try:
        folded = simplify(sqlglot.parse_one(predicate, read="spark"))
    except sqlglot.errors.SqlglotError:
        return False  # not ours to judge: row_filter says what is wrong with it
    return isinstance(folded, exp.Boolean) and bool(folded.this)


def row_filter(predicate: str | None, schema: pa.Schema) -> RowFilter:
    """The erase's selection over the journal (``schema``); ArgumentError names what is wrong."""
    import sqlglot
    from sqlglot import errors, exp

    text = check_predicate(predicate)
    try:
        tree = sqlglot.parse_one(text, read="spark")
    except (errors.ParseError, errors.TokenError) as exc:
        raise ArgumentError(f"--where {text!r} does not parse: {str(exc).splitlines()[0]}") from None
    fields = {f.name.lower(): f for f in schema}
    columns = list(tree.find_all(exp.Column))
    unknown = sorted({c.name for c in columns if c.name.lower() not in fields})
    if unknown:
        raise ArgumentError(
            f"--where names unknown column(s) {', '.join(unknown)}: the journal's columns are {', '.join(schema.names)}"
        )
    if "\\" in text:  # replay hands these to Spark; an erase has no engine whose reading it can vouch for
        raise ArgumentError(
            f"--where {text!r}: erase takes no backslash in its literals: Spark reads \\' and \\\\ as escapes, "
            "the delete's engines do not, and what an erase deletes must mean the same to every engine; name the "
            "rows another way (queue = '...' AND seq = N, their message_id, or LIKE with _ for the character)"
        )
    selection = arrow_predicate(text, schema)
    if selection is None and any(isinstance(c, exp.Concat) for c in tree.find_all(exp.Concat)):
        # 'O''Brien' is SQL's quote in a literal, but two literals joined in Spark's SQL ('OBrien'): said as such
        raise ArgumentError(
            f"--where {text!r}: '' is not a quote inside a literal here (Spark joins 'a''b' into 'ab'); write a "
            'literal holding a single quote in double quotes ("O\'Brien"), or one holding both kinds of quote with '
            "LIKE and _ for the quote"
        )
    if selection is None:
        raise ArgumentError(
            f"--where {text!r}: erase takes comparisons (=, <>, <, <=, >, >=, BETWEEN, IN, LIKE, IS [NOT] NULL) of "
            "journal text, seq and time columns with literals, joined by AND, OR, NOT; no functions, maps, lists "
            "or bodies (what it deletes must mean the same to every engine)"
        )
    for column in columns:
        field = fields[column.name.lower()]
        column.set("this", exp.to_identifier(field.name, quoted=True))
        if pa.types.is_timestamp(field.type):
            _times_as_utc(column)
    sql = tree.sql(dialect="postgres", identify=True)
    return RowFilter(sql, selection.expression, tuple(sorted(selection.columns)))


def _times_as_utc(column: object) -> None:
    """The text literals a time column is compared with, as UTC instants (as ``arrow_predicate`` reads
    them: a time without a zone is UTC), so the delete's engine reads the same instant."""
    from sqlglot import exp

    parent = column.parent  # type: ignore[attr-defined]
    for literal in parent.find_all(exp.Literal) if parent is not None else ():
        if not literal.is_string:
            continue
        text = str(literal.this)
        value = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
        literal.replace(exp.Literal.string(iso_utc(value)))

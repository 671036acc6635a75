"""``--where``: one deterministic Spark SQL boolean expression over the journal's ``messages``.

Why a module: the predicate is the replay's only user-written code. It is checked here before anything
starts (no second statement, no subquery, nothing whose value differs between two runs, since a rerun
must select the same rows), then either evaluated without Spark (``arrow_filter``) or handed to Spark.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from queuelake.errors import ArgumentError, QueuelakeError
from queuelake.report import log

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from queuelake.config_sections import TransportConfig


# Functions whose value differs between two runs: the selection must come out the same on a rerun.
# reflect / java_method call Java: no business in a filter.
_REFUSED_FUNCTIONS = {
    "rand": "random",
    "randn": "random",
    "random": "random",
    "uuid": "random",
    "shuffle": "random",
    "current_timestamp": "time-dependent",
    "current_date": "time-dependent",
    "current_time": "time-dependent",
    "curdate": "time-dependent",
    "now": "time-dependent",
    "localtimestamp": "time-dependent",
    "reflect": "a Java call",
    "java_method": "a Java call",
    "try_reflect": "a Java call",
}
_BARE_TIME = {"current_timestamp", "current_date", "current_time", "localtimestamp"}  # valid without ()
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _code_only(predicate: str) -> str:
    """The predicate with string literals, quoted identifiers and comments blanked out, so that the
    checks below see only code: ``exception_type = 'a;b'`` holds no second statement."""
    out: list[str] = []
    i, n = 0, len(predicate)
    while i < n:
        ch = predicate[i]
        if ch in ("'", '"', "`"):
            j = i + 1
            while j < n:
                if ch != "`" and predicate[j] == "\\":
                    j += 2
                    continue
                if predicate[j] == ch:
                    if j + 1 < n and predicate[j + 1] == ch:  # a doubled quote inside
                        j += 2
                        continue
                    break
                j += 1
            if j >= n:
                raise ArgumentError(f"--where: unterminated {ch}-quoted text in {predicate!r}")
            out.append(" x " if ch == "`" else " '' ")
            i = j + 1
        elif predicate.startswith("--", i):
            j = predicate.find("\n", i)
            i = n if j < 0 else j
            out.append(" ")
        elif predicate.startswith("/*", i):
            j = predicate.find("*/", i + 2)
            if j < 0:
                raise ArgumentError(f"--where: unterminated comment in {predicate!r}")
            i = j + 2
            out.append(" ")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def check_predicate(predicate: str | None) -> str:
    """Refuse what is not one deterministic boolean expression over ``messages``, naming the problem
    (Spark then parses and analyses it: ``validate_against``)."""
    if predicate is None or not predicate.strip():
        raise ArgumentError("--where is required: a Spark SQL predicate over messages, e.g. \"exception_type = 'X'\"")
    code = _code_only(predicate)
    if ";" in code:
        raise ArgumentError(
            f"--where must be a single boolean expression over messages; {predicate!r} holds ';' "
            "(a second statement): refused"
        )
    words = [(m.group(0).lower(), m.end()) for m in _WORD.finditer(code)]
    for word, end in words:
        if word == "select":
            raise ArgumentError(
                f"--where must be a single boolean expression over messages; {predicate!r} holds a subquery "
                "(SELECT): refused"
            )
        why = _REFUSED_FUNCTIONS.get(word)
        if why is None:
            continue
        called = code[end:].lstrip().startswith("(")
        if called or word in _BARE_TIME:
            raise ArgumentError(
                f"--where {predicate!r} calls {word}(), which is {why}: a rerun of the replay must select the "
                "same rows, so use literal values (e.g. time_of_failure >= '2026-05-01T00:00:00Z')"
            )
    return predicate.strip()


def check_columns(predicate: str, columns: list[str], transport: TransportConfig | None = None) -> None:
    """Refuse a predicate naming a column the journal does not have, before any Spark starts (a typo
    used to be reported after a session's start, 11 s; erase reports it in under one). Lambda variables
    (``exists(arr, x -> ...)``) and qualified names are Spark's to judge, as is text sqlglot cannot parse.
    With ``transport``, a queue's short name is refused too (``check_queue_names``, on the same parse:
    a failure group's predicate names thousands of rows)."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(predicate, read="spark")
    except sqlglot.errors.SqlglotError as exc:
        # said now: Spark's verdict comes only once its session has started (52 s on a busy laptop, a
        # review); sqlglot does not read every Spark SQL form, so this is a warning, not a refusal
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        log.warning("--where could not be parsed here (%s); Spark judges it once its session has started", reason)
        return
    bound = {v.name.lower() for fn in tree.find_all(exp.Lambda) for v in fn.expressions}
    known = {c.lower() for c in columns}
    named = {c.name for c in tree.find_all(exp.Column) if not c.table and c.name}
    unknown = sorted(n for n in named if n.lower() not in known and n.lower() not in bound)
    if unknown:
        raise ArgumentError(
            f"--where names unknown column(s) {', '.join(unknown)}: the journal's columns are {', '.join(columns)}"
        )
    if transport is not None:
        _refuse_short_queue_names(tree, transport)


def check_queue_names(predicate: str, transport: TransportConfig) -> None:
    """Refuse a predicate comparing ``queue`` (``=``, ``<>``, ``IN``) with a queue's short name: the
    journal's ``queue`` holds each queue's canonical address (``"public"."Sales"``), so ``queue = 'Sales'``
    matches no row and ``queue <> 'Sales'`` every row. An erase of ``queue = 'Sales' AND seq = 1234``, as
    the docs showed it, ended "ok" having removed nothing (a review). Text sqlglot cannot parse is left
    to ``check_columns`` and Spark."""
    import sqlglot

    try:
        tree = sqlglot.parse_one(predicate, read="spark")
    except sqlglot.errors.SqlglotError:
        return
    _refuse_short_queue_names(tree, transport)


def _refuse_short_queue_names(tree: Any, transport: TransportConfig) -> None:
    """``check_queue_names`` on a parsed ``tree`` (sqlglot's; its class's name changed between versions)."""
    from sqlglot import exp

    from queuelake.transport.table_refs import queue_ref

    short: dict[str, str] = {}
    for node in tree.find_all(exp.EQ, exp.NEQ, exp.In):
        if isinstance(node, exp.In):
            column, literals = node.this, node.expressions
        elif isinstance(node.this, exp.Column):
            column, literals = node.this, [node.expression]
        else:  # 'Sales' = queue
            column, literals = node.expression, [node.this]
        if not (isinstance(column, exp.Column) and column.name.lower() == "queue" and not column.table):
            continue
        for literal in literals:
            if not (isinstance(literal, exp.Literal) and literal.is_string):
                continue
            try:
                canonical = queue_ref(literal.this, transport).canonical
            except QueuelakeError:
                continue  # not an address at all: it matches nothing, as any other text would
            if canonical != literal.this:
                short[literal.this] = canonical
    if short:
        named = ", ".join(f"'{name}' (write '{canonical}')" for name, canonical in short.items())
        raise ArgumentError(
            f"--where compares queue with {named}: the journal's queue column holds each queue's canonical "
            "address, as find and where show it, so a short name matches no row"
        )


def _spark_reason(exc: BaseException) -> str:
    """The first meaningful line of a Spark error, without the JVM stack."""
    for line in str(exc).splitlines():
        line = line.strip()
        if line and not line.startswith(("at ", "JVM stacktrace", "== ")):
            return line[:400]
    return type(exc).__name__


# where Spark's messages place an error: "(line 3, pos 0)" after a parse error, "; line 2 pos 0;" after
# an analysis error
_POSITION = re.compile(r"(\(line |; line )(\d+)(,? pos )(\d+)")
_CLOSING = re.compile(r"at or near '\)'")


def _in_user_lines(reason: str, predicate: str) -> str:
    """A Spark error about the wrapped predicate (``validate_against``), placed in the lines the user
    typed: the wrapper's "(" is line 1 and its ")" the last line. An error at that ")" is the end of the
    predicate (a trailing AND pointed at a ")" the user never typed, on "line 3": a review)."""
    lines = predicate.split("\n")
    found = _POSITION.search(reason)
    if found is None:
        return reason
    line = int(found.group(2))
    at_end = line > len(lines) + 1  # the wrapper's ")": the end of what was typed
    at = (len(lines), len(lines[-1])) if at_end else (max(line - 1, 1), int(found.group(4)))
    placed = reason[: found.start(2)] + str(at[0]) + found.group(3) + str(at[1]) + reason[found.end(4) :]
    return _CLOSING.sub("at or near the end of --where", placed) if at_end else placed


def validate_against(df: DataFrame, predicate: str) -> DataFrame:
    """``df`` filtered by the predicate; Spark parses it as one expression and checks it is a boolean
    over the journal's columns (not an aggregate, not a statement)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    try:
        # in parentheses: a trailing word (a stray AND, a pasted queue name) parsed as the column's alias,
        # and the predicate before it was run, wider than what was typed (a review). On lines of their own:
        # a comment at the end (``-- why``) does not swallow the closing one
        condition = F.expr(f"(\n{predicate}\n)")
        kind = df.select(condition.alias("p")).schema[0].dataType
        if not isinstance(kind, BooleanType):
            raise ArgumentError(f"--where {predicate!r} is a {kind.simpleString()}, not a boolean predicate")
        return df.where(condition)
    except QueuelakeError:
        raise
    except Exception as exc:  # ParseException, AnalysisException (Spark Classic or Connect)
        reason = _in_user_lines(_spark_reason(exc), predicate)
        raise ArgumentError(f"--where {predicate!r} is not a predicate over messages: {reason}") from None

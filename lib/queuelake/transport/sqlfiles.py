"""Load the reviewable SQL files of ``sql/<dialect>/`` and render them for a driver.

Files use two kinds of placeholders:
- ``{name}`` for identifiers. Only values produced by a dialect's ``quote`` / ``qualified``
  (``dialects/dialect.py``) are ever substituted, so no string from config or a table reaches SQL unquoted.
- ``:name`` for values, turned into the driver's parameter style (``?`` or ``%s``) in order, or
  written into the SQL as a decimal literal when the caller passes it in ``integers``: only a Python
  ``int`` is accepted there, so no text can reach the SQL that way either.
PostgreSQL files may hold several statements, one per ``;`` at a line end; a T-SQL file is one batch.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

_IDENT = re.compile(r"\{([a-z_]+)\}")
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_COMMENT = re.compile(r"^\s*--.*$", re.MULTILINE)


@dataclass(frozen=True)
class Statement:
    """One rendered statement: SQL text in the driver's paramstyle and the parameter names in order."""

    name: str
    sql: str
    params: tuple[str, ...]

    def args(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        try:
            return tuple(values[p] for p in self.params)
        except KeyError as exc:
            raise KeyError(f"SQL {self.name}: no value for parameter {exc.args[0]!r}") from None


def sql_root() -> Path:
    """The ``sql/`` folder: the source checkout's, else the one packaged in the wheel."""
    checkout = Path(__file__).resolve().parents[3] / "sql"
    if (checkout / "postgresql").is_dir():
        return checkout
    return Path(str(resources.files("queuelake._sql")))


@functools.cache
def read_sql(dialect: str, name: str) -> str:
    path = sql_root() / dialect / f"{name}.sql"
    return path.read_text(encoding="utf-8")


def split_statements(text: str, dialect: str) -> list[str]:
    body = _COMMENT.sub("", text).strip()
    from queuelake.dialects.dialect import dialect as named

    if not named(dialect).splits_statements:
        return [body]
    parts = re.split(r";\s*\n", body + "\n")
    return [p.strip().rstrip(";") for p in parts if p.strip()]


def render(
    dialect: str,
    name: str,
    identifiers: Mapping[str, str] | None = None,
    paramstyle: str = "qmark",
    integers: Mapping[str, int] | None = None,
) -> list[Statement]:
    """Render ``sql/<dialect>/<name>.sql``.

    paramstyle: ``qmark`` (?), ``format`` (%s), ``dollar`` ($1), ``named`` (@name).
    integers: parameters written as literals instead of placeholders. Why: a statement without bound
    parameters runs differently in some drivers (ADBC's PostgreSQL driver streams it through
    ``COPY ... TO STDOUT (FORMAT binary)`` straight into Arrow, instead of building the whole result
    in libpq's memory first)."""
    identifiers = identifiers or {}
    integers = integers or {}
    for key, value in integers.items():
        if type(value) is not int:  # bool is an int subclass: refused too
            raise TypeError(f"SQL {dialect}/{name}: parameter {key!r} can be inlined only as an int, not {value!r}")
    statements = []
    for text in split_statements(read_sql(dialect, name), dialect):

        def ident(match: re.Match[str]) -> str:
            key = match.group(1)
            if key not in identifiers:
                raise KeyError(f"SQL {dialect}/{name}: no identifier for {{{key}}}")
            return identifiers[key]

        # Identifiers first would let a quoted name containing ':x' look like a parameter, so
        # parameters are found on the template and identifiers substituted around them.
        # In the format style every literal % (of the template or of an identifier such as
        # "a%sb") is doubled piece by piece, so only the placeholders written here read as %s.
        def literal(piece: str) -> str:
            return piece.replace("%", "%%") if paramstyle == "format" else piece

        params: list[str] = []
        pieces: list[str] = []
        pos = 0
        for match in _PARAM.finditer(text):
            pieces.append(literal(_IDENT.sub(ident, text[pos : match.start()])))
            pos = match.end()
            if match.group(1) in integers:
                pieces.append(str(integers[match.group(1)]))
                continue
            params.append(match.group(1))
            if paramstyle == "qmark":
                pieces.append("?")
            elif paramstyle == "format":
                pieces.append("%s")
            elif paramstyle == "dollar":
                pieces.append(f"${len(params)}")
            else:
                pieces.append("@" + match.group(1))
        pieces.append(literal(_IDENT.sub(ident, text[pos:])))
        statements.append(Statement(name, "".join(pieces), tuple(params)))
    return statements


def sql_names(dialect: str) -> list[str]:
    return sorted(p.stem for p in (sql_root() / dialect).glob("*.sql"))

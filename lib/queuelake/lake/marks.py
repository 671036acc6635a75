"""Which engine created a table, and the refusal to let the other one write it.

One table is only ever written by one engine, so the two never race on one log with different
conflict rules and writer versions. The creating engine is recorded at creation:

- delta-spark: table property ``queuelake.engine`` and the table description;
- delta-rs: the table description only, because deltalake 1.x refuses table properties it does not
  know ("Error parsing property 'queuelake.engine'"); it reads such properties fine.

Both engines look at both places. A table without a mark (made outside queuelake) is writable by either.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from queuelake.errors import LakeError

ENGINE_PROPERTY = "queuelake.engine"
_IN_DESCRIPTION = re.compile(r"queuelake\.engine=([A-Za-z0-9_-]+)")


def description_for(engine: str) -> str:
    """The table description that records the creating engine."""
    return f"{ENGINE_PROPERTY}={engine} (written by queuelake; only this engine may write the table)"


def engine_of(configuration: Mapping[str, str | None] | None, description: str | None) -> str | None:
    """The engine recorded on a table, or None when the table carries no mark."""
    value = (configuration or {}).get(ENGINE_PROPERTY)
    if value:
        return value
    match = _IN_DESCRIPTION.search(description or "")
    return match.group(1) if match else None


def check_writable(table: str, path: str, recorded: str | None, engine: str) -> None:
    """Raise LakeError when the table was created by an engine other than ``engine``."""
    if recorded is not None and recorded != engine:
        raise LakeError(
            f"lake table {table!r} at {path} was created by the {recorded} engine and this job writes with "
            f"{engine}; one table is only ever written by one engine. Set lake.engine: auto (each table "
            f"written by the engine that created it; delta-spark's tables need Delta on Spark's classpath) "
            f"or lake.engine: {recorded} if every table of the lake was created by it, or write to a new table."
        )

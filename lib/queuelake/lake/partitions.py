"""Partition values as a Delta log spells them, and the folders our file writer puts them in.

Why a module of its own: the file writer (``files.FileSink``) splits rows by partition and names
folders and add actions with these spellings; they are Delta's (and delta-rs's) conventions, not the
sink's, and ``reading.parse_partition_value`` is their inverse on the way back.

Runs in Spark Python workers too (through the sink): keep imports light.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc

from queuelake.errors import LakeError
from queuelake.timetext import iso_utc

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def partition_value(value: Any) -> str | None:
    """A partition value as the Delta log spells it (``None`` for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return iso_utc(value)  # not strftime: its %Y gives ``1`` for year 1 (timetext)
    if isinstance(value, bytes):
        raise LakeError("binary partition columns are not supported")
    return str(value)


def partition_dir(partition_by: list[str], values: dict[str, str | None]) -> str:
    """``col=value/...`` with values percent-encoded the way delta-rs does it, so paths are safe anywhere."""
    return "/".join(f"{quote(col, safe='')}={_partition_value(values[col])}" for col in partition_by)


def _partition_value(value: str | None) -> str:
    return NULL_PARTITION if value is None else quote(value, safe="")


def split_partitions(data: pa.Table, partition_by: list[str]) -> Iterable[tuple[dict[str, str | None], pa.Table]]:
    """(partition values, rows without the partition columns) for each distinct partition in ``data``."""
    if not partition_by:
        yield {}, data
        return
    keys = data.select(partition_by).group_by(partition_by).aggregate([])
    rest = [name for name in data.column_names if name not in partition_by]
    for row in keys.to_pylist():
        mask = None
        for col, value in row.items():
            test = pc.is_null(data[col]) if value is None else pc.equal(data[col], pa.scalar(value, data[col].type))
            mask = test if mask is None else pc.and_(mask, test)
        yield {col: partition_value(v) for col, v in row.items()}, data.filter(mask).select(rest)

"""Transform functions the tests configure (``transforms[].function``)."""

from __future__ import annotations

from typing import Any

POISON = 7  # the seq whose row the poisoned transform's Spark task fails on


def poisoned(df: Any) -> Any:
    """Each journal row's queue and seq, through a Python UDF that raises on the row at seq ``POISON``:
    the transform's Spark job fails at its write, as a user's function meeting one bad message does."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    def check(seq: int) -> int:
        if seq == POISON:
            raise ValueError(f"cannot handle the message at seq {seq}")
        return seq

    return df.select("queue", F.udf(check, LongType())("seq").alias("seq"))


def seqs(df: Any) -> Any:
    """Each journal row's queue and seq."""
    return df.select("queue", "seq")

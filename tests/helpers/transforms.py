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


def stopped_then_broken(df: Any) -> Any:
    """A stop signal arrives while this transform runs, and then the transform fails on its own (the
    first, graceful signal cancels no Spark job)."""
    from queuelake import stopping

    stopping.request()
    raise ValueError("broken after the stop signal")


def seqs(df: Any) -> Any:
    """Each journal row's queue and seq."""
    return df.select("queue", "seq")

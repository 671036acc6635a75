"""Before a round is sent: the built-in outbound contract (rows failing it are rejected, written to
``<output>_rejected``), then the user's expectations, if any, on the rows accepted."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pyarrow as pa

from queuelake.lake import stage_tables
from queuelake.lake.port import LakeEngine
from queuelake.lake.round_files import open_file, spark_frame
from queuelake.pipeline.publish.rounds import Round
from queuelake.quality import expectations
from queuelake.quality import outbound as quality
from queuelake.report import log

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

OPTIONAL = {
    "destination": pa.string(),
    "headers": pa.map_(pa.string(), pa.string()),
    "ttbr_ms": pa.int64(),
    "deliver_at": pa.timestamp("us", tz="UTC"),
    "correlation_id": pa.string(),
    "conversation_id": pa.string(),
}


def validate(
    spark: SparkSession,
    lake: LakeEngine,
    run_id: str,
    output: str,
    files: list[str],
    rnd: Round,
    suite: expectations.Suite | None,
) -> tuple[set[str], int, expectations.Outcome | None]:
    """Reject rows failing the built-in contract (Spark row checks, written to
    ``<output>_rejected``), then run the user's expectations (``suite``), if any, on the accepted
    rows. With no expectations to run, an Arrow pre-check of the same contract goes first: a round
    it finds clean (the usual one) starts no Spark job at all.

    Returns (keys not to send, rows rejected, the suite's outcome or None). A failed suite
    returns before anything is written for the round (not even the rejects): the round is
    blocked and starts again, on the fixed data, at the next run."""
    if suite is None and not quality.arrow_may_reject(files, open_file):
        return set(), 0, None  # every row passes: no Spark job for the round

    from pyspark.sql import functions as F

    from queuelake.lake.arrow_types import to_spark_schema

    schema = lake.schema(output, rnd.upto)  # the port opens the table (storage options)
    df = spark_frame(spark, files, to_spark_schema(schema))
    for name, kind in OPTIONAL.items():
        if name not in df.columns:
            df = df.withColumn(name, F.lit(None).cast(to_spark_schema(pa.schema([(name, kind)]))[0].dataType))
    full = quality.with_reasons(df)
    # one Spark job: the keys of rejected rows (narrow; the plan reads no bodies); rejects are
    # the exception, so their keys fit the driver, as the bad-key filter of the rows sent needs anyway
    rejected_keys = [r["key"] for r in full.where(F.size("reasons") > 0).select("key").collect()]
    n_rejected = len(rejected_keys)
    outcome = None
    round_name = rnd.key(0, 0).split(":")[0]
    if suite is not None:
        t_suite = time.monotonic()
        accepted = full.where(F.size("reasons") == 0).drop("reasons", "body_len")
        outcome = expectations.validate(accepted, suite)
        expectations.record(lake, run_id, output, round_name, suite, outcome)
        log.info(
            "publish %s: %d expectation(s) %s in %.1fs",
            output,
            outcome.evaluated,
            "passed" if outcome.success else f"FAILED ({len(outcome.failed)})",
            time.monotonic() - t_suite,
        )
        if not outcome.success:
            return set(), n_rejected, outcome
    if n_rejected:
        rejected_out = (
            full.where(F.size("reasons") > 0)
            .drop("body_len")
            .withColumn("rejected_at", F.current_timestamp())
            .withColumn("round", F.lit(round_name))
        )
        rejected_table = stage_tables.REJECTED.name_for(output)
        lake.append_dataframe(rejected_table, rejected_out, f"queuelake.publish/{output}", rnd.upto)
        log.warning("publish %s: %d row(s) rejected, see %s", output, n_rejected, rejected_table)
    return {k for k in rejected_keys if k is not None}, n_rejected, outcome

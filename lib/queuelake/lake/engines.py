"""Which engine: ``open_lake`` builds the one config asks for, ``journal_engine`` the journal's.

Why a module of its own: the interface (``port.py``) is what every pipeline imports, and it must not
know its implementations. The choice between them, and the metastore names wrapped around the chosen
one (``catalog.py``), live here: the one module that builds engines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from queuelake.errors import LakeError
from queuelake.lake.catalog import registrar_for, with_names
from queuelake.lake.jvm import DeltaSparkEngine
from queuelake.lake.port import LakeEngine
from queuelake.lake.rust import DeltaRsEngine
from queuelake.spark import has_delta_jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from queuelake.config import LakeConfig


def open_lake(config: LakeConfig, spark: SparkSession | None = None) -> LakeEngine:
    """The engine config asks for; ``auto`` means delta-spark when its JVM classes are present."""
    engine = config.engine
    if engine == "auto":
        engine = "delta-spark" if spark is not None and has_delta_jvm(spark) else "delta-rs"
    if engine == "delta-spark":
        if spark is None:
            raise LakeError("lake.engine delta-spark needs a Spark session")
        lake: LakeEngine = DeltaSparkEngine(config.root, spark, config.storage_options)
    else:
        lake = DeltaRsEngine(config.root, spark, config.storage_options)
    # metastore names (lake.catalog/lake.schema): tables also registered by name (lake/catalog.py)
    return with_names(lake, registrar_for(config, lake.name, spark))


def journal_engine(lake: LakeEngine) -> LakeEngine:
    """The engine that writes the ``messages`` journal: always delta-rs.

    Why: the drain's claim protocol stages a batch's files before the DB commit and commits exactly
    those files to the Delta log afterwards, possibly from another process after a crash. deltalake
    exposes that (``create_write_transaction`` with add actions and an application transaction);
    delta-spark has no Python API for committing pre-written files. The journal stays a plain Delta
    table at protocol 1/2, which delta-spark, Databricks and every other engine read.
    """
    if lake.name == "delta-rs":
        return lake
    journal = DeltaRsEngine(lake.root, getattr(lake, "spark", None), getattr(lake, "storage_options", None))
    # the same metastore names as the lake it serves (lake.catalog/lake.schema)
    return with_names(journal, getattr(lake, "registrar", None), existing=False)

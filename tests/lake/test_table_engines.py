"""The table catalogue says which engine writes each table, and ``engines.table_engine`` follows it.

Why: "the journal is delta-rs under either engine" used to be a rule written in ``engines.py`` alone,
beside a catalogue that said which command writes each table but not which engine. No Spark here: a
lake named delta-spark is only its name, root and storage options to ``table_engine``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from queuelake.lake import catalogue
from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.lake.engines import journal_engine, table_engine


@dataclass
class _SparkLake:
    root: str
    name: str = "delta-spark"
    storage_options: dict[str, str] = field(default_factory=dict)


def test_the_catalogue_fixes_delta_rs_for_the_journal_and_the_records_and_nothing_else() -> None:
    fixed = {t.name: t.engine for t in catalogue.CATALOGUE if t.engine is not None}
    records = ("runs", "replays", "replay_skipped", "replay_lineage", "message_keys")
    assert fixed == {"messages": "delta-rs", **{name: "delta-rs" for name in records}}
    assert catalogue.engine_for("messages") == "delta-rs"
    assert catalogue.engine_for("orders") is None  # not catalogued: the lake's own engine


def test_table_engine_gives_a_fixed_table_to_delta_rs_and_the_rest_to_the_lake(tmp_path: Path) -> None:
    spark_lake = _SparkLake(str(tmp_path / "lake"))
    journal = table_engine(spark_lake, "messages")  # type: ignore[arg-type]
    assert isinstance(journal, DeltaRsEngine) and journal.root == spark_lake.root
    assert isinstance(journal_engine(spark_lake), DeltaRsEngine)  # type: ignore[arg-type]
    assert table_engine(spark_lake, "orders") is spark_lake  # type: ignore[arg-type]
    rs = DeltaRsEngine(str(tmp_path / "lake"))
    assert table_engine(rs, "messages") is rs and journal_engine(rs) is rs and table_engine(rs, "orders") is rs


def test_the_lake_line_names_each_engine_a_run_writes_new_tables_with(tmp_path: Path, caplog) -> None:
    """With ``auto``, a run's drain (before its Spark session) writes with delta-rs and its later steps
    with delta-spark; the one ``lake:`` line said delta-rs for the whole run (a review)."""
    import logging

    from queuelake.lake import engines

    root = str(tmp_path / "lake")
    with caplog.at_level(logging.INFO, logger="queuelake"):
        engines._announce(root, "auto", "delta-rs")
        engines._announce(root, "auto", "delta-rs")
        engines._announce(root, "auto", "delta-spark")
        engines._announce(root, "delta-spark", "delta-spark")
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("lake: ")]
    assert said == [
        f"lake: {root} (lake.engine auto: new tables by delta-rs)",
        f"lake: {root} (lake.engine auto: new tables by delta-spark)",
    ]


def test_a_command_reading_without_spark_names_the_configured_engine(tmp_path: Path, caplog) -> None:
    """find, where, failures, conversation, ... read a delta-spark lake with delta-rs and no Spark
    session: their line said ``lake.engine delta-rs``, another engine than the config's (a review)."""
    import logging

    from queuelake.config_sections import LakeConfig
    from queuelake.lake import engines

    root = str(tmp_path / "spark-lake")
    with caplog.at_level(logging.INFO, logger="queuelake"):
        lake = engines.without_spark(LakeConfig(root=root, engine="delta-spark"))
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("lake: ")]
    assert said == [f"lake: {root} (lake.engine delta-spark; read here by delta-rs, without Spark)"]
    assert lake.name == "delta-rs"

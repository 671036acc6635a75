"""A notebook off Databricks reads the jobs' lake as the jobs do: ``QUEUELAKE_CONFIG`` gives it the lake's
storage options (an ``s3://`` root's credentials and endpoint); it had only a root and failed at its
first read on object storage (a review)."""

from __future__ import annotations

from queuelake.config_sections import LakeConfig
from queuelake.notebooks.runner import lake_config

JOBS = LakeConfig(
    root="s3://bucket/lake",
    engine="delta-spark",
    storage_options={"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true"},
)


def test_the_jobs_lake_with_its_storage_options_and_the_notebooks_engine() -> None:
    read = lake_config(LakeConfig(root="./lake", engine="delta-rs"), JOBS, {})
    assert read.root == "s3://bucket/lake" and read.engine == "delta-rs"
    assert read.storage_options == JOBS.storage_options


def test_the_lake_root_parameter_still_names_another_root() -> None:
    read = lake_config(LakeConfig(root="s3://other/lake"), JOBS, {"QUEUELAKE_LAKE_ROOT": "s3://other/lake"})
    assert read.root == "s3://other/lake" and read.storage_options == JOBS.storage_options


def test_the_config_files_lake_and_spark_sections_alone(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The queue database's connection variable need not be set where a notebook runs."""
    from queuelake.notebooks.runner import _lake_and_spark

    monkeypatch.delenv("QUEUELAKE_CONNECTION", raising=False)
    monkeypatch.setenv("NB_ENDPOINT", "http://127.0.0.1:9000")
    file = tmp_path / "job.yaml"
    file.write_text(
        "transport:\n  connection: ${QUEUELAKE_CONNECTION}\n"
        "lake:\n  root: s3://bucket/lake\n  storage_options:\n    AWS_ENDPOINT_URL: ${NB_ENDPOINT}\n"
        "spark:\n  conf:\n    spark.sql.shuffle.partitions: '2'\n",
        encoding="utf-8",
    )
    jobs = _lake_and_spark(str(file))
    assert jobs.lake.root == "s3://bucket/lake" and jobs.lake.storage_options["AWS_ENDPOINT_URL"].endswith(":9000")
    assert jobs.spark.conf == {"spark.sql.shuffle.partitions": "2"}


def test_a_notebook_without_spark_reads_the_config_files_lake(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``endpoint_health`` opened ``./lake`` whatever ``QUEUELAKE_CONFIG`` said, and said its table was
    missing (a review): it opens the config's lake now, and starts no Spark session."""
    import pyarrow as pa
    from queuelake.lake.delta_rs.engine import DeltaRsEngine
    from queuelake.notebook_support import Notebook

    root = tmp_path / "jobs-lake"
    DeltaRsEngine(str(root)).create_table("endpoint_health", pa.schema([("endpoint", pa.string())]))
    file = tmp_path / "job.yaml"
    file.write_text(f"transport:\n  connection: x\nlake:\n  root: '{root}'\n", encoding="utf-8")
    monkeypatch.setenv("QUEUELAKE_CONFIG", str(file))
    monkeypatch.delenv("QUEUELAKE_LAKE_ROOT", raising=False)
    nb = Notebook()
    lake = nb.open_lake(LakeConfig(root="./lake", engine="delta-rs"), with_spark=False)
    assert nb.spark is None and lake.exists("endpoint_health") and nb.lake_root == str(root)

"""Versions in one place: lib/queuelake/versions.py, and everything that must agree with it."""

from __future__ import annotations

import importlib.metadata
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from queuelake import versions

REPO = Path(__file__).resolve().parents[2]
POM = REPO / "jvm" / "pom.xml"


def _pom_properties() -> dict[str, str]:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    props = ET.parse(POM).getroot().find("m:properties", ns)
    assert props is not None
    return {child.tag.split("}")[1]: (child.text or "").strip() for child in props}


def test_pom_fetches_the_pinned_delta_for_the_pinned_spark() -> None:
    props = _pom_properties()
    assert props["spark.line"] == versions.SPARK_LINE
    assert props["scala.binary"] == versions.SCALA_BINARY
    assert props["delta.version"] == versions.DELTA_VERSION
    group, artifact, version = versions.delta_coordinate().split(":")
    resolved = artifact.replace(versions.SPARK_LINE, "${spark.line}").replace(versions.SCALA_BINARY, "${scala.binary}")
    assert f"<artifactId>{resolved}</artifactId>" in POM.read_text(encoding="utf-8")
    assert (group, version) == ("io.delta", props["delta.version"])


def test_setup_pins_pyspark_and_delta_spark_from_versions() -> None:
    text = (REPO / "setup.py").read_text(encoding="utf-8")
    assert "PYSPARK_REQUIREMENT" in text and "DELTA_SPARK_REQUIREMENT" in text
    assert versions.DELTA_SPARK_REQUIREMENT == f"delta-spark=={versions.DELTA_VERSION}"
    assert re.fullmatch(rf"pyspark>={re.escape(versions.SPARK_LINE)}\.\d+,<\d+\.\d+", versions.PYSPARK_REQUIREMENT)


def test_installed_pyspark_is_on_the_pinned_line() -> None:
    installed = importlib.metadata.version("pyspark")
    assert versions.spark_line(installed) == versions.SPARK_LINE, (
        f"pyspark {installed} is installed; queuelake pins {versions.PYSPARK_REQUIREMENT}"
    )


@pytest.mark.parametrize(
    ("pyspark_version", "coordinate"),
    [
        ("4.1.4", "io.delta:delta-spark_4.1_2.13:4.4.0"),
        ("4.1.2", "io.delta:delta-spark_4.1_2.13:4.4.0"),
        ("4.0.0", "io.delta:delta-spark_2.13:4.0.1"),  # Databricks 17.3 LTS
    ],
)
def test_delta_coordinate_follows_the_spark_line(pyspark_version: str, coordinate: str) -> None:
    assert versions.delta_coordinate(pyspark_version) == coordinate


def test_unknown_spark_line_is_refused() -> None:
    with pytest.raises(ValueError, match="no Delta release known for Spark 3.5"):
        versions.delta_coordinate("3.5.1")


def test_spark_packages_prints_the_coordinates_for_the_installed_pyspark(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import pyspark
    from queuelake import cli

    assert cli.main(["spark-packages"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == versions.delta_coordinate(pyspark.__version__)
    summary = json.loads(lines[-1])
    assert summary["status"] == "ok" and summary["packages"] == lines[0] and summary["pyspark"] == pyspark.__version__

    assert cli.main(["spark-packages", "--s3"]) == 0
    with_s3 = capsys.readouterr().out.strip().splitlines()[0].split(",")
    assert with_s3[0] == lines[0]
    assert re.fullmatch(rf"org\.apache\.hadoop:hadoop-aws:{re.escape(summary['hadoop'])}", with_s3[1])


def test_docs_name_the_delta_package_spark_packages_prints() -> None:
    """The README and the docs (the spark-submit example is in docs/operations.md) name only the Delta
    package ``queuelake spark-packages`` prints."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    named = set(re.findall(r"io\.delta:delta-spark[\w.]*:[\w.\-]+", text))
    assert named == {versions.delta_coordinate()}

"""What a slice's bodies say of each typed table's schema: the texts sampled per message type and
version, the schema inferred from them and the table's evolution to it, and the rows that record each
change in ``body_schema_changes``.

Why apart from ``run.py``: this is the stage's reading of the bodies (samples in, schemas out), done
before any table is written; ``run.py`` orders the slice's steps and commits them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from queuelake.lake.port import LakeEngine
from queuelake.pipeline.bodies import evolve, select
from queuelake.pipeline.bodies.infer import Change, infer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def samples(
    frame: DataFrame, selected: select.Plan, rows: int | None
) -> dict[str, dict[str | None, dict[str, list[str]]]]:
    """type name -> version -> format -> sampled texts (at most about ``rows`` per type and version)."""
    from pyspark.sql import functions as F

    stratum = F.concat_ws("|", F.col("type_name"), F.coalesce(F.col("type_version"), F.lit("")))
    fractions = {
        f"{name}|{version or ''}": 1.0 if rows is None else min(1.0, rows / count)
        for (name, version), count in selected.strata.items()
    }
    candidates = frame.where(F.col("reason").isNull()).withColumn("stratum", stratum)
    columns = ["type_name", "type_version", "format", "text"]
    parts = [candidates]
    if any(f < 1.0 for f in fractions.values()):
        parts = [candidates.sampleBy("stratum", fractions, seed=33).select(*columns), _each_casing(candidates)]
    out: dict[str, dict[str | None, dict[str, list[str]]]] = {}
    for part in parts:
        data = part.select(*columns).toArrow()
        for name, version, fmt, text in zip(*(data[c].to_pylist() for c in data.column_names)):
            out.setdefault(name, {}).setdefault(version, {}).setdefault(fmt, []).append(text)
    return out


def _each_casing(candidates: DataFrame) -> DataFrame:
    """One JSON body of each type version whose first key starts with a capital letter, and one whose
    first key does not: a sender in PascalCase (Newtonsoft) and one in camelCase (System.Text.Json's web
    defaults) each in the samples, whatever their shares. Why: the respelling of keys (``evolve.respellings``)
    knows only the spellings the samples show; 3 camelCase rows among 200 PascalCase ones, none sampled,
    were written with every field null (found by a review). One aggregation over the cached slice."""
    from pyspark.sql import functions as F

    first = F.regexp_extract(F.col("text"), r'^\{\s*(?:"\$type"\s*:\s*"[^"]*"\s*,\s*)?"(.)', 1)  # after $type
    capital = (first != F.lower(first)).alias("capital")
    json_bodies = candidates.where(F.col("format") == "json")
    grouped = json_bodies.groupBy("type_name", "type_version", "format", capital)
    return grouped.agg(F.first("text").alias("text"))


def evolution(
    lake: LakeEngine, table: str, versions: dict[str | None, dict[str, list[str]]], cfg: Any
) -> evolve.Evolution:
    """The table's evolution (``evolve.plan``) from the schemas the sampled texts of each type version show."""
    from pyspark.sql.types import DataType, StructType

    from queuelake.pipeline.bodies.infer import key_spellings, merge, merge_xml

    per_version: dict[str | None, tuple[StructType, list[Change]]] = {}
    spellings: dict[str, set[str]] = {}
    data_keys: set[str] = set()
    xml = False
    for version, by_format in versions.items():
        schema: DataType | None = None
        conflicts: list[Change] = []
        for fmt, texts in sorted(by_format.items()):
            xml = xml or fmt == "xml"
            found, found_conflicts = infer(texts, fmt, cfg.keep_type_member)
            conflicts += found_conflicts
            if schema is None:
                schema = found
            else:  # JSON, then XML: a field the JSON shows as a list is a list in the XML too
                schema = (merge_xml if fmt == "xml" else merge)(schema, found, "", conflicts)
        per_version[version] = (schema if isinstance(schema, StructType) else StructType([]), conflicts)
    out = evolve.plan(table, evolve.body_columns(lake, table), per_version, xml)
    for by_format in versions.values():  # against the table's schema: the keys of its maps are data
        key_spellings(by_format.get("json", []), spellings, data_keys, out.schema)
    out.respell = evolve.respellings(out.schema, spellings, data_keys)
    return out


def change_row(name: str, table: str, version: str | None, change: Change) -> dict[str, Any]:
    return {
        "type_name": name,
        "table": table,
        "type_version": version,
        "change": change.kind,
        "column": change.column,
        "old_type": change.old,
        "new_type": change.new,
    }


def change_text(row: dict[str, Any]) -> str:
    if row["change"] == "created":
        return ""
    return f" ({row.get('old_type') or '-'} -> {row['new_type']}, version {row['type_version']})"

"""What a slice's bodies say of each typed table's schema: the texts sampled per message type and
version, the schema inferred from them and the table's evolution to it, and the rows that record each
change in ``body_schema_changes``.

Why apart from ``run.py``: this is the stage's reading of the bodies (samples in, schemas out), done
before any table is written; ``run.py`` orders the slice's steps and commits them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from queuelake.lake.port import LakeEngine
from queuelake.pipeline.bodies import evolve, select
from queuelake.pipeline.bodies.infer import Change, infer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


# the body text one slice samples for schemas, every type together: the samples are collected to the
# driver (the JVM's, then Python's), so they are bounded by bytes as well as by ``bodies.sample_rows``
# (5,000 rows of 12 types of 2.9 KB bodies, 174 MB, ran the default 1 GB driver out of memory: a review)
SAMPLE_BYTES = 64 * 2**20
# the fewest rows a type version samples when its bodies are large (its share of SAMPLE_BYTES holds fewer)
MIN_SAMPLE_ROWS = 20


def samples(
    frame: DataFrame, selected: select.Plan, rows: int | None
) -> dict[str, dict[str | None, dict[str, list[str]]]]:
    """type name -> version -> format -> sampled texts: at most about ``rows`` per type and version, and
    about ``SAMPLE_BYTES`` of text in all (each type version its share, never under ``MIN_SAMPLE_ROWS``
    rows); ``rows`` None: every row."""
    from pyspark.sql import functions as F

    stratum = F.concat_ws("|", F.col("type_name"), F.coalesce(F.col("type_version"), F.lit("")))
    candidates = frame.where(F.col("reason").isNull()).withColumn("stratum", stratum)
    columns = ["type_name", "type_version", "format", "text"]
    out: dict[str, dict[str | None, dict[str, list[str]]]] = {}
    if rows is None or (
        all(count <= rows for count in selected.strata.values()) and selected.body_bytes <= SAMPLE_BYTES
    ):
        parts = [candidates.select(*columns).toArrow()]
    else:
        sizes, casings = _sizes_and_casings(candidates)
        fractions = sample_fractions(selected.strata, sizes, rows)
        parts = [candidates.sampleBy("stratum", fractions, seed=33).select(*columns).toArrow(), casings]
    for data in parts:
        for name, version, fmt, text in zip(*(data[c].to_pylist() for c in columns)):
            out.setdefault(name, {}).setdefault(version, {}).setdefault(fmt, []).append(text)
    return out


def sample_fractions(
    strata: Mapping[tuple[str, str | None], int], sizes: Mapping[tuple[str, str | None], int], rows: int
) -> dict[str, float]:
    """``sampleBy``'s fraction per stratum (``type|version``): ``rows`` of its ``strata`` count, within a
    share of ``SAMPLE_BYTES`` of its text's ``sizes`` (bytes), but ``MIN_SAMPLE_ROWS``. The shares are
    dealt smallest need first, so what a small type does not use goes to the large ones (an even split
    left a large type 231 rows beside 99 small ones: a review)."""
    need: dict[tuple[str, str | None], float] = {}
    for key, count in strata.items():
        size = sizes.get(key, 0)
        need[key] = size * min(1.0, rows / count) if count else 0.0
    budget, left = float(SAMPLE_BYTES), len(need)
    given: dict[tuple[str, str | None], float] = {}
    for key in sorted(need, key=lambda k: need[k]):
        given[key] = min(need[key], budget / left)
        budget, left = budget - given[key], left - 1
    out: dict[str, float] = {}
    for (name, version), count in strata.items():
        size = sizes.get((name, version), 0)
        if not count or not size:
            fraction = 1.0 if not count else min(1.0, rows / count)
        else:
            fraction = max(given[(name, version)] / size, min(1.0, MIN_SAMPLE_ROWS / count))
        out[f"{name}|{version or ''}"] = min(1.0, rows / count if count else 1.0, fraction)
    return out


def _sizes_and_casings(candidates: DataFrame) -> tuple[dict[tuple[str, str | None], int], pa.Table]:
    """The text's bytes per type version (what ``sample_fractions`` bounds), and one JSON body of each
    type version whose first key starts with a capital letter, and one whose first key does not: a
    sender in PascalCase (Newtonsoft) and one in camelCase (System.Text.Json's web defaults) each in the
    samples, whatever their shares. Why the casings: a name is read under its other spellings
    (``evolve.spelled``) only when the samples show them; 3 camelCase rows among 200 PascalCase ones,
    none sampled, were written with every field null (found by a review).

    Two jobs over the cached slice, neither carrying a body through an aggregation: the sizes and each
    casing's lowest ``seq``, then the bodies at those ``seq``. Why: one aggregation taking the first text
    per group was a sort of the whole slice's bodies, which ran the default driver out of memory on a
    slice of 2.9 KB bodies (a review's first backlog)."""
    import operator
    from functools import reduce

    from pyspark.sql import functions as F

    first = F.regexp_extract(F.col("text"), r'^\{\s*(?:"\$type"\s*:\s*"[^"]*"\s*,\s*)?"(.)', 1)  # after $type
    keyed = candidates.withColumn("capital", F.when(F.col("format") == "json", first != F.lower(first)))
    groups = ["type_name", "type_version", "format", "capital"]
    stats = keyed.groupBy(*groups).agg(F.sum(F.octet_length("text")).alias("bytes"), F.min("seq").alias("seq"))
    data = stats.toArrow()
    sizes: dict[tuple[str, str | None], int] = {}
    for name, version, size in zip(*(data[c].to_pylist() for c in ("type_name", "type_version", "bytes"))):
        sizes[(name, version)] = sizes.get((name, version), 0) + int(size or 0)
    columns = ["type_name", "type_version", "format", "text"]
    picks = [row for row in data.to_pylist() if row["format"] == "json"]
    if not picks:
        return sizes, pa.table({c: pa.array([], pa.string()) for c in columns})
    matches = [reduce(operator.and_, [F.col(c).eqNullSafe(F.lit(row[c])) for c in [*groups, "seq"]]) for row in picks]
    wanted = reduce(operator.or_, matches)
    found = keyed.where(wanted).select(*groups, "text").toArrow()
    kept: dict[tuple[Any, ...], int] = {}  # one body per casing (two queues may share a seq)
    for index, row in enumerate(found.select(groups).to_pylist()):
        kept.setdefault(tuple(row.values()), index)
    return sizes, found.take(sorted(kept.values())).select(columns)


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
                between: list[Change] = []
                schema = (merge_xml if fmt == "xml" else merge)(schema, found, "", between)
                # only the formats' conflicts: what one shows and the other lacks is no change of the
                # table (``plan`` compares the merged schema with the table's)
                conflicts += [c for c in between if c.kind == "conflict"]
        per_version[version] = (schema if isinstance(schema, StructType) else StructType([]), conflicts)
    out = evolve.plan(table, evolve.body_columns(lake, table), per_version, xml)
    for by_format in versions.values():  # against the table's schema: the keys of its maps are data
        key_spellings(by_format.get("json", []), spellings, data_keys, out.schema)
    out.spellings = evolve.spelled(spellings)
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

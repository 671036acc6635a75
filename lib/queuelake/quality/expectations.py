"""User expectations per outbound table, run with great-expectations before a round is sent.

Why here and not as the built-in contract: the contract (``outbound.with_reasons``) is row-level and
names every failing row; a GX copy of it could only fail if the two drifted apart. What GX earns its
place for is the *business* rules the user knows and queuelake does not (totals non-negative, a
column's value set, a row count range), declared in the config::

    publish:
      expectations:
        outbound_customer_totals:                  # inline: a list of {expectation_type: kwargs}
          - expect_column_values_to_not_be_null: {column: key}
        outbound_other: suites/other.json          # or a GX expectation suite JSON file

A failing suite blocks that output's round: nothing is sent, no ledger row is written, so the next
run (after the data is fixed) starts the round again. Results go to the ``expectation_results`` lake
table (GX's own validation result JSON, one row per output and run) and the ``runs`` table.

GX is imported only when an output has expectations: importing it costs seconds and a dependency
tree a run without expectations should not pay for.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from queuelake.errors import ConfigError
from queuelake.lake import stage_tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from queuelake.config import Config
    from queuelake.lake.port import LakeEngine

RESULTS = stage_tables.EXPECTATION_RESULTS.name
RESULTS_SCHEMA: pa.Schema = stage_tables.EXPECTATION_RESULTS.schema
_COLUMN_KWARGS = ("column", "column_list", "column_A", "column_B", "column_set")


@dataclass(frozen=True)
class Suite:
    """Expectations of one output, checked against GX's registry when loaded (a typo is a config
    error naming it before anything runs, not a failed round)."""

    output: str
    name: str  # the file path or "inline", for messages and the results table
    expectations: tuple[tuple[str, dict[str, Any]], ...]


@dataclass
class Outcome:
    """One suite's verdict on one round, in the words the JSON summary and ``runs`` use."""

    success: bool
    evaluated: int
    failed: list[dict[str, Any]] = field(default_factory=list)
    result_json: str = "{}"


def _quiet_import() -> Any:
    """Import GX without its tqdm progress bars (they flood job logs) or its usage analytics (a job
    must not phone home)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("TQDM_DISABLE", "1")
    import great_expectations as gx

    return gx


def _inline(where: str, items: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or len(item) != 1:
            raise ConfigError(f"{where}[{i}]: expected one mapping {{expectation_type: {{kwargs}}}}, got {item!r}")
        ((name, kwargs),) = item.items()
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, dict):
            raise ConfigError(f"{where}[{i}] {name}: the arguments must be a mapping")
        out.append((str(name), dict(kwargs)))
    return out


def _from_file(where: str, spec: str, base: Path | None) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    path = Path(spec)
    if not path.is_absolute() and base is not None and not path.exists():
        path = base / path  # relative to the config file, like every other path a config names
    if not path.is_file():
        raise ConfigError(f"{where}: expectation suite file {spec} does not exist")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where}: {spec} is not a readable JSON expectation suite: {exc}") from None
    items = data.get("expectations") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ConfigError(f"{where}: {spec} has no 'expectations' list (a GX expectation suite JSON)")
    out: list[tuple[str, dict[str, Any]]] = []
    for i, item in enumerate(items):
        # GX 1.x writes "type"; 0.x suites say "expectation_type": accept both
        name = item.get("type") or item.get("expectation_type") if isinstance(item, dict) else None
        if not name:
            raise ConfigError(f"{where}: {spec} expectation {i} has no type")
        out.append((str(name), dict(item.get("kwargs") or {})))
    return str(path), out


def load(config: Config) -> dict[str, Suite]:
    """Suites per output, checked against GX's registry; {} (and no GX import) when none is set."""
    declared = config.publish.expectations or {}
    return {
        output: _load_suite(config, f"publish.expectations.{output}", output, spec) for output, spec in declared.items()
    }


def load_journal(config: Config) -> dict[str, Suite]:
    """Suites on the journal rows each transform reads (``transforms[].expectations``), by transform
    name; {} (and no GX import) when none is set."""
    return {
        t.name: _load_suite(config, f"transforms.{t.name}.expectations", f"messages:{t.name}", t.expectations)
        for t in config.transforms
        if t.expectations
    }


def _load_suite(config: Config, where: str, output: str, spec: str | list[Any]) -> Suite:
    base = Path(config.source).parent if config.source else None
    _quiet_import()
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration
    from great_expectations.expectations.registry import get_expectation_impl

    if isinstance(spec, str):
        name, items = _from_file(where, spec, base)
    else:
        name, items = "inline", _inline(where, list(spec))
    for kind, kwargs in items:
        try:
            get_expectation_impl(kind)
        except Exception:
            raise ConfigError(f"{where}: unknown expectation {kind!r} (not in great-expectations)") from None
        try:
            ExpectationConfiguration(type=kind, kwargs=kwargs).to_domain_obj()
        except Exception as exc:  # pydantic: a missing or mistyped argument
            text = str(exc).splitlines()
            detail = "; ".join(line.strip() for line in text[:4])
            raise ConfigError(f"{where}: {kind}: invalid arguments: {detail}") from None
    return Suite(output, name, tuple(items))


def _details(r: Any) -> dict[str, Any]:
    """GX's own words for one failed expectation: type, column(s), observed value, unexpected count."""
    cfg = r.expectation_config
    res = dict(r.result or {})
    out: dict[str, Any] = {"expectation_type": cfg.type}
    for key in _COLUMN_KWARGS:
        if cfg.kwargs.get(key) is not None:
            out[key] = cfg.kwargs[key]
    for key in ("observed_value", "unexpected_count", "unexpected_percent", "element_count"):
        if key in res:
            out[key] = res[key]
    if res.get("partial_unexpected_list"):
        out["partial_unexpected_list"] = res["partial_unexpected_list"][:5]
    info = r.exception_info or {}
    # one exception's info, or (GX 1.x) one per metric it could not compute: the first that was raised
    raised = [info] if "raised_exception" in info else [v for v in info.values() if isinstance(v, dict)]
    for one in raised:
        if one.get("raised_exception"):
            out["exception"] = str(one.get("exception_message"))[:500]
            break
    return json.loads(json.dumps(out, default=str))


def validate(df: DataFrame, suite: Suite) -> Outcome:
    """Run the suite on the whole DataFrame with GX's Spark datasource (every row of the round; the
    Spark plan reads only the columns the expectations name)."""
    gx = _quiet_import()
    from great_expectations.data_context.types.base import ProgressBarsConfig
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    source = context.data_sources.add_spark(name=f"queuelake_{suite.output}", persist=False)
    asset = source.add_dataframe_asset(name=suite.output)
    batch = asset.add_batch_definition_whole_dataframe("round").get_batch(batch_parameters={"dataframe": df})
    gx_suite = gx.ExpectationSuite(name=f"{suite.output}:{suite.name}")
    for kind, kwargs in suite.expectations:
        gx_suite.add_expectation(ExpectationConfiguration(type=kind, kwargs=kwargs).to_domain_obj())
    result = batch.validate(gx_suite, result_format="SUMMARY")
    failed = [_details(r) for r in result.results if not r.success]
    return Outcome(
        success=bool(result.success) and not failed,
        evaluated=len(result.results),
        failed=failed,
        result_json=json.dumps(result.to_json_dict(), default=str),
    )


def record(lake: LakeEngine, run_id: str, output: str, rnd: str, suite: Suite, outcome: Outcome) -> None:
    """Keep GX's validation result beside the run (idempotent per run and output)."""
    row = {
        "run_id": run_id,
        "output": output,
        "round": rnd,
        "suite": suite.name,
        "success": outcome.success,
        "evaluated": outcome.evaluated,
        "failed": len(outcome.failed),
        "failed_expectations": json.dumps(outcome.failed),
        "result": outcome.result_json,
        "validated_at": dt.datetime.now(dt.timezone.utc),
    }
    table = pa.Table.from_pylist([row], schema=RESULTS_SCHEMA)
    lake.append(RESULTS, table, f"queuelake.expectations/{run_id}/{output}", 1)


def summary(failed: list[dict[str, Any]]) -> str:
    """One line for errors and logs: ``type(column)`` per failed expectation, and why one could not be
    evaluated at all (a column the table does not have was said only inside the stored result: a review)."""
    parts = []
    for f in failed:
        cols = next((f[k] for k in _COLUMN_KWARGS if k in f), None)
        part = f"{f['expectation_type']}({cols})" if cols is not None else f["expectation_type"]
        if f.get("exception"):
            reason = str(f["exception"]).strip().splitlines()[0][:200] if str(f["exception"]).strip() else ""
            part += f" could not be evaluated: {reason}" if reason else " could not be evaluated"
        parts.append(part)
    return ", ".join(parts)

"""The lake port has no stubs: what ``LakeEngine`` names, both engines implement; the staged writes of the
drain's claim protocol (``JournalLake``) are the journal engine's alone, and delta-spark does not pretend."""

from __future__ import annotations

import inspect

from queuelake.lake.delta_rs.engine import DeltaRsEngine
from queuelake.lake.delta_spark.engine import DeltaSparkEngine
from queuelake.lake.port import JournalLake, LakeEngine


def _methods(protocol: type) -> set[str]:
    return {name for name, member in vars(protocol).items() if inspect.isfunction(member) and not name.startswith("_")}


def test_both_engines_implement_every_method_of_the_port() -> None:
    for engine in (DeltaRsEngine, DeltaSparkEngine):
        missing = {name for name in _methods(LakeEngine) if not callable(getattr(engine, name, None))}
        assert not missing, (engine.__name__, missing)


def test_only_the_journal_engine_stages() -> None:
    staging = _methods(JournalLake)
    assert staging >= {"stage", "commit_staged", "commit_staged_group", "staged_version", "finish_staged"}
    assert not staging & _methods(LakeEngine)
    assert all(callable(getattr(DeltaRsEngine, name, None)) for name in staging)
    assert not [name for name in staging if hasattr(DeltaSparkEngine, name)]

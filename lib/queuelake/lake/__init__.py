"""The Delta port: one small interface, two engines (JVM delta-spark, Rust deltalake).

Pipelines only talk to ``LakeEngine``; ``open_lake`` picks the engine from config. One table is only
ever written by one engine (recorded in the table's properties), so the two never race on a log.
"""

from queuelake.lake.port import LakeEngine, open_lake

__all__ = ["LakeEngine", "open_lake"]

"""The Delta port: one small interface, two engines (JVM delta-spark, Rust deltalake).

Pipelines only talk to ``LakeEngine`` (``port.py``); ``open_lake`` (``engines.py``) picks the engine
from config. One table is only ever written by one engine (recorded in the table's properties), so the
two never race on a log.

Nothing is imported here: importing any ``queuelake.lake.*`` module runs this file first, so a
re-export of ``open_lake`` would make every lake module depend on both engines (an import circle).
"""

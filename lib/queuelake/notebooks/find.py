"""One message or one conversation from the journal, as a pandas frame, for a notebook cell.

Why here: ``queuelake find`` answers at a terminal; a notebook wants the same rows as a frame to
filter, join and plot, without Spark (``pipeline/find/search.py``: the lake port's ``lookup`` and the
time order). Either an open lake (``Notebook.lake``) or a lake root (with its storage options).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from queuelake.config_sections import LakeConfig
from queuelake.lake.engines import open_lake
from queuelake.pipeline.find import search, show

if TYPE_CHECKING:
    from queuelake.lake.port import LakeEngine


def _lake(lake: LakeEngine | str, storage_options: dict[str, str] | None) -> LakeEngine:
    if isinstance(lake, str):
        return open_lake(LakeConfig(root=lake, engine="delta-rs", storage_options=dict(storage_options or {})))
    return lake


def _frame(found: search.Found) -> pd.DataFrame:
    """The rows in time order with ``kind`` first (sent, audit, failed, expired, quarantined)."""
    pdf = found.rows.to_pandas()
    pdf.insert(0, "kind", show.kinds(found.rows))
    return pdf


def find_message(
    lake: LakeEngine | str, message_id: str, storage_options: dict[str, str] | None = None
) -> pd.DataFrame:
    """Every journal row of one message (its send, audit copies, failed copies and retries), in time
    order, as pandas; an empty frame when the journal holds none."""
    return _frame(search.find(_lake(lake, storage_options), "message", message_id))


def find_conversation(
    lake: LakeEngine | str, conversation_id: str, storage_options: dict[str, str] | None = None
) -> pd.DataFrame:
    """Every journal row of one conversation, in time order (message by message), as pandas."""
    return _frame(search.find(_lake(lake, storage_options), "conversation", conversation_id))

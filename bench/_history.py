"""A journal that already holds many data files, as one that has drained for a while since its last
``maintain``: the state in which a run's fixed journal costs (opening the table, its checkpoint) show.

Files of one row each, committed in one commit, then a checkpoint (deltalake's). Imports queuelake
inside the function: the bench imports ``_tree`` first.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pyarrow as pa


def journal_with_files(lake_root: str, files: int) -> str:
    """Create the journal under ``lake_root`` with ``files`` one-row data files; returns its path."""
    from deltalake import DeltaTable
    from queuelake.lake.delta_rs.engine import DeltaRsEngine
    from queuelake.lake.files import commit_files
    from queuelake.pipeline.journal.build import build_batch
    from queuelake.pipeline.journal.schema import MESSAGES, MESSAGES_SCHEMA
    from queuelake.transport.queues import RECEIVED_SCHEMA

    journal = DeltaRsEngine(lake_root)
    journal.create_table(MESSAGES, MESSAGES_SCHEMA)
    received = pa.table(
        {
            "id": [f"history-{i}" for i in range(files)],
            "seq": list(range(files)),
            "expired": [False] * files,
            "expires": [None] * files,
            "raw_expires": [None] * files,
            "headers": ['{"NServiceBus.MessageId":"history-' + str(i) + '"}' for i in range(files)],
            "body": [b"{}"] * files,
        },
        schema=RECEIVED_SCHEMA,
    )
    # one build, then a file per row with a batch id of its own, as a run of one-row batches leaves
    rows, _ = build_batch(received, "history", "history", dt.datetime.now(dt.timezone.utc))
    batch_ids = pa.array([f"history:{i}" for i in range(files)], rows.schema.field("batch_id").type)
    rows = rows.set_column(rows.schema.get_field_index("batch_id"), rows.schema.field("batch_id"), batch_ids)
    staged = []
    for i in range(files):
        staged.extend(journal.stage(MESSAGES, rows.slice(i, 1)).files)
    path = journal.path(MESSAGES)
    commit_files(path, MESSAGES, staged, "bench.history", 1, uuid.uuid4().hex, journal.name)
    DeltaTable(path).create_checkpoint()
    return path

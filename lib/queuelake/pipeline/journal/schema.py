"""The journal table's name, its schema and its time type, as the catalogue defines them: what the
drain writes and transform, replay and the demo read, without the build behind them."""

from __future__ import annotations

import pyarrow as pa

from queuelake.lake import record_tables, table_entry

MESSAGES = record_tables.MESSAGES.name
MESSAGES_SCHEMA: pa.Schema = record_tables.MESSAGES.schema
UTC_TS = table_entry.UTC_TS

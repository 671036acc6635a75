"""The journal table's name, its schema and its time type, as the catalogue defines them: what the
drain writes and transform, replay and the demo read, without the build behind them."""

from __future__ import annotations

import pyarrow as pa

from queuelake.lake import catalogue

MESSAGES = catalogue.MESSAGES.name
MESSAGES_SCHEMA: pa.Schema = catalogue.MESSAGES.schema
UTC_TS = catalogue.UTC_TS

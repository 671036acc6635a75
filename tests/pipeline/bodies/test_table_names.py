"""A typed table's name from ``bodies.tables``: never one of queuelake's own tables. A type mapped to
``messages`` had the journal ALTERed with the body's fields, for good, before bodies failed (a review)."""

from __future__ import annotations

import pytest
from queuelake.config import from_dict
from queuelake.errors import ConfigError
from queuelake.pipeline.bodies import names
from queuelake.pipeline.bodies.run import _reserved

CONFIG = from_dict(
    {
        "transport": {"connection": "x"},
        "transforms": [{"name": "scores", "output": "outbound_scores", "sql": "SELECT 1"}],
    },
    env={},
)


@pytest.mark.parametrize(
    "table", ["messages", "runs", "body_schema_changes", "outbound_scores", "outbound_scores_rejected"]
)
def test_a_type_mapped_to_one_of_queuelakes_own_tables_is_refused(table: str) -> None:
    overrides = {"Sales.Messages.Events.OrderPlaced": table}
    with pytest.raises(ConfigError, match=f"bodies.tables.Sales.Messages.Events.OrderPlaced: {table} is one of"):
        names.check_overrides(overrides, _reserved(CONFIG))
    with pytest.raises(ConfigError, match="one of queuelake's own tables"):
        names.assign(["Sales.Messages.Events.OrderPlaced"], {}, "body_", overrides, _reserved(CONFIG))


def test_a_table_of_its_own_is_taken() -> None:
    overrides = {"Sales.Messages.Events.OrderPlaced": "orders_placed"}
    names.check_overrides(overrides, _reserved(CONFIG))
    assigned = names.assign(["Sales.Messages.Events.OrderPlaced"], {}, "body_", overrides, _reserved(CONFIG))
    assert assigned == {"Sales.Messages.Events.OrderPlaced": "orders_placed"}

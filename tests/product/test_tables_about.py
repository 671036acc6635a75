"""``queuelake tables`` says what each table is, for every kind the project writes (issue 59: the typed
body tables and ``body_increments`` were described as "what a transform produces and publish sends")."""

from __future__ import annotations

from queuelake.commands.tables import about
from queuelake.lake.catalogue import CATALOGUE


def test_every_kind_of_table_is_named_for_what_it_is() -> None:
    outputs = {"outbound_customer_totals"}

    def says(name: str) -> str:
        return about(name, CATALOGUE, outputs)

    assert "journal" in says("messages")
    assert "per message type" in says("body_sales_messages_events_orderplaced")
    for exact in ("body_increments", "body_schema_changes", "body_unparsed", "expectation_results", "runs"):
        assert says(exact) == next(t.about for t in CATALOGUE if t.name == exact)
    assert says("outbound_customer_totals") == next(t.about for t in CATALOGUE if t.name == "{output}")
    assert "contract" in says("outbound_customer_totals_rejected")
    assert "not a table queuelake writes" in says("someone_elses_table")
    named = {t.name for t in CATALOGUE}
    assert not [n for n in named if "{" not in n and says(n) != next(t.about for t in CATALOGUE if t.name == n)]

"""Create missing queue, delayed, subscription and bridge-state tables, idempotently.

Each table is created in its own short transaction holding a named lock (advisory lock /
sp_getapplock) so installers racing on the same table serialise instead of failing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from queuelake.config import Config
from queuelake.transport.db import Connection
from queuelake.transport.tables import TableRef, bridge_ref, queue_ref


@dataclass
class InstallPlan:
    queues: list[TableRef] = field(default_factory=list)
    delayed: list[TableRef] = field(default_factory=list)
    subscription: TableRef | None = None
    ledger: TableRef | None = None

    def steps(self) -> list[tuple[str, TableRef]]:
        out: list[tuple[str, TableRef]] = []
        out += [("create_queue", q) for q in self.queues]
        out += [("create_delayed", d) for d in self.delayed]
        if self.subscription is not None:
            out.append(("create_subscription", self.subscription))
        if self.ledger is not None:
            out.append(("create_ledger", self.ledger))
        return out


def plan(config: Config, extra_queues: list[str] | None = None, delayed_endpoints: list[str] | None = None) -> InstallPlan:
    """What install creates: the drained queues, the publish destinations named in config, the
    delayed stores of endpoints that receive delayed messages, and the two bridge tables."""
    t = config.transport
    names: list[str] = list(dict.fromkeys([*config.drain.queues, *(extra_queues or [])]))
    return InstallPlan(
        queues=[queue_ref(n, t) for n in names],
        delayed=[queue_ref(n, t).delayed() for n in (delayed_endpoints or [])],
        subscription=bridge_ref(t.subscription_table, t),
        ledger=bridge_ref(t.ledger_table, t),
    )


def script(conn_dialect: str, install: InstallPlan) -> str:
    """The SQL install would run, for a DBA to review (parameters shown as literals)."""
    lines: list[str] = []
    for name, ref in install.steps():
        if conn_dialect == "postgresql" and name in ("create_queue", "create_delayed") and ref.address.schema:
            lines += _literal(conn_dialect, "create_schema", ref)
        lines += _literal(conn_dialect, name, ref)
    return "\n".join(lines)


def _literal(dialect: str, name: str, ref: TableRef) -> list[str]:
    from queuelake.transport import sqlfiles

    out = [f"-- {name}: {ref.canonical}"]
    params = ref.params()
    for stmt in sqlfiles.render(dialect, name, ref.identifiers(), "qmark"):
        text = stmt.sql
        for p in stmt.params:
            value = params[p]
            literal = "'" + str(value).replace("'", "''") + "'"
            if dialect == "sqlserver":
                literal = "N" + literal
            text = text.replace("?", literal, 1)
        out.append(text + ";" if dialect == "postgresql" else text + "\nGO")
    return out


def install(conn: Connection, install: InstallPlan) -> list[str]:
    """Run the plan; returns the canonical names of the tables ensured."""
    done: list[str] = []
    for name, ref in install.steps():
        with conn.transaction():
            if conn.dialect == "postgresql" and name in ("create_queue", "create_delayed"):
                conn.run("create_schema", ref.identifiers(), ref.params(), what=ref.canonical)
            conn.run(name, ref.identifiers(), ref.params(), what=ref.canonical)
        done.append(ref.canonical)
    return done

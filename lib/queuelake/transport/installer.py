"""Create missing queue, delayed, subscription and bridge-state tables, idempotently.

Each table is created in its own short transaction holding a named lock (advisory lock /
sp_getapplock) so installers racing on the same table serialise instead of failing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from queuelake.config import Config
from queuelake.transport.db import Connection
from queuelake.transport.table_refs import TableRef, bridge_ref, queue_ref


@dataclass
class InstallPlan:
    queues: list[TableRef] = field(default_factory=list)
    delayed: list[TableRef] = field(default_factory=list)
    subscription: TableRef | None = None
    ledger: TableRef | None = None
    claims: TableRef | None = None

    def steps(self) -> list[tuple[str, TableRef]]:
        out: list[tuple[str, TableRef]] = []
        out += [("create_queue", q) for q in self.queues]
        out += [("create_delayed", d) for d in self.delayed]
        if self.subscription is not None:
            out.append(("create_subscription", self.subscription))
        if self.ledger is not None:
            out.append(("create_ledger", self.ledger))
        if self.claims is not None:
            out.append(("create_claims", self.claims))
        return out


def plan(
    config: Config, extra_queues: list[str] | None = None, delayed_endpoints: list[str] | None = None
) -> InstallPlan:
    """What install creates: the drained queues, the Send destinations the transforms name
    (``transforms[].destinations``), the delayed stores of ``transport.delayed_endpoints`` (endpoints
    that receive delayed messages), and the bridge tables (subscriptions, publish ledger, drain
    claims). ``extra_queues`` and ``delayed_endpoints`` add to what the config names (the demo's
    topology). Each table appears once, by canonical name, however it was spelt."""
    t = config.transport
    sent_to = [d for transform in config.transforms for d in transform.destinations]
    names = [*config.drain.queues, *sent_to, *(extra_queues or [])]
    delayed = [*t.delayed_endpoints, *(delayed_endpoints or [])]
    return InstallPlan(
        queues=list({ref.canonical: ref for ref in (queue_ref(n, t) for n in names)}.values()),
        delayed=list({ref.canonical: ref for ref in (queue_ref(n, t).delayed() for n in delayed)}.values()),
        subscription=bridge_ref(t.subscription_table, t),
        ledger=bridge_ref(t.ledger_table, t),
        claims=bridge_ref(t.claims_table, t),
    )


def script(conn_dialect: str, install: InstallPlan) -> str:
    """The SQL install would run, for a DBA to review (parameters shown as literals)."""
    lines: list[str] = []
    for name, ref in install.steps():
        if ref.rules.creates_schemas and name in ("create_queue", "create_delayed") and ref.address.schema:
            lines += _literal(conn_dialect, "create_schema", ref)
        lines += _literal(conn_dialect, name, ref)
    return "\n".join(lines)


def _comment(text: str) -> str:
    """Text safe inside a ``--`` comment: a line break in a table name must not end the comment."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def _literal(dialect: str, name: str, ref: TableRef) -> list[str]:
    from queuelake.transport import sqlfiles

    out = [f"-- {name}: {_comment(ref.canonical)}"]
    params = ref.params()
    # The format style doubles every literal % and marks parameters with %s, so Python's %
    # operator puts the literals exactly where the parameters were (a ? or %s inside a quoted
    # identifier stays as it is).
    for stmt in sqlfiles.render(dialect, name, ref.identifiers(), "format"):
        literals = tuple(ref.rules.string_literal(str(params[p])) for p in stmt.params)
        out.append(ref.rules.end_statement(stmt.sql % literals))
    return out


# PostgreSQL: the index each create script makes beside its table
_INDEX_SUFFIX = {"create_queue": "_Expires", "create_delayed": "_Due"}


def _complete(conn: Connection, name: str, ref: TableRef) -> bool:
    """Does the table (and its index) already exist? Then a PostgreSQL install has nothing to do.

    Re-running the script would be harmless but not free: CREATE INDEX IF NOT EXISTS locks the table
    in SHARE mode before it looks for the index, so it waits for every open receive transaction and
    queues every new receiver behind itself. Racing installers are still safe: whoever finds
    something missing runs the script, which serialises on its advisory lock.
    """
    if not conn.rules.install_checks_first:
        return False  # the T-SQL scripts check sys.objects first and lock nothing that exists
    params = ref.params()
    if not conn.run("table_exists", ref.identifiers(), params, what=ref.canonical)[0][0]:
        return False
    suffix = _INDEX_SUFFIX.get(name)
    if suffix is None:
        return True
    index = {"schema": params["schema"], "index_name": ref.address.table + suffix}
    return bool(conn.run("index_exists", ref.identifiers(), index, what=ref.canonical)[0][0])


def install(conn: Connection, install: InstallPlan) -> list[str]:
    """Run the plan; returns the canonical names of the tables ensured."""
    done: list[str] = []
    for name, ref in install.steps():
        with conn.transaction():
            if _complete(conn, name, ref):
                done.append(ref.canonical)
                continue
            if conn.rules.creates_schemas and name in ("create_queue", "create_delayed"):
                # Only when missing: CREATE SCHEMA checks the CREATE privilege on the database even
                # when the schema exists, and racing installers serialise on the file's lock.
                if not conn.run("schema_exists", ref.identifiers(), ref.params(), what=ref.canonical)[0][0]:
                    conn.run("create_schema", ref.identifiers(), ref.params(), what=ref.canonical)
            conn.run(name, ref.identifiers(), ref.params(), what=ref.canonical)
        done.append(ref.canonical)
    return done

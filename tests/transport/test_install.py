"""install against a real PostgreSQL, through both drivers: the DDL, idempotence, races, --print-sql."""

from __future__ import annotations

import threading
import uuid
from urllib.parse import urlsplit

import psycopg
from queuelake.transport import installer, queues

from tests.helpers.cli import run_cli
from tests.helpers.db import catalog_snapshot, columns, connection_string, indexes, primary_key, sql
from tests.helpers.transport import connect, make_config, write_config

HOSTILE = "my.tb[e@[my.[sch@ma]@[my.c@ta]]og]"  # PostgreSQL: schema "my", table "tb[e@[my.[sch@ma]@[my.c@ta]]og]"
QUEUES = ["Sales", "audit", '"billing"."Billing"', HOSTILE, '"odd sch"."a%sb?c:x \'q\'"']


def _plan(uri: str, driver: str, queues: list[str] = QUEUES) -> installer.InstallPlan:
    return installer.plan(make_config(uri, driver, queues), delayed_endpoints=["Sales"])


def _install(uri: str, driver: str, queues: list[str] = QUEUES) -> list[str]:
    with connect(uri, driver) as conn:
        return installer.install(conn, _plan(uri, driver, queues))


def test_install_creates_the_transport_tables(fresh_pg_uri: str, pg_driver: str) -> None:
    done = _install(fresh_pg_uri, pg_driver)
    assert done == [
        '"public"."Sales"',
        '"public"."audit"',
        '"billing"."Billing"',
        '"my"."tb[e@[my.[sch@ma]@[my.c@ta]]og]"',
        '"odd sch"."a%sb?c:x \'q\'"',
        '"public"."Sales.Delayed"',
        '"public"."SubscriptionRouting"',
        '"public"."queuelake_publish_ledger"',
        '"public"."queuelake_drain_claims"',
    ]
    for schema, table in [
        ("public", "Sales"),
        ("public", "audit"),
        ("billing", "Billing"),
        ("my", "tb[e@[my.[sch@ma]@[my.c@ta]]og]"),
        ("odd sch", "a%sb?c:x 'q'"),
    ]:
        cols = columns(fresh_pg_uri, schema, table)
        assert list(cols) == ["id", "expires", "headers", "body", "seq"], table
        assert cols["id"][:3] == ("uuid", None, "NO")
        assert cols["expires"][:3] == ("timestamp without time zone", None, "YES")
        assert cols["headers"][:3] == ("text", None, "NO")
        assert cols["body"][:3] == ("bytea", None, "YES")
        assert cols["seq"][:3] == ("integer", None, "NO")
        assert str(cols["seq"][3]).startswith("nextval("), "seq is a serial"
        assert primary_key(fresh_pg_uri, schema, table) == ["id"]
        defs = indexes(fresh_pg_uri, schema, table)
        unique_seq = [d for d in defs.values() if d.startswith("CREATE UNIQUE INDEX") and d.endswith("(seq)")]
        assert len(unique_seq) == 1, defs
        expires = defs[table + "_Expires"]
        assert "(expires) INCLUDE (id, seq) WHERE (expires IS NOT NULL)" in expires

    delayed = columns(fresh_pg_uri, "public", "Sales.Delayed")
    assert {k: v[:3] for k, v in delayed.items()} == {
        "id": ("uuid", None, "NO"),
        "headers": ("text", None, "YES"),
        "body": ("bytea", None, "YES"),
        "due": ("timestamp with time zone", None, "YES"),
    }
    assert delayed["id"][3] == "gen_random_uuid()"
    assert primary_key(fresh_pg_uri, "public", "Sales.Delayed") == ["id"]
    assert indexes(fresh_pg_uri, "public", "Sales.Delayed")["Sales.Delayed_Due"].endswith("USING btree (due)")

    routing = columns(fresh_pg_uri, "public", "SubscriptionRouting")
    assert {k: v[:3] for k, v in routing.items()} == {
        "queueaddress": ("character varying", 200, "NO"),
        "endpoint": ("character varying", 200, "NO"),
        "topic": ("character varying", 200, "NO"),
    }
    assert primary_key(fresh_pg_uri, "public", "SubscriptionRouting") == ["endpoint", "topic"]

    ledger = columns(fresh_pg_uri, "public", "queuelake_publish_ledger")
    assert {k: v[:3] for k, v in ledger.items()} == {
        "pipeline": ("character varying", 200, "NO"),
        "output_table": ("character varying", 200, "NO"),
        "batch_key": ("character varying", 200, "NO"),
        "rows_sent": ("bigint", None, "NO"),
        "copies_sent": ("bigint", None, "NO"),
        "published_at": ("timestamp without time zone", None, "NO"),
    }
    assert primary_key(fresh_pg_uri, "public", "queuelake_publish_ledger") == ["pipeline", "output_table", "batch_key"]
    claims = columns(fresh_pg_uri, "public", "queuelake_drain_claims")
    assert list(claims) == ["app_id", "version", "queue", "lake_table", "row_count", "staged", "claimed_at"]
    assert primary_key(fresh_pg_uri, "public", "queuelake_drain_claims") == ["app_id", "version"]


def test_second_install_changes_nothing(fresh_pg_uri: str, pg_driver: str) -> None:
    first = _install(fresh_pg_uri, pg_driver)
    before = catalog_snapshot(fresh_pg_uri)
    second = _install(fresh_pg_uri, pg_driver)
    assert second == first
    assert catalog_snapshot(fresh_pg_uri) == before


def test_reinstall_keeps_queued_rows(fresh_pg_uri: str, pg_driver: str) -> None:
    """A row in a queue survives a re-install: install never drops or truncates."""
    _install(fresh_pg_uri, pg_driver, ["Sales"])
    sql(fresh_pg_uri, "INSERT INTO \"Sales\" (id, headers) VALUES (gen_random_uuid(), '{}')")
    _install(fresh_pg_uri, pg_driver, ["Sales"])
    assert sql(fresh_pg_uri, 'SELECT count(*) FROM "Sales"') == [(1,)]


def test_reinstall_does_not_wait_for_open_receives(fresh_pg_uri: str, pg_driver: str) -> None:
    """Receivers hold their transactions open (the drain until its Delta commit): a re-install must
    neither wait for them nor, by queueing a table lock, hold up the next receivers."""
    _install(fresh_pg_uri, pg_driver, ["Sales"])
    sales = installer.plan(make_config(fresh_pg_uri, pg_driver, ["Sales"])).queues[0]
    delayed = sales.delayed()
    sql(fresh_pg_uri, "INSERT INTO \"Sales\" (id, headers) VALUES (gen_random_uuid(), '{}')")
    sql(fresh_pg_uri, "INSERT INTO \"Sales.Delayed\" (headers) VALUES ('{}')")
    receiver = connect(fresh_pg_uri, pg_driver)
    mover = psycopg.connect(fresh_pg_uri)
    try:
        assert queues.receive_one(receiver, sales) is not None  # DELETE, not committed
        mover.execute(f"DELETE FROM {delayed.qualified}")  # the endpoint moving due messages
        with connect(fresh_pg_uri, pg_driver) as conn:
            conn.raw.cursor().execute("SET lock_timeout = '5s'")  # waiting fails instead of hanging
            conn.commit()
            assert installer.install(conn, _plan(fresh_pg_uri, pg_driver, ["Sales"])) == [
                '"public"."Sales"',
                '"public"."Sales.Delayed"',
                '"public"."SubscriptionRouting"',
                '"public"."queuelake_publish_ledger"',
                '"public"."queuelake_drain_claims"',
            ]
    finally:
        receiver.rollback()
        receiver.close()
        mover.rollback()
        mover.close()


def _as_role(uri: str, role: str) -> str:
    parts = urlsplit(uri)
    return parts._replace(netloc=role + "@" + parts.netloc.rsplit("@", 1)[-1]).geturl()


def test_install_needs_no_more_privilege_than_it_uses(fresh_pg_uri: str, pg_driver: str) -> None:
    """An installer role may create tables in its schema without CREATE on the database; an
    application role with no CREATE at all can re-run install once everything exists."""
    suffix = uuid.uuid4().hex[:8]
    owner, app = f"ql_owner_{suffix}", f"ql_app_{suffix}"
    db_name = urlsplit(fresh_pg_uri).path.lstrip("/")
    queues_ = ['"queues"."Sales"', '"queues"."Billing"']
    bridge = {
        "subscription_table": '"queues"."SubscriptionRouting"',
        "ledger_table": '"queues"."ledger"',
        "claims_table": '"queues"."claims"',
    }
    for statement in (
        f"CREATE ROLE {owner} LOGIN",
        f"CREATE ROLE {app} LOGIN",
        f'REVOKE CREATE ON DATABASE "{db_name}" FROM PUBLIC',
        "CREATE SCHEMA queues",
        f"GRANT USAGE, CREATE ON SCHEMA queues TO {owner}",
        f"GRANT USAGE ON SCHEMA queues TO {app}",
    ):
        sql(fresh_pg_uri, statement)
    try:
        for role in (owner, app):
            uri = _as_role(fresh_pg_uri, role)
            cfg = make_config(uri, pg_driver, queues_, **bridge)
            with connect(uri, pg_driver) as conn:
                done = installer.install(conn, installer.plan(cfg, delayed_endpoints=[queues_[0]]))
            assert done == [
                '"queues"."Sales"',
                '"queues"."Billing"',
                '"queues"."Sales.Delayed"',
                '"queues"."SubscriptionRouting"',
                '"queues"."ledger"',
                '"queues"."claims"',
            ]
        owned = sql(
            fresh_pg_uri, "SELECT count(*) FROM pg_tables WHERE schemaname = 'queues' AND tableowner = %s", (owner,)
        )
        assert owned == [(6,)]
    finally:
        for role in (owner, app):
            sql(fresh_pg_uri, f"DROP OWNED BY {role}")
            sql(fresh_pg_uri, f"DROP ROLE {role}")


def test_eight_concurrent_installs_all_succeed(fresh_pg_uri: str, pg_driver: str, more_pg_databases) -> None:
    queues = ["Sales", '"race"."Orders"', '"race"."Billing"', '"race2"."Audit"']
    workers = 8
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []
    results: list[list[str]] = []

    def work() -> None:
        try:
            with connect(fresh_pg_uri, pg_driver) as conn:
                plan = _plan(fresh_pg_uri, pg_driver, queues)
                barrier.wait(timeout=30)
                results.append(installer.install(conn, plan))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert len(results) == workers and all(r == results[0] for r in results)

    expected = {
        ("public", "Sales"),
        ("race", "Orders"),
        ("race", "Billing"),
        ("race2", "Audit"),
        ("public", "Sales.Delayed"),
        ("public", "SubscriptionRouting"),
        ("public", "queuelake_publish_ledger"),
        ("public", "queuelake_drain_claims"),
    }
    rows = sql(
        fresh_pg_uri,
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'r' AND n.nspname IN ('public', 'race', 'race2')",
    )
    assert sorted(rows) == sorted(expected)  # exactly one of each

    # and the raced result equals a quiet, single install
    quiet = more_pg_databases("quiet")
    with connect(quiet, pg_driver) as conn:
        installer.install(conn, _plan(quiet, pg_driver, queues))
    assert catalog_snapshot(fresh_pg_uri) == catalog_snapshot(quiet)


def test_print_sql_is_what_install_runs(fresh_pg_uri: str, pg_driver: str, tmp_path, more_pg_databases) -> None:
    # a line break in a table name must stay inside its quotes and out of the script's comments
    queues = ["Sales", "audit", '"billing"."Billing"', HOSTILE, '"public"."Line\nBreak; SELECT 1/0 --"']
    cfg = write_config(tmp_path, pg_driver, queues)
    printed_db = fresh_pg_uri
    installed_db = more_pg_databases("installed")

    printed = run_cli(["install", "-c", str(cfg), "--print-sql"], connection_string(printed_db, pg_driver))
    assert printed.code == 0, printed
    assert printed.summary["command"] == "install" and printed.summary["status"] == "ok", printed
    script = printed.stdout  # only SQL: the summary is on stderr
    assert "CREATE TABLE IF NOT EXISTS" in script
    assert catalog_snapshot(printed_db)["relations"] == [], "--print-sql must not touch the database"

    with psycopg.connect(printed_db, autocommit=True) as conn:
        conn.execute(script)  # the DBA runs the script as printed

    installed = run_cli(["install", "-c", str(cfg)], connection_string(installed_db, pg_driver))
    assert installed.code == 0, installed
    assert installed.summary["status"] == "ok"
    assert installed.summary["tables"] == printed.summary["printed"]
    assert catalog_snapshot(printed_db) == catalog_snapshot(installed_db)

    again = run_cli(["install", "-c", str(cfg)], connection_string(installed_db, pg_driver))
    assert again.code == 0 and again.summary["tables"] == installed.summary["tables"], again


def test_print_sql_marks_every_statement(tmp_path) -> None:
    """Each step is introduced by a one-line comment naming the table; parameters are literals."""
    cfg = make_config("postgresql://u@localhost/db", "psycopg", ['"we\'ird"."Q"'])
    text = installer.script("postgresql", installer.plan(cfg))
    assert '-- create_queue: "we\'ird"."Q"' in text
    assert "hashtextextended('\"we''ird\".\"Q\"_lock', 0)" in text
    assert "%s" not in text and "?" not in text

"""The rights the job's account needs, as the deployment guide gives them (docs/own-database.md): the
owner runs ``install``; an account with read, write and delete on the tables (and the sequences their
``seq`` columns draw from) drains, retries failed messages and reports status. Real PostgreSQL, a real
role without ownership or CREATE."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from queuelake.commands.demo import traffic
from queuelake.config import from_dict
from queuelake.transport import db, installer
from queuelake.transport.table_refs import queue_ref

from tests.helpers.cli import run_cli

pytestmark = pytest.mark.slow
NOW = dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc)

GRANTS = (
    "GRANT USAGE ON SCHEMA public TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}",
)


def _as(uri: str, role: str) -> str:
    parts = urlsplit(uri)
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{role}@{host}").geturl()


def test_read_write_delete_rights_are_enough_for_the_job(fresh_pg_uri: str, tmp_path: Path) -> None:
    role = "queuelake_job"
    setup = from_dict({"transport": {"connection": fresh_pg_uri}, "drain": {"queues": ["Sales", "error"]}}, env={})
    with db.connect(setup.transport) as conn:  # the owner installs
        installer.install(conn, installer.plan(setup))
        sent = list(traffic.order_events(300, seed=4))
        traffic.seed(conn, queue_ref("Sales", setup.transport), sent)
        failed = [traffic.failed_copy(m, "Sales", "System.TimeoutException", "t", NOW) for m in sent[:5]]
        traffic.seed(conn, queue_ref("error", setup.transport), failed)
        conn.commit()
    with psycopg.connect(fresh_pg_uri, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN NOCREATEDB NOCREATEROLE")
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        for grant in GRANTS:
            conn.execute(grant.format(role=role))
    job = _as(fresh_pg_uri, role)
    with psycopg.connect(job) as conn:  # the account really is not the owner
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute('CREATE TABLE "public"."not_allowed" (x int)')
    conf = tmp_path / "job.json"
    conf.write_text(
        json.dumps(
            {
                "transport": {"connection": "${QUEUELAKE_CONNECTION}"},
                "lake": {"root": str(tmp_path / "lake"), "engine": "delta-rs"},
                "drain": {"queues": ["Sales", "error"], "batch_size": 100},
            }
        )
    )

    def cli(*args: str) -> dict:
        result = run_cli([*args, "-c", str(conf)], job, cwd=tmp_path, timeout=300)
        summary = result.summary
        assert result.returncode == 0 and summary["status"] == "ok", (args, summary, result.stderr[-3000:])
        return summary

    assert cli("status")["status"] == "ok"
    assert cli("drain")["landed"] == 305
    retried = cli("replay", "--where", "failed_queue IS NOT NULL")
    assert retried["rows_sent"] == 5, retried
    assert cli("drain")["landed"] == 5  # the retries, back from Sales


def test_a_table_the_job_may_not_insert_into_is_not_a_destination(fresh_pg_uri: str) -> None:
    """A subscriber's table another team owns and never granted INSERT on, or changed with a NOT NULL
    column a send does not write, refused every copy: its refusal failed the whole batch, every run,
    and every other subscriber got nothing (found by a review). The catalog tells both before the
    batch: such a table is an undeliverable destination, named with its reason. A table the job may
    insert into is not refused: INSERT granted on the columns a send writes, through a role, or a NOT
    NULL column whose domain gives the default (a third review)."""
    from queuelake.transport import schema

    role = "queuelake_sender"
    tables = ("Good", "Closed", "Strict", "Hidden", "Columns", "ViaRole", "Domain", "Filled", "NoSeq")
    setup = from_dict({"transport": {"connection": fresh_pg_uri}, "drain": {"queues": ["Good"]}}, env={})
    with db.connect(setup.transport) as conn:
        installer.install(conn, installer.plan(setup, extra_queues=list(tables[1:])))
        conn.commit()
    with psycopg.connect(fresh_pg_uri, autocommit=True) as conn:
        for old in (role, "queuelake_senders"):
            conn.execute(f"DROP ROLE IF EXISTS {old}")
        conn.execute("CREATE ROLE queuelake_senders NOLOGIN")
        conn.execute(f"CREATE ROLE {role} LOGIN IN ROLE queuelake_senders")
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        conn.execute(
            f'GRANT SELECT, INSERT ON "public"."Good", "public"."Strict", "public"."Domain", "public"."Filled", '
            f'"public"."NoSeq" TO {role}'
        )
        # a NOT NULL column a BEFORE INSERT trigger fills (NOT NULL is checked after it): deliverable (a
        # review found it called undeliverable); a seq that lost its default is not
        conn.execute('ALTER TABLE "public"."Filled" ADD COLUMN "Tenant" integer NOT NULL')
        conn.execute(
            "CREATE OR REPLACE FUNCTION fill_tenant() RETURNS trigger LANGUAGE plpgsql AS "
            '$$ BEGIN NEW."Tenant" := 7; RETURN NEW; END $$'
        )
        conn.execute(
            'CREATE TRIGGER "fill" BEFORE INSERT ON "public"."Filled" FOR EACH ROW EXECUTE FUNCTION fill_tenant()'
        )
        conn.execute('ALTER TABLE "public"."NoSeq" ALTER COLUMN seq DROP DEFAULT')
        conn.execute(f'GRANT SELECT ON "public"."Closed" TO {role}')  # read, never insert; Hidden: nothing
        conn.execute(f'GRANT SELECT, INSERT (id, expires, headers, body) ON "public"."Columns" TO {role}')
        conn.execute('GRANT SELECT, INSERT ON "public"."ViaRole" TO queuelake_senders')
        conn.execute('ALTER TABLE "public"."Strict" ADD COLUMN "Tenant" integer NOT NULL')
        # a trigger that fires only on a replica (session_replication_role) fills nothing a send writes
        conn.execute(
            'CREATE TRIGGER "replica_fill" BEFORE INSERT ON "public"."Strict" '
            "FOR EACH ROW EXECUTE FUNCTION fill_tenant()"
        )
        conn.execute('ALTER TABLE "public"."Strict" ENABLE REPLICA TRIGGER "replica_fill"')
        # nor does a DO ALSO rule: the row is still written here (only DO INSTEAD may send it elsewhere)
        conn.execute('CREATE RULE "also_notify" AS ON INSERT TO "public"."Strict" DO ALSO NOTIFY strict_inserts')
        conn.execute('CREATE RULE "instead_off" AS ON INSERT TO "public"."Strict" DO INSTEAD NOTHING')
        conn.execute('ALTER TABLE "public"."Strict" DISABLE RULE "instead_off"')  # a disabled rule sends nothing away
        conn.execute("DROP DOMAIN IF EXISTS tenant_id")
        conn.execute("CREATE DOMAIN tenant_id AS integer DEFAULT 0")
        conn.execute('ALTER TABLE "public"."Domain" ADD COLUMN "Tenant" tenant_id NOT NULL')
    job = from_dict({"transport": {"connection": _as(fresh_pg_uri, role)}}, env={})
    with db.connect(job.transport) as conn:
        problems = {q: schema.delivery_problem(conn, queue_ref(q, job.transport)) for q in tables}
    assert {q for q, problem in problems.items() if problem is None} == {
        "Good",
        "Columns",
        "ViaRole",
        "Domain",
        "Filled",
    }
    assert problems["NoSeq"] == (
        'queue table "public"."NoSeq" has NOT NULL column(s) without a default that a send does not write: seq'
    )
    for closed in ("Closed", "Hidden"):  # a table the login may not even read is named as not granted
        assert (
            problems[closed] == f'this login may not insert into queue table "public"."{closed}" (no INSERT permission)'
        )
    assert problems["Strict"] == (
        'queue table "public"."Strict" has NOT NULL column(s) without a default that a send does not write: tenant'
    )

"""Safe configuration: a drained queue is not a send destination unless the config says so, the
example configs follow that rule, and ``transport.delayed_endpoints`` makes ``install`` create the
delayed tables (before, only the demo could)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from queuelake import config as config_mod
from queuelake.config import check_queues_named, check_send_target, from_dict
from queuelake.errors import ConfigError
from queuelake.transport import installer, schema
from queuelake.transport.table_refs import queue_ref

from tests.helpers.cli import run_cli  # the CLI runs in a process: this module is in the subprocess tier
from tests.helpers.db import connection_string
from tests.helpers.redaction import cut_words
from tests.helpers.transport import connect, write_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_ENV = {"QUEUELAKE_CONNECTION": "postgresql://u:p@db/nsb", "QUEUELAKE_LAKE_ROOT": "/data/lake"}


def settings(queues: list[str], destinations: list[str], dialect: str = "postgresql", **drain: Any) -> dict[str, Any]:
    transport = {"dialect": dialect, "driver": "psycopg" if dialect == "postgresql" else "pyodbc", "connection": "x"}
    return {
        "transport": transport,
        "drain": {"queues": queues, **drain},
        "transforms": [
            {
                "name": "customer_totals",
                "function": "queuelake.commands.demo.orders:customer_totals",
                "output": "outbound_customer_totals",
                "destinations": destinations,
            }
        ],
    }


def test_a_drained_destination_is_an_error_naming_both_places() -> None:
    with pytest.raises(ConfigError) as caught:
        from_dict(settings(["Sales", "Billing", "audit"], ["Billing"]), env={}, source="conf/prod.yaml")
    message = str(caught.value)
    assert message.startswith("conf/prod.yaml: ")
    assert "drain.queues drains Billing" in message
    assert "transforms[0] (customer_totals).destinations" in message
    assert "drain.also_destinations" in message  # how to say it is intended


@pytest.mark.parametrize(
    ("dialect", "drained", "destination"),
    [
        ("postgresql", '"public"."Billing"', "Billing"),
        ("postgresql", "Billing", "public.Billing"),
        ("sqlserver", "Billing@[dbo]", "Billing"),
        ("sqlserver", "Billing", "Billing@[dbo]@[]"),
    ],
)
def test_spellings_of_one_queue_are_the_same_queue(dialect: str, drained: str, destination: str) -> None:
    with pytest.raises(ConfigError, match="drain.queues drains"):
        from_dict(settings(["Sales", drained], [destination], dialect), env={})


def test_other_schemas_and_queues_are_not_conflicts() -> None:
    cfg = from_dict(settings(["Sales", '"archive"."Billing"'], ["Billing", "Shipping"]), env={})
    assert [t.destinations for t in cfg.transforms] == [["Billing", "Shipping"]]


def test_a_queue_named_for_one_drain_is_checked_as_drain_queues_is() -> None:
    """``drain --queue Billing`` took every message the demo had published to Billing into the lake, exit
    0, where Billing in ``drain.queues`` is refused (a review)."""
    cfg = from_dict(settings(["Sales"], ["Billing"]), env={}, source="conf/prod.yaml")
    with pytest.raises(ConfigError) as caught:
        check_queues_named(cfg, ["Sales", "public.Billing"])
    message = str(caught.value)
    assert message.startswith("conf/prod.yaml: --queue drains public.Billing, which transforms[0] (customer_totals)")
    # the advice works as given: both keys (also_destinations alone fails, "not in drain.queues")
    assert "add public.Billing to drain.queues and drain.also_destinations" in message, message
    check_queues_named(cfg, ["Sales", "audit"])  # not a destination: drained as asked
    allowed = from_dict(settings(["Sales", "Billing"], ["Billing"], also_destinations=["Billing"]), env={})
    check_queues_named(allowed, ["Billing"])


def test_also_destinations_says_it_is_intended() -> None:
    cfg = from_dict(settings(["Sales", "Billing"], ["Billing"], also_destinations=['"public"."Billing"']), env={})
    assert cfg.drain.also_destinations == ['"public"."Billing"']


def test_also_destinations_must_name_drained_queues() -> None:
    with pytest.raises(ConfigError, match=r"drain.also_destinations lists Biling, not in drain.queues"):
        from_dict(settings(["Sales", "Billing"], ["Billing"], also_destinations=["Biling"]), env={})


def test_check_send_target_for_replay_to_and_subscribers() -> None:
    cfg = from_dict(settings(["Sales", "audit"], []), env={}, source="conf/prod.yaml")
    check_send_target(cfg, "Billing", "replay --to")  # not drained: fine
    with pytest.raises(ConfigError) as caught:
        check_send_target(cfg, '"public"."Sales"', "replay --to")
    assert "drain.queues drains Sales, which replay --to sends to" in str(caught.value)
    subscriber = "subscription SubscriptionRouting (endpoint Sales, topic Sales.Messages.Events.OrderPlaced)"
    with pytest.raises(ConfigError, match="which subscription SubscriptionRouting"):
        check_send_target(cfg, "Sales", subscriber)
    allowed = from_dict(settings(["Sales", "audit"], [], also_destinations=["Sales"]), env={})
    check_send_target(allowed, "Sales", "replay --to")


@pytest.mark.parametrize("name", ["local.yaml", "postgres.example.yaml", "sqlserver.example.yaml"])
def test_example_configs_do_not_drain_what_they_send_to(name: str) -> None:
    cfg = config_mod.load(ROOT / "conf" / name, env=EXAMPLE_ENV)
    sent_to = [d for t in cfg.transforms for d in t.destinations]
    assert sent_to == ["Billing"], "the example transform sends ApplyLoyaltyDiscount to Billing"
    assert cfg.drain.also_destinations == []
    assert "Billing" not in cfg.drain.queues
    # the same file with Billing drained again is the mistake the issue describes, and is refused
    data = yaml.safe_load((ROOT / "conf" / name).read_text(encoding="utf-8"))
    data["drain"]["queues"].append("Billing")
    with pytest.raises(ConfigError, match="drain.queues drains Billing"):
        from_dict(data, env=EXAMPLE_ENV)


def test_the_example_transform_sends_where_its_config_says() -> None:
    """The config's ``destinations`` for the worked example is its real Send destination."""
    from queuelake.commands.demo import orders

    cfg = config_mod.load(ROOT / "conf" / "postgres.example.yaml", env=EXAMPLE_ENV)
    assert cfg.transforms[0].function == "queuelake.commands.demo.orders:customer_totals"
    assert cfg.transforms[0].destinations == [orders.DISCOUNT_QUEUE]


def test_install_creates_destinations_and_delayed_tables_from_config(fresh_pg_uri: str) -> None:
    data = settings(["Sales", "audit"], ["Billing"])
    data["transport"].update(
        connection=connection_string(fresh_pg_uri, "psycopg"), delayed_endpoints=["Billing", "Shipping", "Billing"]
    )
    cfg = from_dict(data, env={})
    plan = installer.plan(cfg)
    assert [q.canonical for q in plan.queues] == ['"public"."Sales"', '"public"."audit"', '"public"."Billing"']
    assert [d.canonical for d in plan.delayed] == ['"public"."Billing.Delayed"', '"public"."Shipping.Delayed"']
    with connect(fresh_pg_uri, "psycopg") as conn:
        before = [schema.table_exists(conn, d) for d in plan.delayed]
        conn.rollback()
        installer.install(conn, plan)
        after = [schema.table_exists(conn, ref) for ref in [*plan.queues, *plan.delayed]]
        conn.rollback()
    assert before == [False, False]
    assert all(after)
    assert queue_ref("Billing", cfg.transport).delayed().canonical == '"public"."Billing.Delayed"'


def test_delayed_endpoints_default_to_none() -> None:
    cfg = from_dict(settings(["Sales"], []), env={})
    assert cfg.transport.delayed_endpoints == []
    assert installer.plan(cfg).delayed == []


def test_replay_to_a_drained_queue_is_refused_before_anything_runs(tmp_path: Path) -> None:
    path = write_config(tmp_path, "psycopg", ["Sales", "audit"])
    result = run_cli(["replay", "-c", str(path), "--where", "true", "--to", "Sales"], "postgresql://u@127.0.0.1:1/x")
    assert result.code == 1, result
    error = result.summary["error"]
    assert "drain.queues drains Sales" in error and "replay --to" in error, error
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("password", ["Sale", "drain", "queues"])
def test_the_refusal_reads_the_same_whatever_the_password(password: str, tmp_path: Path) -> None:
    """A config error holds no secret: a password that is part of its words leaves them whole."""
    path = write_config(tmp_path, "psycopg", ["Sales", "audit"])
    connection = f"postgresql://u:{password}@127.0.0.1:1/x"
    result = run_cli(["replay", "-c", str(path), "--where", "true", "--to", "Sales"], connection)
    assert result.code == 1, result
    error = result.summary["error"]
    assert f"{path}: drain.queues drains Sales, which replay --to sends to" in error, error
    assert not cut_words(result.stdout + result.stderr), result

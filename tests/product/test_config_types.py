"""Every config key's value is checked against its type as the file is read (``build_section``): a value
of another type went wrong far from the file (a review): ``drain.queues: Sales`` created and drained the
queues S, a, l, e and s; a number as the connection failed with a traceback and no summary."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
from queuelake.config import from_dict
from queuelake.errors import ConfigError

BASE: dict[str, Any] = {"transport": {"connection": "postgresql://u:Sekr1t-Value@h/db"}, "drain": {"queues": ["Sales"]}}


def built(key: str, value: Any) -> Any:
    section, name = key.split(".")
    data = copy.deepcopy(BASE)
    data.setdefault(section, {})[name] = value
    return getattr(getattr(from_dict(data, env={}, source="conf/prod.yaml"), section), name)


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("drain.queues", "Sales", "drain.queues: expected a list of texts, got one string (a list is written [a, b])"),
        ("transport.delayed_endpoints", "Sales", "transport.delayed_endpoints: expected a list of texts, got one"),
        ("transport.delayed_endpoints", {"Sales": 1}, "expected a list of texts, got a mapping"),
        ("drain.queues", [1], "drain.queues[0]: expected a text, got a whole number"),
        ("transport.connection", 12345, "transport.connection: expected a text (or nothing), got a whole number"),
        ("transport.connection", ["a"], "transport.connection: expected a text (or nothing), got a list"),
        ("drain.batch_size", 1.5, "drain.batch_size: expected a whole number, got a number"),
        ("drain.batch_size", True, "drain.batch_size: expected a whole number, got true/false"),
        ("drain.max_messages", 2.7, "drain.max_messages: expected a whole number (or nothing), got a number"),
        ("drain.workers_per_queue", "two", "drain.workers_per_queue: expected a whole number, got a text"),
        ("bodies.enabled", "maybe", "bodies.enabled: expected true or false, got a text"),
        ("bodies.enabled", 2, "bodies.enabled: expected true or false, got a whole number"),
        # YAML's .inf and .nan, or the same as text: no number of seconds (settle forever, never)
        ("drain.settle_seconds", float("inf"), "drain.settle_seconds: expected a number, got a number that is not"),
        ("drain.max_seconds", float("nan"), "drain.max_seconds: expected a number (or nothing), got a number that"),
        ("drain.settle_seconds", "inf", "drain.settle_seconds: expected a number, got a text"),
        # an integer past a float's range (YAML reads 400 digits as an int): OverflowError before (a review)
        ("drain.settle_seconds", 10**400, "drain.settle_seconds: expected a number, got a "),
        ("drain.max_seconds", "NaN", "drain.max_seconds: expected a number (or nothing), got a text"),
        ("spark.conf", {"spark.x": [1]}, "spark.conf.spark.x: expected a text, number or true/false, got a list"),
    ],
)
def test_a_value_of_another_type_is_an_error_naming_its_key(key: str, value: Any, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        built(key, value)
    assert str(caught.value).startswith("conf/prod.yaml: "), caught.value
    assert said in str(caught.value)


def test_numbers_and_yes_no_written_as_text_are_read_as_such() -> None:
    """A quoted YAML value or a ``${VAR}`` is text: read as the number or yes/no the key takes."""
    assert built("drain.workers_per_queue", "2") == 2
    assert built("drain.max_seconds", "10") == 10.0
    assert built("bodies.enabled", "no") is False and built("bodies.enabled", "true") is True
    assert built("drain.max_messages", None) is None
    assert built("lake.root", Path("/data/lake")) == "/data/lake"  # a folder given from Python
    assert built("lake.storage_options", {"AWS_SESSION_TOKEN": None}) == {}  # a key left empty: dropped, as before
    assert built("spark.conf", {"spark.executor.memory": None}) == {}  # so here: it was the text "None"
    assert built("bodies.enabled", 1) is True and built("bodies.enabled", 0) is False  # YAML's 1/0, as before
    assert built("spark.conf", {"spark.executor.cores": 2, "spark.x": True}) == {
        "spark.executor.cores": "2",
        "spark.x": "true",
    }
    conf = from_dict(
        {**BASE, "drain": {"queues": ["Sales"], "batch_size": "${BATCH}"}}, env={"BATCH": "500"}, source="c.yaml"
    )
    assert conf.drain.batch_size == 500


def test_the_value_itself_is_never_shown() -> None:
    """A value in the wrong place may be a secret (a password pasted as a number of workers)."""
    with pytest.raises(ConfigError) as caught:
        built("drain.workers_per_queue", "Sekr1t-Value")
    assert "Sekr1t" not in str(caught.value)


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        # as --max-messages -1 is a usage error: a negative LIMIT failed every queue at the database (a review)
        ("drain.max_messages", -5, "drain.max_messages must be a whole number, 1 or more, or null, not -5"),
        ("drain.max_messages", 0, "drain.max_messages must be a whole number, 1 or more"),
        # a time box of 0 or less drained nothing, with no word why
        ("drain.max_seconds", -1, "drain.max_seconds must be a number of seconds above 0, or null, not -1"),
        ("drain.max_seconds", 0, "drain.max_seconds must be a number of seconds above 0"),
        # past PostgreSQL's 2^31-1 ms every queue's session failed: "Value exceeds integer range"
        ("drain.statement_timeout_seconds", 3_000_000, "drain.statement_timeout_seconds must be a number of seconds"),
        (
            "drain.idle_in_transaction_timeout_seconds",
            1e30,
            "drain.idle_in_transaction_timeout_seconds must be a number of seconds above 0 and at most 2,147,483",
        ),
        # refused when the drain started, as a drain error, not as the config's
        ("drain.workers_per_queue", 33, "drain.workers_per_queue must be a whole number from 1 to 32, not 33"),
    ],
)
def test_a_drain_setting_out_of_range_is_a_config_error_naming_its_key(key: str, value: Any, said: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(said)):
        built(key, value)


def test_drain_settings_at_the_edges_of_their_range_are_taken() -> None:
    assert built("drain.max_messages", 1) == 1 and built("drain.max_seconds", 0.5) == 0.5
    assert built("drain.statement_timeout_seconds", 2_147_483) == 2_147_483
    assert built("drain.workers_per_queue", 32) == 32


def test_two_transforms_writing_one_output_are_a_config_error() -> None:
    """A transform block copied with only its name changed read the whole journal again into the first one's
    output, and publish sent those rows again (a review)."""
    fn = "queuelake.commands.demo.orders:customer_totals"
    twice = [
        {"name": "a", "output": "outbound_x", "function": fn},
        {"name": "b", "output": "outbound_x", "function": fn},
    ]
    with pytest.raises(ConfigError, match="transforms 'a' and 'b' both write outbound_x"):
        from_dict({**BASE, "transforms": twice}, env={})
    named = [
        {"name": "a", "output": "outbound_x", "function": fn},
        {"name": "a", "output": "outbound_y", "function": fn},
    ]
    with pytest.raises(ConfigError, match=r"transforms\[0\] and \[1\] are both named 'a'"):
        from_dict({**BASE, "transforms": named}, env={})
    with pytest.raises(ConfigError, match="publish.outputs names outbound_x more than once"):
        from_dict({**BASE, "publish": {"outputs": ["outbound_x", "outbound_x"]}}, env={})


@pytest.mark.parametrize("schema", ["my schema", "a.b", "x`y"])
def test_a_lake_schema_no_metastore_takes_is_a_config_error(schema: str) -> None:
    """``lake.schema: 'my schema'`` drained every run, then failed bodies and the transforms (a review)."""
    with pytest.raises(ConfigError, match="lake.schema .* cannot be a metastore name"):
        from_dict({**BASE, "lake": {"schema": schema}}, env={})
    assert from_dict({**BASE, "lake": {"schema": "queue-lake_1"}}, env={}).lake.schema == "queue-lake_1"

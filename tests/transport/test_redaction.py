"""Redaction keeps messages readable and never shows a secret, whatever the secret looks like.

A password can be an ordinary word (postgres, admin, password), one character long, or part of the
dialect, user, host or database names. Replacing its text wherever it occurs turned
``transport.dialect must be postgresql or sqlserver`` into ``must be ***ql or sqlserver`` and, with
the password ``a``, ``typo_key.yaml: drain`` into ``typo_key.y***ml: dr***in``. These tests hold both
halves: a message that does not show the secret comes out as it went in, and one that does (a
driver quoting the connection string, a password field, a percent-encoded token) never shows it.
The connect errors of libpq and of a real PostgreSQL with such passwords are in test_errors.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
import yaml
from queuelake import cli, redaction
from queuelake import config as config_mod
from queuelake.config_sections import TransportConfig
from queuelake.errors import ConfigError
from queuelake.transport import db

from tests.helpers.redaction import cut_words, shows_secret

# common words; one character; parts of the dialect (postgresql, sqlserver), of the user
# (queuelake), of the host (db.example.invalid, 127.0.0.1) and of the database (queues)
PASSWORDS = ["postgres", "admin", "password", "a", "sql", "gres", "server", "queue", "lake", "db", "example", "127"]
URI = "postgresql://queuelake:{password}@db.example.invalid:5432/queues"


def _secrets(password: str) -> list[str]:
    return [URI.format(password=quote(password, safe=""))]


# --- our own messages: they hold no secret, and come out as they went in -----------------------


def _config_error(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        config_mod.load(path, env={"QUEUELAKE_CONNECTION": "x"})
    return str(caught.value)


# "lake" is left out: it is a word of the unknown-key error ("known: drain, lake, ..."), masked there
@pytest.mark.parametrize("password", [p for p in PASSWORDS if p != "lake"])
def test_config_errors_are_not_touched(password: str, tmp_path: Path) -> None:
    typo = tmp_path / "typo_key.yaml"
    typo.write_text(yaml.safe_dump({"transport": {"connection": "${QUEUELAKE_CONNECTION}"}, "drian": {}}))
    dialect = tmp_path / "dialect.yaml"
    dialect.write_text(yaml.safe_dump({"transport": {"dialect": "oracle", "connection": "${QUEUELAKE_CONNECTION}"}}))
    for message in (_config_error(typo), _config_error(dialect)):
        assert cli._redact(message, _secrets(password)) == message
    assert "transport.dialect must be postgresql or sqlserver, not 'oracle'" in _config_error(dialect)


@pytest.mark.parametrize("password", ["postgres", "a", "admin"])
def test_cli_config_error_reads_the_same_with_a_common_password(
    password: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's catch-all redaction, end to end: the summary's error is the config error itself."""
    path = tmp_path / "typo_key.yaml"
    path.write_text(yaml.safe_dump({"transport": {"connection": "${QUEUELAKE_CONNECTION}"}, "drian": {"queues": []}}))
    monkeypatch.setenv("QUEUELAKE_CONNECTION", f"postgresql://postgres:{password}@localhost:5432/postgres")
    expected = _config_error(path)
    assert cli.main(["status", "-c", str(path)]) == 1
    out = capsys.readouterr()
    summary = cli_summary(out.out)
    assert summary["error"] == expected
    assert f"{path}: unknown key(s) drian" in out.err


def cli_summary(stdout: str) -> dict[str, object]:
    return json.loads([line for line in stdout.splitlines() if line.strip()][-1])


DRIVER_TEXT = (
    'connection to server at "db.example.invalid" (10.0.0.7), port 5432 failed: '
    'FATAL:  database "queues" does not exist'
)


def _connect_fails(args: argparse.Namespace) -> dict[str, object]:
    """A stand-in command: a connect error as db.py raises it, on its way through the CLI."""
    config = TransportConfig(connection=os.environ["QUEUELAKE_CONNECTION"])
    raise db._connect_error(psycopg.OperationalError(DRIVER_TEXT), config)


@pytest.mark.parametrize("password", PASSWORDS)
def test_connect_error_prefix_and_names_are_kept(
    password: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Our prefix (dialect, driver) is ours: it reads the same whatever the password. Only the
    driver's text is searched for the secret, where a word equal to it is masked."""
    monkeypatch.setenv("QUEUELAKE_CONNECTION", URI.format(password=quote(password, safe="")))
    monkeypatch.setitem(cli.COMMANDS, "status", dataclasses.replace(cli.COMMANDS["status"], run=_connect_fails))
    assert cli.main(["status", "-c", "/nonexistent.yaml"]) == 1
    error = str(cli_summary(capsys.readouterr().out)["error"])
    driver = DRIVER_TEXT.replace(f" {password} ", " *** ")
    assert error == f"cannot connect to the postgresql queue database with psycopg: {driver}"


# --- messages that show the secret: never shown, and the words around it kept ------------------


def _odd_places(password: str) -> list[str]:
    uri = URI.format(password=quote(password, safe=""))
    return [
        f"cannot reach {uri}",  # the whole connection string
        f"cannot reach {uri.replace(':5432', '')}?sslmode=require",  # another URI with the same password
        f'could not parse "host=db.example.invalid user=queuelake password={password} dbname=queues"',
        f"could not parse 'password=\\'{password}\\' dbname=queues'",
        f"[IM002] Driver={{PostgreSQL}};Server=db.example.invalid;Uid=queuelake;PWD={{{password}}};",
        f"[IM002] Driver={{PostgreSQL}};Server=db.example.invalid;Uid=queuelake;pwd={password};Database=queues",
        f'invalid percent-encoded token: "{password}"',  # libpq quotes the URI's password
        f"('08001', 'bad login\\n{password}')",  # a repr with an escaped line break
        f"the password {password} was refused.",
        f"{password}",
    ]


@pytest.mark.parametrize("password", PASSWORDS)
def test_secret_in_odd_places_is_never_shown(password: str) -> None:
    for message in _odd_places(password):
        out = cli._redact(message, _secrets(password))
        assert not shows_secret(out, password), (message, out)
        assert not cut_words(out), (message, out)


def test_the_rest_of_those_messages_is_kept() -> None:
    out = [cli._redact(m, _secrets("admin")) for m in _odd_places("admin")]
    assert out[0] == "cannot reach <connection string>"
    assert out[1] == "cannot reach postgresql://queuelake:***@db.example.invalid/queues?sslmode=require"
    assert out[2] == 'could not parse "host=db.example.invalid user=queuelake password=*** dbname=queues"'
    assert out[4] == "[IM002] Driver={PostgreSQL};Server=db.example.invalid;Uid=queuelake;PWD=***;"
    assert out[6] == 'invalid percent-encoded token: "***"'
    assert out[8] == "the password *** was refused."


@pytest.mark.parametrize("password", ["Wr0ng-Pa55w0rd", "correcthorsebatterystaple"])
def test_a_distinctive_secret_is_removed_even_inside_other_text(password: str) -> None:
    """A secret long and varied enough to be no one's word goes wherever it is, even glued to
    other text (percent-encoded into another string, after an escape): no rule about words needed."""
    secrets = _secrets(password)
    for message in (f"options=user%3Dq%20password%3D{password}x", f"token:{password}_2", f"x{password}"):
        out = cli._redact(message, secrets)
        assert password not in out, out


@pytest.mark.parametrize(
    ("secret", "anywhere"),
    [
        ("postgres", False),
        ("password", False),
        ("sqlserver", False),
        ("a", False),
        ("Pa55", False),
        ("Passw0rd", True),
        ("s3cr3t-pa55", True),
        ("correcthorsebatterystaple", True),
    ],
)
def test_which_secrets_are_removed_anywhere(secret: str, anywhere: bool) -> None:
    """Words of 8 letters (postgres, password) are words of our messages; a mix of kinds or 16
    characters is no one's word."""
    assert redaction.distinctive(secret) is anywhere


def test_storage_option_values_are_redacted_as_words(tmp_path: Path) -> None:
    """lake.storage_options credentials that are ordinary words (MinIO's defaults are admin words)."""
    path = tmp_path / "lake.yaml"
    options = {"AWS_ACCESS_KEY_ID": "minioadmin", "AWS_SECRET_ACCESS_KEY": "password", "AWS_REGION": "us-east-1"}
    path.write_text(
        yaml.safe_dump({"transport": {"connection": "x"}, "lake": {"root": "s3://lake", "storage_options": options}})
    )
    secrets = cli._secrets(argparse.Namespace(config=str(path)))
    assert "minioadmin" in secrets and "password" in secrets
    message = "s3://lake/minioadmin-exports: access denied for key minioadmin (password authentication of passwords)"
    out = cli._redact(message, secrets)
    assert out == "s3://lake/minioadmin-exports: access denied for key *** (*** authentication of passwords)"


def test_a_short_word_of_a_password_of_several_words_leaves_our_messages_alone() -> None:
    """A password of common words masked every one of them as a word in our own messages; a one-letter word
    of it cut ``'x'`` to ``'***'`` (a review). Words of 4 characters or more are still masked, and a piece an
    '@' splits off (libpq reads it as part of the host) however short."""
    from queuelake.redaction import redact

    connection = "postgresql://bridge:battery x staple@/ql?host=/tmp"
    said = redact("--where compares queue with 'x'; battery and staple", [connection])
    assert said == "--where compares queue with 'x'; *** and ***", said
    assert "a@" not in redact("failed to resolve host 'a@127.0.0.1'", ["postgresql://u:x@a@127.0.0.1:1/q"])


def test_a_connection_string_without_a_password_keeps_what_libpq_quotes() -> None:
    """Nothing secret to hide: the quoted piece says what is wrong (a database name's bad escape)."""
    from queuelake.redaction import conninfo_refusal

    message = 'invalid percent-encoded token: "l%zzk"'
    assert conninfo_refusal(message, "postgresql://postgres@localhost/l%zzk") == message
    assert (
        conninfo_refusal(message, "postgresql://postgres:p%zzk@localhost/db") == 'invalid percent-encoded token: "***"'
    )

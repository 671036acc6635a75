"""Errors users see from the transport: they name the table, and never show the password."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import psycopg
import pytest
from queuelake import cli
from queuelake.config_sections import TransportConfig
from queuelake.errors import RowsRefused, TransportError
from queuelake.transport import db, installer, queues, schema
from queuelake.transport.queues import OutgoingMessage

from tests.helpers.cli import run_cli
from tests.helpers.db import connection_string
from tests.helpers.redaction import cut_words, shows_secret
from tests.helpers.transport import connect, make_config, ref, write_config

RIGHT_PASSWORD = "C0rrect;Horse}Battery{St@ple x"  # ODBC-hostile: ; braces @ and a space
WRONG_PASSWORD = "Wr0ng-Pa55w0rd-Xyzzy-7731"


def _with_login(uri: str, user: str, password: str) -> str:
    parts = urlsplit(uri)
    host = parts.netloc.rsplit("@", 1)[-1]
    return parts._replace(netloc=f"{user}:{quote(password, safe='')}@{host}").geturl()


def _assert_secret_absent(text: str, password: str) -> None:
    for form in {password, quote(password, safe=""), password.replace("}", "}}")}:
        assert form not in text
    for fragment in ("Wr0ng", "C0rrect", "Xyzzy", "Battery"):
        assert fragment not in text


@pytest.fixture(scope="module")
def password_login(pg_server_uri: str, pg_uri: str) -> Iterator[tuple[str, str]]:
    """A role that must give RIGHT_PASSWORD (the embedded server trusts everyone else)."""
    role = "ql_pw_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_server_uri, autocommit=True) as conn:
        try:
            conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{RIGHT_PASSWORD}'")
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("the test server's user may not create roles")
        hba = conn.execute("SHOW hba_file").fetchone()[0]
        original = None
        if os.access(hba, os.W_OK):
            with open(hba, encoding="utf-8") as f:
                original = f.read()
            rules = f"local all {role} scram-sha-256\nhost all {role} all scram-sha-256\n"
            with open(hba, "w", encoding="utf-8") as f:
                f.write(rules + original)
            conn.execute("SELECT pg_reload_conf()")
    try:
        wrong = _with_login(pg_uri, role, WRONG_PASSWORD)
        for _ in range(50):  # the reload is asynchronous
            try:
                psycopg.connect(wrong).close()
            except psycopg.OperationalError:
                break
            time.sleep(0.1)
        else:
            pytest.skip("the test server accepts any password for a new role (trust authentication)")
        yield role, _with_login(pg_uri, role, RIGHT_PASSWORD)
    finally:
        with psycopg.connect(pg_server_uri, autocommit=True) as conn:
            if original is not None:
                with open(hba, "w", encoding="utf-8") as f:
                    f.write(original)
                conn.execute("SELECT pg_reload_conf()")
            conn.execute(f"DROP ROLE IF EXISTS {role}")


def test_the_right_password_connects(password_login: tuple[str, str], pg_driver: str) -> None:
    """The control for the wrong-password tests: the same string with the right password works."""
    _, uri = password_login
    with db.connect(TransportConfig(driver=pg_driver, connection=connection_string(uri, pg_driver))) as conn:
        assert conn.run("db_now")


def test_wrong_password_error_hides_it(password_login: tuple[str, str], pg_driver: str) -> None:
    role, uri = password_login
    wrong = connection_string(uri.replace(quote(RIGHT_PASSWORD, safe=""), quote(WRONG_PASSWORD, safe="")), pg_driver)
    assert WRONG_PASSWORD in wrong
    with pytest.raises(TransportError) as info:
        db.connect(TransportConfig(driver=pg_driver, connection=wrong))
    message = str(info.value)
    assert "password authentication failed" in message and role in message
    assert pg_driver in message
    _assert_secret_absent(message, WRONG_PASSWORD)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_wrong_password_cli_output_hides_it(password_login: tuple[str, str], pg_driver: str, tmp_path) -> None:
    _, uri = password_login
    wrong = connection_string(uri.replace(quote(RIGHT_PASSWORD, safe=""), quote(WRONG_PASSWORD, safe="")), pg_driver)
    path = write_config(tmp_path, pg_driver, ["Sales"])
    path.write_text(path.read_text(encoding="utf-8") + f"lake:\n  root: {tmp_path / 'lake'}\n", encoding="utf-8")
    commands = ("status", "install", "purge-expired", "drain")
    for command in ([name, "-c", str(path)] for name in commands):
        result = run_cli(command, wrong)
        assert result.code == 1, result
        assert result.summary["status"] == "failed"
        assert result.summary["error_kind"] == "transport", result.summary
        assert "password authentication failed" in result.summary["error"]
        # one error, logged once: a drain's queues do not each repeat the run's connection failure
        assert result.stderr.count("password authentication failed") == 1, result.stderr
        _assert_secret_absent(result.stdout, WRONG_PASSWORD)
        _assert_secret_absent(result.stderr, WRONG_PASSWORD)


# common words, one character, and parts of the role (ql_pw_...), host (127.0.0.1) and dialect names
COMMON_PASSWORDS = ["postgres", "admin", "password", "a", "ql", "pw", "127", "sql", "gres"]


def _assert_readable_without(message: str, password: str, role: str, driver: str) -> None:
    assert message.startswith(f"cannot connect to the postgresql queue database with {driver}: "), message
    # the word equal to the password is masked, and no other: the secret never shows
    said = "***" if password == "password" else "password"
    assert f'{said} authentication failed for user "{role}"' in message, message
    assert not shows_secret(message, password), message
    assert not cut_words(message), message


@pytest.mark.parametrize("password", COMMON_PASSWORDS)
def test_wrong_common_word_password_error_is_readable(
    password_login: tuple[str, str], pg_driver: str, password: str
) -> None:
    """The issue's case: a password that is an ordinary word, or part of the names around it, is
    hidden where the driver shows it and leaves every other word whole."""
    role, uri = password_login
    wrong = connection_string(_with_login(uri, role, password), pg_driver)
    with pytest.raises(TransportError) as info:
        db.connect(TransportConfig(driver=pg_driver, connection=wrong))
    _assert_readable_without(str(info.value), password, role, pg_driver)


@pytest.mark.parametrize("password", ["postgres", "a"])
def test_wrong_common_word_password_cli_output_is_readable(
    password_login: tuple[str, str], pg_driver: str, password: str, tmp_path
) -> None:
    role, uri = password_login
    wrong = connection_string(_with_login(uri, role, password), pg_driver)
    result = run_cli(["status", "-c", str(write_config(tmp_path, pg_driver, ["Sales"]))], wrong)
    assert result.code == 1 and result.summary["status"] == "failed", result
    _assert_readable_without(result.summary["error"], password, role, pg_driver)
    for output in (result.stdout, result.stderr):
        assert not shows_secret(output, password) and not cut_words(output), output


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_host_error_hides_the_password(pg_driver: str, tmp_path) -> None:
    uri = f"postgresql://queuelake:{quote(WRONG_PASSWORD)}@127.0.0.1:{_closed_port()}/queues?connect_timeout=5"
    connection = connection_string(uri, pg_driver)
    with pytest.raises(TransportError) as info:
        db.connect(TransportConfig(driver=pg_driver, connection=connection))
    assert "cannot connect" in str(info.value)
    _assert_secret_absent(str(info.value), WRONG_PASSWORD)

    result = run_cli(["status", "-c", str(write_config(tmp_path, pg_driver, ["Sales"]))], connection)
    assert result.code == 1 and result.summary["status"] == "failed", result
    _assert_secret_absent(result.stdout + result.stderr, WRONG_PASSWORD)


@pytest.mark.parametrize(
    "connection",
    [
        f"host=127.0.0.1 port=1 password={WRONG_PASSWORD} junk",
        f"host=127.0.0.1 port=1 password='{WRONG_PASSWORD} with spaces' dbname=x",
        f"postgresql://queuelake:{WRONG_PASSWORD}@127.0.0.1:notaport/queues",
        f"Driver={{No Such Driver}};Server=127.0.0.1;Pwd={{{WRONG_PASSWORD};}}}};",
    ],
)
def test_malformed_connection_strings_hide_the_password(connection: str) -> None:
    driver = "pyodbc" if connection.startswith("Driver=") else "psycopg"
    with pytest.raises(TransportError) as info:
        db.connect(TransportConfig(driver=driver, connection=connection))
    _assert_secret_absent(str(info.value), WRONG_PASSWORD)


def test_receive_from_a_missing_table_names_it(pg_uri: str, pg_driver: str) -> None:
    missing = ref("NeverInstalled", pg_driver, pg_uri)
    with connect(pg_uri, pg_driver) as conn:
        for operation in (
            lambda: queues.receive_batch(conn, missing, 10),
            lambda: queues.receive_one(conn, missing),
            lambda: queues.peek(conn, missing),
            lambda: queues.purge_expired_batch(conn, missing),
            lambda: queues.send(conn, missing, [OutgoingMessage("{}", b"x")]),
        ):
            with pytest.raises(TransportError) as info:
                with conn.transaction():
                    operation()
            message = str(info.value)
            assert '"public"."NeverInstalled"' in message and "does not exist" in message, message
        # the connection is still usable after the errors
        with conn.transaction():
            assert queues.db_utc_now(conn) is not None


def test_a_refused_row_is_named_by_its_table_never_quoted(fresh_pg_uri: str, pg_driver: str) -> None:
    """A queue table that refuses a row (an extra NOT NULL column) failed the send with PostgreSQL's
    "DETAIL:  Failing row contains (...)": the message's headers and body (hex) went into the summary,
    the log and ``runs``, where an erase of the message does not reach (found by a review)."""
    cfg = make_config(fresh_pg_uri, pg_driver, ["Strict"])
    strict = ref("Strict", pg_driver, fresh_pg_uri)
    with connect(fresh_pg_uri, pg_driver) as conn:
        installer.install(conn, installer.plan(cfg))
        with conn.transaction():
            conn.raw.cursor().execute(f"ALTER TABLE {strict.qualified} ADD COLUMN extra integer NOT NULL")
        with pytest.raises(TransportError) as info:
            with conn.transaction():
                queues.send(conn, strict, [OutgoingMessage('{"Customer": "Alice"}', b'{"Name": "Alice"}')])
        # publish and replay ask the catalog first, and do not send there (test_job_rights.py)
        with conn.transaction():
            problem = schema.delivery_problem(conn, strict)
            assert problem is not None and problem.endswith("that a send does not write: extra"), problem
            installed = ref("Strict2", pg_driver, fresh_pg_uri)
            installer.install(conn, installer.plan(make_config(fresh_pg_uri, pg_driver, ["Strict2"])))
            assert schema.delivery_problem(conn, installed) is None
    message = str(info.value)
    assert '"public"."Strict"' in message and "not-null constraint" in message, message
    assert "Alice" not in message and b'{"Name"'.hex() not in message and "Failing row" not in message


# What a subscriber's own table may do to a copy: (the DDL, refused for good?)
_TABLE_RULES = {
    "check": ('ALTER TABLE {t} ADD CONSTRAINT "no_bodies" CHECK (body IS NULL)', True),
    "trigger": ('CREATE TRIGGER "closed" BEFORE INSERT ON {t} FOR EACH ROW EXECUTE FUNCTION refuse_rows()', True),
    "transient": ('CREATE TRIGGER "busy" BEFORE INSERT ON {t} FOR EACH ROW EXECUTE FUNCTION busy_rows()', False),
    # checked at COMMIT unless the send's transaction asks for it at once (``queues.immediate_constraints``)
    "deferred": (
        'CREATE CONSTRAINT TRIGGER "closed_later" AFTER INSERT ON {t} DEFERRABLE INITIALLY DEFERRED '
        "FOR EACH ROW EXECUTE FUNCTION refuse_rows()",
        True,
    ),
}


@pytest.mark.parametrize("rule", sorted(_TABLE_RULES))
def test_a_table_refusing_rows_is_told_from_a_passing_failure(fresh_pg_uri: str, pg_driver: str, rule: str) -> None:
    """A CHECK constraint or a trigger that raises refuses the rows themselves: ``RowsRefused``, naming
    the table, on every driver (publish then takes the table out of the run instead of failing every
    batch). A trigger raising a serialization failure is what a retry can cure: a plain TransportError."""
    cfg = make_config(fresh_pg_uri, pg_driver, ["Ruled"])
    table = ref("Ruled", pg_driver, fresh_pg_uri)
    ddl, refused = _TABLE_RULES[rule]
    with connect(fresh_pg_uri, pg_driver) as conn:
        installer.install(conn, installer.plan(cfg))
        with conn.transaction():
            cur = conn.raw.cursor()
            cur.execute(
                "CREATE FUNCTION refuse_rows() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'closed for maintenance'; END $$"
            )
            cur.execute(
                "CREATE FUNCTION busy_rows() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'try later' USING ERRCODE = 'serialization_failure'; END $$"
            )
            cur.execute(ddl.format(t=table.qualified))
        with pytest.raises(TransportError) as info:
            with conn.transaction():
                queues.immediate_constraints(conn)
                queues.send(conn, table, [OutgoingMessage('{"Customer": "Alice"}', b'{"Name": "Alice"}')])
        if rule == "deferred":  # without it, the refusal comes at COMMIT: a TransportError too, naming no table
            with pytest.raises(TransportError) as at_commit:
                with conn.transaction():
                    queues.send(conn, table, [OutgoingMessage('{"Customer": "Alice"}', b'{"Name": "Alice"}')])
            assert "commit failed" in str(at_commit.value) and "closed for maintenance" in str(at_commit.value)
    assert isinstance(info.value, RowsRefused) is refused, info.value
    if refused:
        assert info.value.table == table.canonical
    assert '"public"."Ruled"' in str(info.value) and "Alice" not in str(info.value), info.value


def test_require_table_names_the_missing_table(pg_uri: str, pg_driver: str) -> None:
    cfg = make_config(pg_uri, pg_driver, ["Present"])
    with connect(pg_uri, pg_driver) as conn:
        installer.install(conn, installer.plan(cfg))
        schema.require_table(conn, installer.plan(cfg).queues[0])
        for name, canonical in (("Absent", '"public"."Absent"'), ('"nope"."Orders"', '"nope"."Orders"')):
            with pytest.raises(TransportError) as info:
                schema.require_table(conn, ref(name, pg_driver, pg_uri))
            assert canonical in str(info.value) and "queuelake install" in str(info.value)


def test_cli_on_a_missing_table_fails_naming_it(pg_uri: str, pg_driver: str, tmp_path) -> None:
    path = write_config(tmp_path, pg_driver, ["NotThere"])
    result = run_cli(["purge-expired", "-c", str(path)], connection_string(pg_uri, pg_driver))
    assert result.code == 1, result
    assert result.summary["command"] == "purge-expired" and result.summary["status"] == "failed"
    assert '"public"."NotThere"' in result.summary["error"]


def test_cli_names_a_missing_environment_variable(tmp_path) -> None:
    path = write_config(tmp_path, "psycopg", ["Sales"])
    result = run_cli(["status", "-c", str(path)], None)
    assert result.code == 1 and result.summary["status"] == "failed", result
    assert "QUEUELAKE_CONNECTION" in result.summary["error"]


def test_shared_adbc_wrong_password_error_hides_it(password_login: tuple[str, str]) -> None:
    """The drain's shared ADBC database opens in the background: its error reaches every worker
    that asks for a connection, named like any connect error and without the password."""
    role, uri = password_login
    wrong = uri.replace(quote(RIGHT_PASSWORD, safe=""), quote(WRONG_PASSWORD, safe=""))
    with db.SharedAdbc(TransportConfig(driver="psycopg", connection=wrong)).start() as shared:
        for _ in range(2):
            with pytest.raises(TransportError) as info:
                shared.connect()
            message = str(info.value)
            assert "cannot connect" in message and "adbc" in message and role in message
            _assert_secret_absent(message, WRONG_PASSWORD)
            assert info.value.__cause__ is None and info.value.__suppress_context__


def test_an_unknown_queue_fails_its_drain_with_the_transport_kind(fresh_pg_uri: str, tmp_path) -> None:
    """A queue table that does not exist fails that queue (the others drain), named once in the log, and
    the failed summary says what kind of error it was, at its top and on the queue."""
    path = write_config(tmp_path, "psycopg", ["Sales"])
    path.write_text(path.read_text(encoding="utf-8") + f"lake:\n  root: {tmp_path / 'lake'}\n", encoding="utf-8")
    assert run_cli(["install", "-c", str(path)], fresh_pg_uri).code == 0
    result = run_cli(["drain", "-c", str(path), "--queue", "Sales", "--queue", "Nope"], fresh_pg_uri)
    assert result.code == 1, result
    summary = result.summary
    assert (summary["status"], summary["error_kind"]) == ("failed", "transport"), summary
    assert 'queue table "public"."Nope" does not exist' in summary["error"]
    by_queue = {q["queue"]: q for q in summary["queues"]}
    assert by_queue['"public"."Sales"']["status"] == "ok"
    assert by_queue['"public"."Nope"']["error_kind"] == "transport"
    assert result.stderr.count('"public"."Nope" does not exist') == 1, result.stderr


# --- real libpq, real messages: the password quoted where the connection string is malformed ---


@pytest.mark.parametrize("password", ["admin", "a", "postgres"])
@pytest.mark.parametrize(
    ("template", "shown"),
    [
        ("postgresql://queuelake:%zz{password}@127.0.0.1:1/queues", "invalid percent-encoded token"),
        # the piece libpq quotes is masked: it is a password's as often as not (the next test)
        ("host=127.0.0.1 port=1 user=queuelake password='{password} x' junk", 'missing "=" after "***"'),
        ("host=127.0.0.1 port=1 password={password} x", 'missing "=" after "***"'),
        ("postgresql://queuelake:x@{password}@127.0.0.1:1/queues", "failed to resolve host"),
    ],
)
def test_real_libpq_errors_never_show_the_password(password: str, template: str, shown: str) -> None:
    connection = template.format(password=password)
    with pytest.raises(TransportError) as info:
        db.connect(TransportConfig(driver="psycopg", connection=connection))
    message = cli._redact(str(info.value), [connection])
    assert message.startswith("cannot connect to the postgresql queue database with psycopg: "), message
    assert shown in message
    assert not shows_secret(message, password) and not cut_words(message), message
    with pytest.raises(psycopg.Error) as raw:  # what the driver itself says, before redaction
        psycopg.connect(connection, connect_timeout=2)
    assert shown.split('"***"')[0] in str(raw.value)


@pytest.mark.parametrize(
    ("connection", "shown"),
    [
        (
            "postgresql://bridge:correct horse battery staple@127.0.0.1:1/ql",
            'unexpected spaces found in "***", use percent-encoded spaces (%20) instead',
        ),
        ("host=127.0.0.1 port=1 user=bridge password=correct horse battery staple", 'missing "=" after "***"'),
        ("postgresql://bridge:Pw@:/?#%'\" \\;=x{}@127.0.0.1:1/ql", 'invalid percent-encoded token: "***"'),
        # a word of the password before an '=' is an unknown option to libpq (a review)
        ("host=127.0.0.1 port=1 user=bridge password=correct horse=battery staple", 'invalid connection option "***"'),
    ],
)
def test_a_password_with_spaces_or_quotes_is_never_shown_in_part(connection: str, shown: str) -> None:
    """A password with spaces, unquoted in the connection string: libpq quoted all of it, or its second
    word, and the patterns that find a password ended at its first space (a review)."""
    with pytest.raises(TransportError) as info:
        db.connect(TransportConfig(driver="psycopg", connection=connection))
    message = cli._redact(str(info.value), [connection])
    assert shown in message, message
    for piece in ("correct", "horse", "battery", "staple", "Pw@", "#%'", "\\;", "x{}"):
        assert piece not in message, message


def test_a_mistyped_key_before_the_password_is_still_named() -> None:
    """Only an unknown option standing after the password's key is masked: a typo of a key is named."""
    connection = "hots=127.0.0.1 port=1 user=bridge password=secret"
    with pytest.raises(TransportError) as info:
        db.connect(TransportConfig(driver="psycopg", connection=connection))
    assert 'invalid connection option "hots"' in cli._redact(str(info.value), [connection])


@pytest.mark.parametrize(
    ("driver_text", "shown"),
    [
        (
            'null value in column "x" of relation "Q" violates not-null constraint\n'
            'DETAIL:  Failing row contains (1, {"Name":"Alice"}).\nCONTEXT:  COPY Q, line 1',
            'null value in column "x" of relation "Q" violates not-null constraint',
        ),
        (
            "[23000] [Microsoft][ODBC Driver 18][SQL Server]Violation of PRIMARY KEY constraint 'PK_Q'. Cannot insert "
            "duplicate key in object 'dbo.Q'. The duplicate key value is (Alice (x), 1). (2627)",
            "[23000] [Microsoft][ODBC Driver 18][SQL Server]Violation of PRIMARY KEY constraint 'PK_Q'. Cannot insert "
            "duplicate key in object 'dbo.Q'. The duplicate key value is (...). (2627)",
        ),
        (
            "[22001] [Microsoft][ODBC Driver 18][SQL Server]String or binary data would be truncated in table "
            "'db.dbo.Q', column 'CorrelationId'. Truncated value: 'Alice''s order'. (2628)",
            "[22001] [Microsoft][ODBC Driver 18][SQL Server]String or binary data would be truncated in table "
            "'db.dbo.Q', column 'CorrelationId'. Truncated value: '...'. (2628)",
        ),
    ],
)
def test_a_drivers_error_never_quotes_a_rows_values(driver_text: str, shown: str) -> None:
    """PostgreSQL's DETAIL and CONTEXT, SQL Server's duplicate key and truncated values quote a row: a
    message's headers and body went into summaries, logs and ``runs``, where erase does not reach."""
    error = Exception("08001", driver_text) if driver_text.startswith("[") else Exception(driver_text)
    assert db._first_line(error) == shown
    assert "Alice" not in db._first_line(error)


def test_a_refusal_crosses_a_process_pool_with_its_table() -> None:
    """``RowsRefused`` is raised in drain processes and Spark tasks: unpickling it failed (its table was
    a second argument), and a process pool took the process for dead."""
    import pickle

    refused = pickle.loads(pickle.dumps(RowsRefused('send on "public"."Closed" failed: no', '"public"."Closed"')))
    assert isinstance(refused, RowsRefused) and refused.table == '"public"."Closed"'
    assert str(refused) == 'send on "public"."Closed" failed: no'


def test_a_table_whose_headers_column_a_send_cannot_write_is_no_destination(fresh_pg_uri: str, pg_driver: str) -> None:
    """Another program renamed a queue table's column to ``"Headers"`` or made it ``jsonb``: the catalog
    check took both for queue tables (it compared lower-cased names, never types), and the send's COPY
    failed the whole batch for every destination, every run (a review). Both are named now."""
    names = ["Renamed", "Json", "Plain"]
    cfg = make_config(fresh_pg_uri, pg_driver, names)
    renamed, json_table, plain = (ref(n, pg_driver, fresh_pg_uri) for n in names)
    with connect(fresh_pg_uri, pg_driver) as conn:
        installer.install(conn, installer.plan(cfg))
        with conn.transaction():
            cursor = conn.raw.cursor()
            cursor.execute(f'ALTER TABLE {renamed.qualified} RENAME COLUMN headers TO "Headers"')
            cursor.execute(f"ALTER TABLE {json_table.qualified} ALTER COLUMN headers TYPE jsonb USING headers::jsonb")
        with conn.transaction():
            problems = {t.canonical: schema.delivery_problem(conn, t) for t in (renamed, json_table, plain)}
    assert problems['"public"."Renamed"'] == '"public"."Renamed" is not a queue table: no column(s) headers', problems
    assert "headers column of type jsonb" in str(problems['"public"."Json"']), problems
    assert problems['"public"."Plain"'] is None, problems

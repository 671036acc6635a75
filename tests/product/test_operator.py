"""Operator comforts: ``--version``, ``--log-format json``, ``install --print-sql`` writing only SQL to
stdout (psql and psycopg accept the file), and ``-c`` falling back to the config the package ships."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import psycopg
import pytest
import yaml
from queuelake import __version__, cli
from queuelake import config as config_mod
from queuelake.errors import ConfigError
from queuelake.local_config import LOCAL_YAML, SOURCE
from queuelake.report import JsonFormatter

from tests.helpers.cli import CliResult, run_cli
from tests.helpers.db import catalog_snapshot

REPO = Path(__file__).resolve().parents[2]
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}Z (DEBUG|INFO|WARNING|ERROR) queuelake: ")


def queuelake(args: Sequence[str], cwd: Path, connection: str | None = None, timeout: float = 180) -> CliResult:
    return run_cli(args, connection, cwd=cwd, timeout=timeout)


def last_json(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.strip()][-1])


def write_config(tmp_path: Path, **extra: object) -> Path:
    data = {
        "transport": {
            "dialect": "postgresql",
            "driver": "psycopg",
            "connection": "${QUEUELAKE_CONNECTION}",
            "delayed_endpoints": ["Billing"],
        },
        "drain": {"queues": ["Sales", "audit", "error"]},
        "transforms": [
            {
                "name": "customer_totals",
                "function": "queuelake.commands.demo.orders:customer_totals",
                "output": "outbound_customer_totals",
                "destinations": ["Billing"],
            }
        ],
        **extra,
    }
    path = tmp_path / "queuelake.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


# ---------------------------------------------------------------- --version


def test_version_prints_one_plain_line(tmp_path: Path) -> None:
    """A plain ``queuelake X.Y.Z`` line, as users expect of --version; no JSON summary follows."""
    proc = queuelake(["--version"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"queuelake {__version__}\n"


def test_version_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [f"queuelake {__version__}"]
    # after a command's name too, as the reference says every global option is (exit 2 before: a review)
    assert cli.main(["status", "--version"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"queuelake {__version__}"]


# ---------------------------------------------------------------- --log-format


@pytest.mark.parametrize("position", ["before", "after"])
def test_log_format_json_writes_one_object_per_line(tmp_path: Path, fresh_pg_uri: str, position: str) -> None:
    cfg = write_config(tmp_path)
    assert queuelake(["install", "-c", str(cfg)], tmp_path, connection=fresh_pg_uri).returncode == 0
    args = ["status", "-c", str(cfg)]
    args = ["--log-format", "json", *args] if position == "before" else [*args, "--log-format", "json"]
    proc = queuelake(args, tmp_path, connection=fresh_pg_uri)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert len(records) == 6, proc.stderr  # the config read, then one line per queue the config touches
    for record in records:
        assert set(record) == {"time", "level", "logger", "message"}, record
        assert record["time"].endswith("+00:00"), record  # UTC
        assert record["logger"] == "queuelake" and record["level"] == "INFO"
    assert [r["message"] for r in records] == [
        f"config: {cfg.resolve()}",
        *(f'"public"."{q}" (drained): about 0 message(s) waiting' for q in ("Sales", "audit", "error")),
        '"public"."Billing" (destination): about 0 message(s) waiting',
        '"public"."Billing.Delayed" (delayed): about 0 message(s) waiting',
    ]
    assert not [line for line in proc.stderr.splitlines() if TEXT_LINE.match(line)], "no text lines in json mode"
    assert last_json(proc.stdout)["status"] == "ok"


def test_log_format_text_is_the_default(tmp_path: Path, pg_uri: str) -> None:
    proc = queuelake(["status", "-c", str(write_config(tmp_path))], tmp_path, connection=pg_uri)
    assert proc.returncode == 1 and "do not exist" in proc.stderr, proc.stderr[-3000:]  # nothing installed here
    text_lines = [line for line in proc.stderr.splitlines() if TEXT_LINE.match(line)]
    assert text_lines and not [line for line in proc.stderr.splitlines() if line.startswith('{"time"')]


def test_log_format_json_failure_line_keeps_secrets_out(tmp_path: Path) -> None:
    secret = "postgresql://queuelake:Sup3rSecret@127.0.0.1:1/nsb?connect_timeout=2"
    proc = queuelake(["--log-format", "json", "status", "-c", str(write_config(tmp_path))], tmp_path, secret)
    assert proc.returncode == 1
    records = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert [r["level"] for r in records] == ["INFO", "ERROR"], proc.stderr  # the config read, the failure
    assert records[1]["message"].startswith("status failed: ")
    assert "Sup3rSecret" not in proc.stderr and "Sup3rSecret" not in proc.stdout


def test_json_formatter_keeps_a_multiline_message_on_one_line() -> None:
    record = logging.LogRecord("queuelake", logging.ERROR, __file__, 1, "failed:\n%s", ("line two",), None)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert json.loads(line)["message"] == "failed:\nline two"


def test_log_lines_hold_no_terminal_colour_codes() -> None:
    """deltalake's errors are coloured lines (``\x1b[31m↳\x1b[0m``), and a step's error line quoted
    them into the log (a review); both formats leave the codes out."""
    from queuelake.report import _TextFormatter

    coloured = "Kernel error -> Generic S3 error\n \x1b[31m↳\x1b[0m Error performing GET"
    record = logging.LogRecord("queuelake", logging.ERROR, __file__, 1, "where failed: %s", (coloured,), None)
    for formatter in (_TextFormatter("%(message)s"), JsonFormatter()):
        line = formatter.format(record)
        assert "\x1b" not in line and "\\u001b" not in line and "Error performing GET" in line, line


def test_an_unknown_log_format_is_a_usage_error(tmp_path: Path) -> None:
    proc = queuelake(["--log-format", "xml", "status"], tmp_path)
    assert proc.returncode == 2
    assert last_json(proc.stdout) == {
        "command": "status",
        "status": "failed",
        "error": "invalid arguments",
        "error_kind": "usage",
    }


def test_an_unknown_option_shows_its_commands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    """``tables --bogus`` showed the top-level usage, every command listed, not the one typed (a review)."""
    assert cli._parse(["tables", "--bogus"]) == 2  # noqa: SLF001 - the parse alone, no command run
    out, err = capsys.readouterr()
    assert "usage: queuelake tables" in err and "queuelake tables: error: unrecognized arguments: --bogus" in err
    assert json.loads(out) == {
        "command": "tables",
        "status": "failed",
        "error": "invalid arguments",
        "error_kind": "usage",
    }


def test_a_usage_error_under_json_logs_is_one_json_record(capsys: pytest.CaptureFixture[str]) -> None:
    """Under ``--log-format json`` argparse's usage and error lines were plain text among JSON records."""
    for argv in (["--log-format", "json", "tables", "--bogus"], ["tables", "--bogus", "--log-format=json"]):
        assert cli._parse(argv) == 2  # noqa: SLF001 - the parse alone, no command run
        _, err = capsys.readouterr()
        records = [json.loads(line) for line in err.splitlines()]
        assert [(r["level"], r["message"]) for r in records] == [
            ("ERROR", "queuelake tables: error: unrecognized arguments: --bogus")
        ], err


# ---------------------------------------------------------------- install --print-sql


def test_print_sql_stdout_is_a_script_psql_and_psycopg_accept(tmp_path: Path, fresh_pg_uri: str) -> None:
    cfg = write_config(tmp_path)
    proc = queuelake(["install", "-c", str(cfg), "--print-sql"], tmp_path, connection=fresh_pg_uri)
    assert proc.returncode == 0, proc.stderr[-3000:]
    script = tmp_path / "install.sql"
    script.write_text(proc.stdout, encoding="utf-8")  # what `> install.sql` leaves
    assert not [line for line in proc.stdout.splitlines() if line.startswith("{")], "no JSON on stdout"
    summary = last_json(proc.stderr)  # the summary is the last line of stderr instead
    assert summary["command"] == "install" and summary["status"] == "ok"
    assert '"public"."Billing"' in summary["printed"] and '"public"."Billing.Delayed"' in summary["printed"]
    assert catalog_snapshot(fresh_pg_uri)["relations"] == [], "--print-sql must not touch the database"

    psql = shutil.which("psql")
    if psql:  # the DBA's way: psql -f, stopping at the first error
        ran = subprocess.run(
            [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", fresh_pg_uri, "-f", str(script)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0, ran.stderr
    with psycopg.connect(fresh_pg_uri, autocommit=True) as conn:
        conn.execute(script.read_text(encoding="utf-8"))  # the script is idempotent: again, as a whole
        names = {
            row[0]
            for row in conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")
        }
    expected = {"Sales", "audit", "error", "Billing", "Billing.Delayed", "SubscriptionRouting"}
    assert expected <= names
    assert {"queuelake_publish_ledger", "queuelake_drain_claims"} <= names


def test_install_without_print_sql_keeps_its_summary_on_stdout(tmp_path: Path, fresh_pg_uri: str) -> None:
    proc = queuelake(["install", "-c", str(write_config(tmp_path))], tmp_path, connection=fresh_pg_uri)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = last_json(proc.stdout)
    assert summary["status"] == "ok" and '"public"."Billing.Delayed"' in summary["tables"]
    assert any("table(s) in place" in line for line in proc.stderr.splitlines())


# ---------------------------------------------------------------- -c fallback


def test_repo_local_config_is_the_shipped_one() -> None:
    """conf/local.yaml and the built-in fallback describe the same embedded deployment."""
    in_repo = yaml.safe_load((REPO / "conf" / "local.yaml").read_text(encoding="utf-8"))
    assert in_repo == yaml.safe_load(LOCAL_YAML)


def test_load_without_a_path_falls_back_to_the_built_in_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only where an embedded database already is (a demo's): elsewhere a forgotten -c fails in one
    line naming -c, QUEUELAKE_CONFIG and the demo (issue 59); QUEUELAKE_CONFIG names a config too."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"no config: pass -c FILE \(or set QUEUELAKE_CONFIG\).*queuelake demo"):
        config_mod.load(None, env={})
    assert not (tmp_path / ".queuelake").exists()
    (tmp_path / "mine.yaml").write_text("drain:\n  queues: [FromEnv]\n", encoding="utf-8")
    assert config_mod.load(None, env={"QUEUELAKE_CONFIG": "mine.yaml"}).drain.queues == ["FromEnv"]
    (tmp_path / ".queuelake" / "pgdata").mkdir(parents=True)
    cfg = config_mod.load(None, env={})
    assert cfg.source == SOURCE
    assert cfg.transport.embedded == "./.queuelake/pgdata" and cfg.lake.root == "./lake"
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "local.yaml").write_text("drain:\n  queues: [Mine]\n", encoding="utf-8")
    assert config_mod.load(None, env={}).drain.queues == ["Mine"]  # a folder's own conf/local.yaml wins


def test_an_explicit_missing_config_names_the_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"config file nope.yaml does not exist \(pass the right one with -c FILE\)"):
        config_mod.load("nope.yaml", env={})
    # -c conf/local.yaml said explicitly is not replaced by the built-in config either
    with pytest.raises(ConfigError, match="conf/local.yaml does not exist"):
        config_mod.load("conf/local.yaml", env={})


def test_a_missing_config_beside_the_examples_names_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """The DAGs and jobs once defaulted to conf/prod.yaml, which the repo does not ship: a missing
    config says which shipped templates sit beside it."""
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError) as raised:
        config_mod.load("conf/prod.yaml", env={})
    assert str(raised.value) == (
        "config file conf/prod.yaml does not exist (pass the right one with -c FILE; "
        "start from conf/postgres.example.yaml or conf/sqlserver.example.yaml)"
    )
    for default in ("conf/postgres.example.yaml",):  # what the DAGs, jobs and README now name
        assert (REPO / default).is_file()


def test_a_config_path_that_is_a_folder_or_binary_is_a_config_error(tmp_path: Path) -> None:
    """``-c`` at a folder said the file "does not exist", and at a binary file failed "unexpected" with
    Python's UnicodeDecodeError (a review): both are config errors saying what is wrong."""
    with pytest.raises(ConfigError, match="is a folder"):
        config_mod.load(str(tmp_path), env={})
    binary = tmp_path / "job.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        config_mod.load(str(binary), env={})


def test_status_in_a_fresh_folder_without_a_config_fails_in_one_line(tmp_path: Path) -> None:
    """A forgotten -c in a folder with no config and no demo database: one line saying how to point the
    command at a config, exit 1, error_kind config; no database created here (it used to start a 38 MB
    embedded PostgreSQL and report "ok" on its empty queues)."""
    proc = queuelake(["status"], tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    summary = last_json(proc.stdout)
    assert summary["status"] == "failed" and summary["error_kind"] == "config", summary
    assert "pass -c FILE" in summary["error"] and "QUEUELAKE_CONFIG" in summary["error"]
    assert not (tmp_path / ".queuelake").exists()


# ---------------------------------------------------------------- stderr is queuelake's own


FOREIGN = ("log4j", "NativeCodeLoader", "SQLQueryContextLogger", "Py4JJavaError", "at org.apache", "XDG_RUNTIME_DIR")
# the JVM itself prints this when Spark's launcher adds the vector module; no setting silences it
JVM_NOTE = "WARNING: Using incubator modules: jdk.incubator.vector"


def own_lines(stderr: str) -> list[str]:
    """stderr's lines, asserting each is queuelake's own (or the JVM's one note)."""
    lines = [line for line in stderr.splitlines() if line.strip() and line != JVM_NOTE]
    assert not [line for line in lines if not TEXT_LINE.match(line)], stderr[-3000:]
    assert not [word for word in FOREIGN if word in stderr], stderr[-3000:]
    return [TEXT_LINE.sub("", line) for line in lines]


def test_idle_commands_say_what_they_did(tmp_path: Path, fresh_pg_uri: str) -> None:
    """An idle scheduled drain or maintain says so, queue by queue and table by table, and names the
    config it read (before, an idle drain logged nothing at all)."""
    cfg = write_config(tmp_path, lake={"root": str(tmp_path / "lake"), "engine": "delta-rs"})
    assert queuelake(["install", "-c", str(cfg)], tmp_path, connection=fresh_pg_uri).returncode == 0
    drained = queuelake(["drain", "-c", str(cfg)], tmp_path, connection=fresh_pg_uri)
    assert drained.returncode == 0, drained.stderr[-3000:]
    lines = own_lines(drained.stderr)
    lake = f"lake: {tmp_path / 'lake'} (lake.engine delta-rs)"  # the root it uses, named (a relative one too)
    assert lines[:-1] == [
        f"config: {cfg.resolve()}",
        lake,
        *(f'drain "public"."{q}": nothing to do, the queue is empty' for q in ("Sales", "audit", "error")),
    ]
    assert lines[-1].startswith("drain: 0 message(s) from 3 queue(s) (0 landed, 0 expired, 0 quarantined) in ")
    maintained = queuelake(["maintain", "-c", str(cfg)], tmp_path, connection=fresh_pg_uri)
    assert maintained.returncode == 0, maintained.stderr[-3000:]
    lines = own_lines(maintained.stderr)
    assert lines[:2] == [f"config: {cfg.resolve()}", lake]
    assert [line.split(":")[0] for line in lines[2:]] == [
        "retention",
        "maintain messages (table 1 of 2)",
        "maintain runs (table 2 of 2)",
        "maintain message_keys (the journal's id index)",
    ], lines
    assert lines[2] == "retention: no retention rule with an age limit (lake.retention): nothing to do"


def test_a_typo_in_replay_where_is_one_line_not_a_java_trace(tmp_path: Path, fresh_pg_uri: str) -> None:
    """PySpark logs a failed query's whole Java stack trace (12 KB) before the exception reaches
    queuelake, and the JVM adds its start-up notes (log4j profile, native-hadoop, hostname): none of
    it reaches stderr without --debug; queuelake's own error line does. With --debug the trace is there."""
    cfg = write_config(
        tmp_path, lake={"root": str(tmp_path / "lake"), "engine": "delta-rs"}, spark={"master": "local[1]"}
    )
    assert queuelake(["install", "-c", str(cfg)], tmp_path, connection=fresh_pg_uri).returncode == 0
    assert queuelake(["drain", "-c", str(cfg)], tmp_path, connection=fresh_pg_uri).returncode == 0
    args = ["replay", "-c", str(cfg), "--where", "exception_typo = 'x'", "--dry-run"]
    proc = queuelake(args, tmp_path, connection=fresh_pg_uri)
    assert proc.returncode == 1 and last_json(proc.stdout)["status"] == "failed"
    lines = own_lines(proc.stderr)
    assert lines[:2] == [f"config: {cfg.resolve()}", f"lake: {tmp_path / 'lake'} (lake.engine delta-rs)"], lines
    assert len(lines) == 3 and lines[2].startswith("replay failed: ") and "exception_typo" in lines[2], lines
    debug = queuelake([*args, "--debug"], tmp_path, connection=fresh_pg_uri)
    assert debug.returncode == 1 and "Traceback" in debug.stderr


FAILING_TASK = """
def divide_by_zero(source):
    from pyspark.sql import functions as F

    broken = F.udf(lambda seq: seq // 0, "long")
    return source.select(broken(F.col("seq")).alias("quotient"))
"""


def test_a_failing_spark_task_is_queuelakes_one_line_not_five_traces(tmp_path: Path, fresh_pg_uri: str) -> None:
    """A task failing in a transform's write (a full disk in a review; here a division by zero) was
    reported by five of Spark's classes, each with the whole Java and Python trace: 386 lines on
    stderr. queuelake's own lines say it, the cause included."""
    from queuelake.commands.demo import traffic
    from queuelake.config import load
    from queuelake.transport import db
    from queuelake.transport.table_refs import queue_ref

    (tmp_path / "failing_task.py").write_text(FAILING_TASK)
    transform = {"name": "broken", "function": "failing_task:divide_by_zero", "output": "outbound_broken"}
    cfg = write_config(
        tmp_path,
        lake={"root": str(tmp_path / "lake"), "engine": "delta-rs"},
        spark={"master": "local[1]"},
        transforms=[transform],
    )
    assert queuelake(["install", "-c", str(cfg)], tmp_path, connection=fresh_pg_uri).returncode == 0
    settings = load(str(cfg), env={"QUEUELAKE_CONNECTION": fresh_pg_uri})
    with db.connect(settings.transport) as conn:
        traffic.seed(conn, queue_ref("Sales", settings.transport), traffic.order_events(5, seed=1))
    assert queuelake(["drain", "-c", str(cfg)], tmp_path, connection=fresh_pg_uri).returncode == 0
    proc = queuelake(["transform", "-c", str(cfg)], tmp_path, connection=fresh_pg_uri)
    assert proc.returncode == 1 and last_json(proc.stdout)["status"] == "failed", proc.stderr[-3000:]
    lines = own_lines(proc.stderr)
    assert "ERROR spark" not in proc.stderr and len(lines) < 10, lines
    assert any("ZeroDivisionError" in line for line in lines), lines


def test_a_drain_never_starts_spark_whatever_the_engine(tmp_path: Path, fresh_pg_uri: str) -> None:
    """The journal and runs are delta-rs's under either engine: a drain on a delta-spark config runs
    without a Spark session (it failed with "needs a Spark session"), and starts no JVM."""
    cfg = write_config(tmp_path, lake={"root": str(tmp_path / "lake"), "engine": "delta-spark"})
    assert queuelake(["install", "-c", str(cfg)], tmp_path, connection=fresh_pg_uri).returncode == 0
    proc = queuelake(["drain", "-c", str(cfg)], tmp_path, connection=fresh_pg_uri)
    assert proc.returncode == 0 and last_json(proc.stdout)["status"] == "ok", proc.stderr[-3000:]
    assert JVM_NOTE not in proc.stderr and own_lines(proc.stderr)[0] == f"config: {cfg.resolve()}"

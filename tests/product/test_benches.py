"""The benchmarks still run: each script end to end at a tiny size, its JSON line read back.

Why: the benches are run by hand, rarely, and import the library's internals. A rename in the library
broke nothing in CI until someone next measured. The drain, audit and commits scripts run here, and the
publish script (with its local Spark session, both modes), and the queues script (on the driver and
on a standalone cluster's executors, which it starts and stops); no figure is asserted, only that every
measurement the script promises is there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bench(script: str, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "lib"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_drain_bench_measures_both_tables_against_both_raw_limits(fresh_pg_uri: str) -> None:
    result = _bench(
        "drain.py",
        "--rows",
        "3000",
        "--batch-size",
        "1000",
        "--dsn",
        fresh_pg_uri,
        "--repeat",
        "2",
        "--raw-copy",
        "--journal-files",
        "5",
    )
    assert result["rows"] == 3000 and result["receive_driver"] == "adbc" and not result["embedded"]
    assert result["journal_files_before"] == 5  # each drain landed in a journal with a history
    for table in ("fresh", "churned"):
        summary = result[table]
        assert len(summary["runs"]) == 2 and summary["ratio_median"] > 0
        for run in summary["runs"]:
            assert run["raw_msgs_per_s"] > 0 and run["drain_msgs_per_s"] > 0 and run["raw_copy_msgs_per_s"] > 0
            # the drain logged its per-step timings per batch: at least 3 of at most 1,000 rows (two
            # workers may split the rows into more, smaller batches)
            assert run["batches"] >= 3, run
            assert run["journal_files_at_start"] == 5, run  # a copy of the history built once, whole
            # the CPU each consumer cost (this process; the machine's where /proc/stat exists), and
            # the drain workers' own CPU per step, from the same timing lines
            assert run["cpu"]["raw"]["client_cpu_s"] >= 0 and run["cpu"]["drain"]["client_cpu_s"] > 0
            assert set(run["worker_cpu_seconds"]) == {"receive", "build", "stage+claim"}, run
            if Path("/proc/stat").exists():
                assert run["cpu"]["drain"]["machine_busy_cpu_s"] > 0
        assert summary["ratio_vs_raw_copy_median"] > 0
        assert summary["drain_cpu_median"]["client_cpu_s"] > 0


@pytest.mark.slow
def test_audit_bench_measures_both_sizes_raw_drain_command_and_memory(fresh_pg_uri: str) -> None:
    result = _bench(
        "audit.py",
        *("--sizes", "13,66", "--rows", "300,80", "--batch-mb", "1", "--repeat", "2", "--dsn", fresh_pg_uri),
    )
    assert result["receive_driver"] == "adbc" and not result["embedded"] and result["repeat"] == 2
    assert result["idle_command_seconds"] > 0 and result["idle_peak_rss_mb"] > 20
    thirteen, sixty_six = result["results"]
    assert (thirteen["body_kib"], thirteen["rows"], sixty_six["body_kib"], sixty_six["rows"]) == (13, 300, 66, 80)
    assert thirteen["servicecontrol_msgs_per_s"] == 140 and sixty_six["servicecontrol_msgs_per_s"] == 80
    for size in (thirteen, sixty_six):
        # the messages are the sizes asked for: the body within 1%, plus the audit copy's headers
        body = size["message_bytes_avg"] - size["header_bytes_avg"]
        assert abs(body - size["body_kib"] * 1024) < size["body_kib"] * 1024 * 0.01, size
        assert 900 < size["header_bytes_avg"] < 2000
        # bodies compress as JSON does: neither padding (far more) nor random bytes (about 1x)
        assert 2.5 < size["body_compression"]["zlib6"] < 7 and size["body_compression"]["snappy"] > 1.5
        assert size["lake_mb"] > 0 and size["lake_compression"] > 1
        assert len(size["runs"]) == 2 and size["batch_size"] >= 100
        for key in ("raw", "drain", "command"):
            assert size[f"{key}_msgs_per_s"] > 0 and size[f"{key}_mb_per_s"] > 0
        assert size["ratio"] > 0 and size["command_ratio"] > 0
        assert size["peak_rss_mb"] > 20 and size["half_rows_peak_rss_mb"] > 20
        assert size["default_batch_size"] == 10_000 and size["default_batch_peak_rss_mb"] > 20


def test_commits_bench_compares_both_checkpoint_intervals() -> None:
    result = _bench("commits.py", "--commits", "12", "--every", "6", "--rows", "10")
    assert len(result["default_interval"]) == len(result["queuelake_interval"]) == 2
    assert result["ratio"] > 0


@pytest.mark.slow
def test_journal_fixed_bench_measures_open_and_end_against_deltalake() -> None:
    result = _bench("journal_fixed.py", "--files", "40", "--repeat", "1")
    assert result["files"] == 40 and result["repeat"] == 1
    for step in ("open", "end"):
        figures = result[step]
        assert figures["queuelake"]["cpu_s"] > 0 and figures["deltalake"]["cpu_s"] > 0, result
        assert figures["cpu_ratio"] == round(figures["queuelake"]["cpu_s"] / figures["deltalake"]["cpu_s"], 3)


def test_publish_bench_measures_both_modes_against_both_raw_limits(fresh_pg_uri: str) -> None:
    result = _bench(
        "publish.py",
        *("--rows", "2000", "--batch-size", "500", "--modes", "driver,executors", "--repeat", "2"),
        *("--raw-binary", "--dsn", fresh_pg_uri),
    )
    assert result["rows"] == 2000 and result["repeat"] == 2
    assert result["raw_rows_per_s"] > 0 and result["raw_binary_rows_per_s"] > 0
    for mode in ("driver", "executors"):
        summary = result[mode]
        assert len(summary["ratios"]) == 2 and summary["rows_per_s"] > 0
        assert summary["ratio"] > 0 and summary["ratio_vs_raw_binary"] > 0
    # the command's CPU (a new Python process: its imports alone take tenths of a CPU second) and the
    # server's meanwhile, and the floor they set on this machine's cores
    cpu = result["driver"]["cpu"]
    assert cpu["command_cpu_s"] > 0.2 and cpu["server_cpu_s"] >= 0 and cpu["cores"] >= 1, cpu
    assert cpu["floor_s"] >= cpu["command_cpu_s"] / cpu["cores"] - 0.01 and cpu["best_ratio"] > 0, cpu
    # with the idle publish's time overlapping nothing: the tighter bound
    assert cpu["floor_with_start_s"] >= cpu["floor_s"] - 0.05 and 0 < cpu["best_ratio_with_start"], cpu


def test_publish_bench_measures_pyodbc_with_and_without_array_binding(fresh_pg_uri: str) -> None:
    """pyodbc over psqlodbc, beside the default driver: array binding off (PostgreSQL's setting) and
    on (SQL Server's), each run's rows checked. Array binding on psqlodbc may fail (it does with
    pyodbc 5.5 and psqlodbc 13: bytea is described without a size); it must never mis-send quietly."""
    result = _bench(
        "publish.py",
        *("--rows", "600", "--batch-size", "200", "--modes", "driver", "--driver", "psycopg,pyodbc"),
        *("--repeat", "1", "--dsn", fresh_pg_uri),
    )
    variants = result["drivers"]
    assert list(variants) == ["psycopg", "pyodbc", "pyodbc+array_binding"]
    assert [(v["driver"], v["array_binding"]) for v in variants.values()] == [
        ("psycopg", False),
        ("pyodbc", False),
        ("pyodbc", True),
    ]
    assert result["driver"] == variants["psycopg"]["modes"]["driver"]  # the default driver's figures stay on top
    for label in ("psycopg", "pyodbc"):
        summary = variants[label]["modes"]["driver"]
        assert summary["runs"] == summary["checks_ok"] == 1 and summary["failed_runs"] == 0, summary
        assert summary["rows_per_s"] > 0 and summary["ratio"] > 0 and summary["peak_rss_mb"] > 20
    array = variants["pyodbc+array_binding"]["modes"]["driver"]
    assert array["runs"] == 1 and array["silently_mis_sent"] == 0, array
    assert array["checks_ok"] == 1 or (array["failed_runs"] == 1 and array["errors"] and array["arrived"]), array


@pytest.mark.slow
def test_replay_bench_measures_whole_commands_steps_and_fixed_costs(fresh_pg_uri: str) -> None:
    result = _bench("replay.py", "--rows", "2000", "--batch-size", "500", "--repeat", "2", "--dsn", fresh_pg_uri)
    assert result["rows"] == 2000 and result["raw_rows_per_s"] > 0
    driver, executors = result["modes"]["driver"], result["modes"]["executors"]
    for mode in (driver, executors):
        assert len(mode["command_seconds_all"]) == 2 and mode["rows_per_s"] > 0 and mode["ratio"] > 0
    assert set(driver["seconds_by_step"]) >= {"select", "plan", "read", "headers", "send", "ledger"}
    assert set(executors["seconds_by_step"]) >= {"select", "plan", "executors"}
    fixed = result["fixed_seconds"]
    assert set(fixed) == {"empty_replay", "dry_run_all", "empty_replay_spark_predicate", "bare_spark_start"}
    assert all(seconds > 0 for seconds in fixed.values())
    # peak memory of the command's own process: a Python process holds tens of MB at least
    assert all(mode["peak_rss_mb"] > 20 for mode in (driver, executors))
    assert result["peak_rss_mb"]["empty_replay"] > 20 and result["peak_rss_mb"]["dry_run_all"] > 20
    # each run's CPU: the command's process and the server's meanwhile, the raw load's, the floor they set
    for run in driver["cpu"]:
        assert run["command"]["client_cpu_s"] > 0.2 and run["raw_binary"]["server_cpu_s"] >= 0, run
        assert run["floor"]["floor_s"] >= run["command"]["client_cpu_s"] / run["floor"]["cores"] - 0.01, run
        assert run["floor"]["best_ratio"] > 0 and run["floor"]["best_ratio_with_start"] > 0, run
        assert run["floor"]["floor_with_start_s"] >= run["floor"]["floor_s"] - 0.05, run


@pytest.mark.slow
def test_fixed_bench_times_every_idle_command_and_the_floors() -> None:
    result = _bench("fixed.py", "--rows", "200", "--repeat", "1")
    idle = result["idle_seconds"]
    assert set(idle) == {"status", "drain", "transform", "publish", "run", "maintain", "replay"}
    assert all(seconds > 0 for seconds in idle.values())
    assert result["import_seconds"] > 0 and result["bare_spark_start_seconds"] > 0


def test_a_bench_measures_the_queuelake_of_its_own_tree(tmp_path: Path) -> None:
    """An A/B run of two worktrees must measure two codes: the installed (editable) queuelake points
    at one checkout, so a bench that imported it would measure that one from any tree."""
    tree = tmp_path / "other-tree"
    (tree / "bench").mkdir(parents=True)
    (tree / "lib" / "queuelake").mkdir(parents=True)
    (tree / "lib" / "queuelake" / "__init__.py").write_text("WHICH = 'other tree'\n")
    (tree / "bench" / "_tree.py").write_text((REPO / "bench" / "_tree.py").read_text())
    (tree / "bench" / "probe.py").write_text("import _tree  # noqa: F401\nimport queuelake\nprint(queuelake.WHICH)\n")
    out = subprocess.run(
        [sys.executable, str(tree / "bench" / "probe.py")], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "other tree"
    # and every bench script imports it before anything of queuelake
    for script in sorted((REPO / "bench").glob("*.py")):
        if script.name.startswith("_"):  # _tree itself, and helpers that import no queuelake
            continue
        lines = script.read_text().splitlines()
        first_queuelake = next(i for i, line in enumerate(lines) if line.startswith(("from queuelake", "import queue")))
        assert any(line.startswith("import _tree") for line in lines[:first_queuelake]), script.name


@pytest.mark.slow
def test_queues_bench_drains_many_queues_and_one_in_every_mode(fresh_pg_uri: str) -> None:
    result = _bench("queues.py", "--queues", "30", "--per-queue", "40", "--on", "all", "--dsn", fresh_pg_uri)
    assert set(result["modes"]) == {"driver", "processes", "executors"} and result["max_connections"] == 24
    assert result["cluster"]["workers"] == 2 and result["cluster"]["start_seconds"] > 0
    for mode, summary in result["modes"].items():
        (run,) = summary["runs"]
        assert run["many"]["rows"] == run["one"]["rows"] == 1200 and run["many"]["queues"] == 30, mode
        for label in ("many", "one"):
            figures = run[label]
            assert figures["msgs_per_s"] > 0 and figures["journal_commits"] >= 1, (mode, figures)
            assert 0 < figures["peak_connections_seen"] <= figures["max_connections"], (mode, figures)
            assert 0 < figures["peak_connections_reported"] <= figures["max_connections"], (mode, figures)
            assert sum(figures["seen_at_peak_by_application"].values()) == figures["peak_connections_seen"]
            assert figures["connections_before"] == 0, (mode, figures)
        assert summary["ratio_median"] > 0
    # on executors (or in processes) the command holds no queue's lock: the locks seen are its tasks'
    for mode in ("processes", "executors"):
        for label in ("many", "one"):
            held = result["modes"][mode]["runs"][0][label]["seen_at_peak_by_application"]
            assert held.get("queuelake-drain-lock", 0) >= 1, (mode, held)
        assert result["modes"][mode]["many_vs_driver_one"] > 0
    # an unknown mode is refused, not ignored
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "lib"), os.environ.get("PYTHONPATH", "")])}
    refused = subprocess.run(
        [sys.executable, str(REPO / "bench" / "queues.py"), "--on", "both"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "--on takes all" in refused.stderr, refused.stderr[-2000:]


def test_find_bench_times_whole_find_commands_against_full_scans() -> None:
    result = _bench("find.py", "--rows", "6000", "--batch-size", "1000", "--repeat", "1")
    assert result["rows"] == 6000 and result["files"] >= 6
    for phase in ("find_before_maintain", "find_after_maintain"):
        finds = result[phase]
        assert finds["message"]["found"] >= 2 and finds["conversation"]["found"] >= 2 and finds["unknown"]["found"] == 0
        assert all(f["seconds"] > 0 and f["find_seconds"] >= 0 for f in finds.values())
    assert result["full_scan"]["arrow"]["found"] == result["find_before_maintain"]["message"]["found"]
    assert result["full_scan"]["spark"]["seconds"] > 0 and result["maintain_seconds"] > 0


@pytest.mark.slow
def test_bodies_bench_compares_typed_tables_with_a_hand_written_job() -> None:
    result = _bench("bodies.py", "--rows", "400", "--types", "3", "--commit-rows", "200")
    assert result["rows"] == 400 and result["types"] == 3
    assert result["bodies_seconds"] > 0 and result["hand_seconds"] > 0 and result["rate_ratio"] > 0
    assert result["idle_seconds"] >= 0 and result["one_row_increment_seconds"] > 0


@pytest.mark.slow
def test_backlog_bench_runs_a_first_backlog_on_defaults_with_its_peak_memory() -> None:
    result = _bench("backlog.py", "--messages", "3000", "--copies", "3")
    (one,) = result["results"]
    assert one["exit"] == 0 and one["status"] == "ok", one
    assert one["peak_tree_mb"] > one["peak_jvm_mb"] > 0
    for stage in ("drain", "bodies", "transform", "publish"):
        assert one["stages"][stage]["status"] == "ok" and one["stages"][stage]["seconds"] is not None, one
    assert one["stages"]["bodies"]["rows"] == 3000 and one["stages"]["bodies"]["slices"] == 1


@pytest.mark.slow
def test_backlog_bench_runs_the_first_run_on_a_rewritten_journal() -> None:
    """``--rewritten``: drain, ``maintain`` and an erase of one row (seq 1) first, then the run measured."""
    result = _bench("backlog.py", "--messages", "3000", "--copies", "1", "--rewritten")
    (one,) = result["results"]
    assert one["exit"] == 0 and one["status"] == "ok" and one["rewritten_first_seconds"] > 0, one
    assert one["stages"]["drain"]["rows"] == 0, one  # drained before
    assert one["stages"]["bodies"]["rows"] == one["stages"]["transform"]["rows"] == 2999, one


@pytest.mark.slow
def test_drain_bench_pins_the_server_and_itself_to_cpus_of_their_own() -> None:
    """``--pin`` on its own embedded server (pinning a shared one would move the suite's server): the
    JSON says the pinning, checked after every leg, and each leg's server CPU is the server's own.
    Unpinned only where this platform cannot pin at all, and then it says why."""
    result = _bench("drain.py", "--rows", "2000", "--batch-size", "500", "--pin")
    pinning = result["pinning"]
    assert result["embedded"] and pinning["requested"] is True
    can_pin = hasattr(os, "sched_setaffinity") and Path("/proc").is_dir() and len(os.sched_getaffinity(0)) >= 2
    if not can_pin:
        assert pinning["pinned"] is False and pinning["reason"], pinning
        return
    assert pinning["pinned"] is True, pinning
    (server,), (client,) = pinning["server_cpus"], pinning["client_cpus"]
    assert server != client and {server, client} <= os.sched_getaffinity(0)
    # once when pinned, then after each of the four legs (raw and drain, fresh and churned)
    assert pinning["checks"] == 5, pinning
    assert pinning["server_processes_checked"] >= 5 and pinning["client_threads_checked"] >= 5, pinning
    assert pinning["postmaster_taskset"].endswith(f": {server}"), pinning
    for table in ("fresh", "churned"):
        summary = result[table]
        assert summary["cpu"]["raw"]["server_cpu_s"] >= 0 and summary["cpu"]["drain"]["server_cpu_s"] >= 0
        assert summary["batches"] >= 4 and summary["setup_seconds"] is not None


@pytest.mark.slow
def test_where_bench_asks_each_question_with_every_state_of_the_index() -> None:
    """``bench/where.py`` at a tiny size: the three questions (a typed key, a message id, a
    conversation) with no index, one left behind by the last journal files and a current one, each
    finding the target's rows; the index's own build, rewrite and increment timed."""
    result = _bench(
        "where.py",
        *("--rows", "6000", "--waiting", "1000", "--repeat", "1", "--batch-size", "1000"),
        *("--increment-rows", "3000", "--behind", "2"),
    )
    assert result["rows"] == 6000 and result["target"]["journal_rows"] >= 1
    answers = result["where_by_index_state"]
    assert sorted(answers) == ["behind", "current", "none"]
    for state, questions in answers.items():
        assert sorted(questions) == ["conversation", "key", "message"], state
        for question, answer in questions.items():
            assert answer["seconds"] > 0 and answer["not_searched"] == [], (state, question, answer)
            assert answer["journal"]["index"]["used"] is (state != "none"), (state, question)
        assert questions["message"]["found"] == result["target"]["journal_rows"], state
        assert questions["key"]["found"] >= questions["message"]["found"], state
        assert questions["conversation"]["journal"]["found"] == result["target"]["conversation_rows"], state
    assert answers["behind"]["message"]["journal"]["index"]["unindexed_files"] == 2
    for step in ("build", "rewrite", "increment"):
        assert result["index"][step]["seconds"] > 0, step

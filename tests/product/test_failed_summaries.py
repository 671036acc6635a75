"""Every failed summary carries ``error`` and ``error_kind`` at its top, where a scheduler's script
looks, also when the failure was in a part: a queue of a drain, a stage of ``run`` (issue 59)."""

from __future__ import annotations

from queuelake.cli import _lift_error


def test_a_failed_queue_of_a_drain_is_lifted_with_its_stage_as_kind() -> None:
    summary = {
        "command": "drain",
        "status": "failed",
        "queues": [
            {"queue": "Sales", "status": "ok", "error": None},
            {"queue": "Billing", "status": "failed", "error": "password authentication failed"},
        ],
    }
    _lift_error(summary)
    assert summary["error"] == "password authentication failed" and summary["error_kind"] == "drain"


def test_a_failed_stage_of_run_keeps_its_own_kind_and_names_its_stage_otherwise() -> None:
    run = {
        "command": "run",
        "status": "failed",
        "drain": {"status": "ok"},
        "bodies": {"status": "failed", "tables": [{"table": "t", "status": "failed", "error": "OutOfMemoryError"}]},
    }
    _lift_error(run)
    assert run["error"] == "OutOfMemoryError" and run["error_kind"] == "bodies"
    refused = {"command": "run", "status": "failed", "bodies": {"status": "failed", "error": "created by delta-rs"}}
    refused["bodies"]["tables"] = [{"table": "body_increments", "status": "failed", "error": "x", "error_kind": "lake"}]
    _lift_error(refused)  # the step's error, its failed part's kind (it said "bodies": a review)
    assert refused["error"] == "created by delta-rs" and refused["error_kind"] == "lake"
    own = {"command": "run", "status": "failed", "publish": {"status": "failed", "error": "x", "error_kind": "quality"}}
    _lift_error(own)
    assert own["error_kind"] == "quality"


def test_a_summary_with_its_own_error_is_left_as_it_is() -> None:
    summary = {"command": "find", "status": "failed", "error": "no journal", "error_kind": "lake"}
    _lift_error(summary)
    assert summary == {"command": "find", "status": "failed", "error": "no journal", "error_kind": "lake"}
    # a replay's summary holds every key of its result, unset ones null: a failed one said error_kind null
    unset = {"command": "replay", "status": "failed", "error": "records not written", "error_kind": None}
    _lift_error(unset)
    assert unset["error_kind"] == "replay" and unset["error"] == "records not written"
    bare = {"command": "maintain", "status": "failed"}
    _lift_error(bare)
    assert bare["error_kind"] == "maintain" and "error" not in bare


def test_a_summary_holds_no_terminal_colour_codes() -> None:
    """deltalake's errors are coloured lines ("\\x1b[31m↳\\x1b[0m ..."); quoted in a part's error they
    reached the JSON summary as they were (a review). The summary's texts are plain, one line each."""
    import io

    import orjson
    from queuelake.report import emit_summary

    coloured = "lake table runs: cannot create it: Generic error\n \x1b[31m↳\x1b[0m No space left on device"
    out = io.StringIO()
    emit_summary({"status": "failed", "error": coloured, "queues": [{"error": coloured, "n": 1}], "note": "a\nb"}, out)
    summary = orjson.loads(out.getvalue())
    plain = "lake table runs: cannot create it: Generic error | No space left on device"
    assert summary["error"] == plain and summary["queues"] == [{"error": plain, "n": 1}]
    assert summary["note"] == "a\nb"  # a text without colour codes is left as it is

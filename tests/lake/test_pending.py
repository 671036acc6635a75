"""Pending-work records (``lake/pending.py``) read while another command rewrites them: never half a
record. A second erase read a running erase's record as it was rewritten in place (truncated, then
written) and failed on its JSON (found by a review: 75,588 of 84,293 reads in 5 s)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from queuelake.lake import pending

PAYLOAD = {"purge": [f"body_type_{i}" for i in range(200)] + ["messages"], "journal_version": 12}


def test_a_record_rewritten_while_read_is_read_whole(tmp_path: Path) -> None:
    root = str(tmp_path)
    pending.record(root, "erase", "erase-running", PAYLOAD)
    stop = threading.Event()

    def rewrite() -> None:
        while not stop.is_set():
            pending.record(root, "erase", "erase-running", PAYLOAD)

    writer = threading.Thread(target=rewrite)
    writer.start()
    reads = 0
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            (record,) = pending.recorded(root, "erase")
            assert record.payload["purge"] == PAYLOAD["purge"] and not record.stale
            reads += 1
    finally:
        stop.set()
        writer.join()
    assert reads > 100
    pending.clear(root, "erase", "erase-running")
    assert pending.recorded(root, "erase") == []
    assert not list((tmp_path / pending.FOLDER / "erase").iterdir())  # nothing staged left behind


def test_a_record_from_another_pid_namespace_is_judged_by_its_age() -> None:
    """Two containers with one host name number their processes apart: a running erase's record from
    the other (its pid 1, as ours) was taken for a dead one's, by its start time, and cleared (found by
    a review). A pid of another namespace says nothing here: the record's age decides, as from
    another host; one of this namespace is judged by its process."""
    import os
    import socket

    here = socket.gethostname()
    other = {"host": here, "pids": "pid:[1]", "pid": os.getpid(), "started": "another-boot:1"}
    assert not pending.Record("running-elsewhere", {pending.OWNER: other}, 10.0).stale
    assert pending.Record("killed-elsewhere", {pending.OWNER: other}, pending.STALE_SECONDS).stale
    ours = {**other, "pids": pending._pid_namespace()}
    assert pending.Record("killed-pid-now-ours", {pending.OWNER: ours}, 10.0).stale


def test_a_kept_record_is_rewritten_while_its_command_runs_and_never_after_it_is_cleared(tmp_path: Path) -> None:
    """A record was rewritten only between an erase's steps: one step outlasting ``STALE_SECONDS`` (a
    journal's delete on a big lake) let another host take the running erase's record for a dead one's.
    ``Kept`` rewrites it meanwhile; once cleared, or once the command has left, nothing writes it again."""
    root, record_file = str(tmp_path), tmp_path / pending.FOLDER / "erase" / "e1.json"
    with pending.Kept(root, "erase", "e1", every=0.01) as kept:
        kept.record(PAYLOAD)
        first = record_file.stat().st_mtime_ns
        deadline = time.monotonic() + 30
        while record_file.stat().st_mtime_ns == first and time.monotonic() < deadline:
            time.sleep(0.01)
        assert record_file.stat().st_mtime_ns != first, "rewritten while the command runs"
        kept.clear()
        time.sleep(0.1)
        assert not record_file.exists() and pending.recorded(root, "erase") == []
    with pending.Kept(root, "erase", "e2", every=0.01) as kept:
        kept.record(PAYLOAD)
    left = tmp_path / pending.FOLDER / "erase" / "e2.json"
    assert left.exists(), "an unfinished command's record stays for the next one"
    kept_at = left.stat().st_mtime_ns
    time.sleep(0.1)
    assert left.stat().st_mtime_ns == kept_at, "not rewritten once its command has left"

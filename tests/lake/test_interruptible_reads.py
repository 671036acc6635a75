"""A command that reads the lake takes a stop signal while a read waits on the store: moto's S3 behind a
proxy that holds one reply, ``find`` run as a user runs it, Ctrl-C while it waits."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from queuelake import stopping

from tests.helpers.faulty_proxy import ended, serve_in_a_process, wait_until_held
from tests.helpers.s3 import BUCKET, install_queues, job_config, s3_cli, s3_env, seed_queue

pytest.importorskip("moto.server", reason="moto[server] is in the dev extra: pip install -e '.[dev]'")

HELD_SECONDS = 45.0  # under the store's 60 s timeout: the old read waited it out, then went on


@pytest.mark.slow
def test_find_takes_ctrl_c_while_the_store_holds_a_reply(s3: str, fresh_pg_uri: str, tmp_path: Path) -> None:
    """Python runs a signal's handler in the main thread only, between its bytecodes: a read inside
    deltalake's or pyarrow's native code held it until the store answered (a review: ``failures`` took a
    Ctrl-C 146 s after it was pressed)."""
    root = f"s3://{BUCKET}/stop-{uuid.uuid4().hex[:8]}"
    install_queues(fresh_pg_uri, ["Sales"])
    seed_queue(fresh_pg_uri, "Sales", 20, seed=7)
    env = s3_env(fresh_pg_uri)
    direct = tmp_path / "direct.yaml"
    direct.write_text(json.dumps(job_config(root, s3, "delta-rs", ["Sales"])))
    drained, _ = s3_cli(["drain", "-c", str(direct)], env, tmp_path)
    assert drained["status"] == "ok" and drained["landed"] == 20, drained

    proxy, url = serve_in_a_process(s3, slow_reply=(r"^GET .*/messages/_delta_log/.*\.json", HELD_SECONDS))
    try:
        held = tmp_path / "held.yaml"
        held.write_text(json.dumps(job_config(root, url, "delta-rs", ["Sales"])))
        proc = subprocess.Popen(
            [sys.executable, "-m", "queuelake", "find", "-c", str(held), "--message-id", str(uuid.uuid4())],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert wait_until_held(proxy), "the log's read was not held within 90 s"
        time.sleep(1)  # the command is in the held read
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        held, released = ended(proxy)
    assert held == 1, "the log's reply was not held"
    summary = json.loads(out.strip().splitlines()[-1])
    assert proc.returncode == 130 and summary["status"] == "interrupted", (proc.returncode, summary, err[-2000:])
    assert released == 0, "the command ended only after the store sent the reply it held: the Ctrl-C waited for it"


def test_a_call_made_interruptible_gives_its_value_or_its_error() -> None:
    assert stopping.interruptible(lambda: 42) == 42
    with pytest.raises(ValueError, match="bad row"):
        stopping.interruptible(lambda: (_ for _ in ()).throw(ValueError("bad row")))
    seen: list[str] = []
    worker = threading.Thread(
        target=lambda: seen.append(stopping.interruptible(lambda: threading.current_thread().name))
    )
    worker.start()
    worker.join()
    assert seen == [worker.name]  # off the main thread: called where it is
    assert stopping.interruptible(lambda: threading.current_thread().name) != threading.main_thread().name

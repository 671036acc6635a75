"""A stop while Spark's JVM starts ends that JVM with the command.

Why: the JVM starts ignoring the stop signals (a hang-up or a cancel to the process group must not kill
Spark under a stage) and ends when its stdin closes, but only once it has told pyspark its port. A stop
while pyspark waited for that removed the folder the JVM writes to; the JVM's main thread died on it
before watching its stdin, and its gateway threads kept it alive for good (a review: Ctrl-C Ctrl-C during
the start left a JVM every time). A real JVM, interrupted the moment it appears."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

SCRIPT = """
import _thread, sys, threading, time
import psutil
from queuelake.spark import get_spark

me = psutil.Process()

def interrupt_once_a_jvm_runs():
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        jvms = []  # Spark's own JVM, not spark-class's launcher before it
        for child in me.children(recursive=True):
            try:
                if "org.apache.spark.deploy.SparkSubmit" in child.cmdline():
                    jvms.append(child)
            except psutil.Error:
                pass
        if jvms:
            print("jvm", jvms[0].pid, flush=True)
            _thread.interrupt_main()
            return
        time.sleep(0.01)

threading.Thread(target=interrupt_once_a_jvm_runs, daemon=True).start()
try:
    get_spark()
    print("started", flush=True)  # the JVM told its port first: nothing to show
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_a_stop_while_the_jvm_starts_ends_the_jvm(tmp_path: Path) -> None:
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as stdout, err.open("w") as stderr:  # files: a JVM left behind holds no pipe open
        subprocess.run([sys.executable, "-c", SCRIPT], stdout=stdout, stderr=stderr, timeout=300)
    lines = out.read_text().split()
    assert "jvm" in lines, (lines, err.read_text()[-3000:])
    if "interrupted" not in lines:  # the JVM was up before the interrupt landed: not this case
        return
    pid = int(lines[lines.index("jvm") + 1])
    deadline = time.monotonic() + 15
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.2)
    alive = psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    if alive:
        psutil.Process(pid).kill()
    assert not alive, f"the JVM {pid} outlived the interrupted start"


ASKED = (
    SCRIPT.replace("_thread.interrupt_main()", "stopping.request()  # a first SIGTERM's handler")
    .replace(
        "from queuelake.spark import get_spark", "from queuelake import stopping\nfrom queuelake.spark import get_spark"
    )
    .replace("except KeyboardInterrupt:", "except stopping.Interrupted as exc:\n    print(str(exc).replace(' ', '_'))")
)


def test_a_stop_asked_while_the_jvm_starts_is_taken_once_it_has_started(tmp_path: Path) -> None:
    """A SIGTERM while the JVM started was taken only at the step's first boundary, after Spark work (a
    review: a replay's whole selection, 12 s): the session's start ends with the stop."""
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as stdout, err.open("w") as stderr:
        subprocess.run([sys.executable, "-c", ASKED], stdout=stdout, stderr=stderr, timeout=300)
    lines = out.read_text().split()
    assert "jvm" in lines and "started" not in lines, (lines, err.read_text()[-3000:])
    assert "stopped_while_the_Spark_session_started" in lines, lines

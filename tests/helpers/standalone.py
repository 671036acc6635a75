"""A real Spark standalone cluster on this machine, started from the installed pyspark: a master and
two workers of 1 core / 1 GB each (``spark-class org.apache.spark.deploy.master.Master`` and
``...worker.Worker spark://...``, SPARK_HOME = the pyspark package folder). Each daemon runs in its
own process group, stopped (SIGTERM, then SIGKILL) with its executors when the fixture ends."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.ports import free_port


@dataclass
class Cluster:
    master: str  # spark://127.0.0.1:PORT
    ui: str  # the master's web UI (its /json/ says which workers are alive)
    folder: Path  # daemons' logs; workers' work dirs (each executor's stderr is under them)

    def alive_workers(self) -> int:
        with urllib.request.urlopen(self.ui + "/json/", timeout=5) as response:
            return int(json.load(response).get("aliveworkers", 0))

    def executor_logs(self) -> str:
        """Every executor's stderr so far (where the tasks' Python workers log)."""
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.folder.glob("work-*/app-*/*/stderr")))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def standalone_cluster(workers: int = 2) -> Iterator[Cluster]:
    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    folder = Path(tempfile.mkdtemp(prefix="queuelake-spark-standalone-"))
    env = {**os.environ, "SPARK_HOME": spark_home, "SPARK_LOG_DIR": str(folder), "SPARK_NO_DAEMONIZE": "1"}
    env.pop("PYTHONPATH", None)  # the executors get queuelake's lib from the driver's spark.executorEnv
    spark_class = os.path.join(spark_home, "bin", "spark-class")
    port, ui_port = free_port(), free_port()
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], log: str) -> None:
        with open(folder / log, "wb") as out:
            procs.append(
                subprocess.Popen(
                    [spark_class, *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            )

    cluster = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", folder)
    try:
        start(
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
            + ["--webui-port", str(ui_port)],
            "master.log",
        )
        for i in range(workers):
            work = folder / f"work-{i}"
            work.mkdir()
            start(
                ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1", "--memory", "1g"]
                + ["--webui-port", str(free_port()), "--work-dir", str(work), cluster.master],
                f"worker-{i}.log",
            )
        deadline = time.monotonic() + 120
        while True:
            try:
                if cluster.alive_workers() >= workers:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in folder.glob("*.log"))
                raise RuntimeError(f"the standalone cluster did not start:\n{logs}")
            time.sleep(0.5)
        yield cluster
    finally:
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(folder, ignore_errors=True)

"""A standalone Spark cluster on 127.0.0.1 (a master and two worker JVMs from pyspark's own
packages): a change set built by executors in other processes, split into parts, lands
whole. Slow: the cluster takes seconds to start; every JVM it starts is stopped by its id."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for(log: Path, words: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and words in log.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise TimeoutError(f"{log.name}: no {words!r} within {timeout} s")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    import pyspark

    home = Path(pyspark.__file__).parent
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    started: list[subprocess.Popen[bytes]] = []

    def launch(name: str, *argv: str) -> Path:
        log = tmp_path / f"{name}.log"
        with log.open("wb") as out:
            started.append(
                subprocess.Popen(
                    [str(home / "bin" / "spark-class"), *argv],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
        return log

    try:
        master = launch(
            "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(port), "--webui-port", str(_free_port()),
        )  # fmt: skip
        _wait_for(master, "I have been elected leader", 60)
        for i in (1, 2):
            worker = launch(
                f"worker-{i}", "org.apache.spark.deploy.worker.Worker", url, "--host",
                "127.0.0.1", "--webui-port", str(_free_port()), "--cores", "1", "--memory",
                "1g", "--work-dir", str(tmp_path / f"work-{i}"),
            )  # fmt: skip
            _wait_for(worker, "Successfully registered with master", 60)
        yield url
    finally:
        for proc in started:  # each JVM this fixture started, and its children
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in started:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


JOB = """
import sys
from pathlib import Path
from pyspark.sql import SparkSession
from tabhyper_update import ChangeSet, PersonalAccessToken, TableauClient, build_payload
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table

url, work = sys.argv[1], Path(sys.argv[2])
spark = (SparkSession.builder.master(url).config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.executor.memory", "512m").getOrCreate())
start = make_hyper(work / "start.hyper", {"Extract": ("id BIGINT NOT NULL, v TEXT", ["(1, 'a')"])})
with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
    luid = server.add_datasource("Orders", start)
    df = spark.range(20000).selectExpr(
        "id", "CAST(id * 7 AS STRING) AS v", "'U' AS op", "id AS seq"
    )
    payload = build_payload(df, ChangeSet("id", op_column="op", order_by="seq"),
                            staging_dir=work / "stage", max_payload_mb=0.1)
    with TableauClient(server.url, "", PersonalAccessToken("ci", "pat-secret")) as client:
        payload.upload("Orders", client=client, progress=False).apply(target_table="Extract")
    server.wait_idle()
    rows = sorted(read_table(server.datasource_path(luid), "Extract"))
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    ok = rows == [(i, str(i * 7)) for i in range(20000)]
    print(f"parts={len(payload.parts)} executors={executors} rows={len(rows)} ok={ok}")
spark.stop()
"""


def test_a_split_change_set_built_on_a_standalone_cluster_lands_whole(
    cluster: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", JOB, cluster, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
        check=False,
    )
    said = [line for line in done.stdout.splitlines() if line.startswith("parts=")]
    assert said, done.stdout + done.stderr[-3000:]
    facts = dict(item.split("=") for item in said[0].split())
    assert int(facts["parts"]) > 1
    assert int(facts["executors"]) == 2
    assert (facts["rows"], facts["ok"]) == ("20000", "True")

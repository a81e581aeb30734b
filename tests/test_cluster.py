"""A standalone Spark cluster on 127.0.0.1 (a master and two worker JVMs from pyspark's own
packages): a change set built by executors in other processes, split into parts, lands
whole. Slow: the cluster takes seconds to start; every JVM it starts is stopped by its id."""

from __future__ import annotations

import os
import shlex
import shutil
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
    yield from _cluster(tmp_path, hidden=None)


@pytest.fixture
def isolated_cluster(tmp_path: Path) -> Iterator[str]:
    """Workers in a mount namespace of their own, where ``tmp_path / "shared"`` is another,
    empty file system: they cannot see what the driver stages there, nor it theirs."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("mounts a file system in the workers' own mount namespace (needs root)")
    (tmp_path / "shared").mkdir()
    yield from _cluster(tmp_path, hidden=tmp_path / "shared")


def _cluster(tmp_path: Path, hidden: Path | None) -> Iterator[str]:
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

    def launch(name: str, *argv: str, own_mounts: bool = False) -> Path:
        log = tmp_path / f"{name}.log"
        command = [str(home / "bin" / "spark-class"), *argv]
        if own_mounts and hidden is not None:
            mount = f'mount -t tmpfs tmpfs {shlex.quote(str(hidden))} && exec "$@"'
            command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount]
            command += ["sh", str(home / "bin" / "spark-class"), *argv]
        with log.open("wb") as out:
            started.append(
                subprocess.Popen(
                    command,
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
                "1g", "--work-dir", str(tmp_path / f"work-{i}"), own_mounts=True,
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

url, work, staging = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
spark = (SparkSession.builder.master(url).config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.executor.memory", "512m").getOrCreate())
start = make_hyper(work / "start.hyper", {"Extract": ("id BIGINT NOT NULL, v TEXT", ["(1, 'a')"])})
with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
    luid = server.add_datasource("Orders", start)
    df = spark.range(20000).selectExpr(
        "id", "CAST(id * 7 AS STRING) AS v", "'U' AS op", "id AS seq"
    )
    try:
        payload = build_payload(df, ChangeSet("id", op_column="op", order_by="seq"),
                                staging_dir=work / "shared", max_payload_mb=0.1, staging=staging)
    except Exception as err:
        print(f"error={type(err).__name__}", str(err).replace(chr(10), " ")[:600])
        sys.exit(0)
    with TableauClient(server.url, "", PersonalAccessToken("ci", "pat-secret")) as client:
        payload.upload("Orders", client=client, progress=False).apply(target_table="Extract")
    server.wait_idle()
    rows = sorted(read_table(server.datasource_path(luid), "Extract"))
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    ok = rows == [(i, str(i * 7)) for i in range(20000)]
    print(f"parts={len(payload.parts)} executors={executors} rows={len(rows)} ok={ok}")
spark.stop()
"""


def run_job(cluster: str, work: Path, staging: str) -> dict[str, str]:
    (work / "shared").mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-c", JOB, cluster, str(work), staging],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
        check=False,
    )
    said = [line for line in done.stdout.splitlines() if line.startswith(("parts=", "error="))]
    assert said, done.stdout + done.stderr[-3000:]
    if said[0].startswith("error="):
        name, _, message = said[0].partition(" ")
        return {"error": name.removeprefix("error="), "message": message}
    return dict(item.split("=") for item in said[0].split())


def test_a_split_change_set_built_on_a_standalone_cluster_lands_whole(
    cluster: str, tmp_path: Path
) -> None:
    facts = run_job(cluster, tmp_path, "shared")
    assert int(facts["parts"]) > 1
    assert int(facts["executors"]) == 2
    assert (facts["rows"], facts["ok"]) == ("20000", "True")


def test_workers_that_cannot_see_the_staging_folder_build_through_the_driver(
    isolated_cluster: str, tmp_path: Path
) -> None:
    refused = run_job(isolated_cluster, tmp_path, "shared")
    assert refused.get("error") == "PayloadError", refused
    assert "but 0 were found in the staging directory" in refused["message"]
    assert "or pass staging='driver'" in refused["message"]
    facts = run_job(isolated_cluster, tmp_path, "driver")
    assert facts.get("error") is None, facts
    assert int(facts["parts"]) > 1
    assert int(facts["executors"]) == 2
    assert (facts["rows"], facts["ok"]) == ("20000", "True")

"""A Spark session the SDK starts runs its Python workers with the driver's interpreter, not
whatever ``python3`` the PATH finds; a user's own choice wins; a mismatch Spark reports says
what to set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tabhyper_update.local.spark import _workers_python
from tabhyper_update.values.errors import build_failure

pytest.importorskip("pyspark")

PROGRAM = """
from tabhyper_update.local.spark import own_spark
with own_spark("interpreters") as spark:
    print("sum", spark.sparkContext.parallelize(range(4), 2).map(lambda x: x * 2).sum())
"""


def test_workers_use_the_driver_python_not_the_path_one(tmp_path: Path) -> None:
    # A python3 first on the PATH that is not this interpreter (as with a venv of another
    # Python, or conda): a worker started with it fails at once.
    wrong = tmp_path / "bin"
    wrong.mkdir()
    (wrong / "python3").write_text("#!/bin/sh\necho 'not the driver python' >&2\nexit 3\n")
    (wrong / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "SPARK_REMOTE")}
    env["PATH"] = os.pathsep.join([str(wrong), env.get("PATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sum 12" in done.stdout


def test_the_users_choice_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    with _workers_python({}):
        assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert "PYSPARK_PYTHON" not in os.environ  # restored
    with _workers_python({"spark.pyspark.python": "/opt/py/bin/python"}):
        assert os.environ["PYSPARK_PYTHON"] == "/opt/py/bin/python"
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3.12")
    with _workers_python({"spark.pyspark.python": "/opt/py/bin/python"}):
        assert os.environ["PYSPARK_PYTHON"] == "/usr/bin/python3.12"
    assert os.environ["PYSPARK_PYTHON"] == "/usr/bin/python3.12"


def test_a_version_mismatch_says_what_to_set(tmp_path: Path) -> None:
    err = RuntimeError(
        "An error occurred while calling o123.collect.\n"
        "[PYTHON_VERSION_MISMATCH] Python in worker has different version: 3.11 than that "
        "in driver: 3.13, PySpark cannot run with different minor versions.\n"
    )
    message = str(build_failure(err, {}, tmp_path, tmp_path))
    assert "[PYTHON_VERSION_MISMATCH]" in message
    assert "PYSPARK_PYTHON" in message
    assert sys.executable in message

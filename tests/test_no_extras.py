"""A plain install runs everything that needs no Spark: the round trip without ``pyspark`` or
``opentelemetry`` importable, and with an ``opentelemetry`` that is installed but broken."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tabhyper_update.local import optional

SCRIPT = Path(__file__).with_name("no_extras_round_trip.py")


def _round_trip(*args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_round_trip_without_spark_or_opentelemetry() -> None:
    done = _round_trip("--block", "pyspark", "--block", "opentelemetry")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("OK: publish, the chain, update_datasource")


def test_round_trip_with_a_broken_opentelemetry(tmp_path: Path) -> None:
    broken = tmp_path / "site" / "opentelemetry"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise RuntimeError('half-installed')\n")
    done = _round_trip("--block", "pyspark", pythonpath=tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK:" in done.stdout


def test_a_missing_parent_package_is_absent_not_an_error() -> None:
    assert optional.optional_module("tabhyper_no_such_package.sub") is None
    assert not optional.available("tabhyper_no_such_package.sub")


def test_a_broken_package_is_absent_and_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "tabhyper_broken_extra.py").write_text("import tabhyper_missing_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    caplog.set_level("WARNING", logger="tabhyper_update")
    assert optional.optional_module("tabhyper_broken_extra") is None
    assert optional.optional_module("tabhyper_broken_extra") is None
    said = [r for r in caplog.records if "tabhyper_broken_extra" in r.getMessage()]
    assert len(said) == 1
    assert "cannot be imported" in said[0].getMessage()

"""Shared fixtures: one local Spark session for every Spark test."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    pyspark_sql = pytest.importorskip("pyspark.sql")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Spark talks to itself on loopback only.
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session = (
        pyspark_sql.SparkSession.builder.master("local[2]")
        .appName("tabhyper-update-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _secrets_of_this_test_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK scrubs every secret its clients held in the process: each test starts with
    none, so one test's credentials (some tests use plain words) never blank another's."""
    from tabhyper_update import redaction

    monkeypatch.setattr(redaction, "_secrets", {})
    monkeypatch.setattr(redaction, "_forms", ())

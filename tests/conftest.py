"""Shared fixtures: one local Spark session for every Spark test; a fake Tableau server
holding data source ``Orders`` (started from ``target_file``) and a client signed in to it.

A module shapes the server by overriding a fixture: ``target_file`` (other starting rows,
or ``None`` for a server with no data source), ``target_project``, ``server_options``
(keywords for :class:`FakeTableauServer`: other credentials, a job delay)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper

from ._util import CONNECTED_APP, PAT, USER, client_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tabhyper_update import TableauClient


_MADE_STATE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    # The SDK's default state folder (records, published schemas, sink claims) is a
    # temporary one for the whole run: the suite never writes the user's own.
    if "TABHYPER_TEST_STATE" not in os.environ:
        import tempfile

        made = tempfile.mkdtemp(prefix="tabhyper-test-state-")
        os.environ["TABHYPER_TEST_STATE"] = made
        os.environ["XDG_STATE_HOME"] = made
        config.stash[_MADE_STATE] = made


def pytest_unconfigure(config: pytest.Config) -> None:
    # Removed by the process that made it (the workers share the controller's).
    made = config.stash.get(_MADE_STATE, None)
    if made is not None:
        import shutil

        shutil.rmtree(made, ignore_errors=True)


def _long_tests() -> tuple[str, ...]:
    listed = Path(__file__).with_name("long_tests.txt").read_text(encoding="utf-8")
    lines = (line.partition("#")[0].strip() for line in listed.splitlines())
    return tuple(line for line in lines if line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests ``long_tests.txt`` lists are ``slow``: run with ``-m slow``."""
    long = _long_tests()
    slow = pytest.mark.slow
    for item in items:
        if item.nodeid.startswith(long):
            item.add_marker(slow)


#: The columns and rows data source ``Orders`` starts with, unless a module says otherwise.
ORDERS_DDL = "id BIGINT NOT NULL, name TEXT, qty INTEGER"
ORDERS_ROWS = ["(1, 'a', 10)", "(2, 'b', 20)", "(3, 'c', 30)"]


@pytest.fixture
def target_file(tmp_path: Path) -> Path | None:
    """The .hyper file data source ``Orders`` starts as (the server keeps its own copy)."""
    (tmp_path / "start").mkdir()
    return make_hyper(tmp_path / "start" / "orders.hyper", {"Extract": (ORDERS_DDL, ORDERS_ROWS)})


@pytest.fixture
def target_project() -> str:
    """The top-level project data source ``Orders`` is in."""
    return "Default"


@pytest.fixture
def server_options() -> dict[str, Any]:
    """Keywords for the fake server beyond the shared ones (or replacing them)."""
    return {}


@pytest.fixture
def server(
    target_file: Path | None,
    target_project: str,
    server_options: dict[str, Any],
    tmp_path: Path,
) -> Iterator[FakeTableauServer]:
    """A fake Tableau server on 127.0.0.1 accepting :data:`PAT`, :data:`USER` and
    :data:`CONNECTED_APP`, holding data source ``Orders`` unless ``target_file`` is None."""
    options: dict[str, Any] = {
        "pats": dict([PAT]),
        "users": dict([USER]),
        "connected_app": CONNECTED_APP,
        "directory": tmp_path / "server",
    }
    with FakeTableauServer(**(options | server_options)) as fake:
        if target_file is not None:
            fake.add_datasource("Orders", target_file, project=target_project)
        yield fake


@pytest.fixture
def client(server: FakeTableauServer) -> Iterator[TableauClient]:
    """A client of ``server`` signed in with :data:`PAT` (quick retries and polls)."""
    with client_for(server) as made:
        yield made


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
        # The tests' jobs are short: the JVM's quick compiler alone spends far less CPU on
        # them than the optimising one (the suite takes a fifth less time). Compiled code
        # computes the same; the benchmarks run with the JVM's defaults.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        # A test's query reads a few rows: Spark spends more CPU generating and compiling
        # code for it than running it, and its interpreted evaluation computes the same
        # (Spark's own tests run both). The suite takes a fifth less CPU. The examples and
        # the tests of the generated code itself take the `compiled_code` fixture; the demo
        # and the benchmarks run with Spark's defaults.
        .config(_WHOLE_STAGE, "false")
        .config(_FACTORY_MODE, "NO_CODEGEN")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


_WHOLE_STAGE = "spark.sql.codegen.wholeStage"
_FACTORY_MODE = "spark.sql.codegen.factoryMode"


@pytest.fixture
def compiled_code(spark: SparkSession) -> Iterator[SparkSession]:
    """The session generating and compiling code for its queries, as Spark does by default,
    for this test only."""
    spark.conf.set(_WHOLE_STAGE, "true")
    spark.conf.set(_FACTORY_MODE, "FALLBACK")
    try:
        yield spark
    finally:
        spark.conf.set(_WHOLE_STAGE, "false")
        spark.conf.set(_FACTORY_MODE, "NO_CODEGEN")


@pytest.fixture(autouse=True)
def _sessions_of_this_test_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients of one PAT share its session within a process: each test starts with none
    shared, as a new process would."""
    from tabhyper_update.rest import shared_tokens

    monkeypatch.setattr(shared_tokens, "_shared", {})


@pytest.fixture(autouse=True)
def _servers_of_this_test_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK remembers per server address, in the process, whether its uploads take
    ``sequenceID``, the probes run against it and the query options its service refused:
    each test starts with none remembered (two tests' fake servers may get the same port)."""
    from tabhyper_update.readback import dataservice
    from tabhyper_update.rest import uploads
    from tabhyper_update.update import state

    monkeypatch.setattr(uploads, "_SEQUENTIAL", set())
    monkeypatch.setattr(uploads, "_SEQUENCED", set())
    monkeypatch.setattr(state, "_PROBES", {})
    monkeypatch.setattr(dataservice, "_REFUSED", {})


@pytest.fixture(autouse=True)
def _secrets_of_this_test_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK scrubs every secret its clients held in the process: each test starts with
    none, so one test's credentials (some tests use plain words) never blank another's."""
    from tabhyper_update.values import redaction

    monkeypatch.setattr(redaction, "_secrets", {})
    monkeypatch.setattr(redaction, "_forms", ())

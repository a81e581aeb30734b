"""The SDK over Spark Connect: a local Connect server (the one in pyspark's own packages)
runs a change set's round trip and the streaming sink, whose batches run in a copy of the
sink on the server; the fake server checks the table after each step.

pyspark 3.x ships a Connect client but no server (Spark fetches one from Maven): with
``TABHYPER_TEST_CONNECT=sc://host:port`` the steps use that server instead, so a 3.5 client
is tested against a server of its own choosing; without it they are skipped there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table

from ._connect import CONNECT_URL
from ._streaming import PAT, START, TABLE_DDL, expected_state, start_rows, write_batch

# pyspark's Connect client checks its own dependencies on import (ImportError, not
# ModuleNotFoundError, when grpcio is missing).
pytest.importorskip("grpc")
pytest.importorskip("pyspark.sql.connect.session", exc_type=ImportError)
if not os.environ.get(CONNECT_URL) and int(pytest.importorskip("pyspark").__version__[0]) < 4:
    pytest.skip(
        f"pyspark 3.x ships no Spark Connect server: set {CONNECT_URL}=sc://host:port",
        allow_module_level=True,
    )

ROOT = Path(__file__).resolve().parent.parent
B1 = [(1, "a1", 11, "U", 1), (4, "d", 40, "I", 2)]
B2 = [(2, None, None, "D", 3), (4, "d2", 41, "U", 4)]


@pytest.fixture
def target_file(tmp_path: Path) -> Path:
    return make_hyper(tmp_path / "start.hyper", {"Extract": (TABLE_DDL, start_rows())})


@pytest.fixture
def server_options() -> dict[str, Any]:
    return {"pats": dict([PAT])}  # the streaming jobs' credentials


SHOP = "id BIGINT NOT NULL, a TEXT, b BIGINT"
EVENTS = "id BIGINT, what TEXT"


def event(table: str, key: int, a: str, lsn: int) -> str:
    after = {"id": key, "a": a, "b": lsn}
    return json.dumps({"op": "c", "after": after, "source": {"lsn": lsn, "table": table}})


def over_connect(server: FakeTableauServer, work: Path, *steps: str) -> list[dict[str, Any]]:
    """Run ``steps`` in a process of their own (a Connect client beside this test's
    classic session); every JVM it starts stops with it."""
    done = subprocess.run(
        [sys.executable, "-m", "tests._connect", server.url, str(work), *steps],
        capture_output=True,
        text=True,
        timeout=420,
        cwd=ROOT,
        check=False,
    )
    said = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(said) == len(steps), done.stdout + done.stderr[-3000:]
    return said


def table(server: FakeTableauServer) -> list[tuple[Any, ...]]:
    server.wait_idle()
    (luid,) = [ds.id for ds in server.backend.sources.values() if ds.name == "Orders"]
    return sorted(read_table(server.datasource_path(luid), "Extract"))


def test_the_round_trip_and_the_sink_over_spark_connect(
    server: FakeTableauServer, tmp_path: Path
) -> None:
    write_batch(tmp_path / "in", 0, B1)
    shop = make_hyper(
        tmp_path / "shop.hyper",
        {"Sales": (SHOP, ["(1, 's', 1)"]), "Customers": (SHOP, ["(1, 'c', 1)"])},
    )
    shop_luid = server.add_datasource("Shop", shop)
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "0.json").write_text(
        event("Sales", 2, "sale", 10) + "\n" + event("Customers", 5, "customer", 11) + "\n"
    )
    events = server.add_datasource(
        "Events", make_hyper(tmp_path / "events.hyper", {"Extract": (EVENTS, ["(1, 'old')"])})
    )
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "0.json").write_text('{"id": 2, "what": "new"}\n')
    roundtrip, by_driver, public, refused, first, multi, plain = over_connect(
        server,
        tmp_path,
        "roundtrip",
        "roundtrip-driver",
        "roundtrip-public",
        "no-sink-id",
        "sink",
        "multi",
        "plain",
    )
    assert by_driver.get("error") is None, by_driver
    # The public routes (what pyspark 3.x's Connect client leaves) were taken, and applied.
    assert public.get("error") is None, public
    assert public["rows"] >= 1, public
    assert public["computed"] >= 1, public
    assert public["jobs"] == 1
    assert roundtrip["connect"].startswith("pyspark.sql.connect")
    assert roundtrip.get("error") is None, roundtrip
    assert roundtrip["jobs"] == 1
    # Without sink_id the sink is refused before its query starts, with the SDK's error.
    assert refused["error"] == "ConfigurationError"
    assert "pass TableauSink(..., sink_id=...)" in refused["message"]
    # The batch ran in the server's copy of the sink: the client's own counts stay at zero,
    # the progress the batches recorded says what happened.
    assert first.get("error") is None, first
    assert first["counts_here"] == {"applied": 0, "replayed": 0, "empty": 0}
    assert first["progress"]["counts"] == {"applied": 1, "replayed": 0, "empty": 0}
    assert first["progress"]["last_kind"] == "applied"
    expected = expected_state([B1], {**START, 7: ("g", 70), 8: ("g", 70), 9: ("g", 70)})
    assert table(server) == expected
    # A multi-table Debezium sink: each event lands in the table its source names.
    assert multi.get("error") is None, multi
    assert multi["progress"]["counts"]["applied"] == 1
    server.wait_idle()
    shop_file = server.datasource_path(shop_luid)
    assert read_table(shop_file, "Sales") == [(1, "s", 1), (2, "sale", 10)]
    assert read_table(shop_file, "Customers") == [(1, "c", 1), (5, "customer", 11)]
    # A plain stream's rows appended by the caller's own action.
    assert plain.get("error") is None, plain
    assert plain["progress"]["counts"]["applied"] == 1
    assert read_table(server.datasource_path(events), "Extract") == [(1, "old"), (2, "new")]
    assert server.counts["update"] == 6


@pytest.mark.slow
def test_a_restarted_and_replayed_sink_over_spark_connect_applies_each_batch_once(
    server: FakeTableauServer, tmp_path: Path
) -> None:
    write_batch(tmp_path / "in", 0, B1)
    (first,) = over_connect(server, tmp_path, "sink")
    write_batch(tmp_path / "in", 1, B2)
    restarted, replayed = over_connect(server, tmp_path, "sink", "replay")
    for said in (first, restarted, replayed):
        assert said.get("error") is None, said
    assert replayed["uncommitted"] == 1
    # A new process is a new copy of the sink: the progress record counts its batches.
    assert restarted["progress"]["counts"]["applied"] == 1
    assert replayed["progress"]["last_kind"] == "replayed"
    assert table(server) == expected_state([B1, B2])
    assert server.counts["update"] == 2  # the replay sent no update


@pytest.mark.slow
def test_a_multi_table_change_set_sink_over_spark_connect(
    server: FakeTableauServer, tmp_path: Path
) -> None:
    shop = server.add_datasource(
        "Shop",
        make_hyper(
            tmp_path / "shop.hyper",
            {"Sales": (SHOP, ["(1, 's', 1)"]), "Customers": (SHOP, ["(1, 'c', 1)"])},
        ),
    )
    (tmp_path / "changes").mkdir()
    lines = [
        {"tbl": "Sales", "id": 2, "a": "sale", "b": 10, "op": "U", "seq": 1},
        {"tbl": "Customers", "id": 1, "a": None, "b": None, "op": "D", "seq": 2},
        {"tbl": "Customers", "id": 5, "a": "customer", "b": 11, "op": "U", "seq": 3},
    ]
    (tmp_path / "changes" / "0.json").write_text("\n".join(map(json.dumps, lines)) + "\n")
    (said,) = over_connect(server, tmp_path, "multi-changes")
    assert said.get("error") is None, said
    assert said["progress"]["counts"]["applied"] == 1
    server.wait_idle()
    assert read_table(server.datasource_path(shop), "Sales") == [(1, "s", 1), (2, "sale", 10)]
    assert read_table(server.datasource_path(shop), "Customers") == [(5, "customer", 11)]


@pytest.mark.slow
def test_a_failed_batch_over_spark_connect_is_the_sdks_error(
    server: FakeTableauServer, tmp_path: Path
) -> None:
    write_batch(tmp_path / "in", 0, B1)
    failed: dict[str, Any] = {"job": {"id": "0" * 8 + "-0000-0000-0000-" + "0" * 12}}
    failed["job"]["finishCode"] = "1"
    failed["job"]["updateUploadedFileJob"] = {"notes": "the worker ran out of memory"}
    server.inject("job", content_type="application/json", body=json.dumps(failed).encode())
    (said,) = over_connect(server, tmp_path, "sink")
    # Raised in the server's copy of the sink, and still the SDK's own error here.
    assert (said.get("error"), said.get("ours")) == ("JobFailedError", True), said
    assert "the worker ran out of memory" in said["message"]
    assert said["job_id"] == failed["job"]["id"]  # its fields came along too


@pytest.mark.slow
def test_the_demo_runs_over_spark_connect(tmp_path: Path) -> None:
    remote = os.environ.get(CONNECT_URL, "local[2]")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "tabhyper-update"), "demo"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "SPARK_REMOTE": remote, "PYSPARK_PYTHON": sys.executable},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "OK: the data source matches the expected table." in done.stdout

"""The command line end to end: demo, build, apply, job, state, serve-local."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import requests

from tabhyper_update import Payload
from tabhyper_update.cli import main
from tabhyper_update.client import DataSourceRef
from tabhyper_update.demo import run_demo
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper

from ._util import read_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_demo_runs_and_matches(spark: SparkSession) -> None:
    out = io.StringIO()
    assert run_demo(out, progress=False)
    text = out.getvalue()
    for part in (
        "Before:",
        "Actions sent:",
        '"action": "upsert"',
        "After:",
        "Time per step:",
        "OK: the data source matches",
    ):
        assert part in text


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    values = {
        "TABLEAU_SITE": "",
        "TABLEAU_PAT_NAME": "ci",
        "TABLEAU_PAT_SECRET": "pat-secret",
        "XDG_STATE_HOME": str(tmp_path / "state"),
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    return values


def test_build_then_apply_with_derived_actions(
    spark: SparkSession,
    tmp_path: Path,
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    changes = tmp_path / "changes"
    spark.createDataFrame(
        [(1, "A", "u", 1), (2, None, "d", 1), (3, "c", "c", 1)],
        "id long, v string, op string, seq long",
    ).write.parquet(str(changes))
    start = make_hyper(
        tmp_path / "t.hyper", {"Orders": ("id BIGINT, v TEXT", ["(1, 'a')", "(2, 'b')"])}
    )
    out_dir = tmp_path / "payload"
    # Change-set options without a key are a usage error, before Spark starts.
    assert main(["build", "--input", str(changes), "--op-column", "op"]) == 2
    assert "--op-column describe a change set: give --key too" in capsys.readouterr().err
    assert (
        main(
            [
                "build",
                "--input",
                str(changes),
                "--key",
                "id",
                "--op-column",
                "op",
                "--order-by",
                "seq",
                "--output-dir",
                str(out_dir),
                "--json",
            ]
        )
        == 0
    )
    built = json.loads(capsys.readouterr().out)
    assert Path(built["manifest"]).is_file()
    with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
        luid = server.add_datasource("Orders", start)
        monkeypatch.setenv("TABLEAU_SERVER_URL", server.url)
        apply = ["apply", "--payload", str(out_dir), "--datasource", "Orders", "--json"]
        # A target goes with derived actions only: refused before any request.
        batch = tmp_path / "batch.json"
        batch.write_text(
            '{"actions": [{"action": "insert", "target-schema": "Extract", '
            '"target-table": "Orders", "source-schema": "Extract", "source-table": "upserts"}]}'
        )
        assert main([*apply, "--actions", str(batch), "--target-table", "Orders"]) == 2
        error = json.loads(capsys.readouterr().out)["error"]
        assert "the --actions file names its own targets" in error["message"]
        assert server.counts["initiate"] == server.counts["update"] == 0
        # A dry run checks the target, the actions and the columns, and sends no data.
        assert main([*apply, "--target-table", "Orders", "--dry-run"]) == 0
        plan = json.loads(capsys.readouterr().out)
        assert plan["dry_run"]
        assert plan["datasource_id"] == luid
        assert plan["schema_checked"]  # read from the data source, not assumed
        (part,) = plan["parts"]
        assert part["rows"] == {"upserts": 2, "deletes": 1}
        assert [a["action"] for a in part["actions"]["actions"]] == ["delete", "upsert"]
        assert server.counts["initiate"] == server.counts["append"] == 0
        assert server.counts["update"] == 0
        assert plan["tables_unconfirmed"] == ["Orders"]  # not listed by the service
        # A table the data source may lack: the dry run does not say it fits, it says only
        # the server's job can tell (Tableau lists a data source's columns, not its tables).
        assert main([*apply, "--target-table", "Nope", "--dry-run"]) == 0
        assert json.loads(capsys.readouterr().out)["tables_unconfirmed"] == ["Nope"]
        assert main([*apply[:-1], "--target-table", "Nope", "--dry-run"]) == 0
        shown = capsys.readouterr().out
        assert "table(s) 'Nope' not confirmed" in shown
        assert server.counts["update"] == 0
        assert main([*apply, "--datasource", "Nope", "--dry-run"]) == 4  # looked up first
        assert "Nope" in json.loads(capsys.readouterr().out)["error"]["message"]
        assert main([*apply, "--target-table", "Orders", "--wait"]) == 0
        jobs = json.loads(capsys.readouterr().out)["jobs"]
        assert read_rows(server.datasource_path(luid), "Orders") == [(1, "A"), (3, "c")]
        assert main(["job", "status", jobs[0]["job_id"], "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["finishCode"] == 0
        assert main(["job", "wait", jobs[0]["job_id"]]) == 0
        assert "succeeded" in capsys.readouterr().out
        # Cancelling a finished job: nothing to cancel, said in CLI words.
        assert main(["job", "cancel", jobs[0]["job_id"]]) == 1
        assert "has already finished" in capsys.readouterr().err
        # An unknown job is "not found": exit 4, as one JSON object with --json.
        assert main(["job", "status", "no-such-job", "--json"]) == 4
        failure = json.loads(capsys.readouterr().out)["error"]
        assert failure["class"] == "NotFoundError"
        assert failure["exit_code"] == 4
        # A failing update exits 5 and says why.
        bad = tmp_path / "bad.json"
        bad.write_text(
            json.dumps(
                {"actions": [{"action": "delete", "target-table": "Nope", "condition": True}]}
            )
        )
        assert main(["apply", "--actions", str(bad), "--datasource", "Orders"]) == 5
        assert "Specified table does not exist" in capsys.readouterr().err
        assert main(["apply", "--actions", str(bad), "--datasource", "Orders", "--json"]) == 5
        failure = json.loads(capsys.readouterr().out)["error"]
        assert failure["class"] == "JobFailedError"
        assert "Specified table does not exist" in failure["message"]
        # An unknown data source: exit 4.
        assert main(["apply", "--actions", str(bad), "--datasource", "Nope"]) == 4
        # While the fake runs, commands given no --state-dir keep their records in its
        # folder (never the user's): the change set's record stays there, finished; the
        # failed run of a plain batch left none.
        assert main(["state", "list", "--json"]) == 0
        (record,) = json.loads(capsys.readouterr().out)["records"]
        assert [p["status"] for p in record["parts"]] == ["applied"]
    assert main(["state", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == []  # the user's folder: none


def test_usage_errors_exit_2(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TABLEAU_DATASOURCE", raising=False)
    good = Path(__file__).parent.parent / "examples" / "batches" / "delete_by_constant.json"
    assert main(["apply", "--actions", str(good)]) == 2
    assert "give --datasource NAME (or set TABLEAU_DATASOURCE)" in capsys.readouterr().err
    monkeypatch.delenv("TABLEAU_SERVER_URL", raising=False)
    assert main(["apply", "--actions", str(good), "--datasource", "D", "--json"]) == 2
    failure = json.loads(capsys.readouterr().out)["error"]
    assert "give --server URL (or set TABLEAU_SERVER_URL)" in failure["message"]
    assert main(["apply"]) == 2
    assert main(["apply", "--actions", "does-not-exist.json"]) == 2
    with pytest.raises(SystemExit) as stop:
        main(["job", "frobnicate", "x"])
    assert stop.value.code == 2


def test_state_clear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tabhyper_update.update.identity import new_record
    from tabhyper_update.update.state import StateStore

    store = StateStore(tmp_path)
    record = new_record(
        "position",
        DataSourceRef("ds"),
        request_id="nightly-1",
        payload_digest="",
        batches=[],
        plan=[(None, "")],
        label="request id 'nightly-1'",
    )
    store.save(record)
    assert main(["state", "list", "--state-dir", str(tmp_path)]) == 0
    assert "request id 'nightly-1'" in capsys.readouterr().out
    assert main(["state", "clear", "--state-dir", str(tmp_path)]) == 0
    assert store.records() == []


def test_serve_local_serves_until_its_duration(tmp_path: Path) -> None:
    start = make_hyper(tmp_path / "t.hyper", {"Extract": ("id INT", ["(1)"])})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tabhyper_update",
            "serve-local",
            "--datasource",
            f"Orders={start}",
            "--pat",
            "me:pw",
            "--duration",
            "20",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = ""
        files = ""
        deadline = time.monotonic() + 20
        while not url and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("keeping files in "):
                files = line.removeprefix("keeping files in ").strip()
            if line.startswith("serving on "):
                url = line.split()[2]
        assert url.startswith("http://127.0.0.1:")
        info = requests.get(
            f"{url}/api/3.24/serverinfo", headers={"Accept": "application/json"}, timeout=10
        )
        assert info.json()["serverInfo"]["restApiVersion"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert files
    assert not Path(files).exists()  # stopped by SIGTERM, it still removed its files


def test_build_a_change_set_ordered_by_numbers_written_as_text(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changes = tmp_path / "changes"
    spark.createDataFrame(
        [(1, "older", "U", "999"), (1, "newer", "U", "1000")],
        "id long, v string, op string, seq string",
    ).write.parquet(str(changes))
    build = ["build", "--input", str(changes), "--key", "id", "--op-column", "op"]
    build += ["--order-by", "seq", "--json"]
    # A text position is refused, saying how to tell its order.
    assert main([*build, "--output-dir", str(tmp_path / "refused")]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert "--order-as seq=number" in error["message"]
    out_dir = tmp_path / "payload"
    assert main([*build, "--order-as", "seq=number", "--output-dir", str(out_dir)]) == 0
    built = json.loads(capsys.readouterr().out)
    (part,) = Payload.load(built["manifest"]).parts
    assert read_rows(part.path, "upserts") == [(1, "newer")]

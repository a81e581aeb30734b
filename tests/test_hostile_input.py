"""Hostile input beyond the corpus: folders the SDK does not own, odd names, leftovers of
killed processes, concurrent builds into one folder."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tabhyper_update import (
    ChangeSet,
    Insert,
    PersonalAccessToken,
    RetryPolicy,
    TableauClient,
    build_payload,
)
from tabhyper_update.build import sweep_leftovers
from tabhyper_update.cli import main
from tabhyper_update.testing import FakeTableauServer

from ._util import read_rows
from .test_local import make_db

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_records_live_in_a_folder_of_their_own_and_foreign_files_are_left_alone(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    foreign = shared / "someone-elses.json"
    foreign.write_text('{"not": "ours"}')
    start = make_db(tmp_path / "t.hyper", {"Extract": ("id BIGINT, v TEXT", ["(1, 'a')"])})
    with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
        server.add_datasource("Orders", start)
        client = TableauClient(server.url, "", PersonalAccessToken("ci", "pat-secret"))
        df = spark.createDataFrame([(2, "b")], "id long, v string")
        build_payload(df).upload("Orders", client=client, state_dir=shared).apply(
            [Insert(target_table="Extract", source_table="Extract")], request_id="ours-1"
        )
        client.close()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777  # never chmodded
    assert stat.S_IMODE((shared / "records").stat().st_mode) == 0o700
    # Listing reads only, and foreign files are neither listed nor touched.
    assert main(["state", "list", "--state-dir", str(shared), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["records"]
    assert [r["identity"].split("@")[0] for r in listed] == ["ours-1"]
    (shared / "records" / ("0" * 64 + ".json")).write_text("torn")
    assert main(["state", "list", "--state-dir", str(shared)]) == 0
    assert main(["state", "clear", "--state-dir", str(shared)]) == 0
    assert foreign.read_text() == '{"not": "ours"}'
    assert (shared / "records" / ("0" * 64 + ".json")).read_text() == "torn"


def test_change_set_columns_with_dots_and_backticks(spark: SparkSession) -> None:
    df = spark.createDataFrame(
        [(1, "a", "I", 1), (1, "b", "U", 2), (2, "c", "I", 1), (2, None, "D", 2)],
        "`order.id` long, `v``x` string, `op.code` string, `seq.no` long",
    )
    with build_payload(
        df, ChangeSet("order.id", op_column="op.code", order_by="seq.no")
    ) as payload:
        assert {n: t.row_count for n, t in payload.tables.items()} == {"upserts": 1, "deletes": 1}
        assert read_rows(payload.parts[0].path, "upserts") == [(1, "b")]
        assert payload.tables["upserts"].column_names == ["order.id", "v`x"]


def test_relative_staging_and_output_folders(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    df = spark.createDataFrame([(1, "a"), (2, "b")], "id long, v string")
    with build_payload(df, staging_dir="stage", output_dir="out") as payload:
        (part,) = payload.parts
        assert part.path.is_absolute()
        assert part.path.parent.parent == tmp_path / "out"
        assert read_rows(part.path, "Extract") == [(1, "a"), (2, "b")]
    assert list((tmp_path / "stage").iterdir()) == []


def test_a_data_source_whose_name_holds_a_comma_is_found(tmp_path: Path) -> None:
    start = make_db(tmp_path / "t.hyper", {"Extract": ("id BIGINT", ["(1)"])})
    with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
        luid = server.add_datasource("Orders, Europe", start)
        server.add_datasource("Orders", start)
        with TableauClient(
            server.url, "", PersonalAccessToken("ci", "pat-secret"), retry=RetryPolicy()
        ) as client:
            assert client.datasource("Orders, Europe").id == luid
            assert client.datasource("Orders").id != luid


def test_leftovers_of_killed_builds_are_swept_and_nothing_else(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    gone = int(dead.stdout)
    stage = tmp_path / f"tabhyper-stage-{gone}-abc"
    (stage / "t0").mkdir(parents=True)
    (stage / "t0" / "part-0.parquet").write_bytes(b"x")
    unfinished = tmp_path / f"tabhyper-payload-{gone}-def"
    unfinished.mkdir()
    (unfinished / ".part-1234.hyper.tmp").write_bytes(b"x")
    kept = tmp_path / f"tabhyper-payload-{gone}-ghi"
    kept.mkdir()
    (kept / "payload.hyper").write_bytes(b"x")
    (kept / "manifest.json").write_text("{}")
    old_unmarked = tmp_path / f"tabhyper-payload-{gone}-jkl"
    old_unmarked.mkdir()
    (old_unmarked / "payload.hyper").write_bytes(b"x")
    two_days = time.time() - 2 * 86400
    os.utime(old_unmarked, (two_days, two_days))
    alive = tmp_path / f"tabhyper-stage-{os.getpid()}-mno"  # a build of a running process
    alive.mkdir()
    unrelated = tmp_path / "tabhyper-stage-notes"
    unrelated.mkdir()
    assert sweep_leftovers(tmp_path) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [kept.name, alive.name, unrelated.name]
    )


def test_a_second_build_into_the_same_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "payload"
    out.mkdir()
    (out / ".tabhyper-build.lock").write_text("12345")  # a build is writing it
    args = ["build", "--input", str(tmp_path / "in"), "--name", "rows", "--output-dir", str(out)]
    assert main(args) == 2
    assert "is being written by another build" in capsys.readouterr().err
    (out / ".tabhyper-build.lock").unlink()
    (out / "manifest.json").write_text("{}")  # an earlier payload
    assert main(args) == 2
    assert "is not empty (manifest.json)" in capsys.readouterr().err
    assert (out / "manifest.json").read_text() == "{}"


@pytest.mark.parametrize(
    ("value", "verify"),
    [("disable", False), ("n", False), ("OFF", False), ("yes", True), ("", True)],
)
def test_tls_verification_words(value: str, verify: bool) -> None:
    client = TableauClient.from_env(
        {
            "TABLEAU_SERVER_URL": "https://tableau.example.com",
            "TABLEAU_PAT_NAME": "n",
            "TABLEAU_PAT_SECRET": "s",
            "TABLEAU_VERIFY_TLS": value,
        }
    )
    assert client._http.verify is verify


def test_a_full_disk_during_a_build_is_named(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from tabhyper_update import PayloadError, build

    def full(*args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(build, "_write_parts", full)
    df = spark.createDataFrame([(1, "a")], "id long, v string")
    with pytest.raises(PayloadError, match="no space left on device while building") as caught:
        build_payload(df, staging_dir=tmp_path / "stage", output_dir=tmp_path / "out")
    assert str(tmp_path / "stage") in str(caught.value)
    assert list((tmp_path / "stage").iterdir()) == []
    assert list((tmp_path / "out").iterdir()) == []


def test_cli_failures_are_one_line_of_ours_never_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TABLEAU_SERVER_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("TABLEAU_PAT_NAME", "n")
    monkeypatch.setenv("TABLEAU_PAT_SECRET", "s")
    bad = tmp_path / "bad.json"
    bad.write_text('{"actions": [{"action": "insert", "target-table": "T"}]}')
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    (hostile / "manifest.json").write_text(
        json.dumps({"schema": "Extract", "parts": [{"file": "../../etc/passwd"}]})
    )
    runs = [
        (["validate", str(bad)], 1, "'source-table' is required"),
        (["apply", "--payload", str(hostile), "--datasource", "D"], 1, "outside the manifest"),
        (["apply", "--actions", str(bad), "--datasource", "D"], 1, "'source-table'"),
        (["apply", "--actions", str(tmp_path / "none.json")], 2, "none.json"),
        (["state", "list", "--state-dir", str(bad)], 0, "no records"),
    ]
    for argv, code, words in runs:
        assert main(argv) == code, argv
        captured = capsys.readouterr()
        assert words in captured.out + captured.err, (argv, captured)
        assert "Traceback" not in captured.err

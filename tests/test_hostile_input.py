"""Hostile input beyond the corpus: folders the SDK does not own, odd names, leftovers of
killed processes, concurrent builds into one folder."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from tabhyper_update import (
    ChangeSet,
    Debezium,
    Insert,
    PersonalAccessToken,
    TabHyperError,
    TableauClient,
    build_payload,
    target,
)
from tabhyper_update.cli import main
from tabhyper_update.local import folders
from tabhyper_update.local.folders import sweep_leftovers
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper
from tabhyper_update.values.policies import RetryPolicy

from ._util import read_rows

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
    start = make_hyper(tmp_path / "t.hyper", {"Extract": ("id BIGINT, v TEXT", ["(1, 'a')"])})
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
    start = make_hyper(tmp_path / "t.hyper", {"Extract": ("id BIGINT", ["(1)"])})
    with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
        luid = server.add_datasource("Orders, Europe", start)
        server.add_datasource("Orders", start)
        with TableauClient(
            server.url, "", PersonalAccessToken("ci", "pat-secret"), retry=RetryPolicy()
        ) as client:
            assert client.datasource("Orders, Europe").id == luid
            assert client.datasource("Orders").id != luid


def _lease(folder: Path, *, pid: int, age: float = 0.0, **where: str) -> None:
    """A lease as a build with process id ``pid`` writes it (``where`` overrides its place)."""
    folder.mkdir(parents=True, exist_ok=True)
    holder = {**folders._identity(), "pid": pid, "started": time.time(), **where}
    lease = folder / folders.LEASE_NAME
    lease.write_text(json.dumps(holder))
    then = time.time() - age
    os.utime(lease, (then, then))


def test_leftovers_of_dead_builds_are_swept_and_nothing_else(tmp_path: Path) -> None:
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
    _lease(stage, pid=gone)  # this machine, this namespace, its process gone: dead now
    unfinished = tmp_path / f"tabhyper-payload-{gone}-def"
    unfinished.mkdir()
    (unfinished / ".part-1234.hyper.tmp").write_bytes(b"x")
    _lease(unfinished, pid=gone)
    kept = tmp_path / f"tabhyper-payload-{gone}-ghi"
    kept.mkdir()
    (kept / "payload.hyper").write_bytes(b"x")
    (kept / "manifest.json").write_text("{}")
    _lease(kept, pid=gone)
    old_unmarked = tmp_path / f"tabhyper-payload-{gone}-jkl"
    old_unmarked.mkdir()
    (old_unmarked / "payload.hyper").write_bytes(b"x")
    _lease(old_unmarked, pid=gone)
    two_days = time.time() - 2 * 86400
    os.utime(old_unmarked, (two_days, two_days))
    alive = tmp_path / f"tabhyper-stage-{os.getpid()}-mno"  # a build of a running process
    _lease(alive, pid=os.getpid())
    # A build in another container (another pid namespace) or on another host sharing the
    # folder: its pid means nothing here, its fresh lease says it runs.
    container = tmp_path / f"tabhyper-stage-{gone}-pqr"
    _lease(container, pid=gone, pid_ns="pid:[1]")
    other_host = tmp_path / f"tabhyper-stage-{gone}-stu"
    _lease(other_host, pid=gone, host="builder-7", boot="another-boot")
    # ... and once its lease is older than the bound, it is dead wherever it ran.
    expired = tmp_path / f"tabhyper-stage-{gone}-vwx"
    _lease(expired, pid=gone, host="builder-7", age=folders.LEASE_EXPIRY_SECONDS + 60)
    # A lease of this machine whose pid now belongs to a process started after it: reused.
    reused = tmp_path / f"tabhyper-stage-{os.getpid()}-rus"
    _lease(reused, pid=os.getpid())
    holder = json.loads((reused / folders.LEASE_NAME).read_text())
    holder["started"] = 1_000_000.0  # 1970: before this process started
    (reused / folders.LEASE_NAME).write_text(json.dumps(holder))
    no_lease_yet = tmp_path / f"tabhyper-stage-{gone}-yz0"  # killed before its lease: young
    no_lease_yet.mkdir()
    unrelated = tmp_path / "tabhyper-stage-notes"
    unrelated.mkdir()
    assert sweep_leftovers(tmp_path) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in (kept, alive, container, other_host, no_lease_yet, unrelated)
    )
    assert sorted(p.name for p in kept.iterdir()) == [
        folders.LEASE_NAME,
        "manifest.json",
        "payload.hyper",
    ]


@pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0, reason="needs unshare and root"
)
def test_builds_sweep_a_folder_of_leftovers_at_most_once_a_minute(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = int(
        subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )

    def leftover(name: str) -> Path:
        stage = tmp_path / f"tabhyper-stage-{gone}-{name}"
        (stage / "t0").mkdir(parents=True)
        _lease(stage, pid=gone)
        return stage

    def build() -> None:
        with build_payload(spark.range(3), staging_dir=tmp_path, output_dir=tmp_path / "out"):
            pass

    first = leftover("a")
    build()
    assert not first.exists()  # the process's first build here swept it
    second = leftover("b")
    build()
    assert second.exists()  # swept a moment ago: a streaming job builds every few seconds
    monkeypatch.setattr(folders, "LEFTOVER_SWEEP_SECONDS", 0.0)
    build()
    assert not second.exists()


def test_a_live_build_in_another_pid_namespace_keeps_its_folder(tmp_path: Path) -> None:
    """A real process in its own pid namespace (as in a container) holds a staging folder
    in a shared path: a sweep here leaves it while it lives, and removes it only once its
    lease has expired after it died."""
    script = (
        "import sys, time; from pathlib import Path\n"
        "from tabhyper_update.local.folders import private_dir\n"
        "path, lease = private_dir(Path(sys.argv[1]), 'tabhyper-stage-')\n"
        "print(path, flush=True)\n"
        "time.sleep(60)\n"
    )
    holder = subprocess.Popen(
        ["unshare", "--pid", "--fork", sys.executable, "-c", script, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        folder = Path(holder.stdout.readline().strip())
        assert folder.parent == tmp_path
        assert folder.is_dir()
        inner = json.loads((folder / folders.LEASE_NAME).read_text())
        assert inner["pid_ns"] != folders._identity()["pid_ns"]
        assert sweep_leftovers(tmp_path) == 0
        assert folder.is_dir()
    finally:
        holder.kill()
        holder.wait(timeout=20)
    assert sweep_leftovers(tmp_path) == 0  # dead, but its lease is fresh: not yet
    stale = time.time() - folders.LEASE_EXPIRY_SECONDS - 60
    os.utime(folder / folders.LEASE_NAME, (stale, stale))
    assert sweep_leftovers(tmp_path) == 1
    assert not folder.exists()


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

    from tabhyper_update import PayloadError
    from tabhyper_update.builder import build

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
        (["state", "list", "--state-dir", str(bad)], 2, "is a file, not a folder"),
    ]
    for argv, code, words in runs:
        assert main(argv) == code, argv
        captured = capsys.readouterr()
        assert words in captured.out + captured.err, (argv, captured)
        assert "Traceback" not in captured.err


def _in_own_mounts(script: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a shell script in a mount namespace of its own: the file systems it mounts
    vanish with it and nothing outside sees them."""
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


needs_mounts = pytest.mark.skipif(
    shutil.which("unshare") is None or os.geteuid() != 0,
    reason="mounts a small file system in a mount namespace of its own (needs root)",
)


@needs_mounts
def test_a_full_or_read_only_disk_is_refused_before_any_work(tmp_path: Path) -> None:
    full, read_only = tmp_path / "full", tmp_path / "read-only"
    full.mkdir()
    read_only.mkdir()
    build = f"{sys.executable} -m tabhyper_update build --input nothing.parquet --json"
    done = _in_own_mounts(
        f"mount -t tmpfs -o size=256k tmpfs {full} && "
        f"(dd if=/dev/zero of={full}/filler bs=4k count=100 2>/dev/null; true) && "
        f"mount -t tmpfs -o ro,size=1m tmpfs {read_only} && "
        f"{build} --output-dir {full}/payload; echo exit=$?; "
        f"{build} --output-dir {read_only}/payload; echo exit=$?; "
        f"{build} --output-dir {tmp_path}/out --staging-dir {full}/stage; echo exit=$?; "
        f"ls -A {full} {read_only}",
        timeout=120,
    )
    lines = done.stdout.splitlines()
    errors = [json.loads(line)["error"] for line in lines if line.startswith("{")]
    assert [line for line in lines if line.startswith("exit=")] == ["exit=2"] * 3, done
    assert "--output-dir" in errors[0]["message"]
    assert "its disk is full" in errors[0]["message"]
    assert "--output-dir" in errors[1]["message"]
    assert "is on a read-only file system" in errors[1]["message"]
    assert "--staging-dir" in errors[2]["message"]
    assert "its disk is full" in errors[2]["message"]
    assert {e["class"] for e in errors} == {"ConfigurationError"}
    # Nothing was made on either disk (only the filler that filled the first).
    assert lines[-4:] == [f"{full}:", "filler", "", f"{read_only}:"], lines


@needs_mounts
def test_a_disk_that_fills_during_the_build_is_our_error_and_leaves_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    rows = tmp_path / "rows"
    spark.range(60_000).selectExpr("id", "sha2(CAST(id AS STRING), 512) AS v").write.parquet(
        str(rows)
    )
    small = tmp_path / "small"
    small.mkdir()
    done = _in_own_mounts(
        f"mount -t tmpfs -o size=2m tmpfs {small} && "
        f"{sys.executable} -m tabhyper_update build --input {rows} --json "
        f"--staging-dir {small} --output-dir {tmp_path}/payload; echo exit=$?; "
        f"ls -A {small}",
        timeout=300,
    )
    lines = done.stdout.splitlines()
    (error,) = [json.loads(line)["error"] for line in lines if line.startswith("{")]
    assert "exit=1" in lines, done
    assert error["class"] == "PayloadError"
    assert "no space left on device while building the payload" in error["message"]
    assert str(small) in error["message"]
    assert lines[-1] == "exit=1", lines  # the staging disk is empty again
    assert not (tmp_path / "payload").exists() or not any((tmp_path / "payload").iterdir())


def test_a_running_build_keeps_its_lease_fresh_until_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, lease = folders.private_dir(tmp_path, "tabhyper-stage-")
    lease_file = folder / folders.LEASE_NAME
    long_ago = time.time() - folders.LEASE_EXPIRY_SECONDS - 60
    os.utime(lease_file, (long_ago, long_ago))  # as if the build had been running for hours
    monkeypatch.setattr(folders, "LEASE_REFRESH_SECONDS", 0.05)
    folders._wake.set()
    deadline = time.monotonic() + 10
    while lease_file.stat().st_mtime < long_ago + 60 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lease_file.stat().st_mtime > time.time() - 60  # touched by the keeper
    assert sweep_leftovers(tmp_path) == 0
    lease.release()
    os.utime(lease_file, (long_ago, long_ago))
    folders._wake.set()
    time.sleep(0.3)
    assert lease_file.stat().st_mtime == pytest.approx(long_ago, abs=1)  # no longer touched
    # Written here by a process that still lives: kept, however old its lease (a payload
    # may be uploaded long after its build).
    assert sweep_leftovers(tmp_path) == 0
    assert folder.is_dir()


@pytest.mark.parametrize(
    "given",
    [
        pytest.param(lambda: target("amount\x00"), id="a condition's column"),
        pytest.param(lambda: Debezium("id BIGINT", key="id", table="orders\x00"), id="table="),
        pytest.param(
            lambda: Debezium("id BIGINT", key="id", position=["source.lsn", "seq\x00"]),
            id="position=",
        ),
        pytest.param(
            lambda: build_payload({"Extract\x00": cast(Any, object())}), id="a payload table"
        ),
        pytest.param(lambda: build_payload({"": cast(Any, object())}), id="an empty payload table"),
    ],
)
def test_a_name_holding_a_nul_is_refused_where_it_is_given(given: Any) -> None:
    # No table, column or file name can hold a NUL: refused by the SDK, naming the argument,
    # before any Spark job, file or request (not by Hyper or the file system later on).
    with pytest.raises(TabHyperError) as caught:
        given()
    said = str(caught.value)
    assert "\\x00" in said or "column name must be" in said or "non-empty" in said, said
    assert "DataFrame" not in said  # the name is refused, not what it names

"""What a new user meets: errors they can catch, no-ops that succeed and say so, a payload from
any .hyper file, a command line whose advice it can follow and whose --json is always JSON,
quiet output with bars on a terminal. CLI tests run the installed command, except builds whose
point is what they say (those run the command in this process, on the tests' Spark session)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import (
    ChangeSet,
    Insert,
    JobFailedError,
    NotFoundError,
    Payload,
    PayloadError,
    Replace,
    TableauClient,
    build_payload,
)
from tabhyper_update.streaming import TableauSink
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table
from tabhyper_update.values.actions import ActionBatch
from tabhyper_update.values.errors import ArgumentTypeError

from ._streaming import SCHEMA, write_batch
from ._util import PAT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COMMAND = str(Path(sys.executable).parent / "tabhyper-update")


@pytest.fixture
def target_file(tmp_path: Path) -> Path:
    return make_hyper(tmp_path / "start.hyper", {"Extract": ("id BIGINT, v TEXT", ["(1, 'a')"])})


def rows(server: FakeTableauServer) -> list[tuple[Any, ...]]:
    (luid,) = [ds.id for ds in server.backend.sources.values() if ds.name == "Orders"]
    return sorted(read_table(server.datasource_path(luid), "Extract"))


def build_here(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``tabhyper-update build ARGV`` in this process: the command borrows the tests' Spark
    session rather than starting one (exit code, stdout, stderr)."""
    from tabhyper_update.cli import main

    capsys.readouterr()
    code = main(["build", *argv])
    said = capsys.readouterr()
    return code, said.out, said.err


def run(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Any:
    return subprocess.run(
        [COMMAND, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        check=False,
    )


# 1. a failing sink is the SDK's error, and a wrong target fails before the query starts


def test_a_sink_with_a_wrong_target_fails_before_its_query_starts(
    spark: SparkSession, client: TableauClient, tmp_path: Path
) -> None:
    changes = ChangeSet("id", op_column="op", order_by="seq")
    # Where the sink is made (the ordinary foreachBatch idiom makes it first)...
    with pytest.raises(NotFoundError, match="no data source named 'Ordres'"):
        TableauSink("Ordres", changes, client=client)
    # ...and, for a sink made offline, when sink.start() starts its query.
    sink = TableauSink("Ordres", changes, client=client, check=False)
    writer = (
        spark.readStream.schema(SCHEMA)
        .json(str(tmp_path))
        .writeStream.option("checkpointLocation", str(tmp_path / "checkpoint"))
    )
    with pytest.raises(NotFoundError, match="no data source named 'Ordres'"):
        sink.start(writer)
    assert spark.streams.active == []


def test_a_failed_batch_stops_the_query_with_the_sdks_own_error(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    write_batch(tmp_path / "in", 0, [(2, "b", 20, "I", 1)])
    sink = TableauSink(
        "Orders",
        ChangeSet("id", op_column="op", order_by="seq"),
        client=client,
        target_table="Extract",
        state_dir=tmp_path / "state",
    )
    failed: dict[str, Any] = {"job": {"id": "0" * 8 + "-0000-0000-0000-" + "0" * 12}}
    failed["job"]["finishCode"] = "1"
    failed["job"]["updateUploadedFileJob"] = {"notes": "the worker ran out of memory"}
    server.inject("job", content_type="application/json", body=json.dumps(failed).encode())
    query = sink.start(
        spark.readStream.schema(SCHEMA)
        .json(str(tmp_path / "in"))
        .select("id", "name", "op", "seq")
        .withColumnRenamed("name", "v")
        .writeStream.option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
    )
    try:
        with pytest.raises(JobFailedError, match="the worker ran out of memory"):
            sink.await_termination(query, timeout=120)
    finally:
        query.stop()
    assert isinstance(sink.error, JobFailedError)


# 2. an empty plain DataFrame is a no-op that says so (a replace from it is refused)


def test_an_empty_plain_build_is_a_no_op_that_says_so(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    empty = spark.createDataFrame([], "id long, v string")
    result = (
        build_payload(empty)
        .upload("Orders", client=client, progress=False)
        .apply([Insert(source_table="Extract", target_table="Extract")])
    )
    assert result.empty
    assert str(result) == "nothing to update: the payload holds no rows"
    assert server.counts["update"] == 0
    assert rows(server) == [(1, "a")]
    with pytest.raises(PayloadError, match="would empty that table"):
        build_payload(empty).upload("Orders", client=client, progress=False).apply(
            [Replace(source_table="Extract", target_table="Extract")]
        )
    assert rows(server) == [(1, "a")]


# 4. a payload from any .hyper file, in Python and on the command line


def test_an_existing_hyper_file_is_applied_and_kept(
    server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    made = make_hyper(tmp_path / "new rows.hyper", {"Extract": ("id BIGINT, v TEXT", ["(2, 'b')"])})
    before = made.read_bytes()
    payload = Payload.from_hyper(made)
    assert payload.tables["Extract"].row_count == 1
    payload.upload("Orders", client=client, progress=False).apply(
        [Insert(source_table="Extract", target_table="Extract")]
    )
    assert rows(server) == [(1, "a"), (2, "b")]
    assert made.read_bytes() == before  # the user's file: kept as it was
    again = make_hyper(tmp_path / "more.hyper", {"Extract": ("id BIGINT, v TEXT", ["(3, 'c')"])})
    actions = tmp_path / "insert.json"
    actions.write_text(
        ActionBatch.coerce([Insert(source_table="Extract", target_table="Extract")]).to_json()
    )
    env = {"TABLEAU_SERVER_URL": server.url, "TABLEAU_PAT_NAME": PAT[0]}
    env |= {"TABLEAU_PAT_SECRET": PAT[1], "TABLEAU_SITE": ""}
    done = run(
        "apply",
        "--payload",
        str(again),
        "--actions",
        str(actions),
        "--datasource",
        "Orders",
        "--state-dir",
        str(tmp_path / "state"),
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert rows(server) == [(1, "a"), (2, "b"), (3, "c")]
    assert again.exists()
    not_hyper = tmp_path / "notes.hyper"
    not_hyper.write_text("hello")
    with pytest.raises(PayloadError, match=r"cannot be read as a \.hyper file"):
        Payload.from_hyper(not_hyper)


# 6. applying a saved payload again says it was applied


def test_a_second_apply_of_a_saved_payload_says_it_was_applied(
    spark: SparkSession,
    server: FakeTableauServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = tmp_path / "changes"
    spark.createDataFrame(
        [(2, "b", "I", 1)], "id long, v string, op string, seq long"
    ).write.parquet(str(source))
    out = tmp_path / "payload"
    code, _, err = build_here(
        capsys,
        "--input", str(source), "--key", "id", "--op-column", "op", "--order-by", "seq",
        "--output-dir", str(out),
    )  # fmt: skip
    assert code == 0, err
    env = {"TABLEAU_SERVER_URL": server.url, "TABLEAU_PAT_NAME": PAT[0]}
    env |= {"TABLEAU_PAT_SECRET": PAT[1], "TABLEAU_SITE": ""}
    apply = ["apply", "--payload", str(out), "--datasource", "Orders", "--state-dir"]
    apply += [str(tmp_path / "state"), "--json"]
    first = run(*apply, env=env)
    assert first.returncode == 0, first.stderr
    second = run(*apply, env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    said = json.loads(second.stdout)
    assert said["applied_before"] == [json.loads(first.stdout)["jobs"][0]["job_id"]]
    assert server.counts["update"] == 1
    assert rows(server) == [(1, "a"), (2, "b")]
    # Applied to Orders is not applied to another data source: that is refused, not "done".
    elsewhere = [a if a != "Orders" else "Orders copy" for a in apply]
    other = run(*elsewhere, env=env)
    assert other.returncode == 1, other.stdout + other.stderr
    error = json.loads(other.stdout)["error"]
    assert "'datasource': 'Orders'" in error["message"]
    assert "not to" in error["message"]
    assert "build it again" in error["message"]
    assert server.counts["update"] == 1


# 5, 7, 8. advice that names what the caller can type; misuse in the tree; --json is JSON


def test_the_command_line_names_its_own_flags(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "complex"
    spark.createDataFrame([(1, [1, 2])], "id long, tags array<int>").write.parquet(str(source))
    code, out, _ = build_here(
        capsys, "--input", str(source), "--output-dir", str(tmp_path / "a"), "--json"
    )
    message = json.loads(out)["error"]["message"]
    assert code != 0
    assert "--complex-as-json" in message
    assert "complex_as_json" not in message
    code, out, _ = build_here(
        capsys,
        "--input", str(source), "--complex-as-json", "--output-dir", str(tmp_path / "b"), "--json",
    )  # fmt: skip
    assert code == 0, out
    (part,) = Payload.load(json.loads(out)["manifest"]).parts
    assert read_table(part.path, "Extract") == [(1, "[1,2]")]


def test_publishing_over_an_existing_name_says_how_to_overwrite(
    server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    file = make_hyper(tmp_path / "orders.hyper", {"Extract": ("id BIGINT, v TEXT", ["(1, 'a')"])})
    with pytest.raises(Exception, match="publish with mode='overwrite'") as caught:
        client.publish(file, "Orders", project="Default")
    assert caught.value.status == 409  # type: ignore[attr-defined]
    env = {"TABLEAU_SERVER_URL": server.url, "TABLEAU_PAT_NAME": PAT[0]}
    env |= {"TABLEAU_PAT_SECRET": PAT[1], "TABLEAU_SITE": ""}
    done = run("publish", str(file), "--name", "Orders", "--project", "Default", env=env)
    assert "--mode overwrite" in done.stderr
    assert "mode='overwrite'" not in done.stderr


def test_a_batch_given_as_the_payload_is_a_clear_type_error(client: TableauClient) -> None:
    batch = ActionBatch.coerce([Insert(source_table="Extract", target_table="Extract")])
    with pytest.raises(ArgumentTypeError, match="pass an action batch as actions="):
        client.update_datasource("Orders", batch)  # type: ignore[arg-type]


def test_json_output_is_json_for_every_failure(tmp_path: Path) -> None:
    done = run("validate", "--json", str(tmp_path / "nosuch.json"))
    error = json.loads(done.stdout)["error"]
    assert (error["class"], done.returncode) == ("UsageError", 2)
    assert "nosuch.json" in error["message"]


@pytest.mark.parametrize("command", [["demo"], ["build", "--input", "x", "--json"]])
def test_a_missing_pyspark_is_the_same_usage_error_everywhere(
    command: list[str], tmp_path: Path
) -> None:
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "from tabhyper_update.cli import main\n"
        f"sys.exit(main({command!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    if "--json" in command:
        error = json.loads(done.stdout)["error"]
        assert error["class"] == "UsageError"
        said = error["message"]
    else:
        said = done.stderr
    assert "pip install -e '.[spark]'" in said


# 3, 9. a bar on a terminal, no JVM noise, more on request


def _under_a_terminal(argv: list[str], cwd: Path, timeout: float = 240) -> tuple[int, str]:
    """Run the installed command with a pseudo-terminal as stdout and stderr."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [COMMAND, *argv], stdout=follower, stderr=follower, stdin=subprocess.DEVNULL, cwd=cwd
    )
    os.close(follower)
    seen = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the terminal closed: the command ended
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    return code, seen.decode("utf-8", "replace")


def test_a_build_on_a_terminal_shows_its_bar_and_no_jvm_noise(
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = tmp_path / "rows"
    spark.createDataFrame([(1, "a"), (2, "b"), (3, "c")], "id long, v string").write.parquet(
        str(source)
    )
    code, shown = _under_a_terminal(
        ["build", "--input", str(source), "--output-dir", str(tmp_path / "out")], tmp_path
    )
    assert code == 0, shown
    assert "build payload" in shown  # the SDK's own bar
    assert "Spark stages the rows" in shown
    for noise in ("log4j", "WARN NativeCodeLoader", "incubator", "[Stage ", "setLogLevel"):
        assert noise not in shown, shown
    assert "payload:" in shown  # the result itself
    # -q on a terminal: no bar. In this process (no second JVM), its stderr taken for a
    # terminal: the bar shows without -q, and not with it.
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    inputs = ["--input", str(source), "--output-dir"]
    code, _, err = build_here(capsys, *inputs, str(tmp_path / "here"))
    assert code == 0
    assert "build payload" in err
    code, _, err = build_here(capsys, "-q", *inputs, str(tmp_path / "quiet"))
    assert code == 0
    assert "build payload" not in err


def test_verbose_says_what_the_sdk_does(tmp_path: Path, server: FakeTableauServer) -> None:
    env = {"TABLEAU_SERVER_URL": server.url, "TABLEAU_PAT_NAME": PAT[0]}
    env |= {"TABLEAU_PAT_SECRET": PAT[1], "TABLEAU_SITE": ""}
    quiet = run("job", "status", "no-such-job", env=env)
    assert "INFO" not in quiet.stderr
    verbose = run("-v", "job", "status", "no-such-job", env=env)
    assert "tabhyper-update: INFO: signed in to site ''" in verbose.stderr


# 10. what a user looks for


def test_the_license_is_in_the_repository_and_in_the_wheel(tmp_path: Path) -> None:
    import zipfile

    root = Path(__file__).resolve().parent.parent
    text = (root / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(root),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("tabhyper_update-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        said = archive.read(metadata).decode()
        (license_file,) = [n for n in archive.namelist() if n.endswith("/licenses/LICENSE")]
        assert archive.read(license_file).decode() == text
    assert "License-Expression: Apache-2.0" in said
    assert "License-File: LICENSE" in said
    changelog = (root / "CHANGELOG.md").read_text()
    assert "## Unreleased" in changelog
    assert "## 0.1.0" in changelog


def test_an_input_spark_cannot_read_is_a_usage_error_that_leaves_nothing(tmp_path: Path) -> None:
    done = run(
        "build", "--input", str(tmp_path / "nothing.parquet"), "--output-dir",
        str(tmp_path / "out"), "--json",
    )  # fmt: skip
    error = json.loads(done.stdout)["error"]
    assert (done.returncode, error["class"]) == (2, "UsageError"), done.stderr
    # Found before Spark starts.
    assert error["message"].startswith("--input: no such file or folder: ")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_every_install_line_installs_from_a_checkout_while_the_package_is_unpublished() -> None:
    """The package is not on an index: a page that says ``pip install tabhyper-update``
    sends a newcomer to an error. Every page installs it one way, from the checkout
    (``pip install -e '.[extra]'``, or a wheel built there)."""
    import re

    root = Path(__file__).resolve().parent.parent
    pages = [
        root / "README.md",
        root / "examples" / "README.md",
        *sorted((root / "docs").rglob("*.md")),
        *sorted((root / "tabhyper_update").rglob("*.py")),
    ]
    by_name = re.compile(r"pip install (-U )?['\"]?tabhyper[-_]update")
    found = [
        f"{page.relative_to(root)}:{n}"
        for page in pages
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if by_name.search(line)
    ]
    assert not found, found
    quickstart = (root / "docs" / "getting-started" / "quickstart.md").read_text()
    assert ".venv/bin/pip install -e '.[spark]'" in quickstart
    # Every command of the quickstart runs from the virtual environment, none bare.
    assert not re.search(r"(?<![/\w])tabhyper-update (rows|serve-local|build|apply)", quickstart)

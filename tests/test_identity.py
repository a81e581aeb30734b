"""The identity of an update, through the public API against the fake server (real HTTP on
127.0.0.1): every change applied once, a replay of the same position never applied again,
and a re-run after a crash continuing exactly where the last one stopped.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import (
    ApiError,
    ChangeSet,
    Delete,
    Insert,
    JobFailedError,
    PayloadError,
    TableauClient,
    build_payload,
    target,
)
from tabhyper_update.payload.model import Payload
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper
from tabhyper_update.update.chain import UpdateResult
from tabhyper_update.update.identity import scoped_request_id
from tabhyper_update.update.state import StateStore
from tabhyper_update.values.errors import JobCancelledError, UpdateStateError

from ._util import client_for, read_rows, use_environment

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

START = ["(1, 'x', 'y')"]
CDC_SCHEMA = "id long, a string, b string, op string, seq long"


@pytest.fixture(scope="module")
def start_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_hyper(
        tmp_path_factory.mktemp("start") / "t.hyper",
        {"Extract": ("id BIGINT NOT NULL, a TEXT, b TEXT", START)},
    )


@pytest.fixture
def target_file(start_file: Path) -> Path:
    return start_file


def rows(server: FakeTableauServer) -> list[tuple[Any, ...]]:
    (luid,) = server.backend.sources
    return read_rows(server.datasource_path(luid), "Extract")


def cdc(spark: SparkSession, changes: list[tuple[Any, ...]]) -> Payload:
    df = spark.createDataFrame(changes, CDC_SCHEMA)
    return build_payload(df, ChangeSet("id", op_column="op", order_by="seq"))


def run_cdc(
    spark: SparkSession, client: TableauClient, state: Path, changes: list[tuple[Any, ...]]
) -> UpdateResult:
    return (
        cdc(spark, changes).upload("Orders", client=client, progress=False, state_dir=state).apply()
    )


# -- 1. a value that flips back ------------------------------------------------------------


def test_a_value_that_flips_back_is_applied_every_time(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    seen = []
    for seq, status in enumerate(["inactive", "active", "inactive"], start=1):
        result = run_cdc(spark, client, tmp_path, [(1, status, "y", "U", seq)])
        assert not result.deduplicated
        seen.append(rows(server))
    assert seen == [[(1, "inactive", "y")], [(1, "active", "y")], [(1, "inactive", "y")]]
    assert sum(server.jobs_run.values()) == 3


def test_delete_reinsert_delete_of_one_key(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    Rows = list[tuple[Any, ...]]
    steps: list[tuple[Rows, Rows]] = [
        ([(2, "b", None, "I", 1)], [(1, "x", "y"), (2, "b", None)]),
        ([(2, None, None, "D", 2)], [(1, "x", "y")]),
        ([(2, "b", None, "I", 3)], [(1, "x", "y"), (2, "b", None)]),
        ([(2, None, None, "D", 4)], [(1, "x", "y")]),
    ]
    for changes, expected in steps:
        assert not run_cdc(spark, client, tmp_path, changes).deduplicated
        assert rows(server) == expected
    assert sum(server.jobs_run.values()) == 4


# -- 2. NULLs that move, column boundaries -------------------------------------------------


def test_nulls_in_different_columns_and_shifted_boundaries_give_different_digests(
    spark: SparkSession,
) -> None:
    def digest(values: list[tuple[Any, ...]]) -> str:
        df = spark.createDataFrame(values, "id long, a string, b string")
        with build_payload(df) as payload:
            return payload.digest

    pairs: list[tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]] = [
        ([(5, "555", None)], [(5, None, "555")]),
        ([(5, "ab", "c")], [(5, "a", "bc")]),
        ([(5, "", None)], [(5, None, "")]),
        ([(5, "x", "y"), (5, "x", "y")], [(5, "x", "y")]),  # a repeated row counts
    ]
    for one, other in pairs:
        assert digest(one) != digest(other), (one, other)
    assert digest([(5, "555", None)]) == digest([(5, "555", None)])


def test_nulls_that_move_are_applied(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    run_cdc(spark, client, tmp_path, [(5, "555", None, "I", 1)])
    assert rows(server)[-1] == (5, "555", None)
    second = run_cdc(spark, client, tmp_path, [(5, None, "555", "U", 1)])
    assert not second.deduplicated
    assert rows(server)[-1] == (5, None, "555")


# -- 3. a repeated delete by constant ------------------------------------------------------


def test_a_repeated_delete_by_constant_runs_again(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    def delete_gone() -> UpdateResult:
        empty = build_payload(spark.createDataFrame([], "id long"))
        return empty.upload("Orders", client=client, progress=False, state_dir=tmp_path).apply(
            [Delete(target_table="Extract", condition=target("a") == "gone")]
        )

    insert = [Insert(target_table="Extract", source_table="Extract")]
    new_row = spark.createDataFrame([(7, "gone", None)], "id long, a string, b string")
    build_payload(new_row).upload(
        "Orders", client=client, progress=False, state_dir=tmp_path
    ).apply(insert)
    assert not delete_gone().deduplicated
    assert rows(server) == [(1, "x", "y")]
    # The same matching row arrives again later; the same delete must remove it again.
    build_payload(new_row).upload(
        "Orders", client=client, progress=False, state_dir=tmp_path
    ).apply(insert)
    assert rows(server) == [(1, "x", "y"), (7, "gone", None)]
    assert not delete_gone().deduplicated
    assert rows(server) == [(1, "x", "y")]
    assert StateStore(tmp_path).records() == []  # runs leave no record once finished


# -- 4. odd staging paths ------------------------------------------------------------------

ODD = "a b%20#?'\"é-ü"


def test_an_odd_staging_path_stages_every_row_and_leaves_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    staging = tmp_path / ODD / "x:y"
    staging.parent.mkdir()  # folder arguments are made when missing, not their parents
    df = spark.createDataFrame(
        [(i, f"v{i}", None) for i in range(50)], "id long, a string, b string"
    )
    with build_payload(df, staging_dir=staging, output_dir=tmp_path / ODD / "out") as payload:
        assert payload.tables["Extract"].row_count == 50
        assert read_rows(payload.parts[0].path, "Extract")[0] == (0, "v0", None)
    assert list(staging.iterdir()) == []  # the staged copy went
    assert sorted(p.name for p in (tmp_path / ODD).iterdir()) == ["out", "x:y"]


def test_an_odd_tmpdir_too(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    odd = tmp_path / ODD
    odd.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(odd))
    changes = [(1, "a", None, "I", 1), (2, None, None, "D", 1)]
    with cdc(spark, changes) as payload:
        assert {n: t.row_count for n, t in payload.tables.items()} == {"upserts": 1, "deletes": 1}
    assert list(odd.iterdir()) == []


def test_rows_spark_wrote_but_the_sdk_cannot_find_are_an_error(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tabhyper_update.builder import build

    real = build._write_staged
    elsewhere = tmp_path / "elsewhere"

    def misplaced(df: DataFrame, target: Path, staging: Any) -> None:
        real(df, elsewhere / target.name, staging)

    monkeypatch.setattr(build, "_write_staged", misplaced)
    df = spark.createDataFrame([(1, "a", None), (2, "b", None)], "id long, a string, b string")
    with pytest.raises(PayloadError, match=r"Spark wrote 2 row\(s\) for table 'Extract' but 0"):
        # Spark's write into the shared folder (rows sent to the driver: test_driver_staging)
        build_payload(df, output_dir=tmp_path / "out", staging="shared")
    assert list((tmp_path / "out").iterdir()) == []  # no half-built payload


# -- 5. a split payload: deterministic parts, resumed exactly ------------------------------


def rows_frame(spark: SparkSession, n: int, layout: str) -> DataFrame:
    df = spark.range(1000, 1000 + n).selectExpr(
        "id", "sha2(CAST(id AS STRING), 256) AS a", "IF(id % 3 = 0, NULL, 'b') AS b"
    )
    return df.repartition(7) if layout == "scattered" else df.coalesce(1)


CAP_MB = 0.5
N_ROWS = 12_000


def test_the_same_rows_split_into_the_same_parts_whatever_the_partitioning(
    spark: SparkSession,
) -> None:
    def plan(layout: str) -> list[tuple[tuple[int, int], str]]:
        with build_payload(rows_frame(spark, N_ROWS, layout), max_payload_mb=CAP_MB) as p:
            assert len(p.parts) >= 3
            assert all(part.size_bytes <= CAP_MB * 1024 * 1024 for part in p.parts)
            return [(part.buckets, part.content_digest) for part in p.parts]

    assert plan("scattered") == plan("single")


@pytest.fixture(scope="module")
def split_payloads(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, Payload]]:
    """The same rows built twice, differently partitioned: the first as a manifest for a
    subprocess, the second for the re-run."""
    first = build_payload(
        rows_frame(spark, N_ROWS, "scattered"),
        max_payload_mb=CAP_MB,
        output_dir=tmp_path_factory.mktemp("first"),
        keep_files=True,
    )
    second = build_payload(
        rows_frame(spark, N_ROWS, "single"),
        max_payload_mb=CAP_MB,
        output_dir=tmp_path_factory.mktemp("second"),
        keep_files=True,
    )
    yield first.save_manifest(), second
    first.cleanup()
    second.cleanup()


KILL_SCRIPT = """
import os, sys
from tabhyper_update import Insert, PersonalAccessToken, TableauClient
from tabhyper_update.payload.model import Payload
from tabhyper_update.update.run import UpdateRun
from tabhyper_update.values.policies import PollPolicy

manifest, url, state, when, part = sys.argv[1:6]
real_wait = UpdateRun.wait_part
real_submit = UpdateRun.submit

def wait_part(self, one, timeout):
    real_wait(self, one, timeout)
    if when == "applied" and one.update.part == int(part):
        os._exit(9)  # killed: no cleanup, no sign-out

def submit(self, one):
    real_submit(self, one)
    if when == "submitted" and one.update.part == int(part):
        os._exit(9)

UpdateRun.wait_part = wait_part
UpdateRun.submit = submit
client = TableauClient(url, "", PersonalAccessToken("ci", "pat-secret"),
                       poll=PollPolicy(initial=0.01, maximum=0.05))
Payload.load(manifest).upload("Orders", client=client, progress=False, state_dir=state).apply(
    [Insert(target_table="Extract", source_table="Extract")])
sys.exit(0)
"""


def test_a_split_insert_killed_at_every_part_boundary_applies_every_row_once(
    spark: SparkSession, split_payloads: tuple[Path, Payload], start_file: Path, tmp_path: Path
) -> None:
    manifest, rebuilt = split_payloads
    n_parts = len(rebuilt.parts)
    assert n_parts >= 3
    insert = [Insert(target_table="Extract", source_table="Extract")]
    expected = [(1, "x", "y")] + [
        (i, hashlib.sha256(str(i).encode()).hexdigest(), None if i % 3 == 0 else "b")
        for i in range(1000, 1000 + N_ROWS)
    ]
    kills = [("applied", k) for k in range(n_parts - 1)] + [("submitted", n_parts - 1)]
    for when, part in kills:
        with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
            server.add_datasource("Orders", start_file)
            state = tmp_path / f"state-{when}-{part}"
            args = (str(manifest), server.url, str(state), when, str(part))
            done = subprocess.run(
                [sys.executable, "-c", KILL_SCRIPT, *args],
                timeout=120,
                check=False,
                capture_output=True,
                text=True,
            )
            assert done.returncode == 9, done.stderr
            server.wait_idle()
            applied_before = sum(server.jobs_run.values())
            assert applied_before == part + 1
            with client_for(server) as client:
                result = rebuilt.upload(
                    "Orders", client=client, progress=False, state_dir=state
                ).apply(insert)
            server.wait_idle()
            assert rows(server) == expected, (when, part)
            assert sum(server.jobs_run.values()) == n_parts  # every part exactly once
            skipped = [p.part for p in result.parts if p.skipped]
            resumed = [p.part for p in result.parts if p.resumed]
            if when == "applied":
                assert skipped == list(range(part + 1))
            else:
                assert skipped == list(range(part))
                assert resumed == [part]
            assert StateStore(state).records() == []  # the run finished: its record went


def test_a_later_part_refused_as_it_is_sent_says_which_parts_were_applied(
    split_payloads: tuple[Path, Payload], start_file: Path, tmp_path: Path
) -> None:
    """A failure at any step of the run (here the second part's update request, refused)
    says how far the update got."""
    manifest, _ = split_payloads
    insert = [Insert(target_table="Extract", source_table="Extract")]
    with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
        server.add_datasource("Orders", start_file)
        server.inject("update", nth=2, status=400, code="400000")
        with client_for(server) as client:
            payload = Payload.load(manifest)
            n = len(payload.parts)
            assert n > 1
            with pytest.raises(ApiError) as caught:
                payload.upload("Orders", client=client, progress=False, state_dir=tmp_path).apply(
                    insert
                )
        assert caught.value.progress is not None
        assert caught.value.progress.applied_parts == [1]
        assert f"Part 1 of {n} was applied" in str(caught.value)
        assert "resumes at part 2" in str(caught.value)
        assert server.jobs_run  # the first part's job ran


def test_a_later_part_that_fails_says_which_parts_were_applied_and_the_rerun_resumes(
    split_payloads: tuple[Path, Payload], start_file: Path, tmp_path: Path
) -> None:
    manifest, _ = split_payloads
    insert = [Insert(target_table="Extract", source_table="Extract")]
    with FakeTableauServer(pats={"ci": "pat-secret"}, job_delay=0.3) as server:
        server.add_datasource("Orders", start_file)
        with client_for(server) as client:
            first = (
                Payload.load(manifest)
                .upload("Orders", client=client, progress=False, state_dir=tmp_path)
                .apply(insert, wait=False)  # every part but the last waited for
            )
            n = len(first.parts)
            last = first.parts[-1].job
            assert last is not None
            last.cancel()
            with pytest.raises(JobCancelledError) as caught:
                first.wait()
            jobs = ", ".join(str(p.job_id) for p in first.parts[:-1])
            text = str(caught.value)
            assert f"Parts 1-{n - 1} of {n} were applied (jobs {jobs}) and stay applied" in text
            assert f"part {n} was not (part {n} failed)" in text
            assert f"resumes at part {n}" in text
            assert "nothing was applied" not in text.lower()
            assert caught.value.progress is not None
            assert caught.value.progress.applied_parts == list(range(1, n))
            assert first.applied_parts == list(range(1, n))  # the result says the same
            again = (
                Payload.load(manifest)
                .upload("Orders", client=client, progress=False, state_dir=tmp_path)
                .apply(insert)
            )
        assert [p.part for p in again.parts if p.skipped] == list(range(n - 1))
        assert len(rows(server)) == len(START) + N_ROWS  # every row once


def test_a_first_part_that_fails_says_no_part_was_applied(
    split_payloads: tuple[Path, Payload], start_file: Path, tmp_path: Path
) -> None:
    manifest, _ = split_payloads
    with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
        server.add_datasource("Orders", start_file)
        server.inject("update", status=400, code="400000")
        with client_for(server) as client, pytest.raises(ApiError) as caught:
            Payload.load(manifest).upload(
                "Orders", client=client, progress=False, state_dir=tmp_path
            ).apply([Insert(target_table="Extract", source_table="Extract")])
        assert rows(server) == [(1, "x", "y")]
    assert "No part of this update was applied" in str(caught.value)


# -- 6. records that used to block for ever ------------------------------------------------


def test_a_cancelled_job_is_submitted_again_on_the_next_run(
    spark: SparkSession, start_file: Path, tmp_path: Path
) -> None:
    with FakeTableauServer(pats={"ci": "pat-secret"}, job_delay=0.5) as server:
        server.add_datasource("Orders", start_file)
        with client_for(server) as client:
            changes = [(1, "cancelled-then-applied", None, "U", 1)]
            first = (
                cdc(spark, changes)
                .upload("Orders", client=client, progress=False, state_dir=tmp_path)
                .apply(wait=False)
            )
            (job,) = first.jobs
            job.cancel()
            with pytest.raises(JobCancelledError, match="nothing of this part was applied"):
                first.wait()
            assert rows(server) == [(1, "x", "y")]
            again = run_cdc(spark, client, tmp_path, changes)
        assert again.parts[0].attempt == 1
        assert not again.deduplicated
        assert rows(server) == [(1, "cancelled-then-applied", None)]


def test_without_the_record_an_earlier_cancelled_attempt_is_recognised_and_retried(
    spark: SparkSession, start_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "tabhyper_update")
    with FakeTableauServer(pats={"ci": "pat-secret"}, job_delay=0.5) as server:
        server.add_datasource("Orders", start_file)
        changes = [(1, "second-machine", None, "U", 1)]
        with client_for(server) as client:
            first = (
                cdc(spark, changes)
                .upload("Orders", client=client, progress=False, state_dir=tmp_path / "a")
                .apply(wait=False)
            )
            first.jobs[0].cancel()
            server.wait_idle()
            server.age_jobs(600)
            again = run_cdc(spark, client, tmp_path / "b", changes)  # another machine
        assert again.parts[0].attempt == 1
        assert rows(server) == [(1, "second-machine", None)]
        assert "applied nothing; submitting the part again as attempt 2" in caplog.text


def test_a_failed_job_is_submitted_again_once_the_cause_is_gone(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    changes = [(9, "late", None, "I", 1)]
    payload = cdc(spark, changes)
    bad = payload.upload("Orders", client=client, progress=False, state_dir=tmp_path)
    with pytest.raises(JobFailedError, match="Specified table does not exist"):
        bad.apply([Insert(target_table="Missing", source_table="upserts")], request_id="slice-9")
    # The same position, right actions: the failed attempt applied nothing, so it runs.
    result = (
        cdc(spark, changes)
        .upload("Orders", client=client, progress=False, state_dir=tmp_path)
        .apply([Insert(target_table="Extract", source_table="upserts")], request_id="slice-9")
    )
    scoped = scoped_request_id("slice-9", client.datasource("Orders"))
    assert result.parts[0].request_id == f"{scoped}-attempt-2"
    assert rows(server)[-1] == (9, "late", None)
    payload.cleanup()


def test_a_change_set_whose_job_the_server_forgot_is_submitted_again(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    changes = [(1, "again", None, "U", 1)]
    cdc(spark, changes).upload("Orders", client=client, progress=False, state_dir=tmp_path).apply(
        wait=False
    )
    server.wait_idle()
    assert server.forget_jobs() == 1
    result = run_cdc(spark, client, tmp_path, changes)
    assert "no longer known to the server" in caplog.text
    assert result.jobs[0].succeeded
    assert rows(server) == [(1, "again", None)]


def test_an_insert_whose_job_the_server_forgot_says_how_to_resolve_it(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    df = spark.createDataFrame([(8, "h", None)], "id long, a string, b string")
    insert = [Insert(target_table="Extract", source_table="Extract")]
    build_payload(df).upload("Orders", client=client, progress=False, state_dir=tmp_path).apply(
        insert, wait=False
    )
    server.wait_idle()
    server.forget_jobs()
    before = dict(server.counts)
    with pytest.raises(UpdateStateError, match="tabhyper-update state clear") as caught:
        build_payload(df).upload("Orders", client=client, progress=False, state_dir=tmp_path).apply(
            insert
        )
    assert "add its rows twice" in str(caught.value)
    assert server.counts["update"] == before["update"]
    assert rows(server) == [(1, "x", "y"), (8, "h", None)]  # applied once, not twice
    # Resolved as the message says: forget the record; the next run is a new update.
    assert StateStore(tmp_path).clear() == 1


def test_distinct_request_ids_never_share_a_record(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    insert = [Insert(target_table="Extract", source_table="Extract")]
    orders = client.datasource("Orders")
    for rid, row in (("nightly:1", (11, "colon", None)), ("nightly/1", (12, "slash", None))):
        df = spark.createDataFrame([row], "id long, a string, b string")
        result = (
            build_payload(df)
            .upload("Orders", client=client, progress=False, state_dir=tmp_path)
            .apply(insert, request_id=rid)
        )
        assert result.parts[0].request_id == scoped_request_id(rid, orders)
        assert not result.deduplicated
    assert rows(server)[1:] == [(11, "colon", None), (12, "slash", None)]
    records = StateStore(tmp_path).records()
    assert sorted(r.identity for r in records) == [
        scoped_request_id("nightly/1", orders),
        scoped_request_id("nightly:1", orders),
    ]
    # A request id is the caller's position: running it again sends nothing.
    df = spark.createDataFrame([(11, "colon", None)], "id long, a string, b string")
    again = (
        build_payload(df)
        .upload("Orders", client=client, progress=False, state_dir=tmp_path)
        .apply(insert, request_id="nightly:1")
    )
    assert again.deduplicated
    assert len(rows(server)) == 3
    # ...even with other rows (a position already applied); the result reports what was.
    nightly = scoped_request_id("nightly:1", orders)
    first_job = next(r for r in records if r.identity == nightly).parts[0].job_id
    other = spark.createDataFrame([(13, "late", None)], "id long, a string, b string")
    before = {k: server.counts[k] for k in ("initiate", "append", "update")}
    replay = client.update_datasource(
        "Orders",
        build_payload(other),
        actions=insert,
        request_id="nightly:1",
        progress=False,
        state_dir=tmp_path,
    )
    assert replay.deduplicated
    assert [(p.request_id, p.job_id) for p in replay.parts] == [(nightly, first_job)]
    assert {k: server.counts[k] for k in before} == before  # no upload, no update
    assert len(rows(server)) == 3


# -- 7. the one-liner knows whether it worked ----------------------------------------------


def test_the_one_liner_raises_when_the_job_fails(
    spark: SparkSession, server: FakeTableauServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_environment(monkeypatch, server, tmp_path, "Orders")
    df = spark.createDataFrame([(3, "c", None)], "id long, a string, b string")
    with pytest.raises(JobFailedError, match="Missing"):
        build_payload(df).upload(progress=False).apply(
            [Insert(target_table="Missing", source_table="Extract")]
        )
    # ...and returns only once the update is applied.
    build_payload(df).upload(progress=False).apply(
        [Insert(target_table="Extract", source_table="Extract")]
    )
    assert rows(server)[-1] == (3, "c", None)


# -- a repeat the server's answer tells, and one it cannot ---------------------------------


def insert_seven(server: FakeTableauServer, client: TableauClient, state_dir: Path) -> UpdateResult:
    """An insert of row 7 under a fixed RequestID, from its own state folder."""
    file = make_hyper(
        state_dir.parent / f"{state_dir.name}.hyper",
        {"Extract": ("id BIGINT NOT NULL, a TEXT, b TEXT", ["(7, 'n', NULL)"])},
    )
    return (
        Payload.from_hyper(file)
        .upload("Orders", client=client, progress=False, state_dir=state_dir)
        .apply([Insert(target_table="Extract", source_table="Extract")], request_id="insert-seven")
    )


def test_a_replay_seconds_later_from_a_fresh_state_folder_is_told_a_repeat(
    server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    """The server's answer dates the job it returns (``createdAt``) and itself (``Date``),
    both on its clock: a job older than its answer by more than the request took existed
    before the request, however far the two machines' clocks are apart."""
    first = insert_seven(server, client, tmp_path / "a")
    assert first.deduplicated is False
    server.age_jobs(3)  # the replay comes three seconds later, from another machine
    again = insert_seven(server, client, tmp_path / "b")
    assert again.deduplicated is True
    assert again.parts[0].job_id == first.parts[0].job_id
    assert sum(server.jobs_run.values()) == 1
    assert rows(server) == [(1, "x", "y"), (7, "n", None)]


def test_a_job_older_than_a_slow_answer_cannot_be_told_and_says_so() -> None:
    """Made before the answer by more than a second but within the time the exchange took
    (a slow answer, a retried one), the job may be this request's or an earlier one's:
    the part says it cannot tell (None), and so does the update."""
    from tabhyper_update.rest.jobs import Job
    from tabhyper_update.update.identity import predates_request
    from tabhyper_update.update.results import PartUpdate
    from tabhyper_update.values.actions import ActionBatch

    created = datetime(2027, 1, 15, 8, tzinfo=timezone.utc).timestamp()  # 08:00:00
    job = Job(id="j", createdAt="2027-01-15T08:00:00Z").answered("Fri, 15 Jan 2027 08:00:05 GMT")
    assert job.answered_at == created + 5
    # Four whole seconds older than its answer at least: before a 0.2 s exchange.
    assert predates_request(job, created + 0.5, 0.2) is True
    assert predates_request(job, created + 0.5, 10.0) is None  # a 10 s exchange
    assert predates_request(job, created + 0.5, None) is False  # an earlier run sent it
    fresh = Job(id="k", createdAt="2027-01-15T08:00:05Z").answered("Fri, 15 Jan 2027 08:00:06 GMT")
    assert predates_request(fresh, created + 5.0, 0.05) is False  # a second apart or less
    unanswered = Job(id="m", createdAt="2027-01-15T08:00:00Z")
    assert predates_request(unanswered, created + 5.0, 0.05) is False  # no Date: our clock
    assert predates_request(unanswered, created + 7.5, 0.05) is True  # beyond the skew

    def part(deduplicated: bool | None) -> PartUpdate:
        batch = ActionBatch(actions=[Insert(target_table="Extract", source_table="Extract")])
        return PartUpdate(0, "r", batch, deduplicated=deduplicated)

    result = UpdateResult([part(True), part(None)])
    assert result.deduplicated is None
    assert "cannot tell" in str(UpdateResult([part(None)], done=True))
    assert UpdateResult([part(None), part(False)]).deduplicated is False
    assert UpdateResult([part(True), part(True)]).deduplicated is True

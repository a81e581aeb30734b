"""What the SDK does where a deployment differs from the ideal server: a payload over the
update cap, a rate limit (429), a session ended by another sign-in with the same PAT, a data
source whose refresh is running (409093)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import ApiError, ChangeSet, Insert, build_payload
from tabhyper_update.rest import session as rest_session
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper

from ._util import PAT, client_for, read_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TARGET = "id BIGINT NOT NULL, amount BIGINT, name TEXT"


def changes(spark: SparkSession, rows: int, start: int = 0, seq: int = 1) -> DataFrame:
    return spark.range(start, start + rows).selectExpr(
        "id",
        "id * 3 AS amount",
        "sha2(CAST(id AS STRING), 256) AS name",
        "CASE WHEN id % 7 = 0 THEN 'D' ELSE 'U' END AS op",
        f"CAST({seq} AS BIGINT) AS seq",
    )


def expected(rows: int) -> list[tuple[object, ...]]:
    import hashlib

    return [
        (i, i * 3, hashlib.sha256(str(i).encode()).hexdigest()) for i in range(rows) if i % 7 != 0
    ]


@pytest.fixture
def start_file(tmp_path: Path) -> Path:
    return make_hyper(tmp_path / "start.hyper", {"Extract": (TARGET, [])})


def served(start: Path, **settings: object) -> FakeTableauServer:
    server = FakeTableauServer(pats={PAT[0]: PAT[1]}, **settings)  # type: ignore[arg-type]
    server.start()
    server.add_datasource("Orders", start)
    return server


@pytest.fixture
def small_cap(start_file: Path) -> Iterator[FakeTableauServer]:
    server = served(start_file, max_upload_mb=0.25)
    yield server
    server.stop()


def rows_of(server: FakeTableauServer) -> list[tuple[object, ...]]:
    (luid,) = server.backend.sources
    return read_rows(server.datasource_path(luid), "Extract")


# -- the update cap (413)
def test_a_part_over_the_cap_is_split_and_sent_again_applying_each_key_once(
    spark: SparkSession,
    tmp_path: Path,
    small_cap: FakeTableauServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    payload = build_payload(
        changes(spark, 20_000), ChangeSet("id", op_column="op", order_by="seq"), max_payload_mb=2
    )
    assert len(payload.parts) == 1
    assert payload.parts[0].size_bytes > 0.25 * 1024 * 1024
    with caplog.at_level(logging.WARNING), client_for(small_cap) as client:
        result = client.update_datasource(
            "Orders", payload, state_dir=tmp_path / "state", progress=False
        )
        assert client.update_cap_bytes is not None
    assert result.done
    assert len(result.parts) > 1
    assert all(
        p.size_bytes is not None and p.size_bytes <= 0.25 * 1024 * 1024 for p in result.parts
    )
    assert rows_of(small_cap) == expected(20_000)
    assert small_cap.counts["update"] == len(result.parts) + 1  # the refused one, then each
    assert "larger than its update cap" in caplog.text


def test_later_updates_are_split_before_they_are_sent_once_the_cap_is_known(
    spark: SparkSession, tmp_path: Path, small_cap: FakeTableauServer
) -> None:
    cs = ChangeSet("id", op_column="op", order_by="seq")
    with client_for(small_cap) as client:
        client.update_datasource(
            "Orders",
            build_payload(changes(spark, 20_000), cs, max_payload_mb=2),
            state_dir=tmp_path / "state",
            progress=False,
        )
        refused = small_cap.backend.limits  # noqa: F841 - the server object stays the same
        before = small_cap.counts["update"]
        second = client.update_datasource(
            "Orders",
            build_payload(changes(spark, 20_000, seq=2), cs, max_payload_mb=2),
            state_dir=tmp_path / "state",
            progress=False,
        )
    assert small_cap.counts["update"] - before == len(second.parts)  # none refused
    assert rows_of(small_cap) == expected(20_000)


def test_a_rerun_after_a_crash_mid_split_resumes_the_same_sub_parts(
    spark: SparkSession,
    tmp_path: Path,
    small_cap: FakeTableauServer,
) -> None:
    cs = ChangeSet("id", op_column="op", order_by="seq")
    small_cap.inject("update", nth=3, status=500, code="500000", times=100)
    with client_for(small_cap) as client, pytest.raises(ApiError):
        client.update_datasource(
            "Orders",
            build_payload(changes(spark, 20_000), cs, max_payload_mb=2),
            state_dir=tmp_path / "state",
            progress=False,
        )
    applied_first = sum(small_cap.jobs_run.values())
    assert applied_first == 1  # the refused part, then sub-part 1 applied, then a failure
    small_cap.clear_faults()
    with client_for(small_cap) as client:
        result = client.update_datasource(
            "Orders",
            build_payload(changes(spark, 20_000), cs, max_payload_mb=2),
            state_dir=tmp_path / "state",
            progress=False,
        )
    assert result.done
    assert [p.skipped for p in result.parts][:1] == [True]
    assert sum(small_cap.jobs_run.values()) == len(result.parts)  # no sub-part twice
    assert rows_of(small_cap) == expected(20_000)


def test_a_batch_that_cannot_be_split_says_so_and_applies_nothing(
    spark: SparkSession, tmp_path: Path, small_cap: FakeTableauServer
) -> None:
    from tabhyper_update import Replace

    rows = changes(spark, 20_000).drop("op", "seq")
    with client_for(small_cap) as client, pytest.raises(ApiError) as caught:
        client.update_datasource(
            "Orders",
            build_payload(rows, max_payload_mb=None),
            actions=[Replace(source_table="Extract", target_table="Extract")],
            state_dir=tmp_path / "state",
            progress=False,
        )
    assert caught.value.status == 413
    assert "nothing of it was applied" in str(caught.value)
    assert "max_payload_mb" in str(caught.value)
    assert sum(small_cap.jobs_run.values()) == 0


def test_inserts_over_the_cap_are_split_too(
    spark: SparkSession, tmp_path: Path, small_cap: FakeTableauServer
) -> None:
    rows = changes(spark, 20_000).drop("op", "seq")
    with client_for(small_cap) as client:
        result = client.update_datasource(
            "Orders",
            build_payload(rows, max_payload_mb=None),
            actions=[Insert(source_table="Extract", target_table="Extract")],
            state_dir=tmp_path / "state",
            progress=False,
        )
    assert result.done
    assert len(result.parts) > 1
    assert len(rows_of(small_cap)) == 20_000


# -- a running refresh (409093)
def test_an_update_waits_out_a_running_refresh(
    spark: SparkSession, tmp_path: Path, start_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = served(start_file)
    try:
        (luid,) = server.backend.sources
        # Built first: the refresh must still run when the update arrives, however long a
        # busy machine takes to build.
        payload = build_payload(changes(spark, 10), ChangeSet("id", op_column="op", order_by="seq"))
        server.start_refresh(luid, 1.5)
        with caplog.at_level(logging.WARNING), client_for(server) as client:
            result = client.update_datasource(
                "Orders", payload, state_dir=tmp_path / "state", progress=False
            )
        assert result.done
        assert server.counts["update"] >= 2  # refused while the refresh ran, then accepted
        assert sum(server.jobs_run.values()) == 1
        assert "409093" in caplog.text
        assert "busy" in caplog.text
        assert rows_of(server) == expected(10)
    finally:
        server.stop()


def test_a_refresh_that_outlasts_the_wait_fails_with_what_to_do(
    spark: SparkSession, tmp_path: Path, start_file: Path
) -> None:
    from tabhyper_update.values.policies import PollPolicy

    server = served(start_file)
    try:
        (luid,) = server.backend.sources
        server.start_refresh(luid, 60)
        poll = PollPolicy(initial=0.01, maximum=0.05, timeout=30, busy_timeout=0.5)
        with client_for(server, poll=poll) as client, pytest.raises(ApiError) as caught:
            client.update_datasource(
                "Orders",
                build_payload(changes(spark, 10), ChangeSet("id", op_column="op", order_by="seq")),
                state_dir=tmp_path / "state",
                progress=False,
            )
        assert caught.value.code == "409093"
        assert "busy" in str(caught.value)
        assert "busy_timeout" in str(caught.value)
        assert sum(server.jobs_run.values()) == 0
    finally:
        server.stop()


# -- rate limits (429)
def test_calls_over_the_rate_limit_are_retried_after_the_servers_wait(
    spark: SparkSession, tmp_path: Path, start_file: Path
) -> None:
    # An update makes more than 5 calls, well within 4 s even on a machine running two test
    # suites at once (1.5 s was not): at least one is refused and retried after the server's
    # wait.
    server = served(start_file, rest_calls_per_window=5, rate_window=4.0)
    try:
        with client_for(server) as client:
            result = client.update_datasource(
                "Orders",
                build_payload(changes(spark, 10), ChangeSet("id", op_column="op", order_by="seq")),
                state_dir=tmp_path / "state",
                progress=False,
            )
        assert result.done
        assert server.backend.limits.refused["calls"] >= 1, dict(server.counts)
        assert sum(server.jobs_run.values()) == 1
        assert rows_of(server) == expected(10)
    finally:
        server.stop()


def test_too_many_requests_at_once_are_retried(
    start_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    server = served(start_file, max_concurrent=1)
    try:
        find = server.backend.find_datasources

        def slow_find(*args: Any, **kwargs: Any) -> Any:
            time.sleep(0.2)  # a lookup holds its slot a while: the others find it taken
            return find(*args, **kwargs)

        monkeypatch.setattr(server.backend, "find_datasources", slow_find)
        errors: list[BaseException] = []

        def look() -> None:
            try:
                with client_for(server) as client:  # each its own session and lookup
                    assert client.datasource("Orders").name == "Orders"
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=look) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert server.backend.limits.refused["concurrent"] >= 1  # and were let through later
    finally:
        server.stop()


# -- one PAT, one session
def test_two_processes_sharing_a_pat_both_finish_and_are_warned(
    spark: SparkSession,
    tmp_path: Path,
    start_file: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two threads whose clients share nothing, as two processes' clients cannot.
    monkeypatch.setattr(rest_session, "shared_token", lambda *a: None)
    server = served(start_file)
    try:
        server.add_datasource("Returns", start_file)
        cs = ChangeSet("id", op_column="op", order_by="seq")
        payloads = {
            name: [build_payload(changes(spark, 50, start=i * 50, seq=i + 1), cs) for i in range(4)]
            for name in ("Orders", "Returns")
        }
        errors: list[BaseException] = []

        def run(name: str) -> None:
            try:
                with client_for(server) as client:
                    for payload in payloads[name]:
                        client.update_datasource(
                            name, payload, state_dir=tmp_path / name, progress=False
                        )
            except BaseException as err:
                errors.append(err)

        with caplog.at_level(logging.WARNING):
            threads = [threading.Thread(target=run, args=(n,)) for n in payloads]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        assert errors == []
        assert sorted(server.jobs_run.values()) == [4, 4]  # each update once, none lost
        assert "same personal access token" in caplog.text
    finally:
        server.stop()


# -- parts in flight
def test_the_next_part_uploads_during_the_previous_job_and_is_sent_after_it(
    spark: SparkSession, tmp_path: Path, start_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    server = served(start_file, job_seconds_per_mb=2.0)
    try:
        backend = server.backend
        appended: list[float] = []
        submitted: list[float] = []
        append, submit = backend.uploads.append, backend.submit_update

        def timed_append(*args: object, **kwargs: object) -> int:
            appended.append(time.time())
            return append(*args, **kwargs)  # type: ignore[arg-type]

        def timed_submit(*args: object, **kwargs: object) -> object:
            submitted.append(time.time())
            return submit(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(backend.uploads, "append", timed_append)
        monkeypatch.setattr(backend, "submit_update", timed_submit)
        payload = build_payload(
            changes(spark, 20_000),
            ChangeSet("id", op_column="op", order_by="seq"),
            max_payload_mb=0.3,
        )
        assert len(payload.parts) >= 3
        with client_for(server) as client:
            result = client.update_datasource(
                "Orders", payload, state_dir=tmp_path / "state", progress=False
            )
        assert result.done
        jobs = sorted(backend.jobs.values(), key=lambda j: j.began_at or 0)
        assert len(jobs) == len(payload.parts) == len(appended) == len(submitted)
        for n in range(1, len(jobs)):
            ended = jobs[n - 1].finished_at
            assert ended is not None
            assert appended[n] < ended  # uploaded while the job before it ran...
            assert submitted[n] >= ended  # ...and sent only once that job had finished
        assert rows_of(server) == expected(20_000)
    finally:
        server.stop()


def test_an_upload_made_ahead_that_fails_is_made_again_in_turn(
    spark: SparkSession, tmp_path: Path, start_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = served(start_file, job_seconds_per_mb=1.0)
    try:
        server.inject("append", nth=2, status=400, code="400000")  # the second part's upload
        payload = build_payload(
            changes(spark, 20_000),
            ChangeSet("id", op_column="op", order_by="seq"),
            max_payload_mb=0.3,
        )
        with caplog.at_level(logging.WARNING), client_for(server) as client:
            result = client.update_datasource(
                "Orders", payload, state_dir=tmp_path / "state", progress=False
            )
        assert result.done
        assert "uploading part ahead failed" in caplog.text
        assert sum(server.jobs_run.values()) == len(payload.parts)
        assert rows_of(server) == expected(20_000)
    finally:
        server.stop()


def test_a_users_hyper_file_split_for_the_cap_gets_no_file_beside_it(
    tmp_path: Path, small_cap: FakeTableauServer
) -> None:
    from tabhyper_update import Payload
    from tabhyper_update.local.hyper import connect

    mine = tmp_path / "mine"
    mine.mkdir()
    file = make_hyper(mine / "orders.hyper", {"Extract": (TARGET, [])})
    with connect(file) as conn:
        conn.execute_command(
            'INSERT INTO "Extract"."Extract" SELECT i, i * 3, md5(CAST(i AS TEXT)) '
            "FROM generate_series(0, 19999) s(i)"
        )
    before = file.read_bytes()
    with client_for(small_cap) as client:
        result = client.update_datasource(
            "Orders",
            Payload.from_hyper(file),
            actions=[Insert(source_table="Extract", target_table="Extract")],
            state_dir=tmp_path / "state",
            progress=False,
        )
    assert result.done
    assert len(result.parts) > 1  # split for the cap...
    assert sorted(p.name for p in mine.iterdir()) == ["orders.hyper"]  # ...nowhere near it
    assert file.read_bytes() == before
    assert len(rows_of(small_cap)) == 20_000

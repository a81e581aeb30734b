"""The one-line round trip against the fake server: Spark → payload → upload → apply → wait."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import (
    ChangeSet,
    ConfigurationError,
    Delete,
    Insert,
    JobFailedError,
    PersonalAccessToken,
    TableauClient,
    build_payload,
    target,
)
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.update.state import StateStore
from tabhyper_update.values.errors import InvalidActionBatchError, InvalidArgumentError
from tabhyper_update.values.policies import PollPolicy

from ._util import client_for, read_rows, use_environment

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The change sets of these tests: keyed on id, op in "op", ordered by "seq".
BY_ID = ChangeSet("id", op_column="op", order_by="seq")
# Data source "Orders" starts with conftest's ORDERS_ROWS: ids 1, 2, 3 as 'a' 10, 'b' 20, 'c' 30.


@pytest.fixture
def target_project() -> str:
    return "Sales"


def orders(server: FakeTableauServer) -> list[tuple[Any, ...]]:
    (luid,) = server.backend.sources
    return read_rows(server.datasource_path(luid), "Extract")


def changes(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    return spark.createDataFrame(rows, "id long, name string, qty int, op string, seq long")


CHANGES = [
    (2, "b2", 21, "U", 1),
    (2, "b3", 22, "U", 2),  # updated twice: the last wins
    (3, None, None, "D", 1),  # deleted
    (4, "d", 40, "I", 1),
    (4, None, None, "D", 2),
    (4, "d2", 41, "I", 3),  # re-inserted
    (5, "e", 50, "I", 1),
    (5, None, None, "D", 2),  # inserted then deleted
]
EXPECTED = [(1, "a", 10), (2, "b3", 22), (4, "d2", 41)]


def test_cdc_round_trip_with_derived_actions(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    payload = build_payload(changes(spark, CHANGES), BY_ID)
    result = (
        payload.upload("Orders", client=client, progress=False, state_dir=tmp_path / "state")
        .apply()
        .wait(timeout=60)
    )
    assert orders(server) == EXPECTED
    assert [j.succeeded for j in result.jobs] == [True]
    assert not payload.parts[0].path.exists()  # cleaned up after success
    # The change set's record stays, finished, so that a replay is recognised locally.
    (record,) = StateStore(tmp_path / "state").records()
    assert record.finished
    assert record.kind == "position"


def test_an_update_polls_near_the_time_the_last_updates_took(
    spark: SparkSession, server: FakeTableauServer, tmp_path: Path
) -> None:
    server.backend.job_delay = 0.2
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        time.sleep(seconds)

    with client_for(server, poll=PollPolicy(), sleep=sleep) as client:
        build_payload(changes(spark, CHANGES), BY_ID).upload(
            "Orders", client=client, progress=False, state_dir=tmp_path
        ).apply()
        # The first update of the data source: the usual doubling waits.
        assert sleeps[:2] == [0.05, 0.1]
        (luid,) = server.backend.sources
        expected = client.job_times.expected(luid)
        assert expected is not None
        assert expected >= 0.2
        sleeps.clear()
        more = [(1, "a2", 11, "U", 2), (6, "f", 60, "I", 1)]
        build_payload(changes(spark, more), BY_ID).upload(
            "Orders", client=client, progress=False, state_dir=tmp_path
        ).apply()
        # The next one first polls just before the time the first took (0.95 of it).
        assert sleeps[0] == pytest.approx(expected * 0.95)
        assert client.job_times.expected(luid) != expected
    assert orders(server) == [(1, "a2", 11), (2, "b3", 22), (4, "d2", 41), (6, "f", 60)]


def test_the_literal_one_line_with_the_environment(
    spark: SparkSession, server: FakeTableauServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_environment(monkeypatch, server, tmp_path, "Orders")
    df = spark.createDataFrame([(7, "g", 70)], "id long, name string, qty int")
    actions = [Insert(target_table="Extract", source_table="Extract")]
    build_payload(df).upload().apply(actions).wait()
    assert orders(server)[-1] == (7, "g", 70)


def test_a_payload_in_parts_is_applied_part_by_part(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    n = 20_000
    df = spark.range(100, 100 + n).selectExpr(
        "id", "uuid() AS name", "CAST(id % 7 AS INT) AS qty", "'U' AS op", "1L AS seq"
    )
    payload = build_payload(df, BY_ID, max_payload_mb=0.25)
    assert len(payload.parts) > 1
    result = (
        payload.upload("Orders", client=client, progress=False, state_dir=tmp_path)
        .apply()
        .wait(timeout=60)
    )
    assert len(result.parts) == len(payload.parts)
    assert all(j.succeeded for j in result.jobs)
    ids = [r[0] for r in orders(server)]
    assert ids == [1, 2, 3, *range(100, 100 + n)]
    assert server.counts["update"] == len(payload.parts)


def test_a_rerun_after_a_crash_waits_on_the_submitted_job(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    df = changes(spark, CHANGES)
    # First run: submitted, then the process "dies" before waiting.
    first = build_payload(df, BY_ID)
    first.upload("Orders", client=client, progress=False, state_dir=tmp_path).apply(wait=False)
    first.cleanup()
    # The re-run rebuilds the same change set: same content digest, same RequestID.
    again = build_payload(df, BY_ID)
    result = (
        again.upload("Orders", client=client, progress=False, state_dir=tmp_path)
        .apply()
        .wait(timeout=60)
    )
    assert result.parts[0].resumed
    assert server.counts["update"] == 1
    assert sum(server.jobs_run.values()) == 1
    assert orders(server) == EXPECTED


def test_without_the_record_the_request_id_still_deduplicates_and_says_so(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    df = changes(spark, CHANGES)
    first = (
        build_payload(df, BY_ID)
        .upload("Orders", client=client, progress=False, state_dir=tmp_path / "a")
        .apply()
    )
    assert not first.deduplicated
    server.age_jobs(600)  # the replay comes ten minutes later, from another machine
    again = (
        build_payload(df, BY_ID)
        .upload("Orders", client=client, progress=False, state_dir=tmp_path / "b")
        .apply()
    )
    assert server.counts["update"] == 2
    assert sum(server.jobs_run.values()) == 1  # the server ignored the repeated RequestID
    assert orders(server) == EXPECTED
    assert again.deduplicated
    assert again.parts[0].deduplicated
    assert again.parts[0].job_id == first.parts[0].job_id  # the original job
    assert "existed before this request" in caplog.text


def test_a_replay_with_the_record_is_skipped_without_a_request(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    df = changes(spark, CHANGES)
    build_payload(df, BY_ID).upload(
        "Orders", client=client, progress=False, state_dir=tmp_path
    ).apply()
    before = dict(server.counts)
    # The verb reads the record before anything is sent: no upload, no update.
    again = client.update_datasource(
        "Orders",
        build_payload(df, BY_ID),
        progress=False,
        state_dir=tmp_path,
    )
    assert again.deduplicated
    assert again.parts[0].skipped
    assert server.counts["update"] == before["update"]
    assert server.counts["initiate"] == before["initiate"]
    # The chain's upload() uploads before the actions are known; apply() then submits nothing.
    chained = (
        build_payload(df, BY_ID)
        .upload("Orders", client=client, progress=False, state_dir=tmp_path)
        .apply()
    )
    assert chained.deduplicated
    assert chained.parts[0].skipped
    assert server.counts["update"] == before["update"]
    assert server.counts["initiate"] == before["initiate"] + 1
    assert orders(server) == EXPECTED


def test_upload_uploads_the_first_part_before_it_returns(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    df = changes(spark, CHANGES)
    uploaded = build_payload(df, BY_ID).upload(
        "Orders", client=client, progress=False, state_dir=tmp_path
    )
    # The server has the file; nothing is applied yet.
    assert server.counts["initiate"] == 1
    assert server.counts["update"] == 0
    assert orders(server) == [(1, "a", 10), (2, "b", 20), (3, "c", 30)]
    result = uploaded.apply(target_table="Extract")
    assert server.counts["initiate"] == 1  # apply() used that upload
    assert result.parts[0].upload_session_id is not None
    assert orders(server) == EXPECTED


def test_an_upload_the_server_let_lapse_is_made_again(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    df = changes(spark, CHANGES)
    uploaded = build_payload(df, BY_ID).upload(
        "Orders", client=client, progress=False, state_dir=tmp_path
    )
    server.forget_uploads()  # the session expired between upload() and apply()
    with caplog.at_level(logging.WARNING, logger="tabhyper_update"):
        result = uploaded.apply()
    assert "no longer knows the upload" in caplog.text
    assert server.counts["initiate"] == 2
    assert server.counts["update"] == 2  # the refused request, then the one that ran
    assert result.done
    assert not result.deduplicated
    assert orders(server) == EXPECTED


def test_a_target_goes_with_derived_actions_only(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    plain = build_payload(spark.createDataFrame([(9, "z", 90)], "id long, name string, qty int"))
    with pytest.raises(InvalidArgumentError, match="target_table= choose the target"):
        client.update_datasource(
            "Orders",
            plain,
            actions=[Insert(target_table="Extract", source_table="Extract")],
            target_table="Orders",
            state_dir=tmp_path,
        )
    with pytest.raises(InvalidArgumentError, match="no actions to apply"):
        client.update_datasource("Orders", plain, target_table="Extract", state_dir=tmp_path)
    assert server.counts["initiate"] == server.counts["update"] == 0  # checked first
    df = changes(spark, CHANGES)
    with pytest.raises(JobFailedError, match="Elsewhere"):
        client.update_datasource(
            "Orders",
            build_payload(df, BY_ID),
            target_table="Elsewhere",
            progress=False,
            state_dir=tmp_path,
        )
    assert orders(server) == [(1, "a", 10), (2, "b", 20), (3, "c", 30)]


def test_an_empty_change_set_sends_nothing(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    df = changes(spark, [(1, "x", 1, "update_preimage", 1)])
    payload = build_payload(
        df, ChangeSet("id", op_column="op", order_by="seq", op_map={"update_preimage": "ignore"})
    )
    result = (
        payload.upload("Orders", client=client, progress=False, state_dir=tmp_path).apply().wait()
    )
    assert result.parts == []
    assert server.counts["update"] == 0
    assert server.counts["initiate"] == 0


def test_delete_by_constant_needs_no_upload(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    payload = build_payload(spark.createDataFrame([], "id long"))
    payload.upload("Orders", client=client, progress=False, state_dir=tmp_path).apply(
        [Delete(target_table="Extract", condition=target("qty") >= 20)]
    ).wait()
    assert orders(server) == [(1, "a", 10)]
    assert server.counts["initiate"] == 0


def test_a_failed_job_raises_with_notes_and_keeps_the_files(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    df = spark.createDataFrame([(9, "z", 90)], "id long, name string, qty int")
    payload = build_payload(df)
    with pytest.raises(JobFailedError, match="Specified table does not exist"):
        payload.upload("Orders", client=client, progress=False, state_dir=tmp_path).apply(
            [Insert(target_table="Nope", source_table="Extract")]
        ).wait()
    # The files stay for a local reproduction (README, Troubleshooting); nothing is pending.
    assert payload.parts[0].path.exists()
    assert StateStore(tmp_path).records() == []
    assert orders(server) == [(1, "a", 10), (2, "b", 20), (3, "c", 30)]
    payload.cleanup()


def test_a_batch_that_does_not_fit_the_payload_sends_nothing(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    payload = build_payload(spark.createDataFrame([(9, "z", 90)], "id long, name string, qty int"))
    uploaded = payload.upload("Orders", client=client, progress=False, state_dir=tmp_path)
    before = dict(server.counts)
    with pytest.raises(ValueError, match="the payload has no table 'nope'"):
        uploaded.apply([Insert(target_table="Extract", source_table="nope")])
    assert dict(server.counts) == before
    payload.cleanup()


def test_a_reference_carries_its_client_and_refuses_another(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TABLEAU_SERVER_URL", raising=False)
    df = spark.createDataFrame([(8, "h", 80)], "id long, name string, qty int")
    ref = client.datasource("Orders")
    assert repr(ref).startswith("DataSourceRef(id=")
    assert "client" not in repr(ref)
    insert = [Insert(target_table="Extract", source_table="Extract")]
    result = build_payload(df).upload(ref, progress=False, state_dir=tmp_path).apply(insert)
    assert orders(server)[-1] == (8, "h", 80)  # through the ref's client: no environment
    assert "_finish" not in repr(result)
    assert "part 1: job " in str(result)
    assert "(applied)" in str(result)
    (line,) = result.summary()
    assert line["succeeded"] is True
    assert set(line["seconds"]) == {"upload", "submit", "wait"}
    assert line["rows"] == {"Extract": 1}
    assert line["size_bytes"] == result.parts[0].size_bytes > 0
    assert "Extract 1 row," in str(result)
    with (
        TableauClient(server.url, "", PersonalAccessToken("ci", "pat-secret")) as other,
        pytest.raises(ConfigurationError, match="use one client for both"),
    ):
        build_payload(df).upload(ref, client=other, state_dir=tmp_path)
    with pytest.raises(ConfigurationError, match=r"pass client=TableauClient\(\.\.\.\)"):
        build_payload(df).upload("Orders", state_dir=tmp_path)


def test_update_datasource_is_the_verb_behind_the_chain(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    payload = build_payload(changes(spark, CHANGES), BY_ID)
    result = client.update_datasource("Orders", payload, progress=False, state_dir=tmp_path)
    assert result.done
    assert orders(server) == EXPECTED
    client.update_datasource(
        "Orders",
        actions=[Delete(target_table="Extract", condition=target("qty") > 30)],
        state_dir=tmp_path,
    )
    assert orders(server) == [(1, "a", 10), (2, "b3", 22)]


def test_the_chain_refuses_bad_actions_before_any_update_and_keeps_its_upload(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    df = spark.createDataFrame([(9, "z", 90)], "id long, name string, qty int")
    uploaded = build_payload(df).upload("Orders", client=client, progress=False, state_dir=tmp_path)
    with pytest.raises(InvalidActionBatchError, match="'nope'"):
        uploaded.apply([Insert(target_table="Extract", source_table="nope")])
    assert server.counts["update"] == 0
    uploaded.apply([Insert(target_table="Extract", source_table="Extract")])
    assert server.counts["initiate"] == 1  # the upload made by upload() served the update
    assert orders(server)[-1] == (9, "z", 90)

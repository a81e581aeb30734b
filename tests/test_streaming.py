"""The Structured Streaming sink against the fake server: real queries over a file source with
a checkpoint on disk, restarted, replayed and killed; after every step the published table
equals the source's state and the server ran each non-empty batch exactly once."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import ChangeSet, Insert, PersonalAccessToken, TableauClient, build_payload
from tabhyper_update.streaming import TableauSink
from tabhyper_update.streaming.sink import batch_request_id
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table
from tabhyper_update.values.errors import InvalidArgumentError

from ._streaming import (
    PAT,
    SCHEMA,
    START,
    TABLE_DDL,
    Change,
    expected_state,
    run_query,
    start_rows,
    uncommit_last,
    wait_for,
)
from ._streaming import write_batch as write

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CDC = ChangeSet("id", op_column="op", order_by="seq")
B1: list[Change] = [(1, "a1", 11, "U", 1), (4, "d", 40, "I", 2), (2, None, None, "D", 3)]
B2: list[Change] = [
    (1, "a", 10, "U", 4),
    (4, "d2", 41, "U", 5),
    (4, "d3", 42, "U", 6),
]  # 1 flips back
B3 = list(B1)  # the same rows as batch 1, positions included: still a new batch
B4: list[Change] = [
    (5, "e", 50, "I", 7),
    (5, None, None, "D", 8),
]  # nets out to a delete of a missing key


@dataclass
class Env:
    server: FakeTableauServer
    client: TableauClient
    root: Path

    @property
    def source(self) -> Path:
        return self.root / "in"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def ds_id(self) -> str:
        (luid,) = [d.id for d in self.server.backend.sources.values() if d.name == "Orders"]
        return luid

    def table(self, name: str = "Extract") -> list[tuple[Any, ...]]:
        return read_table(self.server.datasource_path(self.ds_id), name)

    @property
    def jobs_run(self) -> int:
        return self.server.backend.jobs_run[self.ds_id]

    def sink(self, **kwargs: Any) -> TableauSink:
        kwargs.setdefault("state_dir", self.state)
        changes = kwargs.pop("changes", CDC)
        return TableauSink("Orders", changes, client=self.client, **kwargs)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    with FakeTableauServer(pats=dict([PAT]), directory=tmp_path / "server") as server:
        server.add_datasource(
            "Orders",
            make_hyper(tmp_path / "start.hyper", {"Extract": (TABLE_DDL, start_rows())}),
        )
        with TableauClient(server.url, "", PersonalAccessToken(*PAT)) as client:
            yield Env(server, client, tmp_path)


@pytest.mark.every_spark
def test_each_batch_is_applied_once_in_order_and_a_repeat_of_earlier_rows_is_applied(
    spark: SparkSession, env: Env
) -> None:
    for i, batch in enumerate([B1, B2, B3, B4]):
        write(env.source, i, batch)
    run_query(spark, env.source, env.checkpoint, env.sink())
    assert env.table() == expected_state([B1, B2, B3, B4])
    # Batch 3 repeats batch 1 (and flips key 1 back): a new update. Batch 4 nets out to a
    # delete of a key the target lacks: still an update, applied.
    assert env.jobs_run == 4
    assert env.server.counts["update"] == 4


@pytest.mark.every_spark
def test_a_restart_from_the_checkpoint_runs_only_the_new_batches(
    spark: SparkSession, env: Env
) -> None:
    write(env.source, 0, B1)
    write(env.source, 1, B2)
    run_query(spark, env.source, env.checkpoint, env.sink())
    assert env.table() == expected_state([B1, B2])
    assert env.jobs_run == 2
    write(env.source, 2, B3)
    write(env.source, 3, B4)
    run_query(spark, env.source, env.checkpoint, env.sink())
    assert env.table() == expected_state([B1, B2, B3, B4])
    assert env.jobs_run == 4
    # Nothing new: the query runs no batch and the sink sends nothing.
    run_query(spark, env.source, env.checkpoint, env.sink())
    assert env.jobs_run == 4


def test_a_replayed_batch_is_skipped_by_the_sinks_record(
    spark: SparkSession, env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    write(env.source, 0, B1)
    write(env.source, 1, B2)
    run_query(spark, env.source, env.checkpoint, env.sink())
    updates, appends = env.server.counts["update"], env.server.counts["append"]
    replayed = uncommit_last(env.checkpoint)
    assert replayed == 1
    sink = env.sink()
    with caplog.at_level(logging.INFO, logger="tabhyper_update"):
        run_query(spark, env.source, env.checkpoint, sink)
    # Spark ran batch 1 again; the sink's record showed it applied: no upload, no update.
    assert sink.counts == {"applied": 0, "replayed": 1, "empty": 0}
    assert sink.last_result is not None
    assert sink.last_result.deduplicated
    assert env.server.counts["update"] == updates
    assert env.server.counts["append"] == appends
    assert env.jobs_run == 2
    assert env.table() == expected_state([B1, B2])
    assert any("batch 1" in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)


def test_a_replayed_batch_without_its_record_is_deduplicated_by_the_server(
    spark: SparkSession, env: Env
) -> None:
    write(env.source, 0, B1)
    write(env.source, 1, B2)
    run_query(spark, env.source, env.checkpoint, env.sink())
    uncommit_last(env.checkpoint)
    shutil.rmtree(env.state)  # the record is lost too (another machine, a wiped disk)
    env.server.age_jobs(60)  # the first run was a minute ago: the answer can be told
    sink = env.sink()
    run_query(spark, env.source, env.checkpoint, sink)
    assert sink.last_result is not None
    assert sink.last_result.deduplicated
    assert env.jobs_run == 2  # the server answered the same RequestID with its first job
    assert env.table() == expected_state([B1, B2])


@pytest.mark.parametrize("state_kept", [True, False], ids=["state-kept", "state-gone"])
def test_a_checkpoint_reset_under_a_fixed_sink_id_applies_the_new_batches(
    spark: SparkSession, env: Env, state_kept: bool
) -> None:
    write(env.source, 0, B1)
    run_query(spark, env.source, env.checkpoint, env.sink(sink_id="orders"))
    if not state_kept:
        shutil.rmtree(env.state)  # a new machine, a cleaned container
    env.server.age_jobs(60)
    # A new checkpoint: batch ids start at 0 again, with other content.
    other = env.root / "other"
    write(other, 0, B2)
    # The new query declares that it replaces the first (the sink id's claim says whose it
    # is while the state folder lasts).
    sink = env.sink(sink_id="orders", reset=state_kept)
    run_query(spark, other, env.root / "checkpoint-2", sink)
    assert sink.counts == {"applied": 1, "replayed": 0, "empty": 0}
    assert env.table() == expected_state([B1, B2])
    assert env.jobs_run == 2
    # ...while a true replay of that new batch is still recognised.
    uncommit_last(env.root / "checkpoint-2")
    again = env.sink(sink_id="orders", reset=state_kept)
    run_query(spark, other, env.root / "checkpoint-2", again)
    assert again.counts == {"applied": 0, "replayed": 1, "empty": 0}
    assert env.jobs_run == 2


def test_a_second_query_with_the_same_sink_id_is_refused_before_its_first_batch(
    spark: SparkSession, env: Env
) -> None:
    write(env.source, 0, B1)
    run_query(spark, env.source, env.checkpoint, env.sink(sink_id="orders"))
    assert env.jobs_run == 1
    # Another query (its own checkpoint) whose first batch holds the very same rows.
    other = env.root / "other"
    write(other, 0, B1)
    updates = env.server.counts["update"]
    with pytest.raises(Exception, match="sink id 'orders' belongs to streaming query"):
        run_query(spark, other, env.root / "checkpoint-2", env.sink(sink_id="orders"))
    assert env.server.counts["update"] == updates  # nothing sent
    # Declared as the replacement, its batch is its own: applied, not taken for a replay.
    sink = env.sink(sink_id="orders", reset=True)
    run_query(spark, other, env.root / "checkpoint-2", sink)
    assert sink.counts == {"applied": 1, "replayed": 0, "empty": 0}
    assert env.jobs_run == 2
    assert env.table() == expected_state([B1, B1])


def test_without_its_state_folder_a_reused_sink_id_still_loses_no_batch(
    spark: SparkSession, env: Env
) -> None:
    write(env.source, 0, B1)
    run_query(spark, env.source, env.checkpoint, env.sink(sink_id="orders"))
    shutil.rmtree(env.state)  # no claim, no record: only the RequestID can tell
    env.server.age_jobs(60)
    other = env.root / "other"
    write(other, 0, B1)  # equal rows at the same batch id, from another query
    sink = env.sink(sink_id="orders")
    run_query(spark, other, env.root / "checkpoint-2", sink)
    assert sink.counts == {"applied": 1, "replayed": 0, "empty": 0}
    assert env.jobs_run == 2


def test_a_failed_update_fails_the_batch_and_a_restart_retries_it(
    spark: SparkSession, env: Env
) -> None:
    write(env.source, 0, B1)
    write(env.source, 1, B2)
    env.server.inject("update", nth=2, status=400, code="400999")
    with pytest.raises(Exception, match="400999"):
        run_query(spark, env.source, env.checkpoint, env.sink())
    assert env.table() == expected_state([B1])
    env.server.clear_faults()
    run_query(spark, env.source, env.checkpoint, env.sink())
    assert env.table() == expected_state([B1, B2])
    assert env.jobs_run == 2


def test_the_request_id_is_the_query_the_batch_and_its_content(
    spark: SparkSession, env: Env
) -> None:
    write(env.source, 0, B1)
    sink = env.sink()
    query = run_query(spark, env.source, env.checkpoint, sink)
    assert sink.last_result is not None
    (rid,) = [p.request_id for p in sink.last_result.parts]
    with build_payload(spark.read.schema(SCHEMA).json(str(env.source)), CDC) as payload:
        digest = payload.digest  # the batch's content, built again
    assert rid.startswith(batch_request_id(str(query.id), 0, digest) + "@")
    assert rid in env.server.backend.request_ids


def test_empty_batches_send_nothing(spark: SparkSession, env: Env) -> None:
    # Changes that the op map ignores, in a batch of their own: no payload, no request.
    ignored = ChangeSet("id", op_column="op", order_by="seq", op_map={"U": "upsert", "X": "ignore"})
    write(env.source, 0, [(1, "z", 1, "X", 1), (2, "z", 2, "X", 2)])
    write(env.source, 1, [(1, "a9", 19, "U", 3)])
    sink = env.sink(changes=ignored)
    run_query(spark, env.source, env.checkpoint, sink)
    assert sink.counts == {"applied": 1, "replayed": 0, "empty": 1}
    assert env.server.counts["update"] == 1
    assert env.table()[0] == (1, "a9", 19)


def test_processing_time_trigger(spark: SparkSession, env: Env) -> None:
    write(env.source, 0, B1)
    sink = env.sink()
    query = (
        spark.readStream.schema("id BIGINT, name STRING, qty INT, op STRING, seq BIGINT")
        .json(str(env.source))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(env.checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: env.jobs_run == 1, 120, "the first batch")
        write(env.source, 1, B2)
        wait_for(lambda: env.jobs_run == 2, 120, "the second batch")
    finally:
        query.stop()
    assert query.exception() is None
    assert env.table() == expected_state([B1, B2])


def test_a_plain_stream_with_explicit_actions_appends(spark: SparkSession, env: Env) -> None:
    facts = [
        '{"id": 10, "name": "x", "qty": 1}',
        '{"id": 11, "name": "y", "qty": 2}',
    ]
    write(env.source, 0, facts)
    write(env.source, 1, ['{"id": 12, "name": "z", "qty": 3}'])
    sink = TableauSink(
        "Orders",
        client=env.client,
        actions=[Insert(source_table="Extract", target_table="Extract")],
        state_dir=env.state,
    )
    run_query(spark, env.source, env.checkpoint, sink, schema="id BIGINT, name STRING, qty INT")
    added = [(10, "x", 1), (11, "y", 2), (12, "z", 3)]
    assert env.table() == sorted([(k, n, q) for k, (n, q) in START.items()] + added)
    # A replayed append batch is not appended twice.
    uncommit_last(env.checkpoint)
    run_query(spark, env.source, env.checkpoint, sink, schema="id BIGINT, name STRING, qty INT")
    assert len(env.table()) == 6
    assert env.jobs_run == 2


def test_the_sink_refuses_bad_arguments_before_any_query(env: Env) -> None:
    with pytest.raises(InvalidArgumentError, match=r"changes= .* or actions="):
        TableauSink("Orders", client=env.client)
    with pytest.raises(InvalidArgumentError, match="not both"):
        TableauSink(
            "Orders", CDC, client=env.client, actions=[Insert(source_table="a", target_table="b")]
        )
    with pytest.raises(InvalidArgumentError, match="sink_id"):
        TableauSink("Orders", CDC, client=env.client, sink_id="has space")
    with pytest.raises(InvalidArgumentError, match="multi-table"):
        TableauSink("Orders", {"A": CDC, "B": CDC}, client=env.client, target_table="X")
    with pytest.raises(TypeError, match="ChangeSet or a Debezium"):
        TableauSink("Orders", {"A": "id"}, client=env.client)  # type: ignore[dict-item]
    assert env.server.counts["signin"] == 0


@pytest.mark.parametrize(
    "where",
    [
        "job running",
        # The lost answer is met in this process at every step by test_exactly_once's fault
        # matrix; killing a query's process there too is the long run's.
        pytest.param("update answer lost", marks=pytest.mark.slow),
    ],
)
def test_a_query_killed_mid_batch_resumes_without_applying_twice(
    spark: SparkSession, env: Env, where: str
) -> None:
    write(env.source, 0, B1)
    write(env.source, 1, B2)
    if where == "job running":
        env.server.backend.job_delay = 3.0  # the job waits: the child waits on it
    else:
        env.server.inject("update", nth=2, delay=8.0)  # applied, then no answer in time
    root = Path(__file__).resolve().parent.parent
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests._streaming",
            env.server.url,
            str(env.source),
            str(env.checkpoint),
            str(env.state),
        ],
        cwd=root,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wanted = 1 if where == "job running" else 2
        wait_for(lambda: env.server.counts["update"] >= wanted, 240, "the child's update")
        if where == "update answer lost":
            wait_for(lambda: env.jobs_run == 2, 60, "the second batch's job")
    finally:
        # The child and its JVM: the process group this test started.
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    env.server.backend.job_delay = 0.0
    env.server.clear_faults()
    run_query(spark, env.source, env.checkpoint, env.sink())
    env.server.wait_idle()
    assert env.table() == expected_state([B1, B2])
    assert env.jobs_run == 2


def test_the_ordinary_idiom_gets_the_sdks_error_where_the_sink_is_made(
    spark: SparkSession, env: Env
) -> None:
    from tabhyper_update import NotFoundError

    changes = ChangeSet("id", op_column="op", order_by="seq")
    # df.writeStream.foreachBatch(TableauSink(...)).start(): the sink is made first, and a
    # data source that does not exist is the SDK's NotFoundError there, before any batch.
    with pytest.raises(NotFoundError, match="Nowhere"):
        TableauSink("Nowhere", changes, client=env.client, state_dir=env.state)
    # Made offline: no request at all; its first batch then fails with the same error.
    env.server.counts.clear()
    offline = TableauSink("Nowhere", changes, client=env.client, check=False)
    assert sum(env.server.counts.values()) == 0
    write(env.source, 0, [(9, "x", 1, "U", 1)])
    from pyspark.errors import StreamingQueryException

    with pytest.raises(StreamingQueryException, match="Nowhere"):
        run_query(spark, env.source, env.checkpoint, offline)
    # A sink made for a data source that exists runs as ever.
    sink = TableauSink("Orders", changes, client=env.client, state_dir=env.state)
    run_query(spark, env.source, env.checkpoint.with_name("again"), sink)
    assert (9, "x", 1) in env.table()

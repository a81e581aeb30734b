"""Spark's changelog (``spark.read.changes``, DSv2 ``Changelog``) and Iceberg's changelog
view, as their producers write them: recognised by their columns, with no ``op_column=`` or
``order_by=`` to pass. Within one commit a key's delete and insert are one update (the
insert's row wins); a carry-over (a delete and an insert of equal rows, a row a commit rewrote
unchanged) is no change; any other tie in one commit is refused naming the key. Ranked by
Hyper (a small change set) and by Spark alike, in a batch and in a stream."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import ChangeSet, Payload, PayloadError, build_payload
from tabhyper_update.streaming import TableauSink
from tabhyper_update.testing.files import make_hyper, read_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from tabhyper_update import TableauClient
    from tabhyper_update.testing import FakeTableauServer
    from tabhyper_update.types import StagingMode

#: Spark's changelog of a table whose updates are written as a delete and an insert
#: (``Changelog.representsUpdateAsDeleteAndInsert``, Iceberg's copy-on-write) and that was
#: read without deduplication: commit 2 updates key 1, rewrites key 2 unchanged (a
#: carry-over) and deletes key 3; commit 3 rewrites key 1 unchanged again.
SPARK = [
    (1, "a", "insert", 1),
    (2, "b", "insert", 1),
    (3, "c", "insert", 1),
    (1, "a", "delete", 2),
    (1, "a2", "insert", 2),
    (2, "b", "delete", 2),
    (2, "b", "insert", 2),
    (3, "c", "delete", 2),
    (1, "a2", "delete", 3),
    (1, "a2", "insert", 3),
]
SPARK_DDL = (
    "id BIGINT, v STRING, _change_type STRING, _commit_version BIGINT, _commit_timestamp TIMESTAMP"
)


def spark_changelog(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    stamped = [(*r, None) for r in rows]
    return spark.createDataFrame(stamped, SPARK_DDL).selectExpr(
        "id",
        "v",
        "_change_type",
        "_commit_version",
        "timestamp_seconds(1714554000 + _commit_version) AS _commit_timestamp",
    )


def tables(df: DataFrame, **options: Any) -> dict[str, list[tuple[Any, ...]]]:
    with build_payload(df, ChangeSet("id"), **options) as payload:
        found: dict[str, list[tuple[Any, ...]]] = {"upserts": [], "deletes": []}
        for part in payload.parts:
            for name in part.tables:
                found[name] += read_table(part.path, name)
        return {k: sorted(v) for k, v in found.items()}


@pytest.mark.parametrize("staging", ["auto", "shared"], ids=["hyper-ranks", "spark-ranks"])
def test_a_commits_delete_and_insert_are_one_update_and_a_carry_over_none(
    spark: SparkSession, tmp_path: Path, staging: str
) -> None:
    got = tables(spark_changelog(spark, SPARK), staging=staging, staging_dir=tmp_path)
    assert got == {"upserts": [(1, "a2"), (2, "b")], "deletes": [(3,)]}
    # A batch holding only carry-overs changes nothing.
    only = [r for r in SPARK if r[0] == 2 and r[3] == 2]
    assert tables(spark_changelog(spark, only), staging=staging, staging_dir=tmp_path) == {
        "upserts": [],
        "deletes": [],
    }


@pytest.mark.parametrize("staging", ["auto", "shared"], ids=["hyper-ranks", "spark-ranks"])
def test_two_inserts_of_a_key_in_one_commit_are_refused_naming_it(
    spark: SparkSession, tmp_path: Path, staging: str
) -> None:
    rows = [*SPARK, (4, "d", "insert", 4), (4, "d2", "insert", 4)]
    with pytest.raises(PayloadError, match=r"key \(id=4\)"):
        tables(spark_changelog(spark, rows), staging=staging, staging_dir=tmp_path)


def test_other_feeds_still_refuse_a_delete_and_an_upsert_at_one_position(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Outside a commit's changelog (a plain op column), a delete and an upsert of one key
    at one position cannot be told apart: refused, as before."""
    df = spark.createDataFrame(
        [(1, "a", "D", 5), (1, "b", "U", 5)], "id long, v string, op string, seq long"
    )
    with (
        pytest.raises(PayloadError, match=r"key \(id=1\)"),
        build_payload(df, ChangeSet("id", op_column="op", order_by="seq")),
    ):
        pass


def test_spark_changelog_with_computed_updates_and_net_changes(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``computeUpdates``: an update is a pre- and a post-image; ``NET_CHANGES``: one row per
    key for the whole range. Both as Delta's feed."""
    computed = [
        (1, "a", "insert", 1),
        (1, "a", "update_preimage", 2),
        (1, "a2", "update_postimage", 2),
        (2, "b", "insert", 1),
        (2, "b", "delete", 3),
    ]
    assert tables(spark_changelog(spark, computed), staging_dir=tmp_path) == {
        "upserts": [(1, "a2")],
        "deletes": [(2,)],
    }
    net = [(1, "a2", "insert", 2), (2, "b", "delete", 3)]
    assert tables(spark_changelog(spark, net), staging_dir=tmp_path) == {
        "upserts": [(1, "a2")],
        "deletes": [(2,)],
    }


#: Iceberg's ``create_changelog_view``: upper-case change types, the order of each change's
#: snapshot within the range in ``_change_ordinal``, the snapshot in ``_commit_snapshot_id``.
ICEBERG = [
    (1, "a", "INSERT", 0, 8_744_736_658_442_914_487),
    (2, "b", "INSERT", 0, 8_744_736_658_442_914_487),
    (1, "a", "UPDATE_BEFORE", 1, 3_076_514_290_142_431_011),
    (1, "a2", "UPDATE_AFTER", 1, 3_076_514_290_142_431_011),
    (2, "b", "DELETE", 2, 5_781_947_118_336_215_154),
    (3, "c", "DELETE", 2, 5_781_947_118_336_215_154),
    (3, "c2", "INSERT", 2, 5_781_947_118_336_215_154),
]


@pytest.mark.parametrize("staging", ["auto", "shared"], ids=["hyper-ranks", "spark-ranks"])
def test_icebergs_changelog_view_needs_no_op_or_order(
    spark: SparkSession, tmp_path: Path, staging: str
) -> None:
    df = spark.createDataFrame(
        ICEBERG,
        "id BIGINT, v STRING, _change_type STRING, _change_ordinal INT, _commit_snapshot_id BIGINT",
    )
    got = tables(df, staging=staging, staging_dir=tmp_path)
    assert got == {"upserts": [(1, "a2"), (3, "c2")], "deletes": [(2,)]}


@pytest.fixture
def target_file(tmp_path: Path) -> Path:
    (tmp_path / "start").mkdir()
    return make_hyper(
        tmp_path / "start" / "orders.hyper",
        {"Extract": ("id BIGINT NOT NULL, v TEXT", ["(1, 'old')", "(2, 'b')", "(3, 'c')"])},
    )


@pytest.mark.parametrize("staging", ["auto", "shared"], ids=["hyper-ranks", "spark-ranks"])
def test_the_feeds_latest_commit_time_is_the_updates_committed_at(
    spark: SparkSession, client: TableauClient, tmp_path: Path, staging: StagingMode
) -> None:
    """A change feed that says when its source committed (``_commit_timestamp``) gives the
    update its ``committed_at`` (the latest commit's), and the metrics their lag, without
    ``committed_at=``; a saved payload keeps it; one given to ``apply()`` wins."""
    latest = 1714554000 + 3  # commit 3's timestamp
    stage = tmp_path / "stage"
    stage.mkdir()
    df = spark_changelog(spark, SPARK)
    with build_payload(df, ChangeSet("id"), staging=staging, staging_dir=stage) as payload:
        assert payload.committed_at == latest
        with Payload.load(payload.save_manifest(tmp_path / "saved")) as again:
            assert again.committed_at == latest
            given = again.upload("Orders", client=client).apply(
                target_table="Extract", committed_at=1_800_000_000.0, request_id="given"
            )
        result = payload.upload("Orders", client=client).apply(target_table="Extract")
    assert given.metrics()["committed_at"] == 1_800_000_000.0
    got = result.metrics()
    assert got["committed_at"] == latest
    assert result.finished_at is not None
    assert got["lag_seconds"] == pytest.approx(result.finished_at - latest, abs=0.01)
    assert got["position"] == {"_commit_version": 3}
    # A feed without commit times has none to give.
    plain = df.drop("_commit_timestamp")
    with build_payload(plain, ChangeSet("id"), staging=staging, staging_dir=stage) as payload:
        assert payload.committed_at is None


def test_a_streamed_changelog_through_the_sink(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``readStream.changes`` through ``TableauSink``: each micro-batch a commit range,
    its metrics' commit time the batch's latest commit's."""
    folder = tmp_path / "in"
    folder.mkdir()
    for n, commit in enumerate([SPARK[:3], SPARK[3:8], SPARK[8:]]):
        rows = [
            {
                "id": i,
                "v": v,
                "_change_type": t,
                "_commit_version": c,
                "_commit_timestamp": f"2024-05-01T09:00:0{c}Z",
            }
            for i, v, t, c in commit
        ]
        file = folder / f"{n}.json"
        file.write_text("\n".join(json.dumps(r) for r in rows))
        # One file per micro-batch, in commit order (the stream takes the oldest first).
        os.utime(file, (1_700_000_000 + n, 1_700_000_000 + n))
    stream = spark.readStream.schema(SPARK_DDL).option("maxFilesPerTrigger", 1).json(str(folder))
    sink = TableauSink(
        "Orders",
        ChangeSet("id"),
        client=client,
        target_table="Extract",
        state_dir=tmp_path / "state",
        sink_id="changelog",
    )
    query = sink.start(
        stream.writeStream.option("checkpointLocation", str(tmp_path / "cp")).trigger(
            availableNow=True
        )
    )
    with caplog.at_level(logging.INFO, logger="tabhyper_update.metrics"):
        sink.await_termination(query, timeout=240)
    server.wait_idle()
    (luid,) = [d.id for d in server.backend.sources.values() if d.name == "Orders"]
    assert sorted(read_table(server.datasource_path(luid), "Extract")) == [(1, "a2"), (2, "b")]
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name.endswith("metrics")]
    # 2024-05-01T09:00:0cZ is 1714554000 + c: commits 1 and 2 end the first two batches;
    # the third (commit 3, a carry-over only) changes nothing and sends nothing.
    assert [line["committed_at"] for line in lines] == [1714554001, 1714554002]

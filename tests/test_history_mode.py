"""History mode (``ChangeSet(history=...)``): every change of a key kept as a version with the
span it was valid, over batches, crashes and re-runs, checked against a model of the source;
refused where no probe showed the server keeping the columns an update leaves out."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from tabhyper_update import ChangeSet, build_payload
from tabhyper_update.errors import ConfigurationError, OutOfOrderError, PayloadError
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table
from tabhyper_update.types import History, SoftDelete

from ._util import PAT, RERUN_CRASHES, client_for, update_after_a_crash

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HISTORY_DDL = (
    "id BIGINT NOT NULL, name TEXT, qty INTEGER, "
    "_valid_from BIGINT, _valid_to BIGINT, _is_current BOOLEAN"
)
CHANGES = "id long, name string, qty int, op string, seq long"
Change = tuple[int, str | None, int | None, str, int]

#: Four deliveries: a key changed several times in one, deleted and inserted again, a
#: delete that ends a version made in the same delivery, changes out of order within one.
BATCHES: list[list[Change]] = [
    [(1, "a", 1, "I", 1), (1, "b", 2, "U", 2), (2, "x", 3, "I", 3), (2, None, None, "D", 4)],
    [(1, "d", 4, "U", 7), (2, "y", 1, "I", 8), (3, "z", 1, "I", 6), (1, "c", 3, "U", 5)],
    [
        (1, None, None, "D", 9),
        (3, "z2", 2, "U", 10),
        (3, None, None, "D", 11),
        (3, "z3", 3, "I", 12),
    ],
    [(1, "e", 5, "I", 13), (2, "y2", None, "U", 14)],
]


def history_model(changes: list[Change]) -> list[tuple[Any, ...]]:
    """Every version of every key: (id, name, qty, valid from, valid to, current)."""
    versions: list[list[Any]] = []
    current: dict[int, list[Any]] = {}
    for key, name, qty, op, seq in sorted(changes, key=lambda c: c[4]):
        if key in current:
            current.pop(key)[4:6] = [seq, False]
        if op != "D":
            version = [key, name, qty, seq, None, True]
            versions.append(version)
            current[key] = version
    return sorted(tuple(v) for v in versions)


def start_file(tmp_path: Path, ddl: str = HISTORY_DDL) -> Path:
    return make_hyper(tmp_path / "start.hyper", {"Extract": (ddl, [])})


def rows(server: FakeTableauServer, luid: str) -> list[tuple[Any, ...]]:
    return sorted(read_table(server.datasource_path(luid), "Extract"))


@pytest.mark.parametrize("semantics", ["hyper", "strict"])
def test_a_history_over_four_deliveries_with_a_crash_in_each_matches_the_source(
    spark: SparkSession, tmp_path: Path, semantics: str
) -> None:
    state = tmp_path / "state"
    with FakeTableauServer(pats=dict([PAT]), semantics=semantics) as server:
        luid = server.add_datasource("Orders", start_file(tmp_path))
        server.remember_probe(state)
        seen: list[Change] = []
        for batch, crash in zip(BATCHES, RERUN_CRASHES, strict=True):
            df = spark.createDataFrame(batch, CHANGES)
            with build_payload(
                df, ChangeSet("id", op_column="op", order_by="seq", history=True)
            ) as payload:
                update_after_a_crash(server, payload, state, crash)
            seen += batch
            assert rows(server, luid) == history_model(seen)
        # The last delivery sent again as a new update (another state folder, a server that
        # forgot its RequestIDs: it runs the batch a second time) ends and writes nothing more.
        server.forget_jobs()
        with (
            build_payload(
                spark.createDataFrame(BATCHES[-1], CHANGES),
                ChangeSet("id", op_column="op", order_by="seq", history=True),
            ) as payload,
            client_for(server) as client,
        ):
            result = client.update_datasource("Orders", payload, state_dir=tmp_path / "other")
        assert result.parts[0].deduplicated is False
        assert rows(server, luid) == history_model(seen)


def test_a_commit_feed_s_pre_images_and_replaced_rows_make_no_versions(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A Delta change feed: an update is a pre-image and a post-image at one version, an
    Iceberg-style update a delete and an insert at one; neither ends a version early."""
    feed = [
        (1, "a", 1, "insert", 1),
        (1, "a", 1, "update_preimage", 2),
        (1, "b", 2, "update_postimage", 2),
        (1, "b", 2, "delete", 3),
        (2, "x", 1, "insert", 3),
        (2, "x", 1, "delete", 4),
        (2, "y", 2, "insert", 4),
    ]
    df = spark.createDataFrame(
        feed, "id long, name string, qty int, _change_type string, _commit_version long"
    )
    with FakeTableauServer(pats=dict([PAT])) as server:
        luid = server.add_datasource("Orders", start_file(tmp_path))
        server.remember_probe(tmp_path / "state")
        with build_payload(df, ChangeSet("id", history=True)) as payload, client_for(server) as c:
            c.update_datasource("Orders", payload, state_dir=tmp_path / "state")
        assert rows(server, luid) == [
            (1, "a", 1, 1, 2, False),
            (1, "b", 2, 2, 3, False),
            (2, "x", 1, 3, 4, False),
            (2, "y", 2, 4, None, True),
        ]


def test_versions_dated_by_commit_time_with_the_user_s_names(
    spark: SparkSession, tmp_path: Path
) -> None:
    at = datetime(2026, 5, 1, 12, 0, 0)
    feed = [
        (1, "a", 1, "c", 10, at),
        (1, "b", 2, "u", 11, at + timedelta(seconds=90)),
        (1, None, None, "d", 12, at + timedelta(hours=2)),
    ]
    df = spark.createDataFrame(
        feed, "id long, name string, qty int, op string, lsn long, ts timestamp_ntz"
    )
    history = History(valid_from="since", valid_to="until", current="now", at="ts")
    ddl = (
        "id BIGINT NOT NULL, name TEXT, qty INTEGER, ts TIMESTAMP, "
        "since TIMESTAMP, until TIMESTAMP, now BOOLEAN"
    )
    with FakeTableauServer(pats=dict([PAT])) as server:
        luid = server.add_datasource("Orders", start_file(tmp_path, ddl))
        server.remember_probe(tmp_path / "state")
        with (
            build_payload(df, ChangeSet("id", order_by="lsn", history=history)) as payload,
            client_for(server) as client,
        ):
            client.update_datasource("Orders", payload, state_dir=tmp_path / "state")
        assert rows(server, luid) == [
            (1, "a", 1, at, at, at + timedelta(seconds=90), False),
            (1, "b", 2, *[at + timedelta(seconds=90)] * 2, at + timedelta(hours=2), False),
        ]


@pytest.mark.parametrize("found", ["null", "refuse", None])
def test_history_is_sent_only_where_a_probe_showed_left_out_columns_kept(
    spark: SparkSession, tmp_path: Path, found: Literal["null", "refuse"] | None
) -> None:
    state = tmp_path / "state"
    df = spark.createDataFrame(BATCHES[0], CHANGES)
    with FakeTableauServer(pats=dict([PAT]), partial_update=found or "keep") as server:
        luid = server.add_datasource("Orders", start_file(tmp_path))
        if found is not None:
            server.remember_probe(state)
        with (
            build_payload(
                df, ChangeSet("id", op_column="op", order_by="seq", history=True)
            ) as payload,
            client_for(server) as client,
            pytest.raises(ConfigurationError) as caught,
        ):
            client.update_datasource("Orders", payload, state_dir=state)
        said = str(caught.value)
        assert "tabhyper-update probe --project NAME" in said
        found_as = {
            "null": "found partial_update 'null'",
            "refuse": "found partial_update 'refused'",
        }
        assert found_as.get(found or "", "no probe of") in said
        assert server.counts["initiate"] == server.counts["update"] == 0
        assert rows(server, luid) == []


def test_a_guarded_history_refuses_a_delivery_older_than_the_data_source(
    spark: SparkSession, tmp_path: Path
) -> None:
    ddl: dict[str, tuple[str, list[str]]] = {
        "Extract": (HISTORY_DDL, []),
        "Extract_positions": ("id BIGINT NOT NULL, seq BIGINT, guarded BOOLEAN NOT NULL", []),
    }
    start = make_hyper(tmp_path / "start.hyper", ddl)
    state = tmp_path / "state"
    spec = ChangeSet("id", op_column="op", order_by="seq", history=True, guard=True)
    with FakeTableauServer(pats=dict([PAT])) as server:
        luid = server.add_datasource("Orders", start)
        server.remember_probe(state)
        with client_for(server) as client:
            for batch in (BATCHES[1], BATCHES[0]):
                with build_payload(spark.createDataFrame(batch, CHANGES), spec) as payload:
                    if batch is BATCHES[0]:
                        with pytest.raises(OutOfOrderError):
                            client.update_datasource("Orders", payload, state_dir=state)
                    else:
                        client.update_datasource("Orders", payload, state_dir=state)
        assert rows(server, luid) == history_model(BATCHES[1])
        positions = sorted(read_table(server.datasource_path(luid), "Extract_positions"))
        assert positions == [(1, 7, True), (2, 8, True), (3, 6, True)]


def test_a_split_history_keeps_each_key_s_end_and_versions_in_one_part(
    spark: SparkSession,
) -> None:
    df = spark.range(4000).selectExpr(
        "id % 500 AS id", "uuid() AS name", "CAST(id AS INT) AS qty", "'U' AS op", "id AS seq"
    )
    spec = ChangeSet("id", op_column="op", order_by="seq", history=True)
    with build_payload(df, spec, max_payload_mb=0.25) as payload:
        assert len(payload.parts) > 1
        versions = 0
        for part in payload.parts:
            upserts = read_table(part.path, "upserts")
            ends = read_table(part.path, "deletes")
            assert {r[0] for r in upserts} == {r[0] for r in ends}
            versions += len(upserts)
        assert versions == 4000


def test_what_history_cannot_read_is_refused_by_name(spark: SparkSession) -> None:
    df = spark.createDataFrame(
        [(1, "a", "I", 1, 1)], "id long, name string, op string, a long, b long"
    )
    cases: list[tuple[dict[str, Any], str]] = [
        ({"order_by": ["a", "b"], "history": True}, "History(at='_commit_timestamp')"),
        ({"order_by": "a", "history": History(at="ts")}, "history at column 'ts'"),
        ({"order_by": "a", "history": History(valid_from="name")}, "column 'name'"),
        ({"order_by": "a", "soft_delete": SoftDelete(deleted="name")}, "column 'name'"),
    ]
    for options, said in cases:
        with pytest.raises(PayloadError) as caught:
            build_payload(df, ChangeSet("id", op_column="op", **options))
        assert said in str(caught.value)
    with pytest.raises(PayloadError, match="names a column twice"):
        History(valid_from="x", valid_to="x")
    with pytest.raises(PayloadError, match="twice"):
        ChangeSet("id", history=History(current="gone"), soft_delete=SoftDelete(deleted="gone"))
    with pytest.raises(TypeError, match="history= takes True"):
        ChangeSet("id", history="yes")  # type: ignore[arg-type]


def test_a_saved_history_payload_derives_the_same_actions(
    spark: SparkSession, tmp_path: Path
) -> None:
    from tabhyper_update import Payload

    spec = ChangeSet(
        "id",
        op_column="op",
        order_by="seq",
        history=History(valid_from="since", at="seq"),
        soft_delete=True,
    )
    with build_payload(spark.createDataFrame(BATCHES[0], CHANGES), spec, keep_files=True) as built:
        loaded = Payload.load(built.save_manifest(tmp_path / "manifest"))
        actions = built.derived_actions().to_dict()
        assert loaded.derived_actions().to_dict() == actions
        assert loaded.change_set == spec
    ends, versions = actions["actions"]
    assert ends["action"] == "update"
    assert ends["source-table"] == "deletes"
    assert versions["action"] == "upsert"
    assert "since" in json.dumps(versions["condition"])


def test_a_history_data_source_published_from_a_snapshot_takes_the_feed(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The how-to's start: a snapshot published as one current version per row, valid from
    the snapshot's position, then the change feed from there on."""
    from pyspark.sql import functions as F

    snapshot = spark.createDataFrame([(1, "a", 1), (2, "b", 2)], "id long, name string, qty int")
    first = (
        snapshot.withColumn("_valid_from", F.lit(5).cast("bigint"))
        .withColumn("_valid_to", F.lit(None).cast("bigint"))
        .withColumn("_is_current", F.lit(True))
    )
    state = tmp_path / "state"
    with FakeTableauServer(pats=dict([PAT])) as server:
        server.remember_probe(state)
        with client_for(server) as client:
            with build_payload(first, max_payload_mb=None) as payload:
                ref = client.publish(payload, "Orders", project="Default", state_dir=state)
            feed = [(2, "b2", 3, "U", 6), (1, None, None, "D", 7), (3, "c", 1, "I", 8)]
            spec = ChangeSet("id", op_column="op", order_by="seq", history=True)
            with build_payload(spark.createDataFrame(feed, CHANGES), spec) as payload:
                client.update_datasource("Orders", payload, state_dir=state)
        assert rows(server, ref.id) == [
            (1, "a", 1, 5, 7, False),
            (2, "b", 2, 5, 6, False),
            (2, "b2", 3, 6, None, True),
            (3, "c", 1, 8, None, True),
        ]


def test_a_version_without_a_date_is_refused_naming_the_column(spark: SparkSession) -> None:
    """Versions are upserted by key and start: a NULL start would match nothing, and a re-run
    would add the version again."""
    df = spark.createDataFrame(
        [(1, "a", 1, "I", 1, None)],
        "id long, name string, qty int, op string, seq long, ts timestamp",
    )
    spec = ChangeSet("id", op_column="op", order_by="seq", history=History(at="ts"))
    with pytest.raises(PayloadError, match=r"History\(at='ts'\) column is NULL"):
        build_payload(df, spec)


def test_a_multi_table_change_set_keeps_each_table_s_history(
    spark: SparkSession, tmp_path: Path
) -> None:
    ddl: dict[str, tuple[str, list[str]]] = {
        "Orders": (HISTORY_DDL, []),
        "Items": (
            "sku BIGINT NOT NULL, label TEXT, "
            "_valid_from BIGINT, _valid_to BIGINT, _is_current BOOLEAN",
            [],
        ),
    }
    start = make_hyper(tmp_path / "start.hyper", ddl)
    orders = spark.createDataFrame(BATCHES[0], CHANGES)
    items = spark.createDataFrame(
        [(7, "x", "I", 1), (7, "y", "U", 2)], "sku long, label string, op string, seq long"
    )
    specs = {
        "Orders": ChangeSet("id", op_column="op", order_by="seq", history=True),
        "Items": ChangeSet("sku", op_column="op", order_by="seq", history=True),
    }
    state = tmp_path / "state"
    with FakeTableauServer(pats=dict([PAT])) as server:
        luid = server.add_datasource("Shop", start)
        server.remember_probe(state)
        with (
            build_payload({"Orders": orders, "Items": items}, specs) as payload,
            client_for(server) as client,
        ):
            client.update_datasource("Shop", payload, state_dir=state)
        path = server.datasource_path(luid)
        assert sorted(read_table(path, "Orders")) == history_model(BATCHES[0])
        assert sorted(read_table(path, "Items")) == [(7, "x", 1, 2, False), (7, "y", 2, None, True)]

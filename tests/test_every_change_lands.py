"""Every change lands: each history or setup that once left a published data source unlike
its source while the SDK reported success, through the public API against the fake server
(real HTTP on 127.0.0.1)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import (
    ApiError,
    ChangeSet,
    Insert,
    PersonalAccessToken,
    TableauClient,
    build_payload,
)
from tabhyper_update.streaming import Debezium, TableauSink
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table
from tabhyper_update.update.state import StateStore
from tabhyper_update.values.errors import (
    InvalidArgumentError,
    JobOutcomeUnknownError,
    TargetMismatchError,
    TransportError,
)

from ._histories import COLUMNS, ROW_SCHEMA, Commit, DeltaSource, Model, table
from ._streaming import PAT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ROWS = ["(1, 'a', 10)", "(2, 'b', 20)", "(3, 'c', 30)"]
CHANGES = ChangeSet("id", op_column="op", order_by="seq")
JSON = "application/json"


@dataclass
class Site:
    server: FakeTableauServer
    client: TableauClient
    root: Path
    projects: dict[str, str]

    def table(self, luid: str) -> list[tuple[Any, ...]]:
        self.server.wait_idle()
        return read_table(self.server.datasource_path(luid), "Extract")

    def file(self, name: str, rows: list[str]) -> Path:
        return make_hyper(self.root / f"{name}.hyper", {"Extract": (COLUMNS, rows)})


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with FakeTableauServer(pats=dict([PAT]), directory=tmp_path / "server") as server:
        sales = server.add_project("Sales")
        finance = server.add_project("Finance")
        projects = {
            "Sales": sales,
            "Finance": finance,
            "Sales/EMEA": server.add_project("EMEA", parent=sales),
            "Finance/EMEA": server.add_project("EMEA", parent=finance),
        }
        with TableauClient(server.url, "", PersonalAccessToken(*PAT)) as client:
            yield Site(server, client, tmp_path, projects)


def plain(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    return spark.createDataFrame(rows, ROW_SCHEMA)


# -- 1. a change that moves a row to another key -----------------------------------------------


def test_a_delta_update_that_moves_keys_leaves_no_old_row(
    spark: SparkSession, site: Site, tmp_path: Path
) -> None:
    luid = site.server.add_datasource("Orders", site.file("orders", ROWS))
    model: Model = {1: ("a", 10), 2: ("b", 20), 3: ("c", 30)}
    delta = DeltaSource(tmp_path / "orders-delta")
    for commit in [
        Commit("insert", rows=dict(model)),
        # UPDATE orders SET id = 9 WHERE id = 1, then SET id = id + 1 over 2..3.
        Commit("move", moves={1: 9}),
        Commit("shift", span=(2, 3)),
    ]:
        delta.commit(commit, model)
        commit.apply(model)
    delta.read_up_to = 0  # the snapshot is published already: read the two updates
    build_payload(delta.changes(spark), ChangeSet("id")).upload(
        luid, client=site.client, progress=False, state_dir=tmp_path / "state"
    ).apply(target_table="Extract")
    assert site.table(luid) == table(model) == [(3, "b", 20), (4, "c", 30), (9, "a", 10)]


def test_a_debezium_update_whose_keys_differ_deletes_the_old_key(
    spark: SparkSession, site: Site, tmp_path: Path
) -> None:
    luid = site.server.add_datasource("Orders", site.file("orders", ROWS))
    moved = {
        "op": "u",
        "before": {"id": 1, "a": "a", "b": 10},
        "after": {"id": 7, "a": "a", "b": 11},
        "source": {"lsn": 100},
        "ts_ms": 1,
    }
    events = Debezium(ROW_SCHEMA, key="id")
    df = spark.createDataFrame([(json.dumps(moved),)], "value string")
    build_payload(events.changes(df), events.change_set).upload(
        luid, client=site.client, progress=False, state_dir=tmp_path / "state"
    ).apply(target_table="Extract")
    assert site.table(luid) == [(2, "b", 20), (3, "c", 30), (7, "a", 11)]


# -- 2. source positions compared by their meaning ---------------------------------------------


@pytest.mark.parametrize(
    ("connector", "older", "newer"),
    [
        ("oracle", {"scn": "999"}, {"scn": "1000"}),
        (
            "mysql",
            {"file": "mysql-bin.999999", "pos": 9000, "row": 0},
            {"file": "mysql-bin.1000000", "pos": 4, "row": 0},
        ),
    ],
)
def test_the_later_position_wins_when_its_text_sorts_first(
    spark: SparkSession,
    site: Site,
    tmp_path: Path,
    connector: str,
    older: dict[str, Any],
    newer: dict[str, Any],
) -> None:
    luid = site.server.add_datasource("Orders", site.file("orders", ROWS))

    def update(source: dict[str, Any], b: int) -> str:
        after = {"id": 2, "a": "b", "b": b}
        return json.dumps({"op": "u", "before": None, "after": after, "source": source})

    events = Debezium(ROW_SCHEMA, key="id", connector=connector)
    df = spark.createDataFrame([(update(newer, 22),), (update(older, 21),)], "value string")
    build_payload(events.changes(df), events.change_set).upload(
        luid, client=site.client, progress=False, state_dir=tmp_path / "state"
    ).apply(target_table="Extract")
    assert site.table(luid)[1] == (2, "b", 22)


# -- 4. a multi-table sink routes each row to its table ------------------------------------------


def test_a_multi_table_sink_that_cannot_route_is_refused(site: Site) -> None:
    sets = {"Sales": ChangeSet("id", op_column="op", order_by="seq"), "Customers": ChangeSet("id")}
    with pytest.raises(
        InvalidArgumentError, match=r"cannot tell which rows .* 'Sales', 'Customers'"
    ):
        TableauSink("Shop", sets, client=site.client)
    assert site.server.counts["signin"] == 0


def test_debezium_events_go_to_the_table_their_source_names(
    spark: SparkSession, site: Site, tmp_path: Path
) -> None:
    start = make_hyper(
        tmp_path / "shop.hyper",
        {"Sales": (COLUMNS, ["(1, 's', 1)"]), "Customers": (COLUMNS, ["(1, 'c', 1)"])},
    )
    luid = site.server.add_datasource("Shop", start)

    def event(tbl: str, key: int, a: str, lsn: int) -> str:
        after = {"id": key, "a": a, "b": lsn}
        return json.dumps({"op": "c", "after": after, "source": {"lsn": lsn, "table": tbl}})

    source = tmp_path / "events"
    source.mkdir()
    (source / "0.json").write_text(
        event("Sales", 2, "sale", 10) + "\n" + event("Customers", 5, "customer", 11) + "\n"
    )
    described = Debezium(ROW_SCHEMA, key="id")
    sink = TableauSink(
        luid,
        {"Sales": described, "Customers": described},
        client=site.client,
        sink_id="shop",
        state_dir=tmp_path / "state",
    )
    query = (
        spark.readStream.text(str(source))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    path = site.server.datasource_path(luid)
    site.server.wait_idle()
    assert read_table(path, "Sales") == [(1, "s", 1), (2, "sale", 10)]
    assert read_table(path, "Customers") == [(1, "c", 1), (5, "customer", 11)]


# -- 5. targets resolved exactly -----------------------------------------------------------------


@pytest.mark.parametrize("by", ["path", "luid"])
def test_bootstrap_never_touches_a_same_named_source_in_another_project(
    spark: SparkSession, site: Site, tmp_path: Path, by: str
) -> None:
    elsewhere = site.server.add_datasource(
        "Orders", site.file("finance", ROWS), project_id=site.projects["Finance/EMEA"]
    )
    project = "Sales/EMEA" if by == "path" else site.projects["Sales/EMEA"]
    snapshot = [(1, "new", 1)]
    changes = [(2, "change", 2, "I", 1)]
    schema = f"{ROW_SCHEMA}, op STRING, seq BIGINT"

    def run() -> Any:
        return site.client.bootstrap(
            "Orders",
            project=project,
            snapshot=lambda: build_payload(plain(spark, snapshot)),
            changes=lambda: build_payload(
                spark.createDataFrame(changes, schema),
                ChangeSet("id", op_column="op", order_by="seq"),
            ),
            target_table="Extract",
            progress=False,
            state_dir=tmp_path / "state",
        )

    first = run()
    assert first.published
    assert first.datasource.project_id == site.projects["Sales/EMEA"]
    second = run()
    assert not second.published
    assert second.datasource.id == first.datasource.id
    assert site.table(first.datasource.id) == [(1, "new", 1), (2, "change", 2)]
    assert site.table(elsewhere) == [(1, "a", 10), (2, "b", 20), (3, "c", 30)]


def test_publish_as_a_job_finds_what_it_published(spark: SparkSession, site: Site) -> None:
    site.server.add_datasource(
        "Orders", site.file("finance", ROWS), project_id=site.projects["Finance/EMEA"]
    )
    with build_payload(plain(spark, [(1, "x", 1)])) as payload:
        ref = site.client.publish(payload, "Orders", project="Sales/EMEA", as_job=True)
    assert ref.project_id == site.projects["Sales/EMEA"]
    assert site.table(ref.id) == [(1, "x", 1)]
    # A name lookup in that project finds it, and only it.
    assert site.client.datasource("Orders", project="Sales/EMEA").id == ref.id
    with pytest.raises(ApiError, match="projects match"):
        site.client.datasource("Orders", project="EMEA")  # two projects of that name


def test_an_answer_naming_another_data_source_is_refused(site: Site) -> None:
    ours = site.server.add_datasource("Orders", site.file("orders", ROWS))
    other = site.server.add_datasource("Other", site.file("other", ROWS))
    body = {"datasource": {"id": other, "name": "Other", "project": {"id": "p", "name": "P"}}}
    site.server.inject(
        "datasource", body=json.dumps(body).encode(), content_type="application/json"
    )
    with pytest.raises(TargetMismatchError, match=f"asked for data source {ours}"):
        site.client.datasource(ours)


# -- 6. ids bound to their target ---------------------------------------------------------------


def test_one_request_id_on_two_data_sources_updates_both(
    spark: SparkSession, site: Site, tmp_path: Path
) -> None:
    eu = site.server.add_datasource("Orders EU", site.file("eu", ROWS))
    us = site.server.add_datasource("Orders US", site.file("us", ROWS))
    insert = [Insert(target_table="Extract", source_table="Extract")]
    results = [
        build_payload(plain(spark, [(9, name, 9)]))
        .upload(luid, client=site.client, progress=False, state_dir=tmp_path / "state")
        .apply(insert, request_id="nightly-2026-11-24")
        for luid, name in ((eu, "eu"), (us, "us"))
    ]
    assert [r.deduplicated for r in results] == [False, False]
    assert results[0].parts[0].request_id != results[1].parts[0].request_id
    assert site.table(eu)[-1] == (9, "eu", 9)
    assert site.table(us)[-1] == (9, "us", 9)


def test_a_job_of_another_data_source_is_refused_and_not_recorded(
    spark: SparkSession, site: Site, tmp_path: Path
) -> None:
    ours = site.server.add_datasource("Orders", site.file("orders", ROWS))
    other = site.server.add_datasource("Other", site.file("other", ROWS))
    answer = {
        "job": {
            "id": "0f0f0f0f-0000-0000-0000-000000000001",
            "type": "UpdateUploadedFile",
            "createdAt": "2026-01-01T00:00:00Z",
            "updateUploadedFileJob": {"datasource": {"id": other, "name": "Other"}},
        }
    }
    site.server.inject(
        "update", body=json.dumps(answer).encode(), status=202, content_type="application/json"
    )
    state = tmp_path / "state"
    with pytest.raises(TargetMismatchError, match=f"belongs to data source {other}"):
        build_payload(plain(spark, [(9, "x", 9)])).upload(
            ours, client=site.client, progress=False, state_dir=state
        ).apply([Insert(target_table="Extract", source_table="Extract")], request_id="slice-1")
    (record,) = StateStore(state).records()
    assert [p.status for p in record.parts] == ["sending"]
    assert site.table(ours) == [(1, "a", 10), (2, "b", 20), (3, "c", 30)]


# -- 7. only finishCode 0 is success ---------------------------------------------------------------


def test_an_unknown_finish_code_is_an_error_and_never_recorded_as_applied(
    spark: SparkSession, site: Site, tmp_path: Path
) -> None:
    luid = site.server.add_datasource("Orders", site.file("orders", ROWS))
    state = tmp_path / "state"
    insert = [Insert(target_table="Extract", source_table="Extract")]

    def apply() -> Any:
        return (
            build_payload(plain(spark, [(9, "x", 9)]))
            .upload(luid, client=site.client, progress=False, state_dir=state)
            .apply(insert, request_id="slice-4", wait=False)
        )

    result = apply()
    job_id = result.parts[0].job_id
    finished = {"job": {"id": job_id, "finishCode": "4", "completedAt": "2026-01-01T00:00:00Z"}}
    site.server.inject(
        "job", body=json.dumps(finished).encode(), content_type="application/json", times=100
    )
    with pytest.raises(JobOutcomeUnknownError, match="finish code 4"):
        result.wait()
    (record,) = StateStore(state).records()
    assert [p.status for p in record.parts] == ["submitted"]
    # A re-run waits on the same job, and stops there again: it never counts as applied.
    with pytest.raises(JobOutcomeUnknownError):
        apply().wait()
    assert site.server.counts["update"] == 1
    # Once the server tells the outcome, the re-run waits on that same job and records it.
    site.server.clear_faults()
    apply().wait()
    assert [p.status for p in StateStore(state).records()[0].parts] == ["applied"]
    assert site.server.counts["update"] == 1
    assert site.table(luid)[-1] == (9, "x", 9)


@pytest.mark.parametrize(
    "job",
    [
        {"finishCode": "abc"},
        {"finishCode": [0]},
        {"id": {"not": "an id"}},
        {"updateUploadedFileJob": "text"},
    ],
    ids=["finish-code-text", "finish-code-list", "id-object", "details-text"],
)
def test_a_malformed_job_answer_is_our_error(site: Site, job: dict[str, Any]) -> None:
    """Refused as our error naming the field the server sent wrong."""
    body = {"job": {"id": "0f0f0f0f-0000-0000-0000-000000000002", **job}}
    site.server.inject("job", body=json.dumps(body).encode(), content_type="application/json")
    (field,) = job
    with pytest.raises(TransportError, match=rf"job answer is malformed: {field}: "):
        site.client.job("0f0f0f0f-0000-0000-0000-000000000002")


def test_a_numeric_created_at_is_read_as_text(site: Site) -> None:
    body = {"job": {"id": "j-3", "createdAt": 1_700_000_000, "finishCode": "0"}}
    site.server.inject("job", body=json.dumps(body).encode(), content_type="application/json")
    assert site.client.job("j-3").created_at == "1700000000"


# -- 8. the fake server never applies an old update onto a newer snapshot -------------------------


def test_a_publish_waits_for_every_unfinished_update_job(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Every payload built first: no Spark job runs while the update's job is pending (on a
    # loaded machine one outlasted the job's delay), which is 3 s for the same reason.
    delete = build_payload(
        spark.createDataFrame([(1, "D", 1)], "id BIGINT, op STRING, seq BIGINT"),
        ChangeSet("id", op_column="op", order_by="seq"),
    )
    refused_snapshot = build_payload(plain(spark, [(1, "snapshot", 1)]))
    snapshot = build_payload(plain(spark, [(1, "snapshot", 1)]))
    with FakeTableauServer(
        pats=dict([PAT]), directory=tmp_path / "server", job_delay=3.0
    ) as server:
        luid = server.add_datasource(
            "Orders", make_hyper(tmp_path / "o.hyper", {"Extract": (COLUMNS, ROWS)})
        )
        with TableauClient(server.url, "", PersonalAccessToken(*PAT)) as client:
            pending = delete.upload(luid, client=client, progress=False, state_dir=tmp_path / "s")
            result = pending.apply(target_table="Extract", wait=False)
            time.sleep(0.2)  # the worker has taken the job; it has not started
            with refused_snapshot, pytest.raises(ApiError, match="being updated"):
                client.publish(refused_snapshot, "Orders", mode="overwrite")
            result.wait()
            with snapshot:
                client.publish(snapshot, "Orders", mode="overwrite")
            server.wait_idle()
            assert read_table(server.datasource_path(luid), "Extract") == [(1, "snapshot", 1)]

"""Publishing, bootstrapping and schema drift against the fake server over real HTTP, and
Tableau's own Python client publishing to and updating the same fake."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tabhyper_update import (
    ApiError,
    ChangeSet,
    JobFailedError,
    NotFoundError,
    Payload,
    PayloadError,
    PersonalAccessToken,
    TableauClient,
    build_payload,
)
from tabhyper_update.cli import main
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table
from tabhyper_update.update.publish import BootstrapResult
from tabhyper_update.values.errors import InvalidArgumentError, SchemaDriftError

from ._util import PAT, client_for, use_environment

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@pytest.fixture
def target_file() -> None:
    return None  # nothing published yet


def orders(spark: SparkSession, rows: list[tuple[int, str]]) -> DataFrame:
    return spark.createDataFrame(rows, "id long, v string")


def changes(spark: SparkSession, rows: list[tuple[int, str | None, str, int]]) -> DataFrame:
    return spark.createDataFrame(rows, "id long, v string, op string, seq long")


CHANGE_SET = ChangeSet("id", op_column="op", order_by="seq")


def test_publish_creates_a_source_ready_for_updates(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    sales = server.add_project("Sales")
    ref = client.publish(
        build_payload(orders(spark, [(1, "a"), (2, "b")])), "Orders", project="Sales"
    )
    assert (ref.name, ref.project) == ("Orders", "Sales")
    assert ref.columns == {"Extract": ("id", "v")}
    assert server.backend.datasource(ref.id).project_id == sales
    assert server.counts["publish"] == 1
    assert server.counts["initiate"] == 0  # a small file goes in the publish request
    # The reference is usable for an incremental update right away.
    client.update_datasource(
        ref,
        build_payload(changes(spark, [(2, "B", "U", 5), (1, None, "D", 5)]), CHANGE_SET),
        progress=False,
        state_dir=tmp_path,
    )
    assert read_table(server.datasource_path(ref.id), "Extract") == [(2, "B")]


def test_every_publish_mode(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    first = client.publish(build_payload(orders(spark, [(1, "a")])), "Orders")
    assert first.project == "Default"
    with pytest.raises(ApiError, match="already exists") as caught:
        client.publish(build_payload(orders(spark, [(9, "z")])), "Orders")
    assert (caught.value.status, caught.value.code) == (409, "409004")
    again = client.publish(build_payload(orders(spark, [(2, "b")])), "Orders", mode="overwrite")
    assert again.id == first.id  # the same data source, new data
    assert read_table(server.datasource_path(first.id), "Extract") == [(2, "b")]
    appended = client.publish(build_payload(orders(spark, [(3, "c")])), "Orders", mode="append")
    assert appended.id == first.id
    assert appended.columns is None  # an append does not tell the whole table's columns
    assert read_table(server.datasource_path(first.id), "Extract") == [(2, "b"), (3, "c")]
    with pytest.raises(InvalidArgumentError, match="mode must be one of"):
        client.publish(build_payload(orders(spark, [(4, "d")])), "Orders", mode="replace")  # type: ignore[arg-type]
    assert server.counts["publish"] == 4


def test_a_large_file_goes_as_a_chunked_upload_and_a_job(
    spark: SparkSession, server: FakeTableauServer
) -> None:
    df = spark.range(60_000).selectExpr("id", "uuid() AS v")
    with TableauClient(
        server.url, "", PersonalAccessToken("ci", "pat-secret"), chunk_size_mb=1
    ) as client:
        payload = build_payload(df, max_payload_mb=None)
        assert payload.size_bytes > 1024 * 1024
        ref = client.publish(payload, "Big")
    assert server.counts["initiate"] == 1
    assert server.counts["append"] >= 2
    assert server.counts["job"] >= 1  # the publish job was followed to its end
    assert len(read_table(server.datasource_path(ref.id), "Extract")) == 60_000


def test_projects_by_name_path_and_luid(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    sales = server.add_project("Sales")
    emea = server.add_project("EMEA", sales)
    server.add_project("EMEA")  # a second "EMEA", at the top
    payload = build_payload(orders(spark, [(1, "a")]), max_payload_mb=None)
    with pytest.raises(ApiError, match="2 projects match project 'EMEA'") as caught:
        client.publish(payload, "Orders", project="EMEA")
    assert "Sales/EMEA" in str(caught.value)
    with pytest.raises(NotFoundError, match="no project 'Nowhere'"):
        client.publish(payload, "Orders", project="Nowhere")
    assert server.counts["publish"] == 0  # refused before publishing
    ref = client.publish(payload, "Orders", project="Sales/EMEA")
    assert server.backend.datasource(ref.id).project_id == emea
    by_luid = client.publish(build_payload(orders(spark, [(2, "b")])), "Other", project=emea)
    assert server.backend.datasource(by_luid.id).project_id == emea


def test_a_multi_table_payload_publishes_as_one_source_and_updates(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    payload = build_payload(
        {
            "Customers": spark.createDataFrame([(1, "ann")], "id long, name string"),
            "Sales": spark.createDataFrame([(10, 1, 9.5)], "id long, customer long, amount double"),
        }
    )
    ref = client.publish(payload, "Star")
    assert ref.columns == {"Customers": ("id", "name"), "Sales": ("id", "customer", "amount")}
    sales = build_payload(
        spark.createDataFrame(
            [(11, 1, 3.0, "I", 1)], "id long, customer long, amount double, op string, seq long"
        ),
        CHANGE_SET,
    )
    client.update_datasource(ref, sales, target_table="Sales", progress=False, state_dir=tmp_path)
    path = server.datasource_path(ref.id)
    assert read_table(path, "Sales") == [(10, 1, 9.5), (11, 1, 3.0)]
    assert read_table(path, "Customers") == [(1, "ann")]


def test_what_cannot_be_published_is_refused_first(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    split = build_payload(spark.range(20_000).selectExpr("id", "uuid() AS v"), max_payload_mb=0.25)
    assert len(split.parts) > 1
    with pytest.raises(PayloadError, match="max_payload_mb=None"):
        client.publish(split, "Orders")
    cdc = build_payload(changes(spark, [(1, "a", "I", 1)]), CHANGE_SET)
    with pytest.raises(PayloadError, match="not a snapshot"):
        client.publish(cdc, "Orders")
    with pytest.raises(PayloadError, match=r"not a \.hyper file"):
        client.publish(tmp_path / "missing.hyper", "Orders")
    assert sum(server.counts.values()) == 0


def test_the_short_form_publishes_from_the_environment(
    spark: SparkSession, server: FakeTableauServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_environment(monkeypatch, server, tmp_path, "Orders")
    server.add_project("Sales")
    payload = build_payload(orders(spark, [(1, "a")]))
    ref = payload.publish("Orders", project="Sales")
    assert ref.client is not None
    assert not payload.parts[0].path.exists()  # published: the files are gone
    assert read_table(server.datasource_path(ref.id), "Extract") == [(1, "a")]


def test_bootstrap_publishes_once_then_updates(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    built: list[str] = []

    def snapshot() -> Payload:
        built.append("snapshot")
        return build_payload(orders(spark, [(1, "a"), (2, "b")]))

    def feed(rows: list[tuple[int, str | None, str, int]]) -> Callable[[], Payload]:
        def build() -> Payload:
            built.append("changes")
            return build_payload(changes(spark, rows), CHANGE_SET)

        return build

    def run(
        rows: list[tuple[int, str | None, str, int]], full_refresh: bool = False
    ) -> BootstrapResult:
        return client.bootstrap(
            "Orders",
            snapshot=snapshot,
            changes=feed(rows),
            full_refresh=full_refresh,
            progress=False,
            state_dir=tmp_path,
        )

    first = run([(1, "A", "U", 1)])
    assert first.published
    assert built == ["snapshot"]  # the change set was not even built
    luid = first.datasource.id
    second = run([(1, "A", "U", 1)])
    assert not second.published
    assert built == ["snapshot", "changes"]
    assert read_table(server.datasource_path(luid), "Extract") == [(1, "A"), (2, "b")]
    replay = run([(1, "A", "U", 1)])  # the same slice again: not applied twice
    assert replay.update is not None
    assert replay.update.deduplicated
    refreshed = run([], full_refresh=True)  # the change feed was lost: start over
    assert refreshed.published
    assert refreshed.datasource.id == luid
    assert read_table(server.datasource_path(luid), "Extract") == [(1, "a"), (2, "b")]
    with pytest.raises(InvalidArgumentError, match="takes a function"):
        client.bootstrap("Orders", snapshot=snapshot(), changes=feed([]))  # type: ignore[arg-type]


def test_columns_the_target_lacks_are_refused_before_anything_is_sent(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    ref = client.publish(build_payload(orders(spark, [(1, "a")])), "Orders")
    wider = spark.createDataFrame(
        [(1, "A", "gold", "U", 2)], "id long, v string, tier string, op string, seq long"
    )
    before = dict(server.counts)
    with pytest.raises(SchemaDriftError, match="table 'Extract' lacks 'tier'") as caught:
        client.update_datasource(
            ref, build_payload(wider, CHANGE_SET), progress=False, state_dir=tmp_path
        )
    assert caught.value.columns == {"Extract": ["tier"]}
    assert "mode='overwrite'" in str(caught.value)
    assert dict(server.counts) == before
    # A reference the caller describes is checked the same way.
    described = client.datasource("Orders", columns={"Extract": ["id", "v"]})
    with pytest.raises(SchemaDriftError):
        build_payload(wider, CHANGE_SET).upload(described, state_dir=tmp_path).apply()
    assert server.counts["update"] == 0
    # A reference found by name alone: the SDK learns the columns from the server first.
    plain = client.datasource("Orders")
    with pytest.raises(SchemaDriftError):
        client.update_datasource(
            plain, build_payload(wider, CHANGE_SET), progress=False, state_dir=tmp_path
        )
    assert server.counts["update"] == 0


def test_where_no_one_can_say_the_columns_the_servers_failure_names_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A server without the VizQL Data Service, a data source the SDK did not publish: the
    part goes unchecked, and the job's failure names the columns."""
    start = make_hyper(tmp_path / "start.hyper", {"Extract": ("id BIGINT, v TEXT", ["(1, 'a')"])})
    wider = spark.createDataFrame(
        [(1, "A", "gold", "U", 2)], "id long, v string, tier string, op string, seq long"
    )
    with FakeTableauServer(pats=dict([PAT]), data_service="absent") as old:
        ref = old.add_datasource("Orders", start)
        with client_for(old) as client, pytest.raises(JobFailedError) as failed:
            client.update_datasource(
                "Orders", build_payload(wider, CHANGE_SET), progress=False, state_dir=tmp_path
            )
        assert read_table(old.datasource_path(ref), "Extract") == [(1, "a")]
    assert failed.value.missing_columns == ["tier"]
    assert "republish the data source" in str(failed.value)


def test_the_cli_publishes_a_file_and_a_payload(
    spark: SparkSession,
    server: FakeTableauServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    use_environment(monkeypatch, server, tmp_path, "Orders")
    file = make_hyper(tmp_path / "orders.hyper", {"Extract": ("id BIGINT", ["(1)"])})
    assert main(["publish", str(file), "--name", "Orders", "--json"]) == 0
    published = json.loads(capsys.readouterr().out)
    assert published["name"] == "Orders"
    assert main(["publish", str(file), "--name", "Orders", "--json"]) == 3  # 409: exists
    assert "already exists" in json.loads(capsys.readouterr().out)["error"]["message"]
    assert main(["publish", str(file), "--name", "Orders", "--mode", "append"]) == 0
    capsys.readouterr()
    assert read_table(server.datasource_path(published["id"]), "Extract") == [(1,), (1,)]
    assert main(["publish", str(tmp_path / "nothing"), "--name", "X"]) == 2
    assert "neither a .hyper file nor a payload folder" in capsys.readouterr().err
    assert main(["publish", str(file), "--name", "X", "--project", "Nowhere"]) == 4


def test_tableaus_own_client_publishes_and_updates_through_the_fake(
    server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    tsc = pytest.importorskip("tableauserverclient")
    start = make_hyper(tmp_path / "orders.hyper", {"Extract": ("id BIGINT, v TEXT", ["(1, 'a')"])})
    extra = make_hyper(tmp_path / "extra.hyper", {"new": ("id BIGINT, v TEXT", ["(2, 'b')"])})
    tableau = tsc.Server(server.url, use_server_version=True)
    with tableau.auth.sign_in(tsc.PersonalAccessTokenAuth("ci", "pat-secret", site_id="")):
        assert tableau.version == "3.24"  # serverInfo answered: no fallback to 2.4
        projects, _ = tableau.projects.get()
        (default,) = [p for p in projects if p.name == "Default"]
        item = tsc.DatasourceItem(default.id, name="Orders")
        published = tableau.datasources.publish(item, str(start), tsc.Server.PublishMode.CreateNew)
        with pytest.raises(tsc.ServerResponseError):
            tableau.datasources.publish(item, str(start), tsc.Server.PublishMode.CreateNew)
        published = tableau.datasources.publish(item, str(start), tsc.Server.PublishMode.Overwrite)
        job = tableau.datasources.update_hyper_data(
            published,
            request_id="tsc-1",
            actions=[
                {
                    "action": "insert",
                    "source-schema": "Extract",
                    "source-table": "new",
                    "target-schema": "Extract",
                    "target-table": "Extract",
                }
            ],
            payload=str(extra),
        )
        assert tableau.jobs.wait_for_job(job).finish_code == 0
    assert read_table(server.datasource_path(published.id), "Extract") == [(1, "a"), (2, "b")]
    # ...and this SDK finds and updates what Tableau's client published.
    ref = client.datasource("Orders")
    assert ref.id == published.id


def test_a_dry_run_refuses_a_table_a_data_source_it_published_lacks(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    """The SDK knows the tables of a data source it published: a dry run naming another
    table is refused there, as apply is, and nothing is sent."""
    client.publish(build_payload(orders(spark, [(1, "a")])), "Orders")
    with build_payload(changes(spark, [(2, "b", "U", 1)]), CHANGE_SET) as payload:
        bound = payload.upload("Orders", client=client)
        plan = bound.plan(target_table="Extract")
        assert plan.tables_unconfirmed == []
        updates = server.counts["update"]
        with pytest.raises(PayloadError, match="the data source has no table 'Nope'"):
            bound.plan(target_table="Nope")
        assert server.counts["update"] == updates

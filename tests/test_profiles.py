"""Every deployment the fake can answer like (server profiles): what each profile does on
the wire, and the round trip, the streaming sink and the read-back against each one."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import ChangeSet, TableauClient, TableauSink, build_payload
from tabhyper_update.readback.check import check_update, expected_changes
from tabhyper_update.readback.dataservice import DataService
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper
from tabhyper_update.testing.profiles import PROFILES
from tabhyper_update.values.errors import DataServiceError

from ._streaming import START, TABLE_DDL, expected_state, run_query, start_rows, write_batch
from ._util import PAT, client_for, read_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The profiles the default run covers; the others run under ``slow``.
ESSENTIAL = {"server-2021.4", "server-2025.1", "cloud"}
EVERY = [
    pytest.param(name, marks=() if name in ESSENTIAL else pytest.mark.slow) for name in PROFILES
]


@pytest.fixture
def start_file(tmp_path: Path) -> Path:
    return make_hyper(tmp_path / "start.hyper", {"Extract": (TABLE_DDL, start_rows())})


def served(profile: str, start: Path, **settings: object) -> FakeTableauServer:
    server = FakeTableauServer(profile=profile, pats={PAT[0]: PAT[1]}, **settings)  # type: ignore[arg-type]
    server.start()
    server.add_datasource("Orders", start)
    return server


@pytest.fixture(params=EVERY)
def deployment(request: pytest.FixtureRequest, start_file: Path) -> Iterator[FakeTableauServer]:
    server = served(str(request.param), start_file)
    yield server
    server.stop()


def table(server: FakeTableauServer) -> list[tuple[object, ...]]:
    (luid,) = server.backend.sources
    return read_rows(server.datasource_path(luid), "Extract")


CHANGES = [(4, "d", 40, "U", 1), (2, None, None, "D", 1), (1, "A", 11, "U", 2)]


def post(
    server: FakeTableauServer, path: str, body: object, headers: dict[str, str]
) -> tuple[int, str, Any]:
    request = urllib.request.Request(
        server.url + path, json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            kind = str(answer.headers.get("Content-Type"))
            return int(answer.status), kind, json.loads(answer.read())
    except urllib.error.HTTPError as err:
        return int(err.code), str(err.headers.get("Content-Type")), json.loads(err.read())


# -- the profiles on the wire ----------------------------------------------------------------------
def test_an_old_server_speaks_its_own_api_version_and_has_no_data_service(
    start_file: Path,
) -> None:
    server = served("server-2021.4", start_file)
    try:
        with client_for(server) as client:
            client.sign_in()
            assert client.api_version == "3.14"
            ref = client.datasource("Orders")
            with pytest.raises(DataServiceError, match="no VizQL Data Service"):
                DataService(client, ref.id).fields()
        assert server.max_upload_mb == 10
        # A newer version in the URL is not served.
        with urllib.request.urlopen(server.url + "/api/3.14/serverinfo", timeout=10) as ok:
            assert ok.status == 200
        with pytest.raises(urllib.error.HTTPError) as newer:
            urllib.request.urlopen(server.url + "/api/3.24/serverinfo", timeout=10)
        assert newer.value.code == 404
    finally:
        server.stop()


def test_the_service_answers_json_whatever_is_accepted_and_refuses_options_of_later_releases(
    start_file: Path,
) -> None:
    server = served("server-2025.1", start_file)
    try:
        client = client_for(server)
        client.sign_in()
        token = client._token
        luid = client.datasource("Orders").id
        assert token is not None
        headers = {"X-Tableau-Auth": token, "Accept": "application/xml"}
        status, ctype, body = post(
            server,
            "/api/v1/vizql-data-service/read-metadata",
            {"datasource": {"datasourceLuid": luid}},
            headers,
        )
        assert status == 200
        assert "json" in ctype
        assert body["data"]
        status, _, body = post(
            server,
            "/api/v1/vizql-data-service/query-datasource",
            {
                "datasource": {"datasourceLuid": luid},
                "query": {"fields": [{"fieldCaption": "id"}]},
                "options": {"rowLimit": 1},
            },
            headers,
        )
        assert status == 400
        assert "rowLimit" in body["message"]
    finally:
        server.stop()


def test_the_sdk_probes_a_later_option_once_and_remembers_the_refusal(start_file: Path) -> None:
    server = served("server-2025.1", start_file)
    try:
        with client_for(server) as client:
            luid = client.datasource("Orders").id
            first = DataService(client, luid)
            assert set(first.fields()) == {"id", "name", "qty"}
            assert first.stats.requests == 2  # refused with bypassMetadataCache, then without
            again = DataService(client, luid)
            again.fields()
            assert again.stats.requests == 1  # not offered again to this server
        newest = served("cloud", start_file)
        try:
            with client_for(newest) as client:
                service = DataService(client, client.datasource("Orders").id)
                service.fields()
                assert service.stats.requests == 1  # taken at once
        finally:
            newest.stop()
    finally:
        server.stop()


def test_the_query_quota_answers_429_and_a_read_back_says_what_it_left(
    spark: SparkSession, start_file: Path, tmp_path: Path
) -> None:
    server = served("cloud", start_file, service_query_quota=1)
    try:
        with client_for(server) as client:
            from tabhyper_update import reconcile

            source = spark.createDataFrame(
                [(k, n, q) for k, (n, q) in START.items()], "id long, name string, qty int"
            )
            first = reconcile(source, "Orders", key="id", client=client)
            assert first.ok
            assert first.cost["requests"] >= 2
            second = reconcile(source, "Orders", key="id", client=client)
        assert not second.ok
        assert second.stopped is not None
        assert "quota" in second.stopped
        assert "100 queries per hour" in second.stopped
        assert "NOT CHECKED" in str(second)
        assert server.backend.limits.refused["queries"] >= 1
    finally:
        server.stop()


def thirty_keys_upserted(spark: SparkSession, client: TableauClient, tmp_path: Path) -> Any:
    """Upsert keys 10-39 into ``Orders``; what a check of that update expects."""
    changes = spark.range(10, 40).selectExpr(
        "id", "CAST(id AS STRING) AS name", "CAST(id AS INT) AS qty", "'U' AS op", "1L AS seq"
    )
    cs = ChangeSet("id", op_column="op", order_by="seq")
    result = client.update_datasource(
        "Orders", build_payload(changes, cs), state_dir=tmp_path / "s", progress=False
    )
    assert result.done
    return expected_changes(build_payload(changes, cs))


def test_a_budget_stops_a_check_and_the_report_counts_what_was_left(
    spark: SparkSession, start_file: Path, tmp_path: Path
) -> None:
    server = served("cloud", start_file)
    try:
        with client_for(server) as client:
            expected = thirty_keys_upserted(spark, client, tmp_path)
            ref = client.datasource("Orders")
            spent = check_update(client, ref, expected, keys_per_request=10, budget=2)
            whole = check_update(client, ref, expected, keys_per_request=10)
        assert spent.stopped is not None
        assert spent.unchecked == 10
        assert not spent.ok
        assert "budget of 2 queries" in spent.stopped
        assert whole.ok
        assert whole.cost["requests"] == 4  # the fields, then 3 queries of 10 keys
    finally:
        server.stop()


def test_a_cut_short_answer_is_caught_by_its_count(
    spark: SparkSession, start_file: Path, tmp_path: Path
) -> None:
    server = served("cloud", start_file)
    try:
        with client_for(server) as client:
            expected = thirty_keys_upserted(spark, client, tmp_path)
            server.backend.service_truncates_at = 20
            with pytest.raises(DataServiceError, match="cut short: it holds 30 rows"):
                check_update(client, client.datasource("Orders"), expected)
    finally:
        server.stop()


# -- the matrix: round trip, sink, read-back on every profile
def test_the_round_trip_with_its_read_back(
    deployment: FakeTableauServer, spark: SparkSession, tmp_path: Path
) -> None:
    frame = spark.createDataFrame(CHANGES, "id long, name string, qty int, op string, seq long")
    cs = ChangeSet("id", op_column="op", order_by="seq")
    has_service = deployment.profile.data_service is not None
    with client_for(deployment) as client:
        result = (
            build_payload(frame, cs)
            .upload("Orders", client=client, state_dir=tmp_path / "s", progress=False)
            .apply(verify=has_service)
        )
    assert result.done
    assert table(deployment) == expected_state([CHANGES])
    if has_service:
        assert result.readback is not None
        assert result.readback.ok
        assert result.readback.cost["requests"] <= 3  # metadata (probe) and one query


def test_the_streaming_sink(
    deployment: FakeTableauServer, spark: SparkSession, tmp_path: Path
) -> None:
    feed = tmp_path / "feed"
    batches = [CHANGES, [(5, "e", 50, "U", 3), (4, None, None, "D", 4)]]
    for i, batch in enumerate(batches):
        write_batch(feed, i, batch)
    with client_for(deployment) as client:
        sink = TableauSink(
            "Orders",
            ChangeSet("id", op_column="op", order_by="seq"),
            client=client,
            state_dir=tmp_path / "state",
        )
        run_query(spark, feed, tmp_path / "checkpoint", sink)
    assert table(deployment) == expected_state(batches)
    assert sum(deployment.jobs_run.values()) == 2


def test_reconcile_and_its_query_count(deployment: FakeTableauServer, spark: SparkSession) -> None:
    source = spark.createDataFrame(
        [(k, n, q) for k, (n, q) in START.items()] + [(9, "z", 90)], "id long, name string, qty int"
    )
    from tabhyper_update import reconcile

    with client_for(deployment) as client:
        if deployment.profile.data_service is None:
            with pytest.raises(DataServiceError, match="no VizQL Data Service"):
                reconcile(source, "Orders", key="id", client=client)
            return
        report = reconcile(source, "Orders", key="id", client=client)
    assert report.counts()["missing"] == 1
    assert report.keys() == [(9,)]
    assert report.cost["requests"] <= 6


def test_a_check_the_quota_stops_keeps_the_update_and_says_it_was_not_checked(
    spark: SparkSession, start_file: Path, tmp_path: Path
) -> None:
    from tabhyper_update import DriftError

    server = served("cloud", start_file, service_query_quota=0)
    try:
        frame = spark.createDataFrame(CHANGES, "id long, name string, qty int, op string, seq long")
        cs = ChangeSet("id", op_column="op", order_by="seq")
        with client_for(server) as client, pytest.raises(DriftError) as caught:
            build_payload(frame, cs).upload(
                "Orders", client=client, state_dir=tmp_path / "s", progress=False
            ).apply(verify=True, verify_budget=5)
        report = caught.value.report
        assert report.stopped is not None
        assert "quota" in report.stopped
        assert report.unchecked == 3
        assert "the update was applied" in str(caught.value)
        assert table(server) == expected_state([CHANGES])
    finally:
        server.stop()


def test_a_cut_short_answer_is_caught_by_reconcile_from_its_own_aggregates(
    spark: SparkSession, start_file: Path
) -> None:
    server = served("cloud", start_file)
    try:
        rows = [(k, n, q) for k, (n, q) in START.items()]
        with client_for(server) as client:
            from tabhyper_update import reconcile

            source = spark.createDataFrame([*rows, (9, "z", 90)], "id long, name string, qty int")
            server.backend.service_truncates_at = 2
            with pytest.raises(
                DataServiceError, match="cut short: the key ranges of level 1 hold 3 rows"
            ):
                reconcile(source, "Orders", key="id", client=client)
            server.backend.service_truncates_at = None
            assert reconcile(source, "Orders", key="id", client=client).keys() == [(9,)]
    finally:
        server.stop()

"""Tableau's own clients against every server profile of the fake: tableauserverclient for
the REST side (sign in, look up, publish, update, wait) and Tableau's VizQL Data Service
client for the read-back (read metadata, query with the filters the SDK uses). What they
accept of the fake is what the SDK's tests rely on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper
from tabhyper_update.testing.profiles import PROFILES

from ._util import PAT, read_rows

tsc = pytest.importorskip("tableauserverclient")

ESSENTIAL = {"server-2021.4", "server-2025.1", "cloud"}
EVERY = [
    pytest.param(name, marks=() if name in ESSENTIAL else pytest.mark.slow) for name in PROFILES
]


@pytest.fixture(params=EVERY)
def deployment(request: pytest.FixtureRequest) -> Iterator[FakeTableauServer]:
    server = FakeTableauServer(profile=str(request.param), pats={PAT[0]: PAT[1]})
    server.start()
    yield server
    server.stop()


def signed_in(server: FakeTableauServer) -> Any:
    tableau = tsc.Server(server.url, use_server_version=True)
    tableau.auth.sign_in(tsc.PersonalAccessTokenAuth(*PAT, site_id=""))
    return tableau


def test_tableauserverclient_publishes_updates_and_waits(
    deployment: FakeTableauServer, tmp_path: Path
) -> None:
    start = make_hyper(tmp_path / "orders.hyper", {"Extract": ("id BIGINT, v TEXT", ["(1, 'a')"])})
    extra = make_hyper(tmp_path / "extra.hyper", {"new": ("id BIGINT, v TEXT", ["(2, 'b')"])})
    tableau = signed_in(deployment)
    try:
        assert tableau.version == deployment.profile.api_version
        projects, _ = tableau.projects.get()
        (default,) = [p for p in projects if p.name == "Default"]
        item = tsc.DatasourceItem(default.id, name="Orders")
        published = tableau.datasources.publish(item, str(start), tsc.Server.PublishMode.CreateNew)
        found = tableau.datasources.filter(name="Orders")
        assert [d.id for d in found] == [published.id]
        job = tableau.datasources.update_hyper_data(
            published,
            request_id="peer-1",
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
    finally:
        tableau.auth.sign_out()
    assert read_table_rows(deployment, published.id) == [(1, "a"), (2, "b")]


def read_table_rows(server: FakeTableauServer, luid: str) -> list[tuple[Any, ...]]:
    return read_rows(server.datasource_path(luid), "Extract")


def test_tableaus_data_service_client_reads_metadata_and_queries(
    deployment: FakeTableauServer, tmp_path: Path
) -> None:
    vds = pytest.importorskip("vizql_data_service_py.api.client")
    from vizql_data_service_py.api import query_datasource, read_metadata
    from vizql_data_service_py.api.openapi_generated import (
        Datasource,
        DimensionField,
        DimensionFilterField,
        MeasureField,
        Query,
        QueryDatasourceOptions,
        QueryRequest,
        ReadMetadataRequest,
        SetFilter,
    )

    start = make_hyper(
        tmp_path / "orders.hyper",
        {"Extract": ("id BIGINT, v TEXT", ["(1, 'a')", "(2, 'b')", "(3, 'b')"])},
    )
    luid = deployment.add_datasource("Orders", start)
    tableau = signed_in(deployment)
    try:
        auth = tsc.PersonalAccessTokenAuth(*PAT, site_id="")
        client = vds.VizQLDataServiceClient(deployment.url, tableau, auth)
        source = Datasource(datasourceLuid=luid)
        meta = read_metadata.sync_detailed(
            client=client, body=ReadMetadataRequest(datasource=source)
        )
        if deployment.profile.data_service is None:
            assert meta.status_code == 404  # no service before 2025.1
            return
        assert meta.status_code == 200
        assert meta.parsed is not None
        assert {f.fieldCaption for f in meta.parsed.data or []} == {"id", "v"}
        query = Query(
            fields=[
                DimensionField(fieldCaption="v"),
                MeasureField(fieldCaption="id", function="COUNT"),
            ],
            filters=[
                SetFilter(field=DimensionFilterField(fieldCaption="v"), values=["b"], exclude=False)
            ],
        )
        answer = query_datasource.sync_detailed(
            client=client, body=QueryRequest(datasource=source, query=query)
        )
        assert answer.status_code == 200, answer.content
        assert answer.parsed is not None
        assert answer.parsed.data == [{"v": "b", "id": 2}]
        # The client sends every option it knows, false by default; a release that lacks
        # one (this client is newer than the service) refuses the request, naming it.
        answer = query_datasource.sync_detailed(
            client=client,
            body=QueryRequest(
                datasource=source,
                query=query,
                options=QueryDatasourceOptions(returnFormat="ARRAYS"),
            ),
        )
        assert answer.status_code == 400
        assert "withNewSession" in answer.content.decode()
    finally:
        tableau.auth.sign_out()

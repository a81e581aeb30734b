"""The fake server's protocol, with raw requests on 127.0.0.1, and round trips with the client."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import requests

from tabhyper_update import (
    ConnectedAppJWT,
    Insert,
    JobFailedError,
    TableauClient,
    Upsert,
    UsernamePassword,
    keys_match,
)
from tabhyper_update.rest.uploads import multipart_framing
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper
from tabhyper_update.values.errors import AuthenticationError

from ._util import PAT, client_for, read_rows

NS = "{http://tableau.com/api}"
PATS = dict([PAT])


@pytest.fixture
def target_file(tmp_path: Path) -> Path:
    return make_hyper(
        tmp_path / "orders.hyper", {"Extract": ("id INT, v TEXT", ["(1, 'a')", "(2, 'b')"])}
    )


@pytest.fixture
def target_project() -> str:
    return "Sales"


def api(server: FakeTableauServer, rest: str) -> str:
    return f"{server.url}/api/3.24/{rest}"


def sign_in(server: FakeTableauServer) -> tuple[str, str]:
    answer = requests.post(
        api(server, "auth/signin"),
        json={
            "credentials": {
                "personalAccessTokenName": "ci",
                "personalAccessTokenSecret": "pat-secret",
                "site": {"contentUrl": ""},
            }
        },
        headers={"Accept": "application/json"},
        timeout=10,
    )
    assert answer.status_code == 200
    creds = answer.json()["credentials"]
    return creds["token"], creds["site"]["id"]


def test_serves_on_loopback_only(server: FakeTableauServer) -> None:
    assert server.url.startswith("http://127.0.0.1:")


def test_xml_by_default_json_when_asked(server: FakeTableauServer) -> None:
    xml = requests.get(api(server, "serverinfo"), timeout=10)
    assert xml.headers["Content-Type"].startswith("application/xml")
    root = ET.fromstring(xml.text)
    assert root.tag == f"{NS}tsResponse"
    assert root.find(f"{NS}serverInfo/{NS}restApiVersion").text == "3.24"  # type: ignore[union-attr]
    js = requests.get(api(server, "serverinfo"), headers={"Accept": "application/json"}, timeout=10)
    assert js.json()["serverInfo"]["restApiVersion"] == "3.24"


def test_xml_sign_in_body_and_xml_error(server: FakeTableauServer) -> None:
    ok = requests.post(
        api(server, "auth/signin"),
        data=(
            '<tsRequest><credentials name="ana" password="pw"><site contentUrl=""/>'
            "</credentials></tsRequest>"
        ),
        timeout=10,
    )
    assert ok.status_code == 200
    assert ET.fromstring(ok.text).find(f"{NS}credentials").get("token")  # type: ignore[union-attr]
    bad = requests.post(
        api(server, "auth/signin"),
        data=(
            '<tsRequest><credentials name="ana" password="nope"><site contentUrl=""/>'
            "</credentials></tsRequest>"
        ),
        timeout=10,
    )
    assert bad.status_code == 401
    error = ET.fromstring(bad.text).find(f"{NS}error")
    assert error is not None
    assert error.get("code") == "401001"
    assert error.find(f"{NS}summary").text == "Signin Error"  # type: ignore[union-attr]


def test_missing_and_expired_tokens(server: FakeTableauServer) -> None:
    token, site = sign_in(server)
    url = api(server, f"sites/{site}/datasources")
    headers = {"Accept": "application/json"}
    assert requests.get(url, headers=headers, timeout=10).json()["error"]["code"] == "401000"
    good = requests.get(url, headers={**headers, "X-Tableau-Auth": token}, timeout=10)
    assert good.json()["datasources"]["datasource"][0]["name"] == "Orders"
    server.expire_tokens()
    expired = requests.get(url, headers={**headers, "X-Tableau-Auth": token}, timeout=10)
    assert expired.status_code == 401
    assert expired.json()["error"]["code"] == "401002"


def test_a_second_sign_in_with_the_same_pat_ends_the_first_session(
    server: FakeTableauServer,
) -> None:
    first, site = sign_in(server)
    sign_in(server)
    answer = requests.get(
        api(server, f"sites/{site}/datasources"),
        headers={"X-Tableau-Auth": first, "Accept": "application/json"},
        timeout=10,
    )
    assert answer.json()["error"]["code"] == "401002"


def test_filters_and_connections(server: FakeTableauServer, target_file: Path) -> None:
    server.add_datasource("Orders", target_file, project="Finance", connections=2)
    token, site = sign_in(server)
    headers = {"X-Tableau-Auth": token, "Accept": "application/json"}
    url = api(server, f"sites/{site}/datasources")
    both = requests.get(url, params={"filter": "name:eq:Orders"}, headers=headers, timeout=10)
    assert both.json()["pagination"]["totalAvailable"] == "2"
    one = requests.get(
        url, params={"filter": "name:eq:Orders,projectName:eq:Finance"}, headers=headers, timeout=10
    ).json()["datasources"]["datasource"]
    assert [d["project"]["name"] for d in one] == ["Finance"]
    conns = requests.get(f"{url}/{one[0]['id']}/connections", headers=headers, timeout=10)
    assert len(conns.json()["connections"]["connection"]) == 2


def upload_raw(
    server: FakeTableauServer, token: str, site: str, body: bytes, ctype: str
) -> requests.Response:
    headers = {"X-Tableau-Auth": token, "Accept": "application/json"}
    init = requests.post(api(server, f"sites/{site}/fileUploads"), headers=headers, timeout=10)
    assert init.status_code == 201
    session = init.json()["fileUpload"]["uploadSessionId"]
    return requests.put(
        api(server, f"sites/{site}/fileUploads/{session}"),
        data=body,
        headers={**headers, "Content-Type": ctype},
        timeout=10,
    )


@pytest.mark.parametrize(
    ("mangle", "words"),
    [
        (lambda b, h, t: h + b + t, None),
        (lambda b, h, t: h.replace(b"request_payload", b"other") + b + t, "request_payload"),
        (lambda b, h, t: h + b, "closing boundary"),
        (lambda b, h, t: h.split(b"\r\n--")[0] + b + t, "exactly 2 parts"),
        (lambda b, h, t: b"garbage" + h + b + t, "start with the boundary"),
    ],
)
def test_multipart_append_is_parsed_strictly(
    server: FakeTableauServer, mangle: Any, words: str | None
) -> None:
    token, site = sign_in(server)
    head, tail = multipart_framing("BOUNDARY")
    answer = upload_raw(
        server, token, site, mangle(b"x" * 10, head, tail), "multipart/mixed; boundary=BOUNDARY"
    )
    if words is None:
        assert answer.status_code == 200
        assert answer.json()["fileUpload"]["fileSize"] == "0"
    else:
        assert answer.status_code == 400
        assert words in answer.json()["error"]["detail"]


def test_wrong_content_type_is_refused(server: FakeTableauServer) -> None:
    token, site = sign_in(server)
    head, tail = multipart_framing("B")
    answer = upload_raw(server, token, site, head + b"x" + tail, "application/octet-stream")
    assert answer.status_code == 400


def payload_file(tmp_path: Path, rows: list[str]) -> Path:
    return make_hyper(tmp_path / "payload.hyper", {"upserts": ("id INT, v TEXT", rows)})


UPSERT = [Upsert(target_table="Extract", source_table="upserts", condition=keys_match("id"))]


def test_round_trip_applies_the_update(server: FakeTableauServer, tmp_path: Path) -> None:
    path = payload_file(tmp_path, ["(2, 'B')", "(3, 'c')"])
    with client_for(server, chunk_size_mb=0.01) as client:
        ref = client.datasource("Orders", project="Sales")
        session = client.upload(path)
        job = client.update_data(ref, UPSERT, upload_session_id=session)
        assert job.wait(timeout=30).succeeded
    assert read_rows(server.datasource_path(ref.id), "Extract") == [(1, "a"), (2, "B"), (3, "c")]
    assert server.counts["append"] > 1  # several chunks


def test_repeated_request_id_does_not_run_again(server: FakeTableauServer, tmp_path: Path) -> None:
    path = payload_file(tmp_path, ["(9, 'z')"])
    insert = [Insert(target_table="Extract", source_table="upserts")]
    with client_for(server) as client:
        ref = client.datasource("Orders")
        first = client.update_data(
            ref, insert, upload_session_id=client.upload(path), request_id="same"
        )
        again = client.update_data(
            ref, insert, upload_session_id=client.upload(path), request_id="same"
        )
        assert again.id == first.id
        first.wait(timeout=30)
    assert server.jobs_run[ref.id] == 1
    assert [r[0] for r in read_rows(server.datasource_path(ref.id), "Extract")] == [1, 2, 9]


def test_upload_session_is_consumed_once(server: FakeTableauServer, tmp_path: Path) -> None:
    path = payload_file(tmp_path, ["(9, 'z')"])
    with client_for(server) as client:
        ref = client.datasource("Orders")
        session = client.upload(path)
        client.update_data(ref, UPSERT, upload_session_id=session, request_id="a")
        with pytest.raises(Exception, match="404003"):
            client.update_data(ref, UPSERT, upload_session_id=session, request_id="b")


def test_413_over_max_upload(target_file: Path, tmp_path: Path) -> None:
    with FakeTableauServer(pats=PATS, max_upload_mb=0.01) as server:
        server.add_datasource("Orders", target_file)
        with client_for(server) as client:
            ref = client.datasource("Orders")
            session = client.upload(payload_file(tmp_path, ["(1, 'x')"]))
            with pytest.raises(Exception, match="HTTP 413") as caught:
                client.update_data(ref, UPSERT, upload_session_id=session)
            assert "at most 0.01 MB" in str(caught.value)


def test_failed_job_carries_the_engine_reason(server: FakeTableauServer, tmp_path: Path) -> None:
    path = payload_file(tmp_path, ["(9, 'z')"])
    with client_for(server) as client:
        ref = client.datasource("Orders")
        job = client.update_data(
            ref,
            [Insert(target_table="Missing", source_table="upserts")],
            upload_session_id=client.upload(path),
        )
        with pytest.raises(
            JobFailedError,
            match=r"Specified table does not exist: "
            r"Extract\.Missing \(errorCode=410012\)",
        ):
            job.wait(timeout=30)


def test_faults_are_injected_per_route_and_counted(
    server: FakeTableauServer, tmp_path: Path
) -> None:
    server.inject("job", nth=1, status=503, retry_after=0.01)
    server.inject("datasources", drop="before")
    path = payload_file(tmp_path, ["(5, 'e')"])
    with client_for(server) as client:
        ref = client.datasource("Orders")
        job = client.update_data(ref, UPSERT, upload_session_id=client.upload(path))
        job.wait(timeout=30)
    assert server.counts["datasources"] == 2
    assert server.counts["job"] >= 2
    assert server.jobs_run[ref.id] == 1


def test_every_credential_kind_signs_in(server: FakeTableauServer) -> None:
    for auth in (
        UsernamePassword("ana", "pw"),
        ConnectedAppJWT(
            client_id="cid", secret_id="kid", secret_value="app-secret", username="ana"
        ),
    ):
        with TableauClient(server.url, "", auth) as client:
            client.sign_in()
    with pytest.raises(AuthenticationError):
        TableauClient(
            server.url,
            "",
            ConnectedAppJWT(client_id="cid", secret_id="kid", secret_value="wrong", username="ana"),
        ).sign_in()


def test_jobs_on_one_datasource_run_in_order(server: FakeTableauServer, tmp_path: Path) -> None:
    with client_for(server) as client:
        ref = client.datasource("Orders")
        jobs = []
        for i in range(5):
            path = make_hyper(
                tmp_path / f"p{i}.hyper", {"upserts": ("id INT, v TEXT", [f"(1, 'v{i}')"])}
            )
            jobs.append(client.update_data(ref, UPSERT, upload_session_id=client.upload(path)))
        for job in jobs:
            job.wait(timeout=30)
    assert read_rows(server.datasource_path(ref.id), "Extract")[0] == (1, "v4")


def test_responses_adapter_serves_the_same_fake_without_sockets(
    target_file: Path, tmp_path: Path
) -> None:
    with FakeTableauServer(pats=PATS, serve=False) as server, server.mock_requests() as rsps:
        luid = server.add_datasource("Orders", target_file)
        client = client_for(server)
        session = client.upload(payload_file(tmp_path, ["(7, 'g')"]))
        client.update_data(luid, UPSERT, upload_session_id=session).wait(timeout=30)
        assert server.counts["update"] == 1
        assert len(rsps.calls) >= 5
        assert json.loads(rsps.calls[0].response.text)["serverInfo"]
        assert [r[0] for r in read_rows(server.datasource_path(luid), "Extract")] == [1, 2, 7]


def test_a_fake_served_through_responses_unstarted_keeps_records_out_of_the_users_folder(
    target_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mock_requests()`` on a fake never entered with ``with``: an update's record goes to
    the fake's folder, and the user's own state folder stays as it was (absent here)."""
    from tabhyper_update import Payload

    users = tmp_path / "users-state"
    monkeypatch.setenv("XDG_STATE_HOME", str(users))
    monkeypatch.delenv("TABHYPER_TEST_STATE", raising=False)
    server = FakeTableauServer(pats=PATS, serve=False, directory=tmp_path / "fake")
    with server.mock_requests():
        server.add_datasource("Orders", target_file)
        client_for(server).update_datasource(
            "Orders",
            Payload.from_hyper(payload_file(tmp_path, ["(7, 'g')"])),
            actions=UPSERT,
        )
    assert not users.exists()
    assert (tmp_path / "fake" / "client-state").is_dir()


def test_the_fakes_settings_are_resolved_once_against_their_profile() -> None:
    """What is not given comes from the profile (else the fake's default); a setting given
    beside the profile wins; a limit given as None is no limit; a name the fake does not
    take, or a value it cannot take, is refused when the fake is made."""
    from tabhyper_update.testing.settings import BackendConfig

    cloud = BackendConfig.of({"profile": "cloud"})
    assert cloud.max_upload_mb == cloud.profile.max_upload_mb
    assert cloud.rest_calls_per_window == cloud.profile.rest_calls_per_window
    given = BackendConfig.of(
        {"profile": "cloud", "max_upload_mb": 7, "rest_calls_per_window": None, "site": "s"}
    )
    assert (given.max_upload_mb, given.rest_calls_per_window, given.site) == (7, None, "s")
    assert BackendConfig.of({}).profile.name == "ideal"
    with pytest.raises(TypeError, match="job_dealy"):
        FakeTableauServer(job_dealy=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="replay"):
        BackendConfig.of({"replay": "twice"})

"""TableauClient against mocked HTTP (responses): the outgoing requests and the answers."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import responses
from responses import matchers

from tabhyper_update import (
    ApiError,
    Delete,
    JobFailedError,
    NotFoundError,
    Upsert,
    keys_match,
    target,
)
from tabhyper_update.client import DataSourceRef, TableauClient
from tabhyper_update.rest.auth import ConnectedAppJWT, PersonalAccessToken, UsernamePassword
from tabhyper_update.rest.jobs import learned_time
from tabhyper_update.rest.uploads import multipart_framing
from tabhyper_update.values.errors import (
    AuthenticationError,
    ConnectionFailedError,
    InvalidArgumentError,
    JobCancelledError,
    JobTimeoutError,
    RequestTimeoutError,
    TransportError,
    UnsupportedServerError,
)
from tabhyper_update.values.policies import JobTimes, PollPolicy, RetryPolicy

FIXTURES = Path(__file__).parent / "fixtures"
SERVER = "https://tableau.test"
V = "3.24"
SITE_ID = "9a8b7c6d-1111-2222-3333-444455556666"
BASE = f"{SERVER}/api/{V}/sites/{SITE_ID}"
DS = "11111111-aaaa-bbbb-cccc-000000000001"
PAT_SECRET = "pat-secret-value-Zq9"
TOKEN = "session-token-abc123"


class FakeClock:
    """An injected clock whose sleep advances time instantly; records every wait."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def rsps() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


def make_client(clock: FakeClock, **kw: Any) -> TableauClient:
    kw.setdefault("retry", RetryPolicy(max_attempts=4, max_total_seconds=60, jitter=0))
    kw.setdefault("api_version", V)
    return TableauClient(
        SERVER, "sales", PersonalAccessToken("ci", PAT_SECRET), sleep=clock.sleep, clock=clock, **kw
    )


def add_signin(rsps: responses.RequestsMock, token: str = TOKEN) -> None:
    rsps.add(
        responses.POST,
        f"{SERVER}/api/{V}/auth/signin",
        json={
            "credentials": {
                "token": token,
                "site": {"id": SITE_ID, "contentUrl": "sales"},
                "user": {"id": "u-1"},
            }
        },
    )


def error_body(code: str, summary: str = "s", detail: str = "d") -> dict[str, Any]:
    return {"error": {"code": code, "summary": summary, "detail": detail}}


# -- version and sign-in -----------------------------------------------------------------------


def test_no_network_in_constructor(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    make_client(clock, api_version=None)
    assert len(rsps.calls) == 0


def test_version_negotiated_and_pat_sign_in_body(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    rsps.add(
        responses.GET,
        f"{SERVER}/api/2.4/serverinfo",
        json={
            "serverInfo": {
                "productVersion": {"value": "2024.2.0", "build": "x"},
                "restApiVersion": "3.23",
            }
        },
    )
    rsps.add(
        responses.POST,
        f"{SERVER}/api/3.23/auth/signin",
        json={"credentials": {"token": TOKEN, "site": {"id": SITE_ID}, "user": {"id": "u"}}},
        match=[
            matchers.json_params_matcher(
                {
                    "credentials": {
                        "personalAccessTokenName": "ci",
                        "personalAccessTokenSecret": PAT_SECRET,
                        "site": {"contentUrl": "sales"},
                    }
                }
            )
        ],
    )
    client = make_client(clock, api_version=None)
    client.sign_in()
    assert client.api_version == "3.23"
    assert rsps.calls[0].request.headers["Accept"] == "application/json"
    assert rsps.calls[0].request.headers["User-Agent"].startswith("tabhyper-update/")
    assert "X-Tableau-Auth" not in rsps.calls[0].request.headers


def test_server_older_than_3_12_is_refused_naming_its_version(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    rsps.add(
        responses.GET,
        f"{SERVER}/api/2.4/serverinfo",
        json={"serverInfo": {"productVersion": {"value": "2020.4.0"}, "restApiVersion": "3.10"}},
    )
    with pytest.raises(
        UnsupportedServerError,
        match=r"REST API 3\.10 \(product version "
        r"2020\.4\.0\).*3\.12",
    ):
        make_client(clock, api_version=None).sign_in()
    with pytest.raises(UnsupportedServerError):
        make_client(clock, api_version="3.11")


def test_xml_answers_parse(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    rsps.add(
        responses.GET,
        f"{SERVER}/api/2.4/serverinfo",
        body=(FIXTURES / "serverinfo.xml").read_text(),
        content_type="application/xml",
    )
    rsps.add(
        responses.POST,
        f"{SERVER}/api/3.22/auth/signin",
        body=(FIXTURES / "signin.xml").read_text(),
        content_type="application/xml",
    )
    rsps.add(
        responses.GET,
        f"{SERVER}/api/3.22/sites/{SITE_ID}/datasources/{DS}",
        body=(FIXTURES / "error_404.xml").read_text(),
        status=404,
        content_type="application/xml",
    )
    client = make_client(clock, api_version=None)
    client.sign_in()
    assert client.site_id == SITE_ID
    with pytest.raises(NotFoundError) as caught:
        client.request("GET", f"datasources/{DS}", retry=True)
    err = caught.value
    assert (err.status, err.code, err.summary) == (404, "404004", "Resource Not Found")
    assert err.detail == "Datasource 'abc' could not be found."
    assert err.method == "GET"
    assert err.url == f"{SERVER}/api/3.22/sites/{SITE_ID}/datasources/{DS}"
    assert rsps.calls[-1].request.headers["X-Tableau-Auth"] == "xml-session-token"


def test_password_and_impersonation_body(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    rsps.add(
        responses.POST,
        f"{SERVER}/api/{V}/auth/signin",
        json={"credentials": {"token": TOKEN, "site": {"id": SITE_ID}}},
        match=[
            matchers.json_params_matcher(
                {
                    "credentials": {
                        "name": "ana",
                        "password": "pw-secret",
                        "site": {"contentUrl": ""},
                        "user": {"id": "u-luid"},
                    }
                }
            )
        ],
    )
    client = TableauClient(
        SERVER,
        "",
        UsernamePassword("ana", "pw-secret", impersonate_user_id="u-luid"),
        api_version=V,
    )
    client.sign_in()


def _decode(part: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def test_connected_app_mints_a_fresh_signed_jwt_per_sign_in(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    add_signin(rsps)
    add_signin(rsps)
    auth = ConnectedAppJWT(
        client_id="cid",
        secret_id="kid-1",
        secret_value="s3cr3t",
        username="ana@example.com",
        clock=lambda: 1_700_000_000,
    )
    client = TableauClient(SERVER, "sales", auth, api_version=V)
    client.sign_in()
    client.sign_in()
    tokens = [json.loads(c.request.body or "")["credentials"]["jwt"] for c in rsps.calls]
    assert tokens[0] != tokens[1]
    header, claims, signature = tokens[0].split(".")
    assert _decode(header) == {"alg": "HS256", "typ": "JWT", "kid": "kid-1", "iss": "cid"}
    body = _decode(claims)
    assert body["iss"] == "cid"
    assert body["sub"] == "ana@example.com"
    assert body["aud"] == "tableau"
    assert body["exp"] - 1_700_000_000 <= 600
    assert "tableau:datasources:update" in body["scp"]
    expected = hmac.new(b"s3cr3t", f"{header}.{claims}".encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64encode(expected).rstrip(b"=").decode() == signature
    with pytest.raises(ValueError, match="needs client_id"):
        ConnectedAppJWT(client_id="cid")


def test_bad_credentials_give_an_authentication_error(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    rsps.add(
        responses.POST,
        f"{SERVER}/api/{V}/auth/signin",
        status=401,
        json=error_body("401001", "Signin Error", "Error signing in to Tableau Server"),
    )
    with pytest.raises(AuthenticationError, match=r"401001.*check the credentials") as caught:
        make_client(clock).sign_in()
    assert len(rsps.calls) == 1  # a 401 is not retried
    # Which token was refused, by its name; never a fragment of its secret.
    said = str(caught.value)
    assert "site 'sales' with personal access token 'ci' was refused" in said
    assert not any(PAT_SECRET[i : i + 6] in said for i in range(len(PAT_SECRET) - 5))


def test_context_manager_signs_out(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    add_signin(rsps)
    rsps.add(responses.POST, f"{SERVER}/api/{V}/auth/signout", status=204)
    with make_client(clock) as client:
        client.sign_in()
    assert rsps.calls[-1].request.url == f"{SERVER}/api/{V}/auth/signout"
    assert rsps.calls[-1].request.headers["X-Tableau-Auth"] == TOKEN


def test_a_pickled_client_is_made_again_from_its_settings_and_signs_in_afresh(
    rsps: responses.RequestsMock,
) -> None:
    import pickle

    add_signin(rsps)
    client = TableauClient(
        f"{SERVER}/#/site/sales/datasources",  # pasted from the browser: its site
        auth=PersonalAccessToken("ci", PAT_SECRET),
        api_version=V,
        chunk_size_mb=8,
        upload_streams=2,
    )
    client.sign_in()
    copy = pickle.loads(pickle.dumps(client))
    assert copy.settings == client.settings
    assert (copy.site, copy.server, copy.chunk_size) == ("sales", SERVER, 8 * 1024 * 1024)
    assert copy.upload_streams == 2
    assert TOKEN.encode() not in pickle.dumps(client)  # no session token travels
    assert len(rsps.calls) == 1  # the copy signs in only when it is used
    with pytest.raises(InvalidArgumentError, match="chunk_size_mb"):
        TableauClient(SERVER, auth=PersonalAccessToken("ci", PAT_SECRET), chunk_size_mb=65)


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "TABLEAU_SERVER_URL": SERVER,
        "TABLEAU_SITE": "sales",
        "TABLEAU_PAT_NAME": "n",
        "TABLEAU_PAT_SECRET": PAT_SECRET,
        "TABLEAU_VERIFY_TLS": "false",
    }
    client = TableauClient.from_env(env)
    assert client.site == "sales"
    assert isinstance(client.auth, PersonalAccessToken)
    assert client._http.verify is False
    assert TableauClient.from_env({**env, "TABLEAU_VERIFY_TLS": ""})._http.verify is True
    with pytest.raises(ValueError, match="TABLEAU_SERVER_URL is not set"):
        TableauClient.from_env({})
    with pytest.raises(ValueError, match="no Tableau credentials"):
        TableauClient.from_env({"TABLEAU_SERVER_URL": SERVER})
    with pytest.raises(ValueError, match="set both TABLEAU_PAT_NAME and TABLEAU_PAT_SECRET"):
        TableauClient.from_env({"TABLEAU_SERVER_URL": SERVER, "TABLEAU_PAT_NAME": "n"})


# -- error mapping ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        (
            {"status": 400, "json": error_body("400011", "Bad Request", "bad filter")},
            ApiError,
            "HTTP 400, code 400011: Bad Request (bad filter)",
        ),
        (
            {"status": 403, "json": error_body("403004", "Forbidden", "no permission")},
            ApiError,
            "code 403004",
        ),
        (
            {"status": 404, "json": error_body("404004", "Not Found", "gone")},
            NotFoundError,
            "HTTP 404",
        ),
        ({"status": 409, "json": error_body("409093", "Conflict", "dup")}, ApiError, "409093"),
        (
            {
                "status": 413,
                "body": "<html><body><h1>413 Request Entity Too Large</h1></body></html>",
                "content_type": "text/html",
            },
            ApiError,
            "unreadable error body: not JSON or XML: '<html><body><h1>413 Request Entity",
        ),
        (
            {"status": 200, "body": '{"job": {"id": "j1", "mode": "Asyn'},
            TransportError,
            "unreadable body: malformed JSON",
        ),
        (
            {"status": 200, "json": error_body("400000", "Bad Request", "in a 200")},
            ApiError,
            "HTTP 400, code 400000: Bad Request (in a 200)",
        ),
    ],
)
def test_error_mapping(
    rsps: responses.RequestsMock,
    clock: FakeClock,
    kwargs: dict[str, Any],
    error: type[Exception],
    words: str,
) -> None:
    add_signin(rsps)
    rsps.add(responses.GET, f"{BASE}/jobs/j1", **kwargs)
    with pytest.raises(error) as caught:
        make_client(clock).job("j1")
    assert words in str(caught.value)
    assert f"GET {BASE}/jobs/j1" in str(caught.value)
    assert clock.sleeps == []  # none of these is retried


# -- retries ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_transient_statuses_are_retried(
    rsps: responses.RequestsMock, clock: FakeClock, status: int
) -> None:
    add_signin(rsps)
    rsps.add(responses.GET, f"{BASE}/jobs/j1", status=status, json=error_body(f"{status}000"))
    rsps.add(responses.GET, f"{BASE}/jobs/j1", json={"job": {"id": "j1"}})
    assert make_client(clock).job("j1").id == "j1"
    assert clock.sleeps == [0.5]


@pytest.mark.parametrize("exc", [requests.ConnectionError("reset"), requests.ReadTimeout("slow")])
def test_connection_errors_and_timeouts_are_retried(
    rsps: responses.RequestsMock, clock: FakeClock, exc: Exception
) -> None:
    add_signin(rsps)
    rsps.add(responses.GET, f"{BASE}/jobs/j1", body=exc)
    rsps.add(responses.GET, f"{BASE}/jobs/j1", body=exc)
    rsps.add(responses.GET, f"{BASE}/jobs/j1", json={"job": {"id": "j1"}})
    assert make_client(clock).job("j1").id == "j1"
    assert clock.sleeps == [0.5, 1.0]


def test_retry_after_is_honoured(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    add_signin(rsps)
    rsps.add(
        responses.GET,
        f"{BASE}/jobs/j1",
        status=429,
        headers={"Retry-After": "7"},
        json=error_body("429000", "Too Many Requests"),
    )
    rsps.add(responses.GET, f"{BASE}/jobs/j1", json={"job": {"id": "j1"}})
    make_client(clock).job("j1")
    assert clock.sleeps == [7.0]


def test_exhausted_retries_say_how_many_attempts(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    add_signin(rsps)
    for _ in range(4):
        rsps.add(responses.GET, f"{BASE}/jobs/j1", body=requests.ConnectionError("down"))
    with pytest.raises(ConnectionFailedError, match="after 4 attempts") as caught:
        make_client(clock).job("j1")
    assert caught.value.attempts == 4
    assert isinstance(caught.value.__cause__, requests.ConnectionError)
    assert clock.sleeps == [0.5, 1.0, 2.0]


def test_total_time_bounds_retries(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    add_signin(rsps)
    for _ in range(4):
        rsps.add(
            responses.GET,
            f"{BASE}/jobs/j1",
            status=503,
            headers={"Retry-After": "25"},
            json=error_body("503000"),
        )
    client = make_client(clock, retry=RetryPolicy(max_attempts=10, max_total_seconds=60))
    with pytest.raises(ApiError, match="after 3 attempts"):
        client.job("j1")
    assert clock.sleeps == [25.0, 25.0]  # a third wait would pass the 60 s budget


def test_timeout_error_is_a_timeout(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    add_signin(rsps)
    for _ in range(4):
        rsps.add(responses.GET, f"{BASE}/jobs/j1", body=requests.ReadTimeout("slow"))
    with pytest.raises(RequestTimeoutError) as caught:
        make_client(clock).job("j1")
    assert isinstance(caught.value, TimeoutError)


def test_session_expiry_signs_in_again_once(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    add_signin(rsps, "t1")
    add_signin(rsps, "t2")
    rsps.add(responses.GET, f"{BASE}/jobs/j1", status=401, json=error_body("401002"))
    rsps.add(responses.GET, f"{BASE}/jobs/j1", json={"job": {"id": "j1"}})
    make_client(clock).job("j1")
    auths = [c.request.headers.get("X-Tableau-Auth") for c in rsps.calls]
    assert auths == [None, "t1", None, "t2"]


def test_second_expiry_in_a_row_blames_a_shared_pat(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    add_signin(rsps, "t1")
    add_signin(rsps, "t2")
    rsps.add(responses.GET, f"{BASE}/jobs/j1", status=401, json=error_body("401002"))
    rsps.add(responses.GET, f"{BASE}/jobs/j1", status=401, json=error_body("401002"))
    with pytest.raises(AuthenticationError, match="same personal access token"):
        make_client(clock).job("j1")


# -- data sources -------------------------------------------------------------------------------


def test_datasource_by_name_and_project(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    add_signin(rsps)
    sales, emea, finance, other_emea = (f"{n}0000000-0000-0000-0000-000000000000" for n in "1234")
    rsps.add(
        responses.GET,
        f"{BASE}/projects",
        json={
            "pagination": {"totalAvailable": "4"},
            "projects": {
                "project": [
                    {"id": sales, "name": "Sales"},
                    {"id": emea, "name": "EMEA", "parentProjectId": sales},
                    {"id": finance, "name": "Finance"},
                    {"id": other_emea, "name": "EMEA", "parentProjectId": finance},
                ]
            },
        },
    )
    rsps.add(
        responses.GET,
        f"{BASE}/datasources",
        json={
            "pagination": {"totalAvailable": "2"},
            "datasources": {
                "datasource": [
                    # Both projects are named EMEA: only the project's LUID tells them apart.
                    {"id": DS, "name": "Orders", "project": {"id": other_emea, "name": "EMEA"}},
                    {"id": "x" + DS[1:], "name": "Orders", "project": {"id": emea, "name": "EMEA"}},
                ]
            },
        },
        match=[
            matchers.query_param_matcher(
                {
                    "filter": "name:eq:Orders,projectName:eq:EMEA",
                    "pageSize": "100",
                    "pageNumber": "1",
                }
            )
        ],
    )
    ref = make_client(clock).datasource("Orders", project="Sales/EMEA")
    assert ref == DataSourceRef("x" + DS[1:], "Orders", "EMEA")
    assert ref.project_id == emea


def test_a_project_that_is_no_name_is_refused_before_any_listing(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    add_signin(rsps)
    with pytest.raises(InvalidArgumentError, match=r"project= takes a name, a path or a LUID"):
        make_client(clock).datasource("Orders", project=7)  # type: ignore[arg-type]
    # Signed in, then nothing: no data source or project was listed.
    assert [c.request.url for c in rsps.calls if "/datasources" in (c.request.url or "")] == []


def test_datasource_in_several_projects_is_ambiguous(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    add_signin(rsps)
    rsps.add(
        responses.GET,
        f"{BASE}/datasources",
        json=json.loads((FIXTURES / "datasources_two_projects.json").read_text()),
    )
    with pytest.raises(ApiError, match=r"in projects 'Finance', 'Sales'.*pass project=") as caught:
        make_client(clock).datasource("Orders")
    # The server listed both without complaint: the error carries no HTTP status.
    assert caught.value.status is None
    assert "HTTP" not in str(caught.value)


def test_datasource_not_found_names_the_site(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    add_signin(rsps)
    rsps.add(
        responses.GET,
        f"{BASE}/datasources",
        json={"pagination": {"totalAvailable": "0"}, "datasources": {}},
    )
    with pytest.raises(
        NotFoundError, match="no data source named 'Nope' on site 'sales'"
    ) as caught:
        make_client(clock).datasource("Nope")
    assert caught.value.status is None
    assert str(caught.value).startswith("Data source not found (no data source named")


def test_datasource_by_luid_with_connection(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    add_signin(rsps)
    rsps.add(
        responses.GET,
        f"{BASE}/datasources/{DS}",
        json={"datasource": {"id": DS, "name": "Orders", "project": {"name": "Sales"}}},
    )
    rsps.add(
        responses.GET,
        f"{BASE}/datasources/{DS}/connections",
        json={"connections": {"connection": [{"id": "c-1"}, {"id": "c-2"}]}},
    )
    ref = make_client(clock).datasource(DS, connection="c-2")
    assert ref.connection_id == "c-2"
    with pytest.raises(NotFoundError, match=r"no connection 'c-9'.*c-1, c-2"):
        make_client(clock).datasource(DS, connection="c-9")


# -- uploads ------------------------------------------------------------------------------------

SESSION = "7720:170fe6b1c1c7422dadff20f944d58a52-1:0"


def add_initiate(rsps: responses.RequestsMock, session: str = SESSION) -> None:
    rsps.add(
        responses.POST,
        f"{BASE}/fileUploads",
        status=201,
        json={"fileUpload": {"uploadSessionId": session, "fileSize": "0"}},
    )


def append_url(session: str = SESSION) -> str:
    return f"{BASE}/fileUploads/{session.replace(':', '%3A')}"


def test_upload_sends_exact_multipart_chunks(
    rsps: responses.RequestsMock, clock: FakeClock, tmp_path: Path
) -> None:
    data = bytes(range(256)) * 10_000  # 2.44 MB
    path = tmp_path / "payload.hyper"
    path.write_bytes(data)
    add_signin(rsps)
    add_initiate(rsps)
    sizes = iter(["1", "2", "2"])
    rsps.add_callback(
        responses.PUT,
        append_url(),
        callback=lambda req: (
            200,
            {},
            json.dumps({"fileUpload": {"uploadSessionId": SESSION, "fileSize": next(sizes)}}),
        ),
    )
    progress: list[tuple[int, int]] = []
    client = make_client(clock, chunk_size_mb=1, upload_streams=1)  # one block at a time
    assert client.upload(path, progress=lambda s, t: progress.append((s, t))) == SESSION
    appends = [c.request for c in rsps.calls if c.request.method == "PUT"]
    assert len(appends) == 3
    rebuilt = b""
    for req in appends:
        ctype = req.headers["Content-Type"]
        assert ctype.startswith("multipart/mixed; boundary=")
        boundary = ctype.split("boundary=")[1]
        head, tail = multipart_framing(boundary)
        body = req.body if isinstance(req.body, bytes) else req.body.read()  # type: ignore[union-attr]
        assert body.startswith(head)
        assert body.endswith(tail)
        assert int(req.headers["Content-Length"]) == len(body)
        assert head.decode() == (
            f'--{boundary}\r\nContent-Disposition: name="request_payload"\r\n'
            "Content-Type: text/xml\r\n\r\n\r\n"
            f'--{boundary}\r\nContent-Disposition: name="tableau_file"; '
            'filename="payload.hyper"\r\nContent-Type: application/octet-stream\r\n\r\n'
        )
        rebuilt += body[len(head) : -len(tail)]
    assert rebuilt == data
    assert progress == [
        (0, len(data)),
        (1048576, len(data)),
        (2097152, len(data)),
        (len(data), len(data)),
    ]


@pytest.mark.parametrize(
    "failure",
    [
        {"body": requests.ConnectionError("reset mid-body")},
        {"status": 500, "json": error_body("500000")},
        {"body": requests.ReadTimeout("slow")},
    ],
)
def test_failed_append_is_never_replayed_a_fresh_session_starts(
    rsps: responses.RequestsMock, clock: FakeClock, tmp_path: Path, failure: dict[str, Any]
) -> None:
    path = tmp_path / "p.hyper"
    path.write_bytes(b"x" * 100)
    add_signin(rsps)
    add_initiate(rsps, "s:1")
    add_initiate(rsps, "s:2")
    rsps.add(responses.PUT, append_url("s:1"), **failure)
    rsps.add(
        responses.PUT,
        append_url("s:2"),
        json={"fileUpload": {"uploadSessionId": "s:2", "fileSize": "0"}},
    )
    assert make_client(clock).upload(path) == "s:2"
    puts = [c.request.url for c in rsps.calls if c.request.method == "PUT"]
    assert puts == [append_url("s:1"), append_url("s:2")]


def test_upload_restarts_are_bounded(
    rsps: responses.RequestsMock, clock: FakeClock, tmp_path: Path
) -> None:
    path = tmp_path / "p.hyper"
    path.write_bytes(b"x" * 100)
    add_signin(rsps)
    for i in range(3):
        add_initiate(rsps, f"s:{i}")
        rsps.add(responses.PUT, append_url(f"s:{i}"), status=503, json=error_body("503000"))
    with pytest.raises(ApiError, match="gave up after 2 fresh upload sessions"):
        make_client(clock, max_upload_restarts=2).upload(path)


def test_size_mismatch_restarts_the_upload(
    rsps: responses.RequestsMock, clock: FakeClock, tmp_path: Path
) -> None:
    path = tmp_path / "p.hyper"
    path.write_bytes(b"x" * 100)
    add_signin(rsps)
    add_initiate(rsps, "s:1")
    add_initiate(rsps, "s:2")
    rsps.add(responses.PUT, append_url("s:1"), json={"fileUpload": {"fileSize": "7"}})
    rsps.add(responses.PUT, append_url("s:2"), json={"fileUpload": {"fileSize": "0"}})
    assert make_client(clock).upload(path) == "s:2"


def test_rejected_append_is_an_error(
    rsps: responses.RequestsMock, clock: FakeClock, tmp_path: Path
) -> None:
    path = tmp_path / "p.hyper"
    path.write_bytes(b"x")
    add_signin(rsps)
    add_initiate(rsps)
    rsps.add(responses.PUT, append_url(), status=400, json=error_body("400000", "Bad Request"))
    with pytest.raises(ApiError, match="400000"):
        make_client(clock).upload(path)


def test_chunk_size_is_capped_at_64_mb(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="chunk_size_mb"):
        make_client(clock, chunk_size_mb=65)


# -- updates ------------------------------------------------------------------------------------

BATCH = [Upsert(target_table="Extract", source_table="upserts", condition=keys_match("id"))]


def add_patch(rsps: responses.RequestsMock, url: str | None = None, **kw: Any) -> None:
    kw.setdefault("status", 202)
    if "body" not in kw:
        kw.setdefault(
            "json",
            {
                "job": {
                    "id": "job-1",
                    "mode": "Asynchronous",
                    "type": "UpdateUploadedFile",
                    "createdAt": "t",
                }
            },
        )
    rsps.add(responses.PATCH, url or f"{BASE}/datasources/{DS}/data", **kw)


def test_update_sends_actions_request_id_and_session(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    add_signin(rsps)
    add_patch(rsps)
    client = make_client(clock)
    job = client.update_data(DataSourceRef(DS), BATCH, upload_session_id=SESSION)
    assert job.id == "job-1"
    req = rsps.calls[-1].request
    assert (
        req.url == f"{BASE}/datasources/{DS}/data?uploadSessionId=7720%3A170fe6b1c1c7422d"
        "adff20f944d58a52-1%3A0"
    )
    assert req.headers["Content-Type"] == "application/json"
    assert req.headers["X-Tableau-Auth"] == TOKEN
    assert json.loads(req.body or "") == {
        "actions": [
            {
                "action": "upsert",
                "target-schema": "Extract",
                "target-table": "Extract",
                "source-schema": "Extract",
                "source-table": "upserts",
                "condition": {"op": "eq", "target-col": "id", "source-col": "id"},
            }
        ]
    }
    # Without request_id each call is a new update: a fresh random RequestID.
    rid = req.headers["RequestID"]
    assert uuid.UUID(rid).version == 4
    client.update_data(DataSourceRef(DS), BATCH, upload_session_id=SESSION)
    assert rsps.calls[-1].request.headers["RequestID"] != rid


def test_update_without_source_omits_the_upload_session(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    add_signin(rsps)
    add_patch(rsps, f"{BASE}/datasources/{DS}/connections/c-1/data")
    make_client(clock).update_data(
        DataSourceRef(DS, connection_id="c-1"),
        [Delete(target_table="Extract", condition=target("region") == "EU")],
        upload_session_id=SESSION,
    )
    assert "uploadSessionId" not in str(rsps.calls[-1].request.url)


def test_update_retries_keep_the_same_request_id(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    add_signin(rsps)
    add_patch(rsps, body=requests.ConnectionError("dropped"))
    add_patch(rsps, status=502, json=error_body("502000"))
    add_patch(rsps)
    make_client(clock).update_data(DS, BATCH, upload_session_id=SESSION, request_id="my-id")
    ids = [c.request.headers["RequestID"] for c in rsps.calls if c.request.method == "PATCH"]
    assert ids == ["my-id"] * 3


def test_update_validates_before_any_request(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    client = make_client(clock)
    with pytest.raises(ValueError, match="pass upload_session_id"):
        client.update_data(DS, BATCH)
    with pytest.raises(ValueError, match="invalid action batch"):
        client.update_data(
            DS, [{"action": "insert", "target-table": "T"}], upload_session_id=SESSION
        )
    assert len(rsps.calls) == 0


# -- jobs ---------------------------------------------------------------------------------------


def add_job(rsps: responses.RequestsMock, **fields: Any) -> None:
    rsps.add(responses.GET, f"{BASE}/jobs/job-1", json={"job": {"id": "job-1", **fields}})


def test_wait_polls_with_growing_waits(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    add_signin(rsps)
    for _ in range(4):
        add_job(rsps, progress="50")
    add_job(rsps, finishCode="0", completedAt="t")
    job = make_client(clock).job("job-1")
    assert job.wait(timeout=600).succeeded
    # client.job() fetched once; wait() polls at once, then after growing waits.
    assert clock.sleeps == [0.05, 0.1, 0.2]


def test_wait_expecting_a_time_polls_near_it_then_grows(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    add_signin(rsps)
    for _ in range(10):
        add_job(rsps, progress="50")
    add_job(rsps, finishCode="0", completedAt="t")
    client = make_client(clock)
    for seconds in (0.7, 0.8, 5.0):
        client.job_times.note("ds-1", seconds)
    job = client.job("job-1")
    assert job.wait(timeout=600, learn_as="ds-1").succeeded
    # The median of the last three, 0.8 s: no poll at once; polls at 0.76 and 0.84 s, then
    # 0.92, 1.0, 1.12, 1.28, 1.44 and 1.6 s, then waits doubling from 0.8 s.
    assert clock.sleeps == pytest.approx([0.76, 0.08, 0.08, 0.08, 0.12, 0.16, 0.16, 0.16, 0.8, 1.6])
    # Seen finished at 4.0 s, unfinished at 2.4 s: taken as 3.2 s; the three kept are now
    # 0.8, 5.0 and 3.2.
    assert client.job_times.expected("ds-1") == pytest.approx(3.2)
    assert client.job_times.expected("ds-2") is None


@pytest.mark.parametrize(
    ("policy", "noted"),
    [
        (PollPolicy(), 0.05),  # within the first wait: the usual waits
        (PollPolicy(), None),  # nothing learned yet
        (PollPolicy(learn=False), 0.8),
    ],
)
def test_wait_without_a_usable_expectation_polls_as_usual(
    rsps: responses.RequestsMock, clock: FakeClock, policy: PollPolicy, noted: float | None
) -> None:
    add_signin(rsps)
    for _ in range(4):
        add_job(rsps, progress="50")
    add_job(rsps, finishCode="0", completedAt="t")
    client = make_client(clock, poll=policy)
    if noted is not None:
        client.job_times.note("ds-1", noted)
    assert client.job("job-1").wait(timeout=600, learn_as="ds-1").succeeded
    assert clock.sleeps == [0.05, 0.1, 0.2]


def test_a_failed_job_is_not_learned(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    add_signin(rsps)
    add_job(rsps, progress="50")
    add_job(rsps, finishCode="1", notes="no")
    client = make_client(clock)
    with pytest.raises(JobFailedError):
        client.job("job-1").wait(timeout=600, learn_as="ds-1")
    assert client.job_times.expected("ds-1") is None


def test_expected_polls_keep_to_the_longest_wait_and_skip_close_marks() -> None:
    # 240 s expected, 30 s the longest wait: no wait above it, and every mark is reached.
    waits = PollPolicy().expecting(240.0)
    taken = [waits() for _ in range(20)]
    assert max(taken) == 30.0
    marks = {round(sum(taken[: i + 1]), 6) for i in range(len(taken))}
    assert {228.0, 252.0, 276.0, 300.0, 336.0, 384.0, 432.0, 480.0} <= marks
    # 0.06 s expected with 0.05 s first waits: marks closer than 0.025 s to the last poll
    # are skipped, so polls stay at least that far apart: 0.057, then 0.084 (0.063, 0.069
    # and 0.075 skipped), 0.12, then waits doubling from 0.06.
    close = PollPolicy().expecting(0.06)
    assert [round(close(), 6) for _ in range(4)] == [0.057, 0.027, 0.036, 0.06]


def _seen_after(
    waits: Callable[[], float], took: float, *, at_once: bool
) -> tuple[float, int, float]:
    """When a job that takes ``took`` seconds is seen finished, after how many polls, and
    the time then learned (``at_once``: a first poll before any wait)."""
    at, polls, unfinished = 0.0, 1 if at_once else 0, 0.0 if at_once else None
    while at < took:
        if polls:
            unfinished = at
        at += waits()
        polls += 1
    return at, polls, learned_time(unfinished, at)


def _wait(policy: PollPolicy, times: JobTimes, took: float) -> tuple[float, int, float]:
    expected = times.expected("ds")
    return _seen_after(policy.expecting(expected), took, at_once=not policy.usable(expected))


@pytest.mark.parametrize("took", [0.12, 0.7, 3.0, 12.0, 95.0])
def test_learned_polls_see_a_steady_stream_of_jobs_sooner(took: float) -> None:
    policy, times = PollPolicy(), JobTimes()
    for n in range(8):
        seen, polls, learned = _wait(policy, times, took)
        times.note("ds", learned)
        if n >= 3:
            # Seen at most about a tenth of its length late (a short job: at most the first
            # wait), in one or two polls (and one more per longest wait it lasts).
            assert seen - took <= max(0.1 * took, policy.initial) + 1e-9
            assert polls <= 2 + int(took // policy.maximum)
    assert times.expected("other") is None  # learned per data source


@pytest.mark.parametrize("took", [0.7, 3.0, 12.0])
def test_learned_polls_follow_jobs_that_vary(took: float) -> None:
    policy, times = PollPolicy(), JobTimes()
    for n in range(9):
        length = took * (0.9, 1.0, 1.1)[n % 3]  # lengths vary by 10% around ``took``
        seen, polls, learned = _wait(policy, times, length)
        times.note("ds", learned)
        if n >= 3:
            assert seen - length <= 0.25 * length + 1e-9
            assert polls <= 4


def test_one_slow_job_does_not_make_the_next_ones_late() -> None:
    policy, times = PollPolicy(), JobTimes()
    for length in (2.0, 2.0, 2.0, 40.0):
        times.note("ds", _wait(policy, times, length)[2])
    seen, _, _ = _wait(policy, times, 2.0)
    assert seen - 2.0 <= 0.5


def test_wait_caps_the_wait_at_30_seconds(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    add_signin(rsps)
    for _ in range(16):
        add_job(rsps)
    add_job(rsps, finishCode="0")
    make_client(clock).job("job-1").wait(timeout=3600)
    assert max(clock.sleeps) == 30.0
    assert clock.sleeps[-1] == 30.0


def test_failed_job_raises_with_the_notes(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    add_signin(rsps)
    rsps.add(
        responses.GET,
        f"{BASE}/jobs/job-1",
        json=json.loads((FIXTURES / "job_failed.json").read_text()),
    )
    job = make_client(clock).job("job-1")
    assert job.model_extra == {"extraServerField": {"kept": True}}
    with pytest.raises(JobFailedError, match=r"Extract\.Missing \(errorCode=410012\)"):
        job.wait()


def test_cancelled_job(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    add_signin(rsps)
    add_job(rsps, finishCode="2")
    with pytest.raises(JobCancelledError, match="job-1"):
        make_client(clock).job("job-1").wait()


def test_deadline_raises_a_timeout_carrying_the_job_id(
    rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    add_signin(rsps)
    for _ in range(30):
        add_job(rsps)
    job = make_client(clock).job("job-1")
    with pytest.raises(JobTimeoutError) as caught:
        job.wait(timeout=5)
    assert caught.value.job_id == "job-1"
    assert isinstance(caught.value, TimeoutError)
    assert sum(clock.sleeps) == pytest.approx(5)
    add_job(rsps, finishCode="0")
    rsps.replace(
        responses.GET, f"{BASE}/jobs/job-1", json={"job": {"id": "job-1", "finishCode": "0"}}
    )
    assert job.wait(timeout=5).succeeded  # the caller can wait again


def test_cancel(rsps: responses.RequestsMock, clock: FakeClock) -> None:
    add_signin(rsps)
    add_job(rsps)
    rsps.add(responses.PUT, f"{BASE}/jobs/job-1", json={"job": {"id": "job-1"}})
    job = make_client(clock).job("job-1")
    job.cancel()
    assert [c.request.method for c in rsps.calls][-2:] == ["PUT", "GET"]


# -- secrets ------------------------------------------------------------------------------------


def test_no_secret_in_logs_reprs_or_errors(
    rsps: responses.RequestsMock, clock: FakeClock, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    secrets = [PAT_SECRET, TOKEN, "pw-secret", "jwt-s3cret"]
    add_signin(rsps)
    add_initiate(rsps)
    rsps.add(responses.PUT, append_url(), json={"fileUpload": {"fileSize": "0"}})
    add_patch(rsps, status=503, json=error_body("503000"))
    add_patch(rsps)
    add_job(rsps, finishCode="1", statusNotes="failed")
    rsps.add(responses.GET, f"{BASE}/jobs/bad", status=401, json=error_body("401002"))
    rsps.add(responses.POST, f"{SERVER}/api/{V}/auth/signin", status=401, json=error_body("401001"))
    client = make_client(clock)
    path = tmp_path / "p.hyper"
    path.write_bytes(b"data")
    texts = [repr(client), str(client.auth), repr(client.auth)]
    session = client.upload(path)
    job = client.update_data(DS, BATCH, upload_session_id=session)
    texts.append(repr(job))
    calls: list[Callable[[], object]] = [job.wait, lambda: client.job("bad")]
    for call in calls:
        with pytest.raises(Exception) as caught:
            call()
        texts += [str(caught.value), repr(caught.value)]
    for auth in (
        UsernamePassword("u", "pw-secret"),
        ConnectedAppJWT(client_id="c", secret_id="k", secret_value="jwt-s3cret", username="u"),
    ):
        texts += [repr(auth), str(auth), str(auth.model_dump())]
    texts += [r.getMessage() for r in caplog.records]
    joined = "\n".join(texts)
    assert "signed in" in joined  # the logs were captured
    for secret in secrets:
        assert secret not in joined, secret

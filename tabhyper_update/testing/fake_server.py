"""A fake Tableau Server on 127.0.0.1 that applies updates to ``.hyper`` files with real Hyper.

>>> from tabhyper_update.testing import FakeTableauServer
>>> with FakeTableauServer(pats={"ci": "secret"}) as server:  # doctest: +SKIP
...     luid = server.add_datasource("Orders", "orders.hyper", project="Sales")
...     client = TableauClient(server.url, "", PersonalAccessToken("ci", "secret"))

It answers the REST endpoints the SDK uses the way the real server does: XML by default,
JSON when asked (``Accept: application/json``), Tableau's error bodies and codes. Updates
are queued as jobs; one worker per data source applies them in order with
:func:`tabhyper_update.local.apply`. Faults can be injected per route for tests.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import queue
import re
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar
from urllib.parse import parse_qs, unquote, urlsplit

from ..actions import ActionBatch
from ..errors import ApplyError, InvalidActionBatchError
from ..local import apply as apply_locally
from .wire import MultipartError, encode, parse_multipart, parse_xml_request

__all__ = ["FakeTableauServer", "Fault", "Request", "Response"]

log = logging.getLogger("tabhyper_update.testing")

MB = 1024 * 1024


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def wants_json(self) -> bool:
        return "json" in self.headers.get("accept", "")


@dataclass
class Response:
    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Fault handling: "before" drops the connection without an answer, "after" once the
    #: request was processed (the client cannot tell whether it was).
    drop: str | None = None
    delay: float = 0.0
    #: Bytes sent as they are (a malformed answer), with ``headers["Content-Type"]``.
    raw: bytes | None = None


@dataclass
class Fault:
    """Make requests to ``route`` fail: the ``nth`` matching one (1-based, counted from when
    the fault was added) and the ``times - 1`` after it."""

    route: str
    nth: int = 1
    times: int = 1
    status: int | None = None
    code: str | None = None
    retry_after: float | None = None
    drop: str | None = None  # "before" or "after"
    delay: float = 0.0  # seconds before answering (after processing)
    expire_token: bool = False
    #: Answer with these bytes instead (e.g. an HTML error page or truncated JSON), with
    #: ``status`` (default 200) and ``content_type``; the request is not processed.
    body: bytes | None = None
    content_type: str = "text/html"
    seen: int = 0
    fired: int = 0

    def matches(self) -> bool:
        self.seen += 1
        if self.seen >= self.nth and self.fired < self.times:
            self.fired += 1
            return True
        return False


class ApiFailure(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        summary: str,
        detail: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(summary)
        self.status = status
        self.code = code
        self.summary = summary
        self.detail = detail
        self.headers = dict(headers or {})


@dataclass
class _DataSource:
    id: str
    name: str
    project: str
    project_id: str
    path: Path
    connections: list[str]
    queue: queue.Queue[_Job | None] = field(default_factory=queue.Queue)
    worker: threading.Thread | None = None


@dataclass
class _Job:
    id: str
    datasource: _DataSource
    connection: str | None
    batch: ActionBatch
    upload: Path | None
    created_at: str
    started_at: str | None = None
    completed_at: str | None = None
    finish_code: int | None = None
    notes: str | None = None
    progress: int = 0
    cancel_requested: bool = False


@dataclass
class _Session:
    token: str
    user_id: str
    credential: str  # PAT name, user name or connected-app subject
    expires_at: float


def _now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _b64url_decode(part: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


class FakeTableauServer:
    """A Tableau Server stand-in for tests and demos (see the module docstring).

    Parameters name the accepted credentials (``pats`` name → secret, ``users`` name →
    password, ``connected_app`` with ``client_id``, ``secret_id``, ``secret_value``), the
    REST ``api_version``, the session ``token_lifetime`` in seconds, the RequestID
    de-duplication ``dedup_window`` in seconds (24 h) and ``max_upload_mb`` (100).
    """

    def __init__(
        self,
        *,
        pats: Mapping[str, str] | None = None,
        users: Mapping[str, str] | None = None,
        connected_app: Mapping[str, str] | None = None,
        site: str = "",
        api_version: str = "3.24",
        product_version: str = "2024.2.0",
        token_lifetime: float = 240 * 60,
        job_delay: float = 0.0,
        dedup_window: float = 24 * 3600,
        max_upload_mb: float = 100,
        directory: str | os.PathLike[str] | None = None,
        serve: bool = True,
        store_uploads: bool = True,
    ) -> None:
        self.pats = dict(pats or {})
        self.users = dict(users or {})
        self.connected_app = dict(connected_app or {})
        self.site = site
        self.site_id = str(uuid.uuid4())
        self.api_version = api_version
        self.product_version = product_version
        self.token_lifetime = token_lifetime
        self.dedup_window = dedup_window
        #: Seconds each job waits in the queue before it runs (a busy server).
        self.job_delay = job_delay
        self.max_upload_mb = max_upload_mb
        self._owned_dir = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="tabhyper-fake-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "uploads").mkdir(exist_ok=True)
        self._serve = serve
        #: False counts upload bytes without keeping them (for transfer benchmarks); an
        #: update that reads such an upload is refused.
        self.store_uploads = store_uploads
        self._lock = threading.RLock()
        self._sessions: dict[str, _Session] = {}
        self._sources: dict[str, _DataSource] = {}
        self._uploads: dict[str, dict[str, Any]] = {}
        self._jobs: dict[str, _Job] = {}
        self._request_ids: dict[str, tuple[float, str]] = {}
        self._faults: list[Fault] = []
        self.counts: Counter[str] = Counter()
        #: Every secret that crossed the wire (PAT secrets, passwords, JWTs, session tokens),
        #: so that tests can check that none of them leaked into logs or messages.
        self.secrets_seen: set[str] = set()
        self.jobs_run: Counter[str] = Counter()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = "http://tableau.fake"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> FakeTableauServer:
        if self._serve and self._httpd is None:
            handler = type("Handler", (_Handler,), {"app": self})
            self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            self._httpd.daemon_threads = True
            port = self._httpd.server_address[1]
            self.url = f"http://127.0.0.1:{port}"
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, name="fake-tableau", daemon=True
            )
            self._thread.start()
            log.info("fake Tableau server on %s", self.url)
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        for ds in self._sources.values():
            if ds.worker is not None:
                ds.queue.put(None)
                ds.worker.join(timeout=30)
                ds.worker = None
        if self._owned_dir:
            shutil.rmtree(self.directory, ignore_errors=True)
        else:
            shutil.rmtree(self.directory / "uploads", ignore_errors=True)

    def __enter__(self) -> FakeTableauServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- set-up and inspection ---------------------------------------------------------------------
    def add_datasource(
        self,
        name: str,
        hyper_path: str | os.PathLike[str],
        *,
        project: str = "Default",
        connections: int = 1,
    ) -> str:
        """Publish a copy of ``hyper_path`` as a live-to-Hyper data source; returns its LUID."""
        luid = str(uuid.uuid4())
        path = self.directory / f"{luid}.hyper"
        shutil.copyfile(hyper_path, path)
        path.chmod(0o600)
        ds = _DataSource(
            luid,
            name,
            project,
            str(uuid.uuid5(uuid.NAMESPACE_URL, project)),
            path,
            [str(uuid.uuid4()) for _ in range(connections)],
        )
        with self._lock:
            self._sources[luid] = ds
        return luid

    def datasource_path(self, luid: str) -> Path:
        return self._sources[luid].path

    def connections(self, luid: str) -> list[str]:
        return list(self._sources[luid].connections)

    def inject(self, route: str, **kwargs: Any) -> Fault:
        """Add a :class:`Fault` for ``route`` (e.g. ``"append"``, ``"update"``, ``"job"``)."""
        fault = Fault(route, **kwargs)
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def expire_tokens(self) -> None:
        """Make every live session token expire now (next use answers 401002)."""
        with self._lock:
            for session in self._sessions.values():
                session.expires_at = 0

    def age_jobs(self, seconds: float) -> None:
        """Move every job's times, and the RequestIDs it remembers, ``seconds`` into the past
        (as if that much time had passed since they were submitted)."""

        def shift(value: str | None) -> str | None:
            if value is None:
                return None
            when = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
            return (when - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")

        with self._lock:
            for job in self._jobs.values():
                job.created_at = shift(job.created_at) or job.created_at
                job.started_at = shift(job.started_at)
                job.completed_at = shift(job.completed_at)
            for rid, (when, job_id) in list(self._request_ids.items()):
                self._request_ids[rid] = (when - seconds, job_id)

    def forget_jobs(self) -> int:
        """Forget every finished job and the RequestIDs that led to them, as a server does
        once its retention has passed; returns how many jobs were forgotten."""
        with self._lock:
            gone = {j for j, job in self._jobs.items() if job.finish_code is not None}
            for job_id in gone:
                del self._jobs[job_id]
            for rid, (_, job_id) in list(self._request_ids.items()):
                if job_id in gone:
                    del self._request_ids[rid]
            return len(gone)

    def wait_idle(self, timeout: float = 30) -> None:
        """Wait until every queued job has finished."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if all(j.finish_code is not None for j in self._jobs.values()):
                    return
            time.sleep(0.01)
        raise TimeoutError("jobs still running")

    @property
    def jobs(self) -> list[dict[str, Any]]:
        with self._lock:
            return [self._job_body(j) for j in self._jobs.values()]

    # -- request handling --------------------------------------------------------------------------
    _ROUTES: ClassVar[list[tuple[str, str, re.Pattern[str]]]] = [
        (m, name, re.compile(p))
        for m, name, p in [
            ("GET", "serverinfo", r"^/api/[\d.]+/serverinfo$"),
            ("POST", "signin", r"^/api/[\d.]+/auth/signin$"),
            ("POST", "signout", r"^/api/[\d.]+/auth/signout$"),
            ("GET", "datasources", r"^/api/[\d.]+/sites/(?P<site>[^/]+)/datasources$"),
            ("GET", "datasource", r"^/api/[\d.]+/sites/(?P<site>[^/]+)/datasources/(?P<ds>[^/]+)$"),
            (
                "GET",
                "connections",
                r"^/api/[\d.]+/sites/(?P<site>[^/]+)/datasources/(?P<ds>[^/]+)/connections$",
            ),
            ("POST", "initiate", r"^/api/[\d.]+/sites/(?P<site>[^/]+)/fileUploads/?$"),
            ("PUT", "append", r"^/api/[\d.]+/sites/(?P<site>[^/]+)/fileUploads/(?P<upload>[^/]+)$"),
            (
                "PATCH",
                "update",
                r"^/api/[\d.]+/sites/(?P<site>[^/]+)/datasources/(?P<ds>[^/]+)"
                r"(?:/connections/(?P<conn>[^/]+))?/data$",
            ),
            ("GET", "job", r"^/api/[\d.]+/sites/(?P<site>[^/]+)/jobs/(?P<job>[^/]+)$"),
            ("PUT", "cancel", r"^/api/[\d.]+/sites/(?P<site>[^/]+)/jobs/(?P<job>[^/]+)$"),
        ]
    ]

    def route_of(self, method: str, path: str) -> tuple[str, dict[str, str]] | None:
        for m, name, pattern in self._ROUTES:
            match = pattern.match(path)
            if match and m == method:
                return name, {k: unquote(v) for k, v in match.groupdict().items() if v}
        return None

    def handle(self, request: Request) -> Response:
        """Answer one request (shared by the HTTP server and the responses adapter)."""
        found = self.route_of(request.method, request.path)
        if found is None:
            return self._failure(
                ApiFailure(
                    404,
                    "404000",
                    "Resource Not Found",
                    f"no endpoint {request.method} {request.path}",
                )
            )
        route, params = found
        fault: Fault | None = None
        with self._lock:
            self.counts[route] += 1
            for candidate in self._faults:
                if candidate.route == route and candidate.matches():
                    fault = candidate
                    break
        if fault is not None:
            if fault.expire_token:
                self.expire_tokens()
            if fault.drop == "before":
                return Response(0, drop="before")
            if fault.body is not None:
                return Response(
                    fault.status or 200,
                    headers={"Content-Type": fault.content_type},
                    raw=fault.body,
                )
            if fault.status is not None:
                headers = {}
                if fault.retry_after is not None:
                    headers["Retry-After"] = f"{fault.retry_after:g}"
                return self._failure(
                    ApiFailure(
                        fault.status,
                        fault.code or f"{fault.status}000",
                        "Injected failure",
                        f"fault injected on route {route}",
                        headers,
                    )
                )
        try:
            handler: Any = getattr(self, f"_{route}")
            response: Response = handler(request, **params)
        except ApiFailure as failure:
            response = self._failure(failure)
        except Exception as err:  # a bug in the fake must still answer like a server
            log.exception("fake server error on %s", route)
            response = self._failure(
                ApiFailure(500, "500000", "Internal Server Error", type(err).__name__)
            )
        if fault is not None:
            response.drop = fault.drop
            response.delay = fault.delay
        return response

    @staticmethod
    def _failure(failure: ApiFailure) -> Response:
        return Response(
            failure.status,
            {"error": {"code": failure.code, "summary": failure.summary, "detail": failure.detail}},
            headers=failure.headers,
        )

    # -- auth ------------------------------------------------------------------------------------
    def _authorise(self, request: Request, site: str | None = None) -> _Session:
        token = request.headers.get("x-tableau-auth")
        if not token:
            raise ApiFailure(
                401, "401000", "Authentication required", "the X-Tableau-Auth header is missing"
            )
        with self._lock:
            session = self._sessions.get(token)
            if session is None or session.expires_at < time.time():
                raise ApiFailure(
                    401,
                    "401002",
                    "Unauthorized Access",
                    "Invalid authentication credentials were provided",
                )
        if site is not None and site != self.site_id:
            raise ApiFailure(
                403, "403000", "Forbidden", "the session's site is not the one in the URL"
            )
        return session

    def _signin_body(self, request: Request) -> dict[str, Any]:
        text = request.body.decode("utf-8", errors="replace")
        try:
            if text.lstrip().startswith("<"):
                return parse_xml_request(text)
            data = json.loads(text)
            return data if isinstance(data, dict) else {}
        except (ValueError, SyntaxError):
            raise ApiFailure(400, "400000", "Bad Request", "malformed sign-in body") from None

    def _check_jwt(self, token: str) -> str:
        app = self.connected_app
        try:
            head_b64, claims_b64, sig_b64 = token.split(".")
            header = json.loads(_b64url_decode(head_b64))
            claims = json.loads(_b64url_decode(claims_b64))
        except (ValueError, TypeError):
            raise ApiFailure(401, "401001", "Signin Error", "malformed JWT") from None
        expected = hmac.new(
            str(app.get("secret_value", "")).encode(),
            f"{head_b64}.{claims_b64}".encode(),
            hashlib.sha256,
        ).digest()
        ok = (
            app
            and header.get("alg") == "HS256"
            and header.get("kid") == app.get("secret_id")
            and claims.get("iss") == app.get("client_id")
            and claims.get("aud") == "tableau"
            and hmac.compare_digest(expected, _b64url_decode(sig_b64))
            and 0 < float(claims.get("exp", 0)) - time.time() <= 600 + 5
        )
        if not ok:
            raise ApiFailure(401, "401001", "Signin Error", "the JWT was not accepted")
        return str(claims.get("sub"))

    def _signin(self, request: Request) -> Response:
        creds = self._signin_body(request).get("credentials") or {}
        with self._lock:
            for key in ("personalAccessTokenSecret", "password", "jwt"):
                if creds.get(key):
                    self.secrets_seen.add(str(creds[key]))
        site = (creds.get("site") or {}).get("contentUrl", "")
        who: str | None = None
        if "personalAccessTokenName" in creds:
            name = creds.get("personalAccessTokenName")
            if self.pats.get(str(name)) == creds.get("personalAccessTokenSecret"):
                who = f"pat:{name}"
        elif "jwt" in creds:
            who = f"jwt:{self._check_jwt(str(creds['jwt']))}"
        elif "name" in creds and self.users.get(str(creds["name"])) == creds.get("password"):
            who = f"user:{creds['name']}"
        if who is None or site != self.site:
            raise ApiFailure(
                401,
                "401001",
                "Signin Error",
                "Error signing in to Tableau Server (invalid credentials or site)",
            )
        token = uuid.uuid4().hex + uuid.uuid4().hex
        user_id = str(uuid.uuid5(uuid.NAMESPACE_OID, who))
        with self._lock:
            self.secrets_seen.add(token)
            if who.startswith("pat:"):
                # One PAT holds one session: signing in again ends the earlier one.
                for key in [k for k, s in self._sessions.items() if s.credential == who]:
                    del self._sessions[key]
            self._sessions[token] = _Session(token, user_id, who, time.time() + self.token_lifetime)
        return Response(
            200,
            {
                "credentials": {
                    "token": token,
                    "estimatedTimeToExpiration": "365:00:00",
                    "site": {"id": self.site_id, "contentUrl": self.site},
                    "user": {"id": user_id},
                }
            },
        )

    def _signout(self, request: Request) -> Response:
        token = request.headers.get("x-tableau-auth", "")
        with self._lock:
            self._sessions.pop(token, None)
        return Response(204)

    def _serverinfo(self, request: Request) -> Response:
        return Response(
            200,
            {
                "serverInfo": {
                    "productVersion": {"value": self.product_version, "build": "fake"},
                    "restApiVersion": self.api_version,
                }
            },
        )

    # -- data sources ------------------------------------------------------------------------------
    def _ds_body(self, ds: _DataSource) -> dict[str, Any]:
        return {
            "id": ds.id,
            "name": ds.name,
            "type": "hyper",
            "project": {"id": ds.project_id, "name": ds.project},
        }

    def _get_ds(self, luid: str) -> _DataSource:
        ds = self._sources.get(luid)
        if ds is None:
            raise ApiFailure(
                404, "404011", "Resource Not Found", f"Datasource '{luid}' could not be found."
            )
        return ds

    def _matching(self, request: Request) -> list[_DataSource]:
        filters: dict[str, str] = {}
        for clause in filter(None, request.query.get("filter", "").split(",")):
            parts = clause.split(":", 2)
            if len(parts) != 3 or parts[1] != "eq":
                raise ApiFailure(400, "400065", "Bad Request", f"invalid filter {clause!r}")
            filters[parts[0]] = parts[2]
        found = []
        for ds in self._sources.values():
            if "name" in filters and ds.name != filters["name"]:
                continue
            if "projectName" in filters and ds.project != filters["projectName"]:
                continue
            found.append(ds)
        return found

    def _datasources(self, request: Request, site: str) -> Response:
        self._authorise(request, site)
        found = self._matching(request)
        size = int(request.query.get("pageSize", "100"))
        number = int(request.query.get("pageNumber", "1"))
        page = found[(number - 1) * size : number * size]
        return Response(
            200,
            {
                "pagination": {
                    "pageNumber": str(number),
                    "pageSize": str(size),
                    "totalAvailable": str(len(found)),
                },
                "datasources": {"datasource": [self._ds_body(d) for d in page]},
            },
        )

    def _datasource(self, request: Request, site: str, ds: str) -> Response:
        self._authorise(request, site)
        return Response(200, {"datasource": self._ds_body(self._get_ds(ds))})

    def _connections(self, request: Request, site: str, ds: str) -> Response:
        self._authorise(request, site)
        source = self._get_ds(ds)
        return Response(
            200,
            {
                "connections": {
                    "connection": [
                        {"id": c, "type": "hyper", "serverAddress": "", "userName": ""}
                        for c in source.connections
                    ]
                }
            },
        )

    # -- uploads -----------------------------------------------------------------------------------
    def _initiate(self, request: Request, site: str) -> Response:
        self._authorise(request, site)
        session_id = f"{uuid.uuid4().int % 10000}:{uuid.uuid4().hex}-1:0"
        path = self.directory / "uploads" / f"{uuid.uuid4().hex}.part"
        path.touch(mode=0o600)
        with self._lock:
            self._uploads[session_id] = {"path": path, "size": 0, "consumed": False}
        return Response(201, {"fileUpload": {"uploadSessionId": session_id, "fileSize": "0"}})

    def _append(self, request: Request, site: str, upload: str) -> Response:
        self._authorise(request, site)
        with self._lock:
            state = self._uploads.get(upload)
        if state is None or state["consumed"]:
            raise ApiFailure(
                404, "404003", "Resource Not Found", f"upload session '{upload}' could not be found"
            )
        if len(request.body) > 64 * MB + 4096:
            raise ApiFailure(
                413, "413000", "Payload Too Large", "one request may carry at most 64 MB"
            )
        try:
            chunk = parse_multipart(request.body, request.headers.get("content-type", ""))
        except MultipartError as err:
            raise ApiFailure(400, "400000", "Bad Request", str(err)) from None
        with self._lock:
            if self.store_uploads:
                with open(state["path"], "ab") as f:
                    f.write(chunk)
            state["size"] += len(chunk)
            size_mb = state["size"] // MB
        return Response(200, {"fileUpload": {"uploadSessionId": upload, "fileSize": str(size_mb)}})

    # -- updates and jobs --------------------------------------------------------------------------
    def _update(self, request: Request, site: str, ds: str, conn: str | None = None) -> Response:
        self._authorise(request, site)
        source = self._get_ds(ds)
        if conn is not None and conn not in source.connections:
            raise ApiFailure(
                404, "404013", "Resource Not Found", f"Connection '{conn}' could not be found."
            )
        if conn is None and len(source.connections) > 1:
            raise ApiFailure(
                400,
                "400000",
                "Bad Request",
                "the data source has several connections: update one of them",
            )
        request_id = request.headers.get("requestid")
        if not request_id:
            raise ApiFailure(400, "400000", "Bad Request", "the RequestID header is required")
        with self._lock:
            now = time.time()
            seen = self._request_ids.get(request_id)
            if seen is not None and now - seen[0] < self.dedup_window:
                # A repeated RequestID is not run again: answer with the original job.
                return Response(202, {"job": self._job_body(self._jobs[seen[1]], brief=True)})
        try:
            text = request.body.decode("utf-8")
            batch = ActionBatch.from_json(text)
        except (UnicodeDecodeError, InvalidActionBatchError) as err:
            raise ApiFailure(400, "400000", "Bad Request", str(err)) from None
        upload_id = request.query.get("uploadSessionId")
        upload_path: Path | None = None
        if batch.reads_source and not upload_id:
            raise ApiFailure(
                400,
                "400000",
                "Bad Request",
                "the actions read a source table but no uploadSessionId was given",
            )
        if upload_id:
            with self._lock:
                state = self._uploads.get(upload_id)
                if state is None or state["consumed"]:
                    raise ApiFailure(
                        404,
                        "404003",
                        "Resource Not Found",
                        f"upload session '{upload_id}' could not be found",
                    )
                if not self.store_uploads:
                    raise ApiFailure(
                        400,
                        "400000",
                        "Bad Request",
                        "this fake server does not keep uploads (store_uploads=False)",
                    )
                if state["size"] > self.max_upload_mb * MB:
                    raise ApiFailure(
                        413,
                        "413000",
                        "Payload Too Large",
                        f"the uploaded file is {state['size'] / MB:.1f} MB; this "
                        f"server accepts at most {self.max_upload_mb:g} MB",
                    )
                state["consumed"] = True
                upload_path = Path(state["path"])
        job = _Job(str(uuid.uuid4()), source, conn, batch, upload_path, _now_iso())
        with self._lock:
            self._jobs[job.id] = job
            self._request_ids[request_id] = (time.time(), job.id)
            if source.worker is None:
                source.worker = threading.Thread(
                    target=self._work, args=(source,), name=f"fake-job-{source.name}", daemon=True
                )
                source.worker.start()
        source.queue.put(job)
        return Response(202, {"job": self._job_body(job, brief=True)})

    def _work(self, source: _DataSource) -> None:
        while True:
            job = source.queue.get()
            if job is None:
                return
            if self.job_delay:
                time.sleep(self.job_delay)
            with self._lock:
                if job.cancel_requested:
                    job.finish_code, job.completed_at = 2, _now_iso()
                    continue
                job.started_at = _now_iso()
            try:
                apply_locally(job.batch, target=source.path, payload=job.upload)
                code, notes = 0, None
            except ApplyError as err:
                code, notes = 1, str(err)
            except Exception as err:  # a job must always finish
                code, notes = 1, f"{type(err).__name__}: {err}"
            finally:
                if job.upload is not None:
                    with contextlib.suppress(FileNotFoundError):
                        job.upload.unlink()
            with self._lock:
                self.jobs_run[source.id] += 1
                job.finish_code, job.notes = code, notes
                job.progress, job.completed_at = 100, _now_iso()

    def _job_body(self, job: _Job, brief: bool = False) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": job.id,
            "mode": "Asynchronous",
            "type": "UpdateUploadedFile",
            "createdAt": job.created_at,
            "updateUploadedFileJob": {
                "datasource": {"id": job.datasource.id, "name": job.datasource.name},
                "connectionLuid": job.connection or job.datasource.connections[0],
            },
        }
        if brief:
            return body
        body["progress"] = str(job.progress)
        if job.started_at:
            body["startedAt"] = job.started_at
        if job.finish_code is not None:
            body["completedAt"] = job.completed_at
            body["finishCode"] = str(job.finish_code)
        if job.notes:
            body["updateUploadedFileJob"]["notes"] = job.notes
        return body

    def _find_job(self, job: str) -> _Job:
        found = self._jobs.get(job)
        if found is None:
            raise ApiFailure(
                404, "404002", "Resource Not Found", f"Job '{job}' could not be found."
            )
        return found

    def _job(self, request: Request, site: str, job: str) -> Response:
        self._authorise(request, site)
        with self._lock:
            return Response(200, {"job": self._job_body(self._find_job(job))})

    def _cancel(self, request: Request, site: str, job: str) -> Response:
        self._authorise(request, site)
        with self._lock:
            found = self._find_job(job)
            if found.started_at is not None:
                raise ApiFailure(
                    409, "409000", "Conflict", "the job has started and cannot be cancelled"
                )
            found.cancel_requested = True
            return Response(200, {"job": self._job_body(found)})

    # -- in-process mocking ------------------------------------------------------------------------
    @contextlib.contextmanager
    def mock_requests(self) -> Iterator[Any]:
        """Serve this fake to ``requests`` in-process, with no socket (a ``responses`` mock).

        >>> with FakeTableauServer(serve=False, pats={"ci": "s"}) as fake:  # doctest: +SKIP
        ...     with fake.mock_requests():
        ...         TableauClient(fake.url, "", PersonalAccessToken("ci", "s")).sign_in()
        """
        from .responses_adapter import mock

        with mock(self) as rsps:
            yield rsps


class _Handler(BaseHTTPRequestHandler):
    app: FakeTableauServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without this, Nagle's algorithm and the
    # client's delayed ACK hold every answer back by ~40 ms.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("fake server: " + format, *args)

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = bytearray()
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _serve(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        request = Request(
            self.command,
            parts.path,
            query,
            {k.lower(): v for k, v in self.headers.items()},
            self._body(),
        )
        response = self.app.handle(request)
        if response.drop == "before":
            self._drop()
            return
        if response.raw is not None:
            body, ctype = response.raw, response.headers.pop("Content-Type", "text/html")
        else:
            body, ctype = encode(response.body, as_json=request.wants_json)
        if response.delay:
            time.sleep(response.delay)
        if response.drop == "after":
            # The request was processed; the answer is cut off mid-body.
            self.send_response(response.status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body) + 100))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self._drop()
            return
        self.send_response(response.status)
        for key, value in response.headers.items():
            self.send_header(key, value)
        if response.status != 204:
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if response.status != 204:
            self.wfile.write(body)

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

"""A fake Tableau Server on 127.0.0.1 that applies updates to ``.hyper`` files with real Hyper.

>>> from tabhyper_update.testing import FakeTableauServer
>>> with FakeTableauServer(pats={"ci": "secret"}) as server:  # doctest: +SKIP
...     luid = server.add_datasource("Orders", "orders.hyper", project="Sales")
...     client = TableauClient(server.url, "", PersonalAccessToken("ci", "secret"))

It answers the REST endpoints the SDK uses the way the real server does: XML by default,
JSON when asked (``Accept: application/json``), Tableau's error bodies and codes. The rooms:
:mod:`.backend` holds the state and runs the jobs, :mod:`.handlers` answers each route,
:mod:`.routes` maps paths to routes, :mod:`.wire` holds requests, answers and formats. This
module serves them over HTTP (or in-process with :meth:`FakeTableauServer.mock_requests`),
counts requests per route and injects faults.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from typing_extensions import Unpack

from ..update.state import StateStore, temporary_default_state_dir
from ..values.probes import ProbeResult
from ..values.redaction import get_logger
from .backend import FakeBackend
from .handlers import Handlers, job_body
from .profiles import FOUND_AS, ServerProfile
from .routes import route_of
from .settings import BackendSettings
from .wire import ApiFailure, Request, Response, encode

__all__ = ["FakeTableauServer", "Fault", "Request", "Response"]

log = get_logger("tabhyper_update.testing")


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

    def answer(self, route: str) -> Response | None:
        """The answer that replaces the request's own, if this fault gives one."""
        if self.drop == "before":
            return Response(0, drop="before")
        if self.body is not None:
            return Response(
                self.status or 200, headers={"Content-Type": self.content_type}, raw=self.body
            )
        if self.status is not None:
            headers = {}
            if self.retry_after is not None:
                headers["Retry-After"] = f"{self.retry_after:g}"
            return ApiFailure(
                self.status,
                self.code or f"{self.status}000",
                "Injected failure",
                f"fault injected on route {route}",
                headers,
            ).response()
        return None

    def matches(self) -> bool:
        self.seen += 1
        if self.seen >= self.nth and self.fired < self.times:
            self.fired += 1
            return True
        return False


class FakeTableauServer:
    """A Tableau Server stand-in for tests and demos (see the module docstring).

    It serves a :class:`~.backend.FakeBackend`, the state behind it (for tests that look
    inside): the one given, or one made from ``settings``
    (:class:`~.backend.BackendSettings`: credentials, versions, limits, the VizQL Data
    Service). ``serve=False`` opens no socket (for :meth:`mock_requests`); ``port``: the
    port on 127.0.0.1 (a free one by default). While it runs, clients of this process given
    no ``state_dir`` keep their update records in its folder, not the user's state folder.
    """

    def __init__(
        self,
        backend: FakeBackend | None = None,
        *,
        serve: bool = True,
        port: int = 0,
        **settings: Unpack[BackendSettings],
    ) -> None:
        if backend is not None and settings:
            raise TypeError(f"give a backend or its settings ({', '.join(settings)}), not both")
        self.backend = backend if backend is not None else FakeBackend(**settings)
        self.handlers = Handlers(self.backend)
        self._serve = serve
        self._port = port
        self._state_stand_in: contextlib.ExitStack | None = None
        self._faults: list[Fault] = []
        self._faults_lock = threading.Lock()
        #: Requests per route name (see :mod:`.routes`).
        self.counts: Counter[str] = Counter()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url = "http://tableau.fake"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> FakeTableauServer:
        if self._state_stand_in is None:
            # Clients given no state_dir keep their records in the fake's folder, never in
            # the user's real state folder, while it runs.
            self._state_stand_in = contextlib.ExitStack()
            self._state_stand_in.enter_context(
                temporary_default_state_dir(self.backend.directory / "client-state")
            )
        if self._serve and self._httpd is None:
            handler = type("Handler", (_Handler,), {"app": self})
            self._httpd = ThreadingHTTPServer(("127.0.0.1", self._port), handler)
            self._httpd.daemon_threads = True
            port = self._httpd.server_address[1]
            self.url = f"http://127.0.0.1:{port}"
            # A short poll: stop() waits for the serving loop's next look at its flag.
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.02},
                name="fake-tableau",
                daemon=True,
            )
            self._thread.start()
            log.info("fake Tableau server on %s", self.url)
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._state_stand_in is not None:
            self._state_stand_in.close()
            self._state_stand_in = None
        self.backend.shutdown()

    def __enter__(self) -> FakeTableauServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- set-up and inspection (the backend's, for tests and demos) -----------------------------
    @property
    def site(self) -> str:
        return self.backend.sign_ins.site

    @property
    def directory(self) -> Path:
        return self.backend.directory

    @property
    def secrets_seen(self) -> set[str]:
        return self.backend.sign_ins.secrets_seen

    @property
    def jobs_run(self) -> Counter[str]:
        """Jobs run per data source LUID."""
        return self.backend.jobs_run

    @property
    def job_delay(self) -> float:
        return self.backend.job_delay

    @job_delay.setter
    def job_delay(self, seconds: float) -> None:
        self.backend.job_delay = seconds

    @property
    def max_upload_mb(self) -> float:
        return self.backend.uploads.max_upload_mb

    @max_upload_mb.setter
    def max_upload_mb(self, mb: float) -> None:
        self.backend.uploads.max_upload_mb = mb

    def add_datasource(
        self,
        name: str,
        hyper_path: str | os.PathLike[str],
        *,
        project: str = "Default",
        project_id: str | None = None,
        connections: int = 1,
    ) -> str:
        """Publish a copy of ``hyper_path`` as a live-to-Hyper data source in the top-level
        project ``project`` (or the project whose LUID is ``project_id``); returns its LUID."""
        return self.backend.add_datasource(
            name, hyper_path, project=project, project_id=project_id, connections=connections
        )

    def add_project(self, name: str, parent: str | None = None) -> str:
        """A new project (under the project LUID ``parent``); returns its LUID. A project
        named "Default" exists from the start."""
        return self.backend.add_project(name, parent)

    def datasource_path(self, luid: str) -> Path:
        return self.backend.datasource(luid).path

    def connections(self, luid: str) -> list[str]:
        return list(self.backend.datasource(luid).connections)

    def expire_tokens(self) -> None:
        """Make every live session token expire now (next use answers 401002)."""
        self.backend.sign_ins.expire_tokens()

    @property
    def profile(self) -> ServerProfile:
        """The deployment this fake answers like (see :mod:`.profiles`)."""
        return self.backend.profile

    def expected_probe(self) -> ProbeResult:
        """What ``client.probe()`` finds on this fake, from its settings (the probe's own
        tests check that it finds exactly this on every profile and semantics)."""
        backend = self.backend
        hyper = backend.semantics == "hyper"
        service = backend.data_service
        return ProbeResult(
            server=self.url.rstrip("/"),
            site=backend.sign_ins.site,
            multi_match="one_row_used" if hyper else "refused",
            not_null="enforced",
            narrowing="rounded" if hyper else "refused",
            replay=FOUND_AS[backend.replay],
            guard="works",
            data_service=backend.service_release if service == "on" else service,
            read_back="data_service" if service == "on" else "not_null",
            requests=0,
            canary="",
            api_version=backend.api_version,
            parallel_upload="sequence" if backend.uploads.sequence_ids else "refused",
            extra_columns=FOUND_AS[backend.source_columns.extra],
            missing_columns=FOUND_AS[backend.source_columns.missing],
            partial_update=FOUND_AS[backend.source_columns.partial],
            download_types=FOUND_AS[backend.download_types],
        )

    def remember_probe(self, state_dir: str | os.PathLike[str] | None = None) -> ProbeResult:
        """Remember :meth:`expected_probe` for this server (in ``state_dir`` and for this
        process), as a probe run against it would: what a test of a guarded change set
        needs without running the probe's dozen updates first."""
        found = self.expected_probe()
        StateStore(state_dir).remember_probe(found)
        return found

    def start_refresh(self, luid: str, seconds: float) -> None:
        """Someone else's refresh of the data source runs for ``seconds`` from now: updates
        sent meanwhile are refused with 409093."""
        self.backend.start_refresh(luid, seconds)

    def age_jobs(self, seconds: float) -> None:
        """Move every job's times, and the RequestIDs it remembers, ``seconds`` into the past."""
        self.backend.age_jobs(seconds)

    def forget_jobs(self) -> int:
        """Forget every finished job and its RequestIDs (the server's retention passed)."""
        return self.backend.forget_jobs()

    def forget_uploads(self) -> int:
        """Forget every upload session not yet used (they expired)."""
        return self.backend.uploads.forget()

    def wait_idle(self, timeout: float = 30) -> None:
        """Wait until every queued job has finished."""
        self.backend.wait_idle(timeout)

    @property
    def jobs(self) -> list[dict[str, Any]]:
        with self.backend.lock:
            return list(map(job_body, self.backend.jobs.values()))

    # -- faults --------------------------------------------------------------------------------
    def inject(self, route: str, **kwargs: Any) -> Fault:
        """Add a :class:`Fault` for ``route`` (e.g. ``"append"``, ``"update"``, ``"job"``)."""
        fault = Fault(route, **kwargs)
        with self._faults_lock:
            self._faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self._faults_lock:
            self._faults.clear()

    def _fault_for(self, route: str) -> Fault | None:
        with self._faults_lock:
            self.counts[route] += 1
            for candidate in self._faults:
                if candidate.route == route and candidate.matches():
                    return candidate
        return None

    # -- one request -----------------------------------------------------------------------------
    def handle(self, request: Request) -> Response:
        """Answer one request (shared by the HTTP server and the responses adapter)."""
        found = route_of(request.method, request.path)
        if found is None:
            return ApiFailure(
                404, "404000", "Resource Not Found", f"no endpoint {request.method} {request.path}"
            ).response()
        route, params = found
        if not _version_known(request.path, self.backend.api_version):
            return ApiFailure(
                404,
                "404000",
                "Resource Not Found",
                f"REST API version in {request.path} is newer than this server's "
                f"{self.backend.api_version}",
            ).response()
        limits = self.backend.limits
        try:
            limits.enter()
        except ApiFailure as failure:
            return failure.response()
        try:
            return self._answer(route, params, request)
        finally:
            limits.leave()

    def _answer(self, route: str, params: dict[str, str], request: Request) -> Response:
        fault = self._fault_for(route)
        if fault is not None:
            if fault.expire_token:
                self.expire_tokens()
            early = fault.answer(route)
            if early is not None:
                return early
        try:
            response = self.handlers.dispatch(route, request, params)
        except Exception as err:  # a bug in the fake must still answer like a server
            log.exception("fake server error on %s", route)
            response = ApiFailure(
                500, "500000", "Internal Server Error", type(err).__name__
            ).response()
        if fault is not None:
            response.drop = fault.drop
            response.delay = fault.delay
        return response

    # -- in-process mocking ------------------------------------------------------------------------
    @contextlib.contextmanager
    def mock_requests(self) -> Iterator[Any]:
        """Serve this fake to ``requests`` in-process, with no socket (a ``responses`` mock).

        >>> with FakeTableauServer(serve=False, pats={"ci": "s"}) as fake:  # doctest: +SKIP
        ...     with fake.mock_requests():
        ...         TableauClient(fake.url, "", PersonalAccessToken("ci", "s")).sign_in()
        """
        from .responses_adapter import mock

        with contextlib.ExitStack() as stack:
            if self._state_stand_in is None:
                # Not started: clients given no state_dir still keep their records in the
                # fake's folder, never in the user's real state folder.
                stack.enter_context(
                    temporary_default_state_dir(self.backend.directory / "client-state")
                )
            yield stack.enter_context(mock(self))


def _version_known(path: str, newest: str) -> bool:
    """Whether a path's ``/api/X.Y/`` is a version the server speaks (any other path is)."""
    match = re.match(r"^/api/(\d+)\.(\d+)/", path)
    if match is None:
        return True
    major, _, minor = newest.partition(".")
    return (int(match[1]), int(match[2])) <= (int(major), int(minor or 0))


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
        request = self._request()
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
            self._cut_off(response, body, ctype)
        else:
            self._answer(response, body, ctype)

    def _request(self) -> Request:
        """The request as the fake's handlers take it (a query parameter given twice: its
        last value; header names in lower case)."""
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        headers = {k.lower(): v for k, v in self.headers.items()}
        return Request(self.command, parts.path, query, headers, self._body())

    def _answer(self, response: Response, body: bytes, ctype: str) -> None:
        self.send_response(response.status)
        for key, value in response.headers.items():
            self.send_header(key, value)
        if response.status != 204:
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if response.status != 204:
            self.wfile.write(body)

    def _cut_off(self, response: Response, body: bytes, ctype: str) -> None:
        """The answer of a request that was processed, cut off mid-body (its length said
        longer than what is sent), then the connection dropped."""
        self.send_response(response.status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body) + 100))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self._drop()

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

"""The REST session: sign-in, calls with the session's token, listings, and the REST
resources an update uses, each a method backed by its module (data sources, uploads, the
update request, jobs).

>>> with RestSession.from_env() as session:  # doctest: +SKIP
...     orders = session.datasource("Orders", project="Sales")
...     upload = session.upload("payload.hyper")
...     session.update_data(orders, batch, upload_session_id=upload).wait()

No network I/O happens in the constructor. :class:`~tabhyper_update.client.TableauClient`
is this session with the workflows (update, publish, bootstrap) on top.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any

import requests
from typing_extensions import Self

from ..values.actions import BatchLike
from ..values.errors import (
    ApiError,
    AuthenticationError,
    ConfigurationError,
    NotFoundError,
    TransportError,
)
from ..values.policies import JobTimes, PollPolicy
from ..values.redaction import get_logger, remember
from .auth import ConnectedAppJWT, Credentials, PersonalAccessToken
from .datasources import find_datasource
from .jobs import Job, get_job
from .projects import Project
from .refs import DataSourceRef, given_columns
from .scopes import scope_for
from .settings import ClientSettings, client_settings
from .shared_tokens import shared_token
from .transport import RetryPolicy, Transport, as_list, child
from .updates import update_data
from .uploads import (
    DEFAULT_UPLOAD_STREAMS,
    ProgressCallback,
    append_chunk,
    initiate_upload,
    upload_file,
)
from .versions import PROBE_VERSION, server_api_version

__all__ = ["RestSession", "client_for"]

log = get_logger("tabhyper_update")

SESSION_EXPIRED = "401002"
#: How many times one call signs in again when its session was ended (by expiry, or by
#: another sign-in with the same PAT) before giving up.
SESSION_RECOVERIES = 3
#: Sessions ended this many times within this many seconds: warned as a shared PAT.
PING_PONG_COUNT = 3
PING_PONG_WINDOW = 600
#: Listing pages: their size, and how many are read at most for one lookup.
PAGE_SIZE = 100
MAX_PAGES = 50


class RestSession:
    """A session with one site of a Tableau server: sign-in, the calls, and the REST
    resources an update uses (data sources, uploads, the update request, jobs).

    ``server`` is the base URL (``https://tableau.example.com``), ``site`` the site's
    content URL (``""`` for the default site of Tableau Server). No network I/O happens in
    the constructor: the session signs in on first use (or on :meth:`sign_in`).
    """

    def __init__(
        self,
        server: str,
        site: str = "",
        auth: Credentials | None = None,
        *,
        api_version: str | None = None,
        verify: bool | str = True,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        chunk_size_mb: float = 50,
        poll: PollPolicy | None = None,
        max_upload_restarts: int = 3,
        upload_streams: int = DEFAULT_UPLOAD_STREAMS,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: What this client is made of, checked (a copy of it is made again from these).
        self.settings = settings = ClientSettings(
            server,
            site,
            auth,
            api_version=api_version,
            verify=verify,
            timeout=timeout,
            retry=retry,
            chunk_size_mb=chunk_size_mb,
            poll=poll or PollPolicy(),
            max_upload_restarts=max_upload_restarts,
            upload_streams=upload_streams,
            session=session,
            sleep=sleep,
            clock=clock,
        )
        self.site = settings.site
        #: The REST API version: the one given, else the server's own (asked once).
        self.api_version = settings.api_version
        #: The upload's block size in bytes (``chunk_size_mb``).
        self.chunk_size = settings.chunk_size
        #: The server's update cap as learned from a part it refused as too large (413):
        #: larger parts are split before they are sent.
        self.update_cap_bytes: int | None = None
        #: How long recent updates of each data source took (``PollPolicy.learn``).
        self.job_times = JobTimes()
        self._http = Transport(
            settings.server,
            verify=settings.verify,
            timeout=settings.timeout,
            retry=settings.retry,
            session=settings.session,
            sleep=settings.sleep,
            clock=settings.clock,
        )
        self._token: str | None = None
        self._site_id: str | None = None
        #: The session of this PAT shared with the process's other clients (None for other
        #: credentials), and the last token that was ended under this client.
        self._shared = shared_token(settings.server, settings.site, self.auth)
        self._ended: str | None = None
        self._recoveries: deque[float] = deque()
        #: Data sources looked up by name (or LUID), project and connection: a name names the
        #: same LUID until the data source is deleted or renamed, and a call answering 404
        #: for a LUID forgets it (the next lookup asks the server again).
        self._found: dict[tuple[str, str | None, str | None], DataSourceRef] = {}
        self._warned_at = float("-inf")
        self._lock = threading.RLock()

    # The settings a caller reads off the client.
    @property
    def auth(self) -> Credentials:
        assert self.settings.auth is not None  # checked when made
        return self.settings.auth

    @property
    def poll(self) -> PollPolicy:
        return self.settings.poll

    @property
    def max_upload_restarts(self) -> int:
        return self.settings.max_upload_restarts

    @property
    def upload_streams(self) -> int:
        """Blocks of one upload in flight at once, where the server takes ``sequenceID``."""
        return self.settings.upload_streams

    @property
    def sleep(self) -> Callable[[float], None]:
        return self.settings.sleep

    @property
    def clock(self) -> Callable[[], float]:
        return self.settings.clock

    def __reduce__(self) -> tuple[Any, ...]:
        """A pickled client is its settings, credentials included (Spark Connect pickles a
        ``foreachBatch`` function to run it on the server): the copy signs in afresh, and
        no session token travels."""
        return (_session_from_settings, (type(self), self.settings))

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Self:
        """A client configured from the environment.

        ``TABLEAU_SERVER_URL`` (required), ``TABLEAU_SITE`` (default ``""``), and one of:
        ``TABLEAU_PAT_NAME`` + ``TABLEAU_PAT_SECRET``; ``TABLEAU_USERNAME`` +
        ``TABLEAU_PASSWORD``; ``TABLEAU_JWT_CLIENT_ID`` + ``TABLEAU_JWT_SECRET_ID`` +
        ``TABLEAU_JWT_SECRET_VALUE`` + ``TABLEAU_JWT_USERNAME`` (or ``TABLEAU_JWT``).
        Optional: ``TABLEAU_API_VERSION``, ``TABLEAU_VERIFY_TLS`` (``false`` or a CA bundle
        path), ``TABLEAU_IMPERSONATE_USER_ID``. Keyword arguments override.
        """
        return cls(**client_settings(env, overrides))

    def __repr__(self) -> str:
        state = "signed in" if self._token else "not signed in"
        return (
            f"{type(self).__name__}(server={self._http.server!r}, site={self.site!r}, "
            f"auth={type(self.auth).__name__}, api_version={self.api_version!r}, {state})"
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Sign out (best-effort) and release the connection pool."""
        try:
            self.sign_out()
        finally:
            self._http.close()

    @property
    def server(self) -> str:
        return self._http.server

    # -- version and session -------------------------------------------------------------------
    def server_info(self) -> dict[str, Any]:
        """``serverinfo`` (no sign-in needed), probed at a version every server answers."""
        _, body = self._http.call("GET", f"api/{PROBE_VERSION}/serverinfo", retry=True)
        info = child(body, "serverInfo")
        if not isinstance(info, dict):
            raise TransportError("serverinfo answered without a serverInfo object")
        return info

    def negotiate_version(self) -> str:
        """Adopt the server's REST API version; refuse servers older than 3.12."""
        if self.api_version is None:
            version = server_api_version(self.server_info())
            self.api_version = str(version)
            log.info("server REST API version %s", version)
        return self.api_version

    def sign_in(self) -> None:
        """Sign in now (otherwise the first call that needs a session does). A client of a
        personal access token another client of this process signed in with adopts that
        session (see :mod:`.shared_tokens`)."""
        shared = self._shared
        if shared is None:
            self._sign_in()
            return
        with shared.lock:
            if shared.token is not None and shared.token != self._ended:
                with self._lock:
                    self._token, self._site_id = shared.token, shared.site_id
                    self.api_version = self.api_version or shared.api_version
                shared.users.add(id(self))
                log.info("using this process's session of the same personal access token")
                return
            self._sign_in()
            shared.token, shared.site_id = self._token, self._site_id
            shared.api_version = self.api_version
            shared.users.add(id(self))

    def _sign_in(self) -> None:
        with self._lock:
            version = self.negotiate_version()
            body_in = self.auth.credentials(self.site)
            try:
                _, body = self._http.call(
                    "POST", f"api/{version}/auth/signin", json_body=body_in, retry=True
                )
            except AuthenticationError as err:
                raise err.with_hint(
                    f"signing in to site {self.site!r} with {self.auth.describe()} was "
                    "refused: check the credentials and the site"
                ) from None
            creds = child(body, "credentials") or {}
            token = creds.get("token")
            if not token:
                raise TransportError("sign-in answered without a token")
            remember(str(token))
            self._token = str(token)
            self._site_id = str((creds.get("site") or {}).get("id") or "")
            if not self._site_id:
                raise TransportError("sign-in answered without a site id")
            log.info("signed in to site %r", self.site)

    def sign_out(self) -> None:
        """Sign out (best-effort: errors are logged, not raised). A session shared with
        other clients of the process is signed out by the last of them only."""
        with self._lock:
            token, self._token = self._token, None
        if token is None or self.api_version is None:
            return
        shared = self._shared
        if shared is not None:
            with shared.lock:
                shared.users.discard(id(self))
                if shared.token == token and shared.users:
                    return  # others still use it
                if shared.token == token:
                    shared.token = None
        try:
            self._http.send_once(
                "POST", f"api/{self.api_version}/auth/signout", token=token, expected=(200, 204)
            )
            log.info("signed out")
        except Exception as err:
            log.debug("sign-out failed: %s", err)

    @property
    def site_id(self) -> str:
        self._ensure_signed_in()
        assert self._site_id is not None
        return self._site_id

    def _ensure_signed_in(self) -> str:
        with self._lock:
            if self._token is None:
                self.sign_in()
            assert self._token is not None
            return self._token

    def _site_path(self, rest: str) -> str:
        return f"api/{self.api_version}/sites/{self.site_id}/{rest}"

    def request(
        self, method: str, rest: str, *, retry: bool, site_scoped: bool = True, **kwargs: Any
    ) -> tuple[requests.Response, dict[str, Any] | None]:
        """A call with this client's session: site-scoped (``rest`` under the site's path),
        or with ``site_scoped=False`` to a path of its own on the server (the VizQL Data
        Service's, whose token names the site). Signs in first, and once more if the session
        expired."""
        token = self._ensure_signed_in()

        def path() -> str:
            return self._site_path(rest) if site_scoped else rest

        for round_ in range(SESSION_RECOVERIES + 1):
            try:
                return self._http.call(method, path(), retry=retry, token=token, **kwargs)
            except NotFoundError:
                self._forget(rest)
                raise
            except AuthenticationError as err:
                if err.code != SESSION_EXPIRED:
                    raise
                if round_ == SESSION_RECOVERIES:
                    raise err.with_hint(
                        f"the session was ended {SESSION_RECOVERIES} times in a row right after "
                        "signing in: another process is signing in with the same personal "
                        "access token (one PAT holds one session); give each process its own "
                        "PAT, or use a connected app"
                    ) from None
            except ApiError as err:
                if err.status == 403 and isinstance(self.auth, ConnectedAppJWT):
                    raise self._scope_refused(err, method, path()) from None
                raise
            token = self._sign_in_again(token, round_, kwargs.get("data"))
        raise AssertionError("unreachable")  # pragma: no cover

    def _sign_in_again(self, ended: str, round_: int, body: Any) -> str:
        """A new session in place of the one the server ``ended`` (the ``round_``-th time in
        a row), for the call to be sent again (a streamed ``body`` from its start)."""
        self._recovered()
        if round_:
            self.sleep(0.2 * round_)  # let the other process's call finish first
        with self._lock:
            if self._token == ended:
                self._token = None
            self._ended = ended
        token = self._ensure_signed_in()
        if body is not None and hasattr(body, "seek"):
            body.seek(0)
        return token

    def _scope_refused(self, err: ApiError, method: str, path: str) -> ApiError:
        """A 403 under a connected app: the error naming the scope the call needs, and
        whether the token asked for it."""
        assert isinstance(self.auth, ConnectedAppJWT)
        needed = scope_for(method, path)
        if needed is None:
            return err
        if needed in self.auth.scopes:
            why = (
                "the token asked for it: the connected app itself (or the user) may not be "
                "allowed it; check the app's access level and the user's permissions"
            )
        else:
            why = "the token did not ask for it: add it to ConnectedAppJWT(scopes=...)"
        return err.with_hint(f"{method} needs the connected-app scope {needed!r}; {why}")

    def _forget(self, rest: str) -> None:
        """Forget the looked-up data sources whose LUID ``rest`` names (it answered 404)."""
        with self._lock:
            for key in [k for k, ref in self._found.items() if ref.id in rest]:
                del self._found[key]

    def _recovered(self) -> None:
        """Count a session that ended under us; warn when it happens often (another process
        signing in with the same PAT ends this one's session each time)."""
        now = self.clock()
        with self._lock:
            seen = self._recoveries
            seen.append(now)
            while seen and seen[0] < now - PING_PONG_WINDOW:
                seen.popleft()
            often = len(seen) >= PING_PONG_COUNT and now - self._warned_at > PING_PONG_WINDOW
            if often:
                self._warned_at = now
        if often and isinstance(self.auth, PersonalAccessToken):
            log.warning(
                "the session was ended %d times in the last %d minutes: another process is "
                "probably signing in with the same personal access token (one PAT holds one "
                "session, so each sign-in ends the other's). Nothing is lost or applied twice "
                "(calls are sent again after signing in), but each costs a sign-in: give each "
                "process its own PAT, or use a connected app (ConnectedAppJWT)",
                len(seen),
                PING_PONG_WINDOW // 60,
            )
        else:
            log.info("session ended (401002): signing in again")

    def list_items(
        self,
        rest: str,
        item: str,
        *,
        filters: Sequence[str] = (),
        what: str,
        remedy: str,
    ) -> list[dict[str, Any]]:
        """Every item of a paged listing (``GET rest``, items under ``{rest}.{item}``),
        at most ``MAX_PAGES`` pages; more is an error that says ``remedy``."""
        items: list[dict[str, Any]] = []
        for page in range(1, MAX_PAGES + 1):
            listed, total = self._page(rest, item, page, filters)
            items += [i for i in listed if isinstance(i, dict)]
            if not listed or page * PAGE_SIZE >= total:
                return items
        raise TransportError(
            f"listing {what}: the server lists more than {MAX_PAGES * PAGE_SIZE:,} candidates "
            f"({total:,} announced); stopped. {remedy[0].upper()}{remedy[1:]}"
        )

    def _page(
        self, rest: str, item: str, page: int, filters: Sequence[str]
    ) -> tuple[list[Any], int]:
        """Page ``page`` of a listing: its items, and how many the server says there are."""
        params = {"pageSize": str(PAGE_SIZE), "pageNumber": str(page)}
        if filters:
            params["filter"] = ",".join(filters)
        _, body = self.request("GET", rest, retry=True, params=params)
        listed = as_list(child(body, rest, item))
        pagination = child(body, "pagination") or {}
        try:
            return listed, int(pagination.get("totalAvailable") or 0)
        except (TypeError, ValueError):
            raise TransportError(
                f"the listing of {rest} answered an unreadable totalAvailable "
                f"{pagination.get('totalAvailable')!r}"
            ) from None

    # -- the REST resources -------------------------------------------------------------------
    def datasource(
        self,
        name_or_luid: str,
        *,
        project: str | Project | None = None,
        connection: str | None = None,
        columns: Mapping[str, Sequence[str] | str | Mapping[str, str]] | None = None,
    ) -> DataSourceRef:
        """Find a published data source by LUID, or by name (optionally in ``project``: a
        path from the top such as ``"Sales/EMEA"``, a LUID, or a name unique on the site).

        Within a project the data source is matched by the project's LUID, so a same-named
        data source in another project (``Finance/EMEA``) is never taken. ``columns`` (table
        name → column names, or their DDL with the exact types: ``"id BIGINT NOT NULL,
        amount NUMERIC(12,2)"``) tells the SDK what the data source's tables hold, so that an
        update with other columns, or a narrower type, is refused before anything is sent.
        """
        where = project.id if isinstance(project, Project) else project
        key = (name_or_luid, where, connection)
        with self._lock:
            ref = self._found.get(key)
        if ref is None:
            ref = find_datasource(self, name_or_luid, project=project, connection=connection)
            with self._lock:
                self._found[key] = ref
        else:
            log.debug("data source %r as looked up before: %s", name_or_luid, ref.id)
        if columns is not None:
            return given_columns(ref, columns)
        return ref

    @property
    def requests_sent(self) -> int:
        """Requests this client has sent so far (every attempt, sign-ins included)."""
        return self._http.sent

    def delete_datasource(self, target: DataSourceRef) -> None:
        """Delete a published data source (Tableau's "Delete Data Source"): only ever one the
        caller named by its reference, e.g. a canary the SDK published itself."""
        self.request("DELETE", f"datasources/{target.id}", retry=True, expected=(200, 204))
        with self._lock:
            for key in [k for k, ref in self._found.items() if ref.id == target.id]:
                del self._found[key]

    def initiate_upload(self) -> str:
        return initiate_upload(self)

    def append_chunk(
        self, session_id: str, body: Any, boundary: str, sequence: int | None = None
    ) -> dict[str, Any] | None:
        return append_chunk(self, session_id, body, boundary, sequence)

    def upload(
        self, path: str | os.PathLike[str], *, progress: ProgressCallback | None = None
    ) -> str:
        """Upload a file in chunks; returns the upload session id."""
        return upload_file(
            self,
            path,
            chunk_size=self.chunk_size,
            max_restarts=self.max_upload_restarts,
            progress=progress,
            streams=self.upload_streams,
        )

    def update_data(
        self,
        target: DataSourceRef | str,
        batch: BatchLike,
        *,
        upload_session_id: str | None = None,
        request_id: str | None = None,
    ) -> Job:
        """Ask the server to apply ``batch``; returns the queued :class:`Job`.

        ``request_id`` is the update's identity: the server runs one RequestID once (for 24
        hours, as commonly reported) and answers a repeat with the original job. Without
        one, each call is a new update with a fresh random RequestID; the same RequestID is
        sent on every retry of this call. The round trip (:meth:`Payload.upload`) derives it
        from the change set's position and keeps a record for re-runs.
        """
        return update_data(
            self, target, batch, upload_session_id=upload_session_id, request_id=request_id
        )

    def job(self, job_id: str) -> Job:
        return get_job(self, job_id)

    def cancel_job(self, job_id: str) -> None:
        self.request("PUT", f"jobs/{job_id}", retry=True, expected=(200, 204))


def _session_from_settings(kind: type[RestSession], settings: ClientSettings) -> RestSession:
    """A session made again from :meth:`RestSession.__reduce__`'s settings."""
    return kind(**settings.keywords())


def client_for(
    target: DataSourceRef | str | None, client: RestSession | None, purpose: str
) -> RestSession:
    """The session to ``purpose`` with: ``client``, else the one ``target`` was found with,
    else one from the environment (:meth:`RestSession.from_env`). A reference found with
    another client than the one passed is refused: one client for both."""
    bound = target.client if isinstance(target, DataSourceRef) else None
    if client is not None:
        if bound is not None and bound is not client:
            assert isinstance(target, DataSourceRef)
            raise ConfigurationError(
                f"data source {target.label!r} was found with the client for "
                f"{bound.server} (site {bound.site!r}), not with the client= passed here "
                f"({client.server}, site {client.site!r}): use one client for both"
            )
        return client
    if isinstance(bound, RestSession):
        return bound
    try:
        return RestSession.from_env()
    except ConfigurationError as err:
        raise ConfigurationError(
            f"no client to {purpose} with: pass client=TableauClient(...)"
            + (" or a data source from client.datasource(...)" if purpose == "upload" else "")
            + f", or configure the environment ({err})"
        ) from None

"""``TableauClient``: sign-in, data source lookup, chunked upload, idempotent update, jobs.

>>> with TableauClient.from_env() as client:  # doctest: +SKIP
...     orders = client.datasource("Orders", project="Sales")
...     session = client.upload("payload.hyper")
...     client.update_data(orders, batch, upload_session_id=session).wait()

No network I/O happens in the constructor: the client signs in on first use (or on
``sign_in()``) and signs out, best-effort, when used as a context manager.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import requests

from ._http import RetryPolicy, Transport, as_list
from .actions import ActionBatch, BatchLike
from .auth import Credentials
from .environment import check_verify, client_settings
from .errors import (
    AuthenticationError,
    ConfigurationError,
    InvalidArgumentError,
    TransportError,
)
from .jobs import Job, PollPolicy
from .policies import JobTimes
from .projects import Project
from .redaction import get_logger, remember
from .refs import DataSourceRef, check_job_target, check_request_id
from .uploads import MAX_CHUNK_MB, MB, ProgressCallback, upload_file
from .versions import MIN_API_VERSION, PROBE_VERSION, check_api_version, server_api_version

if TYPE_CHECKING:
    from .parts import PayloadLike
    from .publish import BootstrapResult, PublishMode
    from .roundtrip import UpdateResult

__all__ = ["MIN_API_VERSION", "DataSourceRef", "TableauClient", "client_for"]

log = get_logger("tabhyper_update")

SESSION_EXPIRED = "401002"
#: Listing pages: their size, and how many are read at most for one lookup.
PAGE_SIZE = 100
MAX_PAGES = 50


class TableauClient:
    """A client for the Tableau REST endpoints that update live-to-Hyper data sources.

    ``server`` is the base URL (``https://tableau.example.com``), ``site`` the site's
    content URL (``""`` for the default site of Tableau Server).
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
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not server or not server.startswith(("http://", "https://")):
            raise ConfigurationError(f"server must be an http(s) URL, got {server!r}")
        if auth is None:
            raise ConfigurationError(
                "auth is required: PersonalAccessToken, UsernamePassword or ConnectedAppJWT"
            )
        check_verify(verify, "verify")
        if not 0 < chunk_size_mb <= MAX_CHUNK_MB:
            raise InvalidArgumentError(
                f"chunk_size_mb must be in (0, {MAX_CHUNK_MB}], got {chunk_size_mb}"
            )
        if api_version is not None:
            check_api_version(api_version)
        self.site = site
        self.auth = auth
        self.api_version = api_version
        self.chunk_size = int(chunk_size_mb * MB)
        self.poll = poll or PollPolicy()
        #: How long recent updates of each data source took (``PollPolicy.learn``).
        self.job_times = JobTimes()
        self.max_upload_restarts = max_upload_restarts
        self.sleep = sleep
        self.clock = clock
        self._http = Transport(
            server,
            verify=verify,
            timeout=timeout,
            retry=retry,
            session=session,
            sleep=sleep,
            clock=clock,
        )
        self._token: str | None = None
        self._site_id: str | None = None
        self._lock = threading.RLock()
        #: What a copy of this client is made from (see :meth:`__reduce__`).
        self._settings: dict[str, Any] = {
            "server": server,
            "site": site,
            "auth": auth,
            "api_version": api_version,
            "verify": verify,
            "timeout": timeout,
            "retry": retry,
            "chunk_size_mb": chunk_size_mb,
            "poll": poll,
            "max_upload_restarts": max_upload_restarts,
            "session": session,
            "sleep": sleep,
            "clock": clock,
        }

    def __reduce__(self) -> tuple[Any, ...]:
        """A pickled client is its settings, credentials included (Spark Connect pickles a
        ``foreachBatch`` function to run it on the server): the copy signs in afresh, and
        no session token travels."""
        return (_client_from_settings, (self._settings,))

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> TableauClient:
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
            f"TableauClient(server={self._http.server!r}, site={self.site!r}, "
            f"auth={type(self.auth).__name__}, api_version={self.api_version!r}, {state})"
        )

    def __enter__(self) -> TableauClient:
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
        info = (body or {}).get("serverInfo")
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
        """Sign in now (otherwise the first call that needs a session does)."""
        with self._lock:
            version = self.negotiate_version()
            body_in = self.auth.credentials(self.site)
            try:
                _, body = self._http.call(
                    "POST", f"api/{version}/auth/signin", json_body=body_in, retry=True
                )
            except AuthenticationError as err:
                raise err.with_hint(
                    f"signing in to site {self.site!r} with {type(self.auth).__name__} "
                    "was refused: check the credentials and the site"
                ) from None
            creds = (body or {}).get("credentials") or {}
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
        """Sign out (best-effort: errors are logged, not raised)."""
        with self._lock:
            token, self._token = self._token, None
        if token is None or self.api_version is None:
            return
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

        try:
            return self._http.call(method, path(), retry=retry, token=token, **kwargs)
        except AuthenticationError as err:
            if err.code != SESSION_EXPIRED:
                raise
            log.info("session expired (401002): signing in again")
            with self._lock:
                if self._token == token:
                    self._token = None
            token = self._ensure_signed_in()
            body = kwargs.get("data")
            if body is not None and hasattr(body, "seek"):
                body.seek(0)  # a streamed body is replayed from its start
            try:
                return self._http.call(method, path(), retry=retry, token=token, **kwargs)
            except AuthenticationError as again:
                if again.code != SESSION_EXPIRED:
                    raise
                raise again.with_hint(
                    "the session expired again right after signing in: another job is "
                    "probably signing in with the same personal access token (one PAT holds "
                    "one session); give each concurrent job its own PAT"
                ) from None

    # -- data sources ----------------------------------------------------------------------------
    def datasource(
        self,
        name_or_luid: str,
        *,
        project: str | Project | None = None,
        connection: str | None = None,
        columns: Mapping[str, Sequence[str]] | None = None,
    ) -> DataSourceRef:
        """Find a published data source by LUID, or by name (optionally in ``project``: a
        path from the top such as ``"Sales/EMEA"``, a LUID, or a name unique on the site).

        Within a project the data source is matched by the project's LUID, so a same-named
        data source in another project (``Finance/EMEA``) is never taken. ``columns`` (table
        name → column names) tells the SDK what the data source's tables hold, so that an
        update with other columns is refused before anything is sent.
        """
        from .datasources import find_datasource

        return find_datasource(
            self, name_or_luid, project=project, connection=connection, columns=columns
        )

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
            params = {"pageSize": str(PAGE_SIZE), "pageNumber": str(page)}
            if filters:
                params["filter"] = ",".join(filters)
            _, body = self.request("GET", rest, retry=True, params=params)
            listed = as_list(((body or {}).get(rest) or {}).get(item))
            items += [i for i in listed if isinstance(i, dict)]
            pagination = (body or {}).get("pagination") or {}
            try:
                total = int(pagination.get("totalAvailable") or 0)
            except (TypeError, ValueError):
                raise TransportError(
                    f"the listing of {rest} answered an unreadable totalAvailable "
                    f"{pagination.get('totalAvailable')!r}"
                ) from None
            if not listed or page * PAGE_SIZE >= total:
                return items
        raise TransportError(
            f"listing {what}: the server lists more than {MAX_PAGES * PAGE_SIZE:,} candidates "
            f"({total:,} announced); stopped. {remedy[0].upper()}{remedy[1:]}"
        )

    # -- uploads ---------------------------------------------------------------------------------
    def initiate_upload(self) -> str:
        _, body = self.request("POST", "fileUploads", retry=True, expected=(200, 201))
        session_id = ((body or {}).get("fileUpload") or {}).get("uploadSessionId")
        if not session_id:
            raise TransportError("fileUploads answered without an uploadSessionId")
        return str(session_id)

    def append_chunk(self, session_id: str, body: Any, boundary: str) -> dict[str, Any] | None:
        # Never retried by the transport: an append with an unknown outcome restarts the upload.
        _, answer = self.request(
            "PUT",
            f"fileUploads/{quote(session_id, safe='')}",
            retry=False,
            data=body,
            headers={"Content-Type": f"multipart/mixed; boundary={boundary}"},
        )
        return answer

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
        )

    # -- updates and jobs --------------------------------------------------------------------------
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
        checked = ActionBatch.coerce(batch)
        ref = target if isinstance(target, DataSourceRef) else DataSourceRef(str(target))
        if checked.reads_source and not upload_session_id:
            raise InvalidArgumentError(
                "this batch reads payload tables: pass upload_session_id= (from client.upload(...))"
            )
        session = upload_session_id if checked.reads_source else None
        rid = check_request_id(request_id) if request_id is not None else str(uuid.uuid4())
        path = (
            f"datasources/{ref.id}/connections/{ref.connection_id}/data"
            if ref.connection_id
            else f"datasources/{ref.id}/data"
        )
        params = {"uploadSessionId": session} if session else None
        log.info(
            "updating data source %s with %d action(s), RequestID %s",
            ref.name or ref.id,
            len(checked.actions),
            rid,
        )
        _, body = self.request(
            "PATCH",
            path,
            retry=True,
            json_body=checked.to_dict(),
            params=params,
            headers={"RequestID": rid},
            expected=(200, 202),
        )
        return check_job_target(Job.from_response(body, self), ref, rid)

    def job(self, job_id: str) -> Job:
        _, body = self.request("GET", f"jobs/{job_id}", retry=True)
        return Job.from_response(body, self)

    def cancel_job(self, job_id: str) -> None:
        self.request("PUT", f"jobs/{job_id}", retry=True, expected=(200, 204))

    # -- workflows: thin doors into roundtrip.py and publish.py -------------------------------
    def update_datasource(
        self,
        target: DataSourceRef | str,
        payload: PayloadLike | None = None,
        *,
        actions: BatchLike | None = None,
        target_table: str | None = None,
        target_schema: str | None = None,
        request_id: str | None = None,
        wait: bool = True,
        timeout: float | None = None,
        progress: bool | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        verify: bool | int = False,
    ) -> UpdateResult:
        """Update a data source: upload ``payload`` part by part and apply ``actions`` (a
        change set's own actions by default, on ``target_schema.target_table``), waiting
        until applied unless ``wait=False``. Everything is checked before the first request.
        ``verify`` reads a change set's update back (see ``BoundPayload.apply``).

        The verb behind ``payload.upload(target).apply(actions)``; with no payload, a batch
        that reads no table (e.g. a delete by constant)::

            client.update_datasource("Orders", payload)
            client.update_datasource("Orders", actions=[Delete(target_table="Extract",
                                                               condition=target("day") < cutoff)])
        """
        from .roundtrip import update_datasource

        return update_datasource(
            self,
            target,
            payload,
            actions=actions,
            target_table=target_table,
            target_schema=target_schema,
            request_id=request_id,
            wait=wait,
            timeout=timeout,
            progress=progress,
            state_dir=state_dir,
            verify=verify,
        )

    def publish(
        self,
        payload: PayloadLike | str | os.PathLike[str],
        name: str,
        *,
        project: str | Project | None = None,
        mode: PublishMode = "create",
        description: str | None = None,
        as_job: bool | None = None,
        timeout: float | None = None,
    ) -> DataSourceRef:
        """Publish a one-file payload (or a ``.hyper`` file) as the live-to-Hyper data source
        ``name``, ready for updates.

        ``project``: a name, a path from the top (``"Sales/EMEA"``), a LUID, or the default
        project. ``mode``: ``"create"`` (refused when the name exists in the project),
        ``"overwrite"`` (replace its data) or ``"append"`` (add the file's rows). Files from
        64 MB on (or ``chunk_size_mb``) go as a chunked upload and a job, followed to its
        end within ``timeout``. Returns a reference that knows its columns.
        """
        from .publish import publish

        return publish(
            self,
            payload,
            name,
            project=project,
            mode=mode,
            description=description,
            as_job=as_job,
            timeout=timeout,
        )

    def bootstrap(
        self,
        name: str,
        *,
        snapshot: Callable[[], PayloadLike],
        changes: Callable[[], PayloadLike],
        project: str | Project | None = None,
        full_refresh: bool = False,
        target_table: str | None = None,
        target_schema: str | None = None,
        request_id: str | None = None,
        timeout: float | None = None,
        progress: bool | None = None,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> BootstrapResult:
        """Publish when missing, else update: what a CDC job calls on every run.

        When data source ``name`` does not exist in ``project`` (or ``full_refresh``), the
        payload ``snapshot()`` builds is published (overwriting on a full refresh);
        otherwise the change set ``changes()`` builds is applied. Only the one needed is
        built.
        """
        from .publish import bootstrap

        return bootstrap(
            self,
            name,
            snapshot=snapshot,
            changes=changes,
            project=project,
            full_refresh=full_refresh,
            target_table=target_table,
            target_schema=target_schema,
            request_id=request_id,
            timeout=timeout,
            progress=progress,
            state_dir=state_dir,
        )


def _client_from_settings(settings: dict[str, Any]) -> TableauClient:
    """A client made again from :meth:`TableauClient.__reduce__`'s settings."""
    return TableauClient(**settings)


def client_for(
    target: DataSourceRef | str | None, client: TableauClient | None, purpose: str
) -> TableauClient:
    """The client to ``purpose`` with: ``client``, else the one ``target`` was found with,
    else one from the environment (:meth:`TableauClient.from_env`). A reference found with
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
    if bound is not None:
        return bound
    try:
        return TableauClient.from_env()
    except ConfigurationError as err:
        raise ConfigurationError(
            f"no client to {purpose} with: pass client=TableauClient(...)"
            + (" or a data source from client.datasource(...)" if purpose == "upload" else "")
            + f", or configure the environment ({err})"
        ) from None

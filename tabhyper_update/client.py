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
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import requests

from ._http import RetryPolicy, Transport, as_list
from .actions import ActionBatch
from .auth import ConnectedAppJWT, Credentials, PersonalAccessToken, UsernamePassword
from .errors import (
    ApiError,
    ArgumentTypeError,
    AuthenticationError,
    ConfigurationError,
    InvalidArgumentError,
    NotFoundError,
    TargetMismatchError,
    TransportError,
    UnsupportedServerError,
)
from .jobs import Job, PollPolicy
from .projects import LUID, Project, find_project
from .redaction import get_logger, remember

if TYPE_CHECKING:
    from .payload import Payload
    from .publish import BootstrapResult, PublishMode
    from .roundtrip import UpdateResult
from .uploads import MAX_CHUNK_MB, MB, ProgressCallback, upload_file

__all__ = ["MIN_API_VERSION", "DataSourceRef", "TableauClient"]

log = get_logger("tabhyper_update")

MIN_API_VERSION = (3, 12)
#: serverinfo answers at every version; this one exists on every server.
PROBE_VERSION = "2.4"
SESSION_EXPIRED = "401002"
#: Listing pages: their size, and how many are read at most for one lookup.
PAGE_SIZE = 100
MAX_PAGES = 50


@dataclass(frozen=True)
class DataSourceRef:
    """A published data source (and, for several connections, the one to update), and the
    client it was found with: ``payload.upload(client.datasource("Orders"))`` uploads through
    that client."""

    id: str
    name: str | None = None
    project: str | None = None
    connection_id: str | None = None
    client: TableauClient | None = field(default=None, repr=False, compare=False)
    #: The columns of the data source's tables (table name → column names), when known: the
    #: SDK published it, or the caller said. An update whose payload has other columns is
    #: refused before anything is sent (:class:`SchemaDriftError`).
    columns: Mapping[str, tuple[str, ...]] | None = field(default=None, repr=False, compare=False)
    #: The LUID of the project the data source lives in, when known.
    project_id: str | None = field(default=None, repr=False, compare=False)


def _version_tuple(text: str) -> tuple[int, int]:
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


_TRUE = ("1", "true", "yes", "y", "on", "enable", "enabled")
_FALSE = ("0", "false", "no", "n", "off", "disable", "disabled")
#: What a RequestID may hold: printable ASCII, no spaces at the ends, at most 200 characters
#: (a header value; CR or LF would split the request).
_REQUEST_ID = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]{0,198}[\x21-\x7e])?$")


def _env_flag(value: str | None, default: bool | str) -> bool | str:
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    return value  # a path to a CA bundle


def _check_verify(verify: bool | str, where: str) -> None:
    if isinstance(verify, bool):
        return
    if not isinstance(verify, str) or not verify or not os.path.exists(verify):
        raise ConfigurationError(
            f"{where} is {verify!r}: give true or false, or the path of an existing CA "
            "bundle (file or directory)"
        )


def check_request_id(request_id: object, *, most: int = 200) -> str:
    """``request_id`` if it can travel as a RequestID header (``most`` characters at most),
    else an error naming it."""
    if (
        not isinstance(request_id, str)
        or not _REQUEST_ID.match(request_id)
        or len(request_id) > most
    ):
        raise InvalidArgumentError(
            f"request_id must be 1-{most} printable ASCII characters (no CR, LF or other "
            f"control characters, no spaces at the ends), got {request_id!r}"
        )
    return request_id


def check_job_target(job: Job, target: DataSourceRef, request_id: str | None) -> Job:
    """``job`` when it is an update job of ``target`` (or does not say), else an error: the
    server answered with another data source's job (a RequestID it had run elsewhere)."""
    kind = (job.type or "").lower()
    owner = job.datasource_id
    if (kind and kind != "updateuploadedfile") or (
        owner is not None and owner.lower() != target.id.lower()
    ):
        what = f"data source {owner}" if owner is not None else f"a {job.type} job"
        raise TargetMismatchError(
            f"the server answered the update of data source {target.name or target.id!r} "
            f"({target.id}) with job {job.id}, which belongs to {what}"
            + (f" (RequestID {request_id!r})" if request_id else "")
            + ": the server had run that RequestID before for something else, so this update "
            "was not applied and is not counted as applied. Use a request id of its own for "
            "each data source"
        )
    return job


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
        _check_verify(verify, "verify")
        if not 0 < chunk_size_mb <= MAX_CHUNK_MB:
            raise InvalidArgumentError(
                f"chunk_size_mb must be in (0, {MAX_CHUNK_MB}], got {chunk_size_mb}"
            )
        if api_version is not None:
            self._check_version(api_version)
        self.site = site
        self.auth = auth
        self.api_version = api_version
        self.chunk_size = int(chunk_size_mb * MB)
        self.poll = poll or PollPolicy()
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
        e = dict(os.environ if env is None else env)
        server = overrides.pop("server", None) or e.get("TABLEAU_SERVER_URL")
        if not server:
            raise ConfigurationError("TABLEAU_SERVER_URL is not set")
        site = overrides.pop("site", None)
        if site is None:
            site = e.get("TABLEAU_SITE", "")
        auth = overrides.pop("auth", None) or cls._auth_from_env(e)
        if "api_version" not in overrides and e.get("TABLEAU_API_VERSION"):
            overrides["api_version"] = e["TABLEAU_API_VERSION"]
        if "verify" not in overrides:
            overrides["verify"] = _env_flag(e.get("TABLEAU_VERIFY_TLS"), True)
            _check_verify(overrides["verify"], "TABLEAU_VERIFY_TLS")
        return cls(server, site, auth, **overrides)

    @staticmethod
    def _auth_from_env(e: Mapping[str, str]) -> Credentials:
        user = e.get("TABLEAU_IMPERSONATE_USER_ID") or None
        if e.get("TABLEAU_PAT_NAME") or e.get("TABLEAU_PAT_SECRET"):
            if not (e.get("TABLEAU_PAT_NAME") and e.get("TABLEAU_PAT_SECRET")):
                raise ConfigurationError("set both TABLEAU_PAT_NAME and TABLEAU_PAT_SECRET")
            return PersonalAccessToken(
                e["TABLEAU_PAT_NAME"], e["TABLEAU_PAT_SECRET"], impersonate_user_id=user
            )
        if e.get("TABLEAU_USERNAME") or e.get("TABLEAU_PASSWORD"):
            if not (e.get("TABLEAU_USERNAME") and e.get("TABLEAU_PASSWORD")):
                raise ConfigurationError("set both TABLEAU_USERNAME and TABLEAU_PASSWORD")
            return UsernamePassword(
                e["TABLEAU_USERNAME"], e["TABLEAU_PASSWORD"], impersonate_user_id=user
            )
        if e.get("TABLEAU_JWT"):
            return ConnectedAppJWT(jwt=e["TABLEAU_JWT"], impersonate_user_id=user)
        if e.get("TABLEAU_JWT_CLIENT_ID"):
            names = (
                "TABLEAU_JWT_CLIENT_ID",
                "TABLEAU_JWT_SECRET_ID",
                "TABLEAU_JWT_SECRET_VALUE",
                "TABLEAU_JWT_USERNAME",
            )
            missing = [n for n in names if not e.get(n)]
            if missing:
                raise ConfigurationError(f"set {', '.join(missing)} for a connected app")
            return ConnectedAppJWT(
                client_id=e["TABLEAU_JWT_CLIENT_ID"],
                secret_id=e["TABLEAU_JWT_SECRET_ID"],
                secret_value=e["TABLEAU_JWT_SECRET_VALUE"],
                username=e["TABLEAU_JWT_USERNAME"],
                impersonate_user_id=user,
            )
        raise ConfigurationError(
            "no Tableau credentials in the environment: set TABLEAU_PAT_NAME and "
            "TABLEAU_PAT_SECRET (or TABLEAU_USERNAME/TABLEAU_PASSWORD, or the "
            "TABLEAU_JWT_* variables)"
        )

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
    @staticmethod
    def _check_version(version: str) -> None:
        try:
            parsed = _version_tuple(version)
        except ValueError:
            raise InvalidArgumentError(
                f"api_version must look like '3.24', got {version!r}"
            ) from None
        if parsed < MIN_API_VERSION:
            raise UnsupportedServerError(
                f"REST API {version} is older than 3.12 (Tableau Server 2021.2), the first "
                "version with the Hyper update endpoints"
            )

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
            info = self.server_info()
            version = info.get("restApiVersion")
            if isinstance(version, dict):
                version = version.get("value")
            if not version:
                raise TransportError("serverinfo did not say the REST API version")
            product = info.get("productVersion")
            if isinstance(product, dict):
                product = product.get("value")
            try:
                self._check_version(str(version))
            except UnsupportedServerError:
                raise UnsupportedServerError(
                    f"the server speaks REST API {version} (product version {product}); "
                    "updating live-to-Hyper data sources needs 3.12 (Tableau Server 2021.2) "
                    "or newer"
                ) from None
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
        self, method: str, rest: str, *, retry: bool, **kwargs: Any
    ) -> tuple[requests.Response, dict[str, Any] | None]:
        """A site-scoped call; signs in first, and once more if the session expired."""
        token = self._ensure_signed_in()
        try:
            return self._http.call(
                method, self._site_path(rest), retry=retry, token=token, **kwargs
            )
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
                return self._http.call(
                    method, self._site_path(rest), retry=retry, token=token, **kwargs
                )
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
        if not name_or_luid:
            raise InvalidArgumentError("a data source name or LUID is required")
        if columns is not None:
            known = {str(t): tuple(str(c) for c in cs) for t, cs in columns.items()}
            plain = self.datasource(name_or_luid, project=project, connection=connection)
            return replace(plain, columns=known)
        home = project if isinstance(project, Project) or project is None else None
        if home is None and project is not None:
            home = find_project(self, project)
        if LUID.match(name_or_luid) and home is None:
            try:
                _, body = self.request("GET", f"datasources/{name_or_luid}", retry=True)
                item = (body or {}).get("datasource") or {}
                ref = self._ref(item)
            except NotFoundError:
                ref = None
            if ref is not None:
                if ref.id.lower() != name_or_luid.lower():
                    raise TargetMismatchError(
                        f"asked for data source {name_or_luid}, the server answered with "
                        f"data source {ref.id} ({ref.name!r}): refused"
                    )
                return replace(self._with_connection(ref, connection), client=self)
        found = self._find_by_name(name_or_luid, home)
        if not found:
            where = f" in project {home.path!r}" if home is not None else ""
            raise NotFoundError(
                status=404,
                summary="Data source not found",
                detail=f"no data source named {name_or_luid!r}{where} on site {self.site!r}",
            )
        if len(found) > 1:
            projects = ", ".join(sorted(repr(r.project) for r in found))
            raise ApiError(
                status=409,
                summary="Ambiguous data source name",
                detail=f"{len(found)} data sources are named {name_or_luid!r} on site "
                f"{self.site!r}, in projects {projects}",
                hint="pass project= to pick one",
            )
        return replace(self._with_connection(found[0], connection), client=self)

    @staticmethod
    def _ref(item: Mapping[str, Any]) -> DataSourceRef | None:
        if not item.get("id"):
            return None
        project = item.get("project")
        project_name = project.get("name") if isinstance(project, dict) else None
        project_id = project.get("id") if isinstance(project, dict) else None
        return DataSourceRef(
            str(item["id"]),
            item.get("name"),
            project_name,
            project_id=str(project_id) if project_id else None,
        )

    def _find_by_name(self, name: str, project: Project | None) -> list[DataSourceRef]:
        # The filter syntax separates filters with "," and fields with ":", with no escape:
        # a name holding either is matched here instead, over the (bounded) listing. The
        # project's name only narrows the listing: names repeat across parents, so each
        # item is matched by the project's LUID below.
        filters = []
        if "," not in name and ":" not in name:
            filters.append(f"name:eq:{name}")
        if project is not None and "," not in project.name and ":" not in project.name:
            filters.append(f"projectName:eq:{project.name}")
        found: list[DataSourceRef] = []
        listing = self.list_items(
            "datasources",
            "datasource",
            filters=filters,
            what=f"data sources (looking up {name!r})",
            remedy="pass the data source's LUID instead of its name",
        )
        for item in listing:
            ref = self._ref(item)
            # Filters are matched by the server; check again in case it ignored one.
            if (
                ref is not None
                and item.get("name") == name
                and (
                    project is None
                    or (ref.project_id is not None and ref.project_id.lower() == project.id.lower())
                )
            ):
                found.append(ref)
        return found

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

    def _with_connection(self, ref: DataSourceRef, connection: str | None) -> DataSourceRef:
        if connection is None:
            return ref
        _, body = self.request("GET", f"datasources/{ref.id}/connections", retry=True)
        ids = [
            c.get("id") for c in as_list(((body or {}).get("connections") or {}).get("connection"))
        ]
        if connection not in ids:
            raise NotFoundError(
                status=404,
                summary="Connection not found",
                detail=f"data source {ref.name or ref.id!r} has no connection {connection!r} "
                f"(its connections: {', '.join(map(str, ids)) or 'none'})",
            )
        return replace(ref, connection_id=connection)

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
        batch: Any,
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

    def update_datasource(
        self,
        target: DataSourceRef | str,
        payload: Payload | None = None,
        *,
        actions: Any = None,
        target_table: str | None = None,
        target_schema: str | None = None,
        request_id: str | None = None,
        wait: bool = True,
        timeout: float | None = None,
        progress: bool | None = None,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> UpdateResult:
        """Update a data source: upload ``payload`` part by part and apply ``actions`` (a
        change set's own actions by default, on ``target_schema.target_table``), waiting
        until applied unless ``wait=False``. Everything is checked before the first request.

        The verb behind ``payload.upload(target).apply(actions)``; with no payload, a batch
        that reads no table (e.g. a delete by constant)::

            client.update_datasource("Orders", payload)
            client.update_datasource("Orders", actions=[Delete(target_table="Extract",
                                                               condition=target("day") < cutoff)])
        """
        from .payload import Payload as _Payload
        from .roundtrip import upload_payload

        if payload is not None and not isinstance(payload, _Payload):
            hint = (
                "; pass an action batch as actions=..."
                if not isinstance(payload, (str, os.PathLike))
                else "; for a .hyper file use Payload.from_hyper(path)"
            )
            raise ArgumentTypeError(
                "update_datasource's second argument is a Payload (from build_payload(...)), "
                f"got {type(payload).__name__}{hint}"
            )
        chosen = payload if payload is not None else _Payload([])
        if payload is None and actions is None:
            raise InvalidArgumentError("give a payload, actions, or both")
        uploaded = upload_payload(
            chosen, target, client=self, progress=progress, state_dir=state_dir, upload_first=False
        )
        return uploaded.apply(
            actions,
            target_table=target_table,
            target_schema=target_schema,
            request_id=request_id,
            wait=wait,
            timeout=timeout,
        )

    def publish(
        self,
        payload: Payload | str | os.PathLike[str],
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
        snapshot: Callable[[], Payload],
        changes: Callable[[], Payload],
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

    def job(self, job_id: str) -> Job:
        _, body = self.request("GET", f"jobs/{job_id}", retry=True)
        return Job.from_response(body, self)

    def cancel_job(self, job_id: str) -> None:
        self.request("PUT", f"jobs/{job_id}", retry=True, expected=(200, 204))


def _client_from_settings(settings: dict[str, Any]) -> TableauClient:
    """A client made again from :meth:`TableauClient.__reduce__`'s settings."""
    return TableauClient(**settings)

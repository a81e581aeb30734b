"""The fake server's request handling: one method per route (:mod:`.routes`) that reads the
request (auth header, query, XML or JSON body), calls the backend, and shapes the answer the
way Tableau's REST API does."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from ..values.actions import ActionBatch
from ..values.errors import InvalidActionBatchError
from .backend import MB, DataSource, FakeBackend, Job
from .data_service import ServiceFailure, metadata, run_query
from .datasource_file import datasource_file
from .profiles import SERVICE_OPTIONS
from .wire import (
    ApiFailure,
    MultipartError,
    Part,
    Request,
    Response,
    bad_request,
    not_found,
    parse_multipart,
    parse_parts,
    parse_xml_request,
)

__all__ = ["Handlers", "job_body"]

#: The most one request may carry (Tableau's per-request cap, with room for the headers).
MAX_REQUEST_BYTES = 64 * MB + 4096


def datasource_body(ds: DataSource) -> dict[str, Any]:
    return {
        "id": ds.id,
        "name": ds.name,
        "type": "hyper",
        "project": {"id": ds.project_id, "name": ds.project},
    }


def job_body(job: Job, brief: bool = False) -> dict[str, Any]:
    """A job as ``GET jobs/{id}`` shows it (``brief``: as the update's answer does)."""
    body: dict[str, Any] = {
        "id": job.id,
        "mode": "Asynchronous",
        "type": job.kind,
        "createdAt": job.created_at,
    }
    if job.kind == "UpdateUploadedFile":
        body["updateUploadedFileJob"] = {
            "datasource": {"id": job.datasource.id, "name": job.datasource.name},
            "connectionLuid": job.connection or job.datasource.connections[0],
        }
    else:
        body["datasource"] = datasource_body(job.datasource)
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


def _filters(request: Request) -> dict[str, str]:
    filters: dict[str, str] = {}
    for clause in filter(None, request.query.get("filter", "").split(",")):
        parts = clause.split(":", 2)
        if len(parts) != 3 or parts[1] != "eq":
            raise bad_request(f"invalid filter {clause!r}", "400065")
        filters[parts[0]] = parts[2]
    return filters


def _page(request: Request, collection: str, item: str, items: list[dict[str, Any]]) -> Response:
    """One page of a listing (``pageSize``, ``pageNumber``) with its pagination."""
    size = int(request.query.get("pageSize", "100"))
    number = int(request.query.get("pageNumber", "1"))
    return Response(
        200,
        {
            "pagination": {
                "pageNumber": str(number),
                "pageSize": str(size),
                "totalAvailable": str(len(items)),
            },
            collection: {item: items[(number - 1) * size : number * size]},
        },
    )


class Handlers:
    """Route name → answer, over one :class:`FakeBackend`."""

    def __init__(self, backend: FakeBackend) -> None:
        self.backend = backend

    def dispatch(self, route: str, request: Request, params: dict[str, str]) -> Response:
        handler: Any = getattr(self, route)
        try:
            response: Response = handler(request, **params)
        except ApiFailure as failure:
            return failure.response()
        return response

    def _auth(self, request: Request, site: str | None = None) -> None:
        session = self.backend.sign_ins.authorise(request.headers.get("x-tableau-auth"), site)
        self.backend.sign_ins.check_scope(session, request.method, request.path)
        self.backend.limits.call(session.user_id)

    # -- server and sessions -----------------------------------------------------------------
    def serverinfo(self, request: Request) -> Response:
        b = self.backend
        return Response(
            200,
            {
                "serverInfo": {
                    "productVersion": {"value": b.product_version, "build": "fake"},
                    "restApiVersion": b.api_version,
                }
            },
        )

    def signin(self, request: Request) -> Response:
        text = request.body.decode("utf-8", errors="replace")
        try:
            if text.lstrip().startswith("<"):
                body = parse_xml_request(text)
            else:
                data = json.loads(text)
                body = data if isinstance(data, dict) else {}
        except (ValueError, SyntaxError):
            raise bad_request("malformed sign-in body") from None
        session = self.backend.sign_ins.sign_in(body.get("credentials") or {})
        return Response(
            200,
            {
                "credentials": {
                    "token": session.token,
                    "estimatedTimeToExpiration": "365:00:00",
                    "site": {
                        "id": self.backend.sign_ins.site_id,
                        "contentUrl": self.backend.sign_ins.site,
                    },
                    "user": {"id": session.user_id},
                }
            },
        )

    def signout(self, request: Request) -> Response:
        self.backend.sign_ins.sign_out(request.headers.get("x-tableau-auth", ""))
        return Response(204)

    # -- data sources --------------------------------------------------------------------------
    def datasources(self, request: Request, site: str) -> Response:
        self._auth(request, site)
        found = self.backend.find_datasources(_filters(request))
        return _page(request, "datasources", "datasource", list(map(datasource_body, found)))

    def datasource(self, request: Request, site: str, ds: str) -> Response:
        self._auth(request, site)
        return Response(200, {"datasource": datasource_body(self.backend.datasource(ds))})

    def delete_datasource(self, request: Request, site: str, ds: str) -> Response:
        self._auth(request, site)
        self.backend.delete_datasource(ds)
        return Response(204)

    def download(self, request: Request, site: str, ds: str) -> Response:
        """Download Data Source, without its extract only: its file's metadata records."""
        self._auth(request, site)
        source = self.backend.datasource(ds)
        if request.query.get("includeExtract", "").lower() != "false":
            raise ApiFailure(
                400,
                "400000",
                "Bad Request",
                "the fake downloads a data source without its extract only (includeExtract=false)",
            )
        if self.backend.download_types == "refuse":
            raise ApiFailure(403, "403000", "Forbidden", "the data source may not be downloaded")
        body = datasource_file(source.path, source.name, self.backend.download_types == "exact")
        return Response(200, headers={"Content-Type": "application/octet-stream"}, raw=body)

    def connections(self, request: Request, site: str, ds: str) -> Response:
        self._auth(request, site)
        source = self.backend.datasource(ds)
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

    def projects(self, request: Request, site: str) -> Response:
        self._auth(request, site)
        filters = _filters(request)
        found = [
            p
            for p in self.backend.projects.values()
            if all(
                {"name": p.name, "parentProjectId": p.parent_id or ""}.get(k) == v
                for k, v in filters.items()
            )
        ]
        bodies = [{"id": p.id, "name": p.name, "parentProjectId": p.parent_id} for p in found]
        return _page(request, "projects", "project", bodies)

    def publish(self, request: Request, site: str) -> Response:
        """Publish Data Source: a ``request_payload`` part (the ``tsRequest`` XML) and either
        a ``tableau_datasource`` file part or ``uploadSessionId=`` of a chunked upload."""
        self._auth(request, site)
        query = request.query
        mode = _publish_mode(query)
        upload_id = query.get("uploadSessionId")
        parts = _publish_parts(request, bool(upload_id))
        name, project_id = _published_datasource(parts[0].data)
        if upload_id:
            file = self.backend.uploads.consume(upload_id, capped=False)
        else:
            filename = parts[1].filename or ""
            if not filename.endswith(".hyper"):
                raise bad_request(f"the file part's filename must end in .hyper, got {filename!r}")
            file = self.backend.directory / "uploads" / f"publish-{uuid.uuid4().hex}.hyper"
            file.touch(mode=0o600)
            file.write_bytes(parts[1].data)
        try:
            ds = self.backend.publish(name, project_id, file, mode)
        finally:
            file.unlink(missing_ok=True)
        if query.get("asJob", "").lower() == "true":
            job = self.backend.finished_job("PublishDatasource", ds)
            return Response(202, {"job": job_body(job, brief=True)})
        return Response(201, {"datasource": datasource_body(ds)})

    # -- uploads -------------------------------------------------------------------------------
    def initiate(self, request: Request, site: str) -> Response:
        self._auth(request, site)
        session_id = self.backend.uploads.initiate()
        return Response(201, {"fileUpload": {"uploadSessionId": session_id, "fileSize": "0"}})

    def append(self, request: Request, site: str, upload: str) -> Response:
        self._auth(request, site)
        self.backend.uploads.open(upload)
        _check_size(request)
        try:
            chunk = parse_multipart(request.body, request.headers.get("content-type", ""))
        except MultipartError as err:
            raise bad_request(str(err)) from None
        given = request.query.get("sequenceID")
        sequence: int | None = None
        if given is not None:
            try:
                sequence = int(given)
            except ValueError:
                raise bad_request(f"sequenceID must be a whole number, got {given!r}") from None
        size = self.backend.uploads.append(upload, chunk, sequence)
        return Response(
            200, {"fileUpload": {"uploadSessionId": upload, "fileSize": str(size // MB)}}
        )

    # -- updates and jobs ----------------------------------------------------------------------
    def update(self, request: Request, site: str, ds: str, conn: str | None = None) -> Response:
        self._auth(request, site)
        source = self.backend.datasource(ds)
        if conn is not None and conn not in source.connections:
            raise not_found("404013", f"Connection '{conn}' could not be found.")
        if conn is None and len(source.connections) > 1:
            raise bad_request("the data source has several connections: update one of them")
        request_id = request.headers.get("requestid")
        if not request_id:
            raise bad_request("the RequestID header is required")
        earlier = self.backend.job_for_request(request_id)
        if earlier is not None:
            return self._repeated(request_id, earlier)
        batch = _batch_of(request)
        upload_id = request.query.get("uploadSessionId")
        if batch.reads_source and not upload_id:
            raise bad_request("the actions read a source table but no uploadSessionId was given")
        self.backend.check_not_busy(source)
        upload = self.backend.uploads.consume(upload_id) if upload_id else None
        job = self.backend.submit_update(source, conn, request_id, batch, upload)
        return Response(202, {"job": job_body(job, brief=True)})

    def _repeated(self, request_id: str, earlier: Job) -> Response:
        """The answer to a RequestID received before: not run again; how it is answered is a
        setting (refused, a new job that ignores it, or the earlier job)."""
        if self.backend.replay == "refuse":
            raise ApiFailure(
                409,
                "409000",
                "Conflict",
                f"duplicate request: RequestID '{request_id}' was received before",
            )
        if self.backend.replay == "new_job":
            earlier = self.backend.ignored_job(earlier)
        return Response(202, {"job": job_body(earlier, brief=True)})

    def job(self, request: Request, site: str, job: str) -> Response:
        self._auth(request, site)
        with self.backend.lock:
            return Response(200, {"job": job_body(self.backend.job(job))})

    def cancel(self, request: Request, site: str, job: str) -> Response:
        self._auth(request, site)
        with self.backend.lock:
            return Response(200, {"job": job_body(self.backend.cancel_job(job))})

    # -- the VizQL Data Service --------------------------------------------------------------------
    def _service(self, request: Request) -> DataSource:
        """The data source a service request names, once the service may answer it."""
        mode = self.backend.data_service
        if mode == "absent":  # an older server: no such endpoint
            raise not_found("404000", f"no endpoint {request.method} {request.path}")
        session = self.backend.sign_ins.authorise(request.headers.get("x-tableau-auth"))
        if session.scopes is not None and "tableau:viz_data_service:read" not in session.scopes:
            raise ServiceFailure(
                403,
                "403000",
                "Forbidden",
                "the connected app's token does not grant the scope this call needs",
            )
        if mode == "denied":
            raise ServiceFailure(
                403,
                "403157",
                "Forbidden",
                f"user {session.user_id} lacks the API Access permission on this data source",
            )
        body, luid = _service_body(request)
        with self.backend.lock:
            source = self.backend.sources.get(str(luid))
        if source is None:
            raise ServiceFailure(404, "404934", "Not Found", f"unknown data source {luid!r}")
        self._check_options(body.get("options") or {})
        request.parsed = body
        return source

    def _check_options(self, options: Any) -> None:
        """Refuse service options the service's release lacks, as its request validation
        answers a field it does not know."""
        known = SERVICE_OPTIONS[self.backend.service_release]
        unknown = (
            sorted(str(k) for k in options if k not in known) if isinstance(options, dict) else []
        )
        if unknown:
            raise ServiceFailure(
                400,
                "400800",
                "Bad Request",
                f"Unrecognized field(s) in options: {', '.join(unknown)}",
            )

    def service_health(self, request: Request) -> Response:
        if self.backend.data_service == "absent":
            raise not_found("404000", f"no endpoint {request.method} {request.path}")
        return Response(200, {"status": "ok"})

    def read_metadata(self, request: Request) -> Response:
        source = self._service(request)
        return Response(200, {"data": metadata(source.path)})

    def query_datasource(self, request: Request) -> Response:
        source = self._service(request)
        self.backend.limits.query()
        self.backend.service_queries += 1
        rows = run_query(source.path, request.parsed)
        cut = self.backend.service_truncates_at
        if cut is not None:
            rows = rows[:cut]  # as a capped answer comes back: short, with no signal
        return Response(200, {"data": rows})


def _check_size(request: Request) -> None:
    """Refuse a request over the server's 64 MB, as Tableau does (413)."""
    if len(request.body) > MAX_REQUEST_BYTES:
        raise ApiFailure(413, "413000", "Payload Too Large", "one request may carry at most 64 MB")


def _publish_mode(query: Mapping[str, str]) -> str:
    """A publish's mode by its query: ``create``, ``overwrite`` or ``append``; refused for a
    data source other than a ``.hyper`` file, or both flags."""
    kind = query.get("datasourceType", "")
    if kind != "hyper":
        raise bad_request(f"datasourceType must be hyper for this server, got {kind!r}")
    flags = {k for k in ("overwrite", "append") if query.get(k, "").lower() == "true"}
    if len(flags) > 1:
        raise bad_request("overwrite and append cannot both be true")
    return flags.pop() if flags else "create"


def _publish_parts(request: Request, uploaded: bool) -> list[Part]:
    """A publish's multipart parts: the ``request_payload``, and the file unless it was
    ``uploaded`` in chunks; refused when too large or otherwise."""
    _check_size(request)
    try:
        parts = parse_parts(request.body, request.headers.get("content-type", ""))
    except MultipartError as err:
        raise bad_request(str(err)) from None
    names = [p.name for p in parts]
    expected = ["request_payload"] if uploaded else ["request_payload", "tableau_datasource"]
    if names != expected:
        raise bad_request(f"the parts must be {expected}, got {names}")
    return parts


def _published_datasource(payload: bytes | memoryview) -> tuple[str, str | None]:
    """The name and project id a publish's ``tsRequest`` names (a name is required)."""
    try:
        document = parse_xml_request(bytes(payload).decode("utf-8"))
    except (ValueError, SyntaxError):
        raise bad_request("request_payload is not a tsRequest XML document") from None
    item = document.get("datasource") or {}
    name = item.get("name")
    if not name:
        raise bad_request("the datasource element needs a name")
    return name, (item.get("project") or {}).get("id")


def _service_body(request: Request) -> tuple[dict[str, Any], Any]:
    """A service request's JSON body and the data source it names."""
    try:
        body = json.loads(request.body.decode("utf-8"))
        return body, body["datasource"]["datasourceLuid"]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise ServiceFailure(
            400, "400800", "Bad Request", "the body must name datasource.datasourceLuid"
        ) from None


def _batch_of(request: Request) -> ActionBatch:
    """The update's action batch, read as strictly as Tableau reads it: a lenient reader
    here would let a client's wire-format mistake pass the fake."""
    try:
        return ActionBatch.from_json(request.body.decode("utf-8"))
    except (UnicodeDecodeError, InvalidActionBatchError) as err:
        raise bad_request(str(err)) from None

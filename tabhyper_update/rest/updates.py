"""The "Update Data in Hyper Data Source" request (the PATCH with its ``RequestID``) and the
check that the job the server answers with belongs to that data source."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from ..values.actions import ActionBatch, BatchLike
from ..values.errors import ApiError, InvalidArgumentError, TargetMismatchError
from ..values.redaction import get_logger
from .caller import RestCaller
from .jobs import Job
from .refs import DataSourceRef, check_request_id

if TYPE_CHECKING:
    import requests

__all__ = ["check_job_target", "update_data"]

log = get_logger("tabhyper_update")

#: Tableau's error code for an update sent while a refresh or job of the data source runs.
BUSY = "409093"


def update_data(
    client: RestCaller,
    target: DataSourceRef | str,
    batch: BatchLike,
    *,
    upload_session_id: str | None = None,
    request_id: str | None = None,
) -> Job:
    """:meth:`RestSession.update_data`: send ``batch`` once (retried under the same
    RequestID), and return the queued job of ``target``."""
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
    send = partial(
        client.request,
        "PATCH",
        path,
        retry=True,
        json_body=checked.to_dict(),
        params=params,
        headers={"RequestID": rid},
        expected=(200, 202),
    )
    response, body = _while_busy(client, ref, send)
    job = Job.from_response(body, client).answered(response.headers.get("Date"))
    return check_job_target(job, ref, rid)


def _while_busy(
    client: RestCaller,
    ref: DataSourceRef,
    send: Callable[[], tuple[requests.Response, dict[str, Any] | None]],
) -> tuple[requests.Response, dict[str, Any] | None]:
    """``send``'s answer, sent again while the data source is busy (409093: a refresh or
    another job of it running), until the poll policy's ``busy_timeout``."""
    waits = client.poll.waits(start=1.0)
    deadline = client.clock() + client.poll.busy_timeout
    while True:
        try:
            return send()
        except ApiError as err:
            if err.code != BUSY:
                raise
            wait = waits()
            if client.clock() + wait > deadline:
                raise err.with_hint(
                    f"data source {ref.label!r} stayed busy (a refresh or another job of it "
                    f"running) for the {client.poll.busy_timeout:g} s this update waits "
                    "(PollPolicy.busy_timeout); nothing was applied. Run it again once the "
                    "refresh ends, or schedule updates apart from refreshes"
                ) from None
            log.warning(
                "data source %s is busy (409093: a refresh or another job of it is running); "
                "sending the update again in %.1f s",
                ref.label,
                wait,
            )
            client.sleep(wait)


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
            f"the server answered the update of data source {target.label!r} "
            f"({target.id}) with job {job.id}, which belongs to {what}"
            + (f" (RequestID {request_id!r})" if request_id else "")
            + ": the server had run that RequestID before for something else, so this update "
            "was not applied and is not counted as applied. Use a request id of its own for "
            "each data source"
        )
    return job

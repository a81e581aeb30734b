"""References to what lives on the server: a published data source, and the checks that
bind an update to it (its RequestID, the job the server answers with).

These are values: they hold no connection. :class:`DataSourceRef` remembers the client it
was found with, so that ``payload.upload(client.datasource("Orders"))`` uploads through it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import InvalidArgumentError, TargetMismatchError

if TYPE_CHECKING:
    from .client import TableauClient
    from .jobs import Job

__all__ = ["DataSourceRef", "check_job_target", "check_request_id", "ref_from_item"]


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

    @property
    def label(self) -> str:
        """The name when known, else the LUID: how messages name the data source."""
        return self.name or self.id


def ref_from_item(item: Mapping[str, Any]) -> DataSourceRef | None:
    """A reference from a ``datasource`` item of a REST answer (None without an id)."""
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


#: What a RequestID may hold: printable ASCII, no spaces at the ends, at most 200 characters
#: (a header value; CR or LF would split the request).
_REQUEST_ID = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]{0,198}[\x21-\x7e])?$")


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
            f"control characters, no spaces at the ends), got {request_id!r}",
            argument="request_id",
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
            f"the server answered the update of data source {target.label!r} "
            f"({target.id}) with job {job.id}, which belongs to {what}"
            + (f" (RequestID {request_id!r})" if request_id else "")
            + ": the server had run that RequestID before for something else, so this update "
            "was not applied and is not counted as applied. Use a request id of its own for "
            "each data source"
        )
    return job

"""Finding a published data source: by LUID, or by name within a project (matched by the
project's LUID, so a same-named data source in another project is never taken), and the
connection to update when it has several.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..values.errors import (
    ApiError,
    InvalidArgumentError,
    NotFoundError,
    TabHyperError,
    TargetMismatchError,
)
from .projects import LUID, Project, find_project
from .refs import DataSourceRef, given_columns, ref_from_item
from .transport import as_list, child

if TYPE_CHECKING:
    from .caller import RestCaller

__all__ = ["find_datasource"]


def find_datasource(
    client: RestCaller,
    name_or_luid: str,
    *,
    project: str | Project | None = None,
    connection: str | None = None,
    columns: Mapping[str, Sequence[str] | str | Mapping[str, str]] | None = None,
) -> DataSourceRef:
    """:meth:`RestSession.datasource`."""
    if not name_or_luid:
        raise InvalidArgumentError("a data source name or LUID is required")
    if columns is not None:
        plain = find_datasource(client, name_or_luid, project=project, connection=connection)
        return given_columns(plain, columns)
    home = (
        project
        if project is None or isinstance(project, Project)
        else find_project(client, project)
    )
    ref = _by_luid(client, name_or_luid) if LUID.match(name_or_luid) and home is None else None
    if ref is None:
        ref = _one_by_name(client, name_or_luid, home)
    return replace(_with_connection(client, ref, connection), client=client)


def _by_luid(client: RestCaller, luid: str) -> DataSourceRef | None:
    """The data source whose LUID is ``luid`` (``None``: there is none, the text may be a
    name); refused when the server answers with another."""
    try:
        _, body = client.request("GET", f"datasources/{luid}", retry=True)
        ref = ref_from_item(child(body, "datasource") or {})
    except NotFoundError:
        return None
    if ref is not None and ref.id.lower() != luid.lower():
        raise TargetMismatchError(
            f"asked for data source {luid}, the server answered with "
            f"data source {ref.id} ({ref.name!r}): refused"
        )
    return ref


def _one_by_name(client: RestCaller, name: str, home: Project | None) -> DataSourceRef:
    """The one data source named ``name`` (in ``home``, when given): none is an error with
    the names near it, several an error naming their projects."""
    found = _find_by_name(client, name, home)
    if not found:
        where = f" in project {home.path!r}" if home is not None else ""
        near = _near_names(client, name)
        raise NotFoundError(
            status=None,
            summary="Data source not found",
            detail=f"no data source named {name!r}{where} on site {client.site!r}",
            hint=f"did you mean {' or '.join(map(repr, near))}?" if near else None,
        )
    if len(found) > 1:
        projects = ", ".join(sorted(repr(r.project) for r in found))
        raise ApiError(
            status=None,
            summary="Ambiguous data source name",
            detail=f"{len(found)} data sources are named {name!r} on site "
            f"{client.site!r}, in projects {projects}",
            hint="pass project= to pick one",
        )
    return found[0]


#: How many data source names a "did you mean" reads (one listing page, one request).
NEAR_NAMES_PAGE = 1000


def _near_names(client: RestCaller, name: str) -> list[str]:
    """Up to three names on the site close to ``name`` (one request, best effort: a
    failure to list them leaves the error as it was)."""
    try:
        _, body = client.request(
            "GET",
            "datasources",
            retry=False,
            params={"pageSize": str(NEAR_NAMES_PAGE), "pageNumber": "1", "fields": "name"},
        )
    except TabHyperError:
        return []
    names = {str(i.get("name")) for i in as_list(child(body, "datasources", "datasource"))}
    names.discard("None")
    by_fold = {n.casefold(): n for n in names}
    close = difflib.get_close_matches(name.casefold(), list(by_fold), n=3, cutoff=0.6)
    return [by_fold[c] for c in close]


def _find_by_name(client: RestCaller, name: str, project: Project | None) -> list[DataSourceRef]:
    # A name no filter can hold is matched here instead, over the (bounded) listing. The
    # project's name only narrows the listing: names repeat across parents, so each item is
    # matched by the project's LUID below.
    filters = [f"name:eq:{name}"] if _filterable(name) else []
    if project is not None and _filterable(project.name):
        filters.append(f"projectName:eq:{project.name}")
    listing = client.list_items(
        "datasources",
        "datasource",
        filters=filters,
        what=f"data sources (looking up {name!r})",
        remedy="pass the data source's LUID instead of its name",
    )
    # Filters are matched by the server; check again in case it ignored one.
    return [
        ref
        for item in listing
        if (ref := ref_from_item(item)) is not None
        and item.get("name") == name
        and (project is None or _in_project(ref, project))
    ]


def _filterable(name: str) -> bool:
    """Whether a listing's filter can name ``name``: its syntax separates filters with ","
    and fields with ":", with no escape."""
    return "," not in name and ":" not in name


def _in_project(ref: DataSourceRef, project: Project) -> bool:
    """Whether ``ref`` is in ``project``, by the project's LUID."""
    return ref.project_id is not None and ref.project_id.lower() == project.id.lower()


def _with_connection(
    client: RestCaller, ref: DataSourceRef, connection: str | None
) -> DataSourceRef:
    if connection is None:
        return ref
    _, body = client.request("GET", f"datasources/{ref.id}/connections", retry=True)
    ids = [c.get("id") for c in as_list(child(body, "connections", "connection"))]
    if connection not in ids:
        raise NotFoundError(
            status=None,
            summary="Connection not found",
            detail=f"data source {ref.name or ref.id!r} has no connection {connection!r} "
            f"(its connections: {', '.join(map(str, ids)) or 'none'})",
        )
    return replace(ref, connection_id=connection)

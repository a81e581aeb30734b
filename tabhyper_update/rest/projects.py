"""Projects: found by LUID, by path from the top (``Sales/EMEA``) or by a name that is
unique on the site. Project names repeat across parents, so a data source is looked up
within its project by the project's LUID, never by the project's name alone."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..values.errors import ApiError, InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from .caller import RestCaller

__all__ = ["LUID", "Project", "find_project"]

LUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


@dataclass(frozen=True)
class Project:
    """A project: its LUID, name, parent's LUID and path from the top (``Sales/EMEA``)."""

    id: str
    name: str
    parent_id: str | None
    path: str


def list_projects(client: RestCaller) -> list[Project]:
    listed = client.list_items("projects", "project", what="projects", remedy="pass a project LUID")
    raw = [i for i in listed if i.get("id")]
    by_id = {str(i["id"]): i for i in raw}

    def path_of(item: Mapping[str, Any], depth: int = 0) -> str:
        parent = by_id.get(str(item.get("parentProjectId") or ""))
        if parent is None or depth > 100:
            return str(item.get("name", ""))
        return f"{path_of(parent, depth + 1)}/{item.get('name', '')}"

    return [
        Project(
            str(i["id"]),
            str(i.get("name", "")),
            str(i["parentProjectId"]) if i.get("parentProjectId") else None,
            path_of(i),
        )
        for i in raw
    ]


def find_project(client: RestCaller, project: str | Project | None) -> Project:
    """A project by LUID, by name, or by path from the top (``"Sales/EMEA"``); ``None`` is
    the site's default project (the top-level "Default")."""
    if isinstance(project, Project):
        return project
    if project is not None and (not isinstance(project, str) or not project.strip("/")):
        raise InvalidArgumentError(f"project= takes a name, a path or a LUID, got {project!r}")
    projects = list_projects(client)
    matches, wanted = _matcher(project)
    return _only([p for p in projects if matches(p)], wanted, site=client.site, known=projects)


def _only(found: list[Project], wanted: str, *, site: str, known: list[Project]) -> Project:
    """The one project of ``found`` (those that match ``wanted`` among the site's
    ``known``); none, or more than one, refused naming them."""
    if not found:
        listed = ", ".join(sorted(repr(p.path) for p in known)[:20])
        raise NotFoundError(
            status=None,
            summary="Project not found",
            detail=f"no {wanted} on site {site!r} (projects: {listed or 'none'})",
        )
    if len(found) > 1:
        raise ApiError(
            status=None,
            summary="Ambiguous project",
            detail=f"{len(found)} projects match {wanted}: "
            + ", ".join(sorted(repr(p.path) for p in found)),
            hint="pass the project's path from the top (e.g. 'Sales/EMEA') or its LUID",
        )
    return found[0]


def _matcher(project: str | None) -> tuple[Callable[[Project], bool], str]:
    """How a project is told by ``project`` (the default one, a LUID, a path from the top
    or a name), and how an error names what was asked for."""
    if project is None:
        return lambda p: p.parent_id is None and p.name.lower() == "default", "the default project"
    if LUID.match(project):
        return lambda p: p.id.lower() == project.lower(), f"project {project!r}"
    if "/" in project:
        return lambda p: p.path == project.strip("/"), f"project path {project!r}"
    return lambda p: p.name == project, f"project {project!r}"

"""References to what lives on the server: a published data source, and the check of the
RequestID that binds an update to it.

These are values: they hold no connection. :class:`DataSourceRef` remembers the session it
was found with, so that ``payload.upload(client.datasource("Orders"))`` uploads through it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..values.errors import InvalidArgumentError
from ..values.narrowing import DeclaredColumn, declared_columns

if TYPE_CHECKING:
    from .caller import RestCaller

__all__ = ["DataSourceRef", "check_request_id", "given_columns", "ref_from_item"]


@dataclass(frozen=True)
class DataSourceRef:
    """A published data source (and, for several connections, the one to update), and the
    client it was found with: ``payload.upload(client.datasource("Orders"))`` uploads through
    that client."""

    id: str
    name: str | None = None
    project: str | None = None
    connection_id: str | None = None
    client: RestCaller | None = field(default=None, repr=False, compare=False)
    #: The columns of the data source's tables (table name → column names), when known: the
    #: SDK published it, or the caller said. An update whose payload has other columns is
    #: refused before anything is sent (:class:`SchemaDriftError`).
    columns: Mapping[str, tuple[str, ...]] | None = field(default=None, repr=False, compare=False)
    #: The tables' columns with their types, where the caller declared them (table name →
    #: column → its declaration): the exact types, which the VizQL Data Service cannot tell.
    declared: Mapping[str, Mapping[str, DeclaredColumn]] | None = field(
        default=None, repr=False, compare=False
    )
    #: The LUID of the project the data source lives in, when known.
    project_id: str | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        """The name when known, else the LUID: how messages name the data source."""
        return self.name or self.id


def given_columns(ref: DataSourceRef, columns: Mapping[str, object]) -> DataSourceRef:
    """``ref`` with the columns a caller gave (table name → column names, or their
    declaration as DDL, ``"id BIGINT NOT NULL, amount NUMERIC(12,2)"``, or a mapping of name
    to type): names only, or names and exact types."""
    names: dict[str, tuple[str, ...]] = {}
    declared: dict[str, dict[str, DeclaredColumn]] = {}
    for table, given in columns.items():
        if isinstance(given, (str, Mapping)):
            declared[str(table)] = declared_columns(
                given, f"columns[{str(table)!r}]", InvalidArgumentError
            )
            names[str(table)] = tuple(declared[str(table)])
        elif isinstance(given, Sequence):
            names[str(table)] = tuple(map(str, given))
        else:
            raise InvalidArgumentError(
                f"columns[{str(table)!r}] takes column names, or their DDL, got {given!r}",
                argument="columns",
            )
    return replace(ref, columns=names, declared=declared or None)


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

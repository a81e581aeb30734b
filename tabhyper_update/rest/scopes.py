"""The connected-app scope each REST call this SDK makes needs, by Tableau's REST reference
(and, for "Update Data in Hyper Data Source", as Tableau's own clients name it:
``tableau:hyper_data:update``; the SDK's token asks for ``tableau:datasources:update`` too,
since which one a server demands is not confirmed).

A connected app's token (``ConnectedAppJWT``) asks for :data:`DEFAULT_JWT_SCOPES`; a call
refused with 403 names the scope it needed (:func:`scope_for`).
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_JWT_SCOPES", "scope_for"]

_SITE = r"/api/[\d.]+/sites/[^/]+"
#: (method, path pattern, scope), the first match wins.
_CALLS: list[tuple[str, re.Pattern[str], str]] = [
    (m, re.compile(p), scope)
    for m, p, scope in [
        (
            "PATCH",
            _SITE + r"/datasources/[^/]+(?:/connections/[^/]+)?/data$",
            "tableau:hyper_data:update",
        ),
        ("POST", _SITE + r"/datasources/?$", "tableau:datasources:create"),
        ("GET", _SITE + r"/datasources(?:/.*)?$", "tableau:datasources:read"),
        ("DELETE", _SITE + r"/datasources/[^/]+$", "tableau:datasources:delete"),
        ("POST", _SITE + r"/fileUploads/?$", "tableau:file_uploads:create"),
        ("PUT", _SITE + r"/fileUploads/[^/]+$", "tableau:file_uploads:create"),
        ("GET", _SITE + r"/jobs/[^/]+$", "tableau:jobs:read"),
        ("PUT", _SITE + r"/jobs/[^/]+$", "tableau:jobs:update"),
        ("GET", _SITE + r"/projects/?$", "tableau:projects:read"),
        ("POST", r"/api/v1/vizql-data-service/.*$", "tableau:viz_data_service:read"),
        ("GET", r"/api/v1/vizql-data-service/.*$", "tableau:viz_data_service:read"),
    ]
]

#: What a connected-app token asks for: every scope of the calls above, and
#: ``tableau:datasources:update`` for the update beside Tableau's clients' name for it.
DEFAULT_JWT_SCOPES: tuple[str, ...] = (
    "tableau:datasources:read",
    "tableau:datasources:create",
    "tableau:datasources:update",
    "tableau:datasources:delete",
    "tableau:hyper_data:update",
    "tableau:file_uploads:create",
    "tableau:jobs:read",
    "tableau:jobs:update",
    "tableau:projects:read",
    "tableau:viz_data_service:read",
)


def scope_for(method: str, path: str) -> str | None:
    """The scope the call ``method path`` needs (``path`` from ``/api/...``), if known."""
    path = path.split("?", 1)[0]
    if "://" in path:  # a whole URL: its path
        path = path.split("://", 1)[1].partition("/")[2]
    path = "/" + path.lstrip("/")
    for m, pattern, scope in _CALLS:
        if m == method.upper() and pattern.search(path):
            return scope
    return None

"""The fake server's routes: which REST endpoint a method and path name.

Each route's name is the name of its handler in :mod:`.handlers`, of its counter in
``FakeTableauServer.counts`` and of the ``route`` faults are injected on.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["ROUTES", "route_of"]

_SITE = r"^/api/[\d.]+/sites/(?P<site>[^/]+)"
_SERVICE = r"^/api/v1/vizql-data-service"

#: (method, route name, path pattern); the first match wins.
ROUTES: list[tuple[str, str, re.Pattern[str]]] = [
    (m, name, re.compile(p))
    for m, name, p in [
        # Clients use both spellings (Tableau's own Python client asks for serverInfo).
        ("GET", "serverinfo", r"^/api/[\d.]+/server[iI]nfo$"),
        ("POST", "signin", r"^/api/[\d.]+/auth/signin$"),
        ("POST", "signout", r"^/api/[\d.]+/auth/signout$"),
        ("GET", "datasources", _SITE + r"/datasources$"),
        ("POST", "publish", _SITE + r"/datasources$"),
        ("GET", "projects", _SITE + r"/projects$"),
        ("GET", "datasource", _SITE + r"/datasources/(?P<ds>[^/]+)$"),
        ("DELETE", "delete_datasource", _SITE + r"/datasources/(?P<ds>[^/]+)$"),
        ("GET", "connections", _SITE + r"/datasources/(?P<ds>[^/]+)/connections$"),
        ("GET", "download", _SITE + r"/datasources/(?P<ds>[^/]+)/content$"),
        ("POST", "initiate", _SITE + r"/fileUploads/?$"),
        ("PUT", "append", _SITE + r"/fileUploads/(?P<upload>[^/]+)$"),
        (
            "PATCH",
            "update",
            _SITE + r"/datasources/(?P<ds>[^/]+)(?:/connections/(?P<conn>[^/]+))?/data$",
        ),
        ("GET", "job", _SITE + r"/jobs/(?P<job>[^/]+)$"),
        ("PUT", "cancel", _SITE + r"/jobs/(?P<job>[^/]+)$"),
        # The VizQL Data Service: the session token names the site.
        ("GET", "service_health", _SERVICE + r"/simple-request$"),
        ("POST", "read_metadata", _SERVICE + r"/read-metadata$"),
        ("POST", "query_datasource", _SERVICE + r"/query-datasource$"),
    ]
]


def route_of(method: str, path: str) -> tuple[str, dict[str, str]] | None:
    """The route a request goes to and its path parameters (decoded), or ``None``."""
    for m, name, pattern in ROUTES:
        match = pattern.match(path)
        if match and m == method:
            return name, {k: unquote(v) for k, v in match.groupdict().items() if v}
    return None

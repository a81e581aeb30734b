"""Server profiles: the fake answering like one Tableau deployment rather than an ideal one.

A profile sets what differs between Tableau Server releases and Tableau Cloud: the REST API
version, the update payload cap, the VizQL Data Service release (and so the query options it
takes) or its absence, the service's query quota, REST rate limits and concurrency, and
whether an update is refused while another job of the data source runs (409093), and how
batches are applied (``semantics``: as Hyper does, or strictly)::

    FakeTableauServer(profile="cloud", pats={"ci": "s"})
    FakeTableauServer(profile="server-2021.4", max_upload_mb=5)   # a setting wins

Sources: Tableau's REST API guide (payload caps, 429), Tableau's VizQL Data Service
documentation and OpenAPI schema history (releases, options, the query quota), and
reports of tableauserverclient users (one session per personal access token, 409093).
Limits Tableau does not publish (Cloud's concurrent requests per site) are assumptions,
kept as settings.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PROFILES", "SERVICE_OPTIONS", "ServerProfile", "profile_named"]

#: The VizQL Data Service's query options, by the release that added them.
_FIRST = frozenset({"returnFormat", "debug", "disaggregate"})
_20253 = _FIRST | {"bypassMetadataCache", "interpretFieldCaptionsAsFieldNames"}
_20261 = _20253 | {"rowLimit", "returnServerSentEvents", "includeHiddenFields"}
SERVICE_OPTIONS: dict[str, frozenset[str]] = {"2025.1": _FIRST, "20253": _20253, "20261": _20261}


@dataclass(frozen=True)
class ServerProfile:
    """How one deployment behaves (see the module docstring).

    ``data_service``: the VizQL Data Service release that answers (a key of
    :data:`SERVICE_OPTIONS`) or ``None`` where there is none. ``service_query_quota``:
    queries the service answers per ``rate_window`` seconds, site-wide (Cloud: 100 per
    Creator license). ``rest_calls_per_window``: REST calls per user per window.
    ``max_concurrent``: requests in flight at once on the site. ``busy_conflicts``: an
    update sent while another job of the data source has not finished is refused with
    409093 instead of queued. ``None`` means no limit.
    """

    name: str
    product_version: str
    api_version: str
    max_upload_mb: float
    data_service: str | None
    service_query_quota: int | None = None
    rest_calls_per_window: int | None = None
    max_concurrent: int | None = None
    busy_conflicts: bool = False
    #: How batches are applied: ``"hyper"`` (what Hyper documents) or ``"strict"`` (refuse
    #: what depends on which source row is used or changes a value).
    semantics: str = "hyper"


PROFILES: dict[str, ServerProfile] = {
    p.name: p
    for p in (
        # The fake's own default: the newest service, no limits at all.
        ServerProfile("ideal", "2024.2.0", "3.24", 100, "20261"),
        # The same, refusing what Hyper would decide silently (the fake's earlier default).
        ServerProfile("strict", "2024.2.0", "3.24", 100, "20261", semantics="strict"),
        # Before 2022.1 the update cap defaults to 10 MB; no VizQL Data Service.
        ServerProfile("server-2021.4", "2021.4.0", "3.14", 10, None),
        # The service's first release (2025-02).
        ServerProfile("server-2025.1", "2025.1.0", "3.25", 100, "2025.1"),
        # Tableau Cloud today: 100 service queries per hour for a one-Creator site, 40,000
        # REST calls per user per hour, a few requests at once, busy data sources refused.
        ServerProfile(
            "cloud",
            "2026.1.0",
            "3.28",
            100,
            "20261",
            service_query_quota=100,
            rest_calls_per_window=40_000,
            max_concurrent=8,
            busy_conflicts=True,
        ),
    )
}


def profile_named(name: str) -> ServerProfile:
    """The profile called ``name``, or an error listing the ones there are."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown server profile {name!r}; the profiles are {', '.join(sorted(PROFILES))}"
        ) from None

"""Server profiles: the fake answering like one Tableau deployment rather than an ideal one.

A profile sets what differs between Tableau Server releases and Tableau Cloud: the REST API
version, the update payload cap, the VizQL Data Service release (and so the query options it
takes) or its absence, the service's query quota, REST rate limits and concurrency, and
whether an update is refused while another job of the data source runs (409093), and how
batches are applied (``semantics``: as Hyper does, or strictly)::

    FakeTableauServer(profile="cloud", pats={"ci": "s"})
    FakeTableauServer(profile="server-2021.4", max_upload_mb=5)   # a setting wins
    FakeTableauServer(profile="probe.json")   # as a probed server answered (its probe's JSON)

Sources: Tableau's REST API guide (payload caps, 429), Tableau's VizQL Data Service
documentation and OpenAPI schema history (releases, options, the query quota), and
reports of tableauserverclient users (one session per personal access token, 409093).
Limits Tableau does not publish (Cloud's concurrent requests per site) are assumptions,
kept as settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..values.probes import ProbeResult

__all__ = ["FOUND_AS", "PROFILES", "SERVICE_OPTIONS", "ServerProfile", "profile_named"]

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
    #: How a repeated RequestID is answered: "original", "new_job" or "refuse".
    replay: str = "original"
    #: Whether an upload's blocks may carry ``sequenceID`` (sent at once, assembled by
    #: sequence); a server without it refuses the parameter.
    sequence_ids: bool = False
    #: A source column the target lacks: "refuse" (Hyper's SQL) or "ignore".
    extra_columns: Literal["refuse", "ignore"] = "refuse"
    #: Rows inserted from a source lacking target columns: "null" there, or "refuse".
    missing_columns: Literal["null", "refuse"] = "null"
    #: Rows updated from a source lacking target columns: "keep" those columns (Hyper's
    #: SQL), set them to "null", or "refuse" the update.
    partial_update: Literal["keep", "null", "refuse"] = "keep"
    #: A data source downloaded without its extract: its columns' types "exact", "coarse"
    #: (kinds only), or the download "refuse"-d.
    download_types: Literal["exact", "coarse", "refuse"] = "exact"


PROFILES: dict[str, ServerProfile] = {
    p.name: p
    for p in (
        # The fake's own default: the newest service, no limits at all.
        ServerProfile("ideal", "2024.2.0", "3.24", 100, "20261", sequence_ids=True),
        # The same, refusing what Hyper would decide silently (the fake's earlier default).
        ServerProfile(
            "strict", "2024.2.0", "3.24", 100, "20261", semantics="strict", sequence_ids=True
        ),
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
            sequence_ids=True,
        ),
    )
}


def profile_named(name: str) -> ServerProfile:
    """The profile called ``name`` (or the ``.json`` file a probe wrote: see
    :func:`profile_from_probe`), or an error listing the ones there are."""
    if name.endswith(".json"):
        return profile_from_probe(name)
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"unknown server profile {name!r}; the profiles are {', '.join(sorted(PROFILES))}"
        ) from None


#: A probe's findings → the fake's semantics.
_SEMANTICS = {("one_row_used", "rounded"): "hyper", ("refused", "refused"): "strict"}
#: A setting of the fake → what a probe of it finds (and back: a probe's finding → the
#: setting that answers as that server did; a case a probe from before it did not measure
#: reads as Hyper's SQL).
FOUND_AS = {
    "original": "original",
    "new_job": "new_job",
    "refuse": "refused",
    "ignore": "ignored",
    "null": "null",
    "keep": "kept",
    "exact": "exact",
    "coarse": "coarse",
}
_REPLAY = {FOUND_AS[v]: v for v in ("original", "new_job", "refuse")}
_EXTRA: dict[str | None, Literal["refuse", "ignore"]] = {
    FOUND_AS["refuse"]: "refuse",
    FOUND_AS["ignore"]: "ignore",
    None: "refuse",
}
_MISSING: dict[str | None, Literal["null", "refuse"]] = {
    FOUND_AS["null"]: "null",
    FOUND_AS["refuse"]: "refuse",
    None: "null",
}
_PARTIAL: dict[str | None, Literal["keep", "null", "refuse"]] = {
    FOUND_AS["keep"]: "keep",
    FOUND_AS["null"]: "null",
    FOUND_AS["refuse"]: "refuse",
    None: "keep",
}
_DOWNLOAD: dict[str | None, Literal["exact", "coarse", "refuse"]] = {
    FOUND_AS["exact"]: "exact",
    FOUND_AS["coarse"]: "coarse",
    FOUND_AS["refuse"]: "refuse",
    None: "coarse",
}
#: The probe's findings the fake answers by a setting of the same name: each finding → the
#: setting that answers as that server did.
_ANSWERED_AS: dict[str, Mapping[Any, str]] = {
    "replay": _REPLAY,
    "extra_columns": _EXTRA,
    "missing_columns": _MISSING,
    "partial_update": _PARTIAL,
    "download_types": _DOWNLOAD,
}


def profile_from_probe(path: str | Path) -> ServerProfile:
    """The profile of a server as its probe found it (``tabhyper-update probe --json >
    FILE``): its semantics, its answer to a repeated RequestID, how it meets source columns
    that differ from the target's (a probe from before those cases: as Hyper's SQL does),
    its VizQL Data Service release (or none), its REST API version and its update cap. A
    finding the fake cannot reproduce (NOT NULL not enforced, a RequestID applied twice, a
    key matched twice refused while narrowed values are rounded) is an error naming it,
    never answered otherwise."""
    try:
        found = ProbeResult.load(path)
    except (OSError, ValueError, TypeError) as err:
        raise ValueError(f"cannot read the probe {str(path)!r}: {err}") from None
    semantics = _SEMANTICS.get((found.multi_match, found.narrowing))
    problems = []
    if semantics is None:
        problems.append(
            f"multi_match={found.multi_match!r} with narrowing={found.narrowing!r} (the fake "
            "refuses both or neither)"
        )
    if found.not_null != "enforced":
        problems.append(f"not_null={found.not_null!r} (Hyper enforces NOT NULL)")
    problems += [
        f"{name}={getattr(found, name)!r}"
        for name, settings in _ANSWERED_AS.items()
        if getattr(found, name) not in settings
    ]
    if problems:
        raise ValueError(
            f"the fake cannot answer as the server of {str(path)!r} did: {'; '.join(problems)}"
        )
    base = PROFILES["ideal"]
    answers: dict[str, Any] = {
        name: settings[getattr(found, name)] for name, settings in _ANSWERED_AS.items()
    }
    return ServerProfile(
        f"probe of {found.server}",
        base.product_version,
        found.api_version or base.api_version,
        found.cap_mb if found.cap_mb is not None else base.max_upload_mb,
        _release(found.data_service),
        semantics=str(semantics),
        sequence_ids=found.parallel_upload == "sequence",
        **answers,
    )


def _release(data_service: str) -> str | None:
    """The VizQL Data Service release the fake answers as, for a probe's finding: none where
    the service was absent or denied, a release the fake does not know as its newest."""
    if data_service in ("absent", "denied"):
        return None
    return data_service if data_service in SERVICE_OPTIONS else "20261"

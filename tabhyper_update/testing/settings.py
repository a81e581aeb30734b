"""How the fake server behaves: its settings, declared once (the fake server and its backend
both take them), and :class:`BackendConfig`, what they come to once the profile has filled
in what was not given (made once, where the backend is made)."""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from typing_extensions import TypedDict

from ..local.engine import Semantics, check_semantics
from ..update.options import check_options
from ..values.wording import check_choice
from .profiles import SERVICE_OPTIONS, ServerProfile, profile_named

__all__ = ["BackendConfig", "BackendSettings"]


class BackendSettings(TypedDict, total=False):
    """How the fake behaves (each key optional, its default in brackets).

    The accepted credentials: ``pats`` (name → secret), ``users`` (name → password),
    ``connected_app`` (``client_id``, ``secret_id``, ``secret_value``); the ``site`` [""];
    the REST ``api_version`` ["3.24"] and ``product_version`` ["2024.2.0"]; the session
    ``token_lifetime`` in seconds [4 h]; ``job_delay``, seconds each job waits in the queue
    [0]; the RequestID de-duplication ``dedup_window`` in seconds [24 h]; ``max_upload_mb``
    [100]; the ``directory`` of its files [a temporary one]; ``store_uploads`` [True]; and
    the VizQL Data Service, ``"on"``, ``"absent"`` (a server before 2025.1) or ``"denied"``
    to the signed-in user (``data_service``) ["on"].

    A ``profile`` (a name in :data:`~.profiles.PROFILES`: ``"ideal"``, ``"server-2021.4"``,
    ``"server-2025.1"``, ``"cloud"``) ["ideal"] sets the versions, the cap and the limits
    below; a setting given beside it wins. The limits: the service's ``service_release``
    (which query options it takes), its ``service_query_quota``, ``rest_calls_per_window``
    per user, ``max_concurrent`` requests on the site (each ``None``: no limit), all counted
    over ``rate_window`` seconds [3600]; ``busy_conflicts``: refuse an update while another
    job of the data source runs (409093); ``service_truncates_at``: answer at most this many
    rows, silently (as an answer over the service's size cap may come back) [None];
    ``job_seconds_per_mb``: how long a job runs per MB of its upload, and
    ``upload_seconds_per_mb``: how long an upload's chunk takes to arrive per MB (a server's
    work and a network's pace, modelled) [0].

    ``semantics``: how a job applies its batch, ``"hyper"`` (as Hyper documents: a key
    matched by several source rows takes one of them, decimals are rounded and text cut to
    fit, overflows and NULLs into NOT NULL fail) or ``"strict"`` (each of those refused,
    naming the table, column and value) [the profile's: ``"hyper"`` but for ``strict``];
    ``seed``: which of several source rows a key takes under ``"hyper"`` [random per
    server, so that no test comes to rely on which]; ``replay``: how a repeated RequestID
    (within ``dedup_window``) is answered: ``"original"`` (202 with the first request's
    job), ``"new_job"`` (202 with a new job that applies nothing, its notes saying so) or
    ``"refuse"`` (409 naming the duplicate) ["original"]. ``sequence_ids``: an upload's
    blocks may carry ``sequenceID`` (sent at once, assembled by sequence, a gap refused), or
    the parameter is refused [the profile's]. ``extra_columns``: a source column the target
    lacks is ``"refuse"``-d (what Hyper does with a column that does not exist) or
    ``"ignore"``-d; ``missing_columns``: rows inserted from a source lacking target columns
    get ``"null"`` there (Hyper's ``INSERT`` with a column list) or are ``"refuse"``-d;
    ``partial_update``: rows updated from a source lacking target columns ``"keep"`` them
    (Hyper's ``UPDATE``), get ``"null"`` there, or the update is ``"refuse"``-d [the
    profile's: ``"refuse"``, ``"null"`` and ``"keep"``]. ``download_types``: a data source
    downloaded without its extract records its columns' types ``"exact"`` (type codes with
    precision, scale and width), ``"coarse"`` (kinds only) or the download is ``"refuse"``-d
    [the profile's: ``"exact"``].
    """

    pats: Mapping[str, str] | None
    users: Mapping[str, str] | None
    connected_app: Mapping[str, str] | None
    site: str
    api_version: str
    product_version: str
    token_lifetime: float
    job_delay: float
    dedup_window: float
    max_upload_mb: float
    directory: str | os.PathLike[str] | None
    store_uploads: bool
    data_service: str
    profile: str
    service_release: str
    service_query_quota: int | None
    rest_calls_per_window: int | None
    max_concurrent: int | None
    rate_window: float
    busy_conflicts: bool
    service_truncates_at: int | None
    job_seconds_per_mb: float
    upload_seconds_per_mb: float
    semantics: str
    seed: int
    replay: str
    sequence_ids: bool
    extra_columns: Literal["refuse", "ignore"]
    missing_columns: Literal["null", "refuse"]
    partial_update: Literal["keep", "null", "refuse"]
    download_types: Literal["exact", "coarse", "refuse"]


@dataclass(frozen=True)
class BackendConfig:
    """Every :class:`BackendSettings` with its value: as given, else the profile's, else
    the fake's default; checked where a value could be none of those it takes."""

    profile: ServerProfile
    pats: Mapping[str, str]
    users: Mapping[str, str]
    connected_app: Mapping[str, str]
    site: str
    api_version: str
    product_version: str
    token_lifetime: float
    job_delay: float
    dedup_window: float
    max_upload_mb: float
    directory: str | os.PathLike[str] | None
    store_uploads: bool
    data_service: str
    service_release: str
    service_query_quota: int | None
    rest_calls_per_window: int | None
    max_concurrent: int | None
    rate_window: float
    busy_conflicts: bool
    service_truncates_at: int | None
    job_seconds_per_mb: float
    upload_seconds_per_mb: float
    semantics: Semantics
    seed: int
    replay: str
    sequence_ids: bool
    extra_columns: Literal["refuse", "ignore"]
    missing_columns: Literal["null", "refuse"]
    partial_update: Literal["keep", "null", "refuse"]
    download_types: Literal["exact", "coarse", "refuse"]

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> BackendConfig:
        """``settings`` (:class:`BackendSettings`) resolved against their profile."""
        check_options(settings, BackendSettings, "the fake server")
        profile = profile_named(settings.get("profile", "ideal"))
        given = {k: v for k, v in settings.items() if k != "profile" and v is not None}
        values: dict[str, Any] = {
            "pats": {},
            "users": {},
            "connected_app": {},
            "site": "",
            "api_version": profile.api_version,
            "product_version": profile.product_version,
            "token_lifetime": 240 * 60,
            "job_delay": 0.0,
            "dedup_window": 24 * 3600,
            "max_upload_mb": profile.max_upload_mb,
            "directory": None,
            "store_uploads": True,
            "data_service": "on" if profile.data_service else "absent",
            "service_release": profile.data_service or "20261",
            "service_query_quota": profile.service_query_quota,
            "rest_calls_per_window": profile.rest_calls_per_window,
            "max_concurrent": profile.max_concurrent,
            "rate_window": 3600.0,
            "busy_conflicts": profile.busy_conflicts,
            "service_truncates_at": None,
            "job_seconds_per_mb": 0.0,
            "upload_seconds_per_mb": 0.0,
            "semantics": profile.semantics,
            "seed": random.SystemRandom().randrange(2**31),
            "replay": profile.replay,
            "sequence_ids": profile.sequence_ids,
            "extra_columns": profile.extra_columns,
            "missing_columns": profile.missing_columns,
            "partial_update": profile.partial_update,
            "download_types": profile.download_types,
        }
        # A limit given as None means no limit, not the profile's.
        for limit in ("service_query_quota", "rest_calls_per_window", "max_concurrent"):
            if limit in settings and settings[limit] is None:
                values[limit] = None
        values.update(given)
        for credentials in ("pats", "users", "connected_app"):
            values[credentials] = dict(values[credentials])
        values["semantics"] = check_semantics(values["semantics"])
        made = cls(profile=profile, **values)
        made._check()
        return made

    def _check(self) -> None:
        check_choice(self.data_service, ("on", "absent", "denied"), "data_service", ValueError)
        check_choice(self.service_release, sorted(SERVICE_OPTIONS), "service_release", ValueError)
        check_choice(self.replay, ("original", "new_job", "refuse"), "replay", ValueError)

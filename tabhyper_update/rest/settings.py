"""A client's settings: :class:`ClientSettings`, made and checked once when a client is
made (a copy of the client, pickled for Spark Connect's ``foreachBatch``, is made again from
it), and those read from the environment (what :meth:`TableauClient.from_env` reads).

``TABLEAU_SERVER_URL`` (required), ``TABLEAU_SITE`` (default ``""``), and one of:
``TABLEAU_PAT_NAME`` + ``TABLEAU_PAT_SECRET``; ``TABLEAU_USERNAME`` + ``TABLEAU_PASSWORD``;
``TABLEAU_JWT_CLIENT_ID`` + ``TABLEAU_JWT_SECRET_ID`` + ``TABLEAU_JWT_SECRET_VALUE`` +
``TABLEAU_JWT_USERNAME`` (or ``TABLEAU_JWT``). Optional: ``TABLEAU_API_VERSION``,
``TABLEAU_VERIFY_TLS`` (``false`` or a CA bundle path), ``TABLEAU_IMPERSONATE_USER_ID``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import requests

from ..values.errors import ConfigurationError, InvalidArgumentError
from ..values.policies import PollPolicy
from ..values.redaction import get_logger
from .auth import ConnectedAppJWT, Credentials, PersonalAccessToken, UsernamePassword
from .transport import RetryPolicy
from .uploads import DEFAULT_UPLOAD_STREAMS, MAX_CHUNK_MB, MB, check_upload_streams
from .versions import check_api_version

__all__ = ["ClientSettings", "check_verify", "client_settings", "credentials_from_env"]

log = get_logger("tabhyper_update")

_TRUE = ("1", "true", "yes", "y", "on", "enable", "enabled")
_FALSE = ("0", "false", "no", "n", "off", "disable", "disabled")


def _env_flag(value: str | None, default: bool | str) -> bool | str:
    if value is None or value == "":
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    return value  # a path to a CA bundle


def check_verify(verify: bool | str, where: str) -> None:
    """Refuse a TLS setting that is neither a flag nor an existing CA bundle."""
    if isinstance(verify, bool):
        return
    if not isinstance(verify, str) or not verify or not os.path.exists(verify):
        raise ConfigurationError(
            f"{where} is {verify!r}: give true or false, or the path of an existing CA "
            "bundle (file or directory)"
        )


def client_settings(env: Mapping[str, str] | None, overrides: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of a client: the environment's settings, ``overrides`` first."""
    e = dict(os.environ if env is None else env)
    settings = dict(overrides)
    server = settings.pop("server", None) or e.get("TABLEAU_SERVER_URL")
    if not server:
        raise ConfigurationError("TABLEAU_SERVER_URL is not set")
    site = settings.pop("site", None)
    if site is None:
        site = e.get("TABLEAU_SITE", "")
    auth = settings.pop("auth", None) or credentials_from_env(e)
    if "api_version" not in settings and e.get("TABLEAU_API_VERSION"):
        settings["api_version"] = e["TABLEAU_API_VERSION"]
    if "verify" not in settings:
        settings["verify"] = _env_flag(e.get("TABLEAU_VERIFY_TLS"), True)
        check_verify(settings["verify"], "TABLEAU_VERIFY_TLS")
    return {"server": server, "site": site, "auth": auth, **settings}


#: The credentials the environment can hold, in the order they are looked for: the
#: variables that say a kind is meant (any one set), those it needs (all set), what to say
#: when some are missing, and how it is made from their values and the user to impersonate.
_FROM_ENV: tuple[tuple[tuple[str, ...], tuple[str, ...], str, Callable[..., Credentials]], ...] = (
    (
        ("TABLEAU_PAT_NAME", "TABLEAU_PAT_SECRET"),
        ("TABLEAU_PAT_NAME", "TABLEAU_PAT_SECRET"),
        "set both TABLEAU_PAT_NAME and TABLEAU_PAT_SECRET",
        lambda name, secret, user: PersonalAccessToken(name, secret, impersonate_user_id=user),
    ),
    (
        ("TABLEAU_USERNAME", "TABLEAU_PASSWORD"),
        ("TABLEAU_USERNAME", "TABLEAU_PASSWORD"),
        "set both TABLEAU_USERNAME and TABLEAU_PASSWORD",
        lambda name, password, user: UsernamePassword(name, password, impersonate_user_id=user),
    ),
    (
        ("TABLEAU_JWT",),
        ("TABLEAU_JWT",),
        "set TABLEAU_JWT",
        lambda jwt, user: ConnectedAppJWT(jwt=jwt, impersonate_user_id=user),
    ),
    (
        ("TABLEAU_JWT_CLIENT_ID",),
        (
            "TABLEAU_JWT_CLIENT_ID",
            "TABLEAU_JWT_SECRET_ID",
            "TABLEAU_JWT_SECRET_VALUE",
            "TABLEAU_JWT_USERNAME",
        ),
        "set {missing} for a connected app",
        lambda client_id, secret_id, secret_value, username, user: ConnectedAppJWT(
            client_id=client_id,
            secret_id=secret_id,
            secret_value=secret_value,
            username=username,
            impersonate_user_id=user,
        ),
    ),
)


def credentials_from_env(e: Mapping[str, str]) -> Credentials:
    """The one set of credentials the environment holds (:data:`_FROM_ENV`), or an error
    naming what is missing."""
    user = e.get("TABLEAU_IMPERSONATE_USER_ID") or None
    for meant, needed, say, made in _FROM_ENV:
        if not any(map(e.get, meant)):
            continue
        missing = [name for name in needed if not e.get(name)]
        if missing:
            raise ConfigurationError(say.format(missing=", ".join(missing)))
        return made(*(e[name] for name in needed), user)
    raise ConfigurationError(
        "no Tableau credentials in the environment: set TABLEAU_PAT_NAME and "
        "TABLEAU_PAT_SECRET (or TABLEAU_USERNAME/TABLEAU_PASSWORD, or the "
        "TABLEAU_JWT_* variables)"
    )


_BROWSER_SITE = re.compile(r"#/site/([^/?#]+)")


def _from_browser_url(server: str, site: str) -> tuple[str, str]:
    """A URL pasted from the browser (``https://host/#/site/NAME/datasources``): the
    server's own URL, and the site it names (unless another site was given)."""
    if "#" not in server:
        return server, site
    found = _BROWSER_SITE.search(server)
    base = server.split("#", 1)[0].rstrip("/")
    named = found.group(1) if found else ""
    if named and site and site != named:
        raise ConfigurationError(
            f"the server URL names site {named!r} (#/site/{named}) but the site given is "
            f"{site!r}: give the server's URL ({base}) and one site"
        )
    if named and not site:
        log.info("site %r taken from the browser URL's #/site/%s", named, named)
    return base, site or named


@dataclass(frozen=True)
class ClientSettings:
    """What a client is made of (the keywords of :class:`TableauClient`), checked when it
    is made: ``server`` an http(s) URL (one pasted from the browser gives its site too),
    ``auth`` given, ``verify`` a flag or an existing CA bundle, ``chunk_size_mb`` within the
    server's request cap, ``api_version`` a version the SDK speaks, ``upload_streams`` 1 to
    32."""

    server: str
    site: str = ""
    auth: Credentials | None = None
    api_version: str | None = None
    verify: bool | str = True
    timeout: float = 60.0
    retry: RetryPolicy | None = None
    chunk_size_mb: float = 50
    poll: PollPolicy = field(default_factory=PollPolicy)
    max_upload_restarts: int = 3
    upload_streams: int = DEFAULT_UPLOAD_STREAMS
    #: A ``requests.Session`` to send with (proxies, adapters), and the clock and sleep the
    #: waits use (tests give their own).
    session: requests.Session | None = None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if not self.server or not self.server.startswith(("http://", "https://")):
            raise ConfigurationError(f"server must be an http(s) URL, got {self.server!r}")
        server, site = _from_browser_url(self.server, self.site)
        object.__setattr__(self, "server", server)
        object.__setattr__(self, "site", site)
        if self.auth is None:
            raise ConfigurationError(
                "auth is required: PersonalAccessToken, UsernamePassword or ConnectedAppJWT"
            )
        check_verify(self.verify, "verify")
        if not 0 < self.chunk_size_mb <= MAX_CHUNK_MB:
            raise InvalidArgumentError(
                f"chunk_size_mb must be in (0, {MAX_CHUNK_MB}], got {self.chunk_size_mb}"
            )
        if self.api_version is not None:
            check_api_version(self.api_version)
        check_upload_streams(self.upload_streams)

    @property
    def chunk_size(self) -> int:
        """The upload's block size in bytes."""
        return int(self.chunk_size_mb * MB)

    def keywords(self) -> dict[str, Any]:
        """The settings as the client's keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

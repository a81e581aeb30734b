"""Client settings read from the environment: the server, the site, the credentials and
TLS verification (what :meth:`TableauClient.from_env` reads).

``TABLEAU_SERVER_URL`` (required), ``TABLEAU_SITE`` (default ``""``), and one of:
``TABLEAU_PAT_NAME`` + ``TABLEAU_PAT_SECRET``; ``TABLEAU_USERNAME`` + ``TABLEAU_PASSWORD``;
``TABLEAU_JWT_CLIENT_ID`` + ``TABLEAU_JWT_SECRET_ID`` + ``TABLEAU_JWT_SECRET_VALUE`` +
``TABLEAU_JWT_USERNAME`` (or ``TABLEAU_JWT``). Optional: ``TABLEAU_API_VERSION``,
``TABLEAU_VERIFY_TLS`` (``false`` or a CA bundle path), ``TABLEAU_IMPERSONATE_USER_ID``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..values.errors import ConfigurationError
from .auth import ConnectedAppJWT, Credentials, PersonalAccessToken, UsernamePassword

__all__ = ["check_verify", "client_settings", "credentials_from_env"]

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


def credentials_from_env(e: Mapping[str, str]) -> Credentials:
    """The one set of credentials the environment holds, or an error naming what is missing."""
    user = e.get("TABLEAU_IMPERSONATE_USER_ID") or None
    if e.get("TABLEAU_PAT_NAME") or e.get("TABLEAU_PAT_SECRET"):
        if not (e.get("TABLEAU_PAT_NAME") and e.get("TABLEAU_PAT_SECRET")):
            raise ConfigurationError("set both TABLEAU_PAT_NAME and TABLEAU_PAT_SECRET")
        return PersonalAccessToken(
            e["TABLEAU_PAT_NAME"], e["TABLEAU_PAT_SECRET"], impersonate_user_id=user
        )
    if e.get("TABLEAU_USERNAME") or e.get("TABLEAU_PASSWORD"):
        if not (e.get("TABLEAU_USERNAME") and e.get("TABLEAU_PASSWORD")):
            raise ConfigurationError("set both TABLEAU_USERNAME and TABLEAU_PASSWORD")
        return UsernamePassword(
            e["TABLEAU_USERNAME"], e["TABLEAU_PASSWORD"], impersonate_user_id=user
        )
    if e.get("TABLEAU_JWT"):
        return ConnectedAppJWT(jwt=e["TABLEAU_JWT"], impersonate_user_id=user)
    if e.get("TABLEAU_JWT_CLIENT_ID"):
        names = (
            "TABLEAU_JWT_CLIENT_ID",
            "TABLEAU_JWT_SECRET_ID",
            "TABLEAU_JWT_SECRET_VALUE",
            "TABLEAU_JWT_USERNAME",
        )
        missing = [n for n in names if not e.get(n)]
        if missing:
            raise ConfigurationError(f"set {', '.join(missing)} for a connected app")
        return ConnectedAppJWT(
            client_id=e["TABLEAU_JWT_CLIENT_ID"],
            secret_id=e["TABLEAU_JWT_SECRET_ID"],
            secret_value=e["TABLEAU_JWT_SECRET_VALUE"],
            username=e["TABLEAU_JWT_USERNAME"],
            impersonate_user_id=user,
        )
    raise ConfigurationError(
        "no Tableau credentials in the environment: set TABLEAU_PAT_NAME and "
        "TABLEAU_PAT_SECRET (or TABLEAU_USERNAME/TABLEAU_PASSWORD, or the "
        "TABLEAU_JWT_* variables)"
    )

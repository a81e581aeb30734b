"""REST API versions: the oldest one with the Hyper update endpoints, and the server's own
(read from ``serverinfo``, which answers at every version without sign-in)."""

from __future__ import annotations

from typing import Any

from ..values.errors import InvalidArgumentError, TransportError, UnsupportedServerError

__all__ = ["MIN_API_VERSION", "PROBE_VERSION", "check_api_version", "server_api_version"]

#: REST API 3.12 (Tableau Server 2021.2): the first with the Hyper update endpoints.
MIN_API_VERSION = (3, 12)
#: serverinfo answers at every version; this one exists on every server.
PROBE_VERSION = "2.4"


def _version_tuple(text: str) -> tuple[int, int]:
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


def check_api_version(version: str) -> None:
    """Refuse a version that is not ``major.minor``, or older than 3.12."""
    try:
        parsed = _version_tuple(version)
    except ValueError:
        raise InvalidArgumentError(
            f"api_version must look like '3.24', got {version!r}", argument="api_version"
        ) from None
    if parsed < MIN_API_VERSION:
        raise UnsupportedServerError(
            f"REST API {version} is older than 3.12 (Tableau Server 2021.2), the first "
            "version with the Hyper update endpoints"
        )


def _value(field: Any) -> Any:
    return field.get("value") if isinstance(field, dict) else field


def server_api_version(info: dict[str, Any]) -> str:
    """The REST API version a ``serverInfo`` object says, refused when older than 3.12."""
    version = _value(info.get("restApiVersion"))
    if not version:
        raise TransportError("serverinfo did not say the REST API version")
    try:
        check_api_version(str(version))
    except UnsupportedServerError:
        raise UnsupportedServerError(
            f"the server speaks REST API {version} (product version "
            f"{_value(info.get('productVersion'))}); updating live-to-Hyper data sources needs "
            "3.12 (Tableau Server 2021.2) or newer"
        ) from None
    return str(version)

"""What a request that got no (complete) answer means, told apart for the reader: no
answer in time, a certificate refused, ``https`` against a server speaking ``http``, an
unknown host (never retried), a refused connection; each names the URL and what to check."""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests

from ..values.errors import (
    ConnectionFailedError,
    RequestTimeoutError,
    TlsVerificationError,
    TransportError,
    UnknownHostError,
)

__all__ = ["causes_of", "no_answer", "tls_reason"]


def no_answer(
    method: str,
    url: str,
    shown: str,
    limit: float,
    deadline: float,
    err: BaseException,
    cut_off: bool,
) -> TransportError:
    """Our error for a request that got no (complete) answer: ``cut_off`` when the whole
    exchange outlived ``deadline``; else by what ``err`` wraps (:data:`_BY_CAUSE`)."""
    where = f"{method} {shown}"
    if cut_off:
        message = f"{where}: no complete answer within {deadline:g} s"
        return RequestTimeoutError(message, method=method, url=shown)
    if isinstance(err, requests.Timeout):
        message = f"{where}: no answer within {limit:g} s"
        return RequestTimeoutError(message, method=method, url=shown)
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    failed = _Failed(method, shown, parts.hostname or "?", port, err)
    causes = causes_of(err)
    for types, made in _BY_CAUSE:
        if any(isinstance(c, types) for c in causes):
            return made(failed)
    # requests' own messages repeat the URL with its query; a bare OSError says more.
    detail = type(err).__name__
    if not isinstance(err, requests.RequestException):
        detail += f": {err}"
    return ConnectionFailedError(
        f"{where}: connection failed ({detail}); {_CHECK}", method=method, url=shown
    )


_CHECK = "check the server URL (TABLEAU_SERVER_URL, or the server= you passed)"


@dataclass(frozen=True)
class _Failed:
    """A request that got no answer: what its error names."""

    method: str
    shown: str
    host: str
    port: int
    err: BaseException

    @property
    def where(self) -> str:
        return f"{self.method} {self.shown}"


def _unknown_host(f: _Failed) -> TransportError:
    return UnknownHostError(
        f"{f.where}: the host {f.host!r} does not resolve (unknown host); {_CHECK}",
        method=f.method,
        url=f.shown,
    )


def _refused(f: _Failed) -> TransportError:
    return ConnectionFailedError(
        f"{f.where}: connection refused by {f.host}:{f.port} (nothing listens there); "
        f"{_CHECK} and that the server is running",
        method=f.method,
        url=f.shown,
        refused_locally=_is_loopback(f.host),
    )


def _broke(f: _Failed) -> TransportError:
    # The server was reached: the connection broke before its answer was whole.
    return ConnectionFailedError(
        f"{f.where}: the connection to {f.host}:{f.port} broke before the answer was complete "
        f"({type(f.err).__name__}); whether the server acted on the request is not known",
        method=f.method,
        url=f.shown,
    )


def _tls_failure(f: _Failed) -> TransportError:
    """A TLS failure: a server that does not speak TLS where ``f`` went, or a certificate
    refused (with what to set for a private certificate authority)."""
    said = str(f.err)
    if "WRONG_VERSION_NUMBER" in said or "wrong version number" in said:
        return TlsVerificationError(
            f"{f.where}: the server at {f.host}:{f.port} does not speak TLS (https) there: "
            "use an http:// URL for it, or the port it serves https on; " + _CHECK,
            method=f.method,
            url=f.shown,
        )
    return TlsVerificationError(
        f"{f.where}: TLS verification failed ({tls_reason(f.err)}); if the server uses a "
        "private certificate authority, set TABLEAU_VERIFY_TLS to its CA bundle's path (or "
        "pass verify='/path/to/ca-bundle.pem'); only for a test server, "
        "TABLEAU_VERIFY_TLS=false",
        method=f.method,
        url=f.shown,
    )


#: What a request that got no answer failed on, by the first rule one of its causes'
#: types meets, in order: TLS, a host that does not resolve, a refused connection, a
#: connection broken before the answer was whole.
_BY_CAUSE: tuple[
    tuple[tuple[type[BaseException], ...], Callable[[_Failed], TransportError]], ...
] = (
    ((requests.exceptions.SSLError, ssl.SSLError), _tls_failure),
    ((socket.gaierror,), _unknown_host),
    ((ConnectionRefusedError,), _refused),
    (
        (
            requests.exceptions.ChunkedEncodingError,
            ConnectionResetError,
            http.client.RemoteDisconnected,
        ),
        _broke,
    ),
)


def _is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def causes_of(err: BaseException) -> list[BaseException]:
    """``err`` and what it wraps (causes, contexts, urllib3's ``reason``, exception args),
    at most a few levels deep."""
    seen: list[BaseException] = []
    todo: list[object] = [err]
    while todo and len(seen) < 20:
        item = todo.pop()
        if not isinstance(item, BaseException) or any(item is s for s in seen):
            continue
        seen.append(item)
        todo += [item.__cause__, item.__context__, getattr(item, "reason", None), *item.args]
    return seen


def tls_reason(err: BaseException) -> str:
    text = str(err)
    for marker in ("certificate verify failed", "hostname mismatch", "self-signed", "expired"):
        if marker in text:
            start = text.index(marker)
            return text[start : start + 80].split(")")[0].split("'")[0].strip()
    return type(err).__name__

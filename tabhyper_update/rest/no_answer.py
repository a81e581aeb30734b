"""What a request that got no (complete) answer means, told apart for the reader: no
answer in time, a certificate refused, ``https`` against a server speaking ``http``, an
unknown host (never retried), a refused connection; each names the URL and what to check."""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
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
    exchange outlived ``deadline``; else by what ``err`` wraps."""
    where = f"{method} {shown}"
    if cut_off:
        message = f"{where}: no complete answer within {deadline:g} s"
        return RequestTimeoutError(message, method=method, url=shown)
    if isinstance(err, requests.Timeout):
        message = f"{where}: no answer within {limit:g} s"
        return RequestTimeoutError(message, method=method, url=shown)
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    check = "check the server URL (TABLEAU_SERVER_URL, or the server= you passed)"
    causes = causes_of(err)
    if isinstance(err, (requests.exceptions.SSLError, ssl.SSLError)) or any(
        isinstance(c, ssl.SSLError) for c in causes
    ):
        return _tls_failure(method, shown, f"{host}:{port}", err, check)
    if any(isinstance(c, socket.gaierror) for c in causes):
        return UnknownHostError(
            f"{where}: the host {host!r} does not resolve (unknown host); {check}",
            method=method,
            url=shown,
        )
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        return ConnectionFailedError(
            f"{where}: connection refused by {host}:{port} (nothing listens there); {check}"
            " and that the server is running",
            method=method,
            url=shown,
            refused_locally=_is_loopback(host),
        )
    if isinstance(err, requests.exceptions.ChunkedEncodingError) or any(
        isinstance(c, (ConnectionResetError, http.client.RemoteDisconnected)) for c in causes
    ):
        # The server was reached: the connection broke before its answer was whole.
        return ConnectionFailedError(
            f"{where}: the connection to {host}:{port} broke before the answer was complete "
            f"({type(err).__name__}); whether the server acted on the request is not known",
            method=method,
            url=shown,
        )
    # requests' own messages repeat the URL with its query; a bare OSError says more.
    detail = type(err).__name__
    if not isinstance(err, requests.RequestException):
        detail += f": {err}"
    return ConnectionFailedError(
        f"{where}: connection failed ({detail}); {check}", method=method, url=shown
    )


def _tls_failure(
    method: str, shown: str, address: str, err: BaseException, check: str
) -> TlsVerificationError:
    """A TLS failure: a server that does not speak TLS at ``address``, or a certificate
    refused (with what to set for a private certificate authority)."""
    where = f"{method} {shown}"
    if "WRONG_VERSION_NUMBER" in str(err) or "wrong version number" in str(err):
        return TlsVerificationError(
            f"{where}: the server at {address} does not speak TLS (https) there: "
            "use an http:// URL for it, or the port it serves https on; " + check,
            method=method,
            url=shown,
        )
    return TlsVerificationError(
        f"{where}: TLS verification failed ({tls_reason(err)}); if the server uses a private "
        "certificate authority, set TABLEAU_VERIFY_TLS to its CA bundle's path (or "
        "pass verify='/path/to/ca-bundle.pem'); only for a test server, "
        "TABLEAU_VERIFY_TLS=false",
        method=method,
        url=shown,
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

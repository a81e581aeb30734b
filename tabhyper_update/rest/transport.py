"""The transport seam: one session, JSON both ways, retries, error translation, redaction.

Every ``requests`` exception and every non-2xx answer becomes an error of our tree here,
with the cause chained. Retries (tenacity) happen only for requests the caller marks as
safe to repeat, on connection errors, timeouts, 429 (honouring ``Retry-After``) and
500/502/503/504, bounded by a number of attempts and by total time. The final error is
ours, never tenacity's ``RetryError``, and says how many attempts were made.

What a hostile or broken server cannot do:

- **Redirect credentials elsewhere.** No redirect is followed by ``requests``; a redirect to
  the same origin (scheme, host, port) is followed here (at most five), one to another
  origin is an error naming where it pointed.
- **Hold a call for ever.** ``timeout`` bounds each socket operation *and* each request's
  whole life (connect, send, read the full answer): a watchdog shuts the socket when the
  deadline passes, so a server dripping one byte at a time is cut off. A request carrying
  a body gets one more second per MiB. A call with its retries is bounded by the retry
  policy's ``max_total_seconds``.
- **Fill memory.** An answer is read in pieces and refused beyond ``max_answer_bytes``.
- **Be retried into.** TLS verification failures are not retried and say how to supply a
  CA bundle.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import socket
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter
from tenacity import RetryCallState, Retrying, retry_if_exception
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from .._version import __version__
from ..local.telemetry import http_request
from ..values.errors import (
    ApiError,
    AuthenticationError,
    NotFoundError,
    TabHyperError,
    TransportError,
)
from ..values.policies import RetryPolicy
from ..values.redaction import get_logger, scrub
from .no_answer import no_answer

__all__ = ["RetryPolicy", "Transport", "as_list", "parse_body"]

log = get_logger("tabhyper_update")

AUTH_HEADER = "X-Tableau-Auth"
_XML_NS = "{http://tableau.com/api}"
#: Answers are small JSON documents; anything bigger than this is refused unread.
DEFAULT_MAX_ANSWER_BYTES = 16 * 1024 * 1024
#: Same-origin redirects followed for one request.
MAX_REDIRECTS = 5
#: A request body earns its deadline one more second per this many bytes (8 Mbit/s).
_BODY_BYTES_PER_SECOND = 1024 * 1024
_REDIRECTS = (301, 302, 303, 307, 308)


# -- whole-request deadlines --------------------------------------------------------------------

_active = threading.local()


class _Watchdog:
    """Shuts the sockets of one request down when its deadline passes."""

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, seconds), self._fire)
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        _active.watchdog = self
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        _active.watchdog = None

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._sockets.append(sock)
            fired = self.fired
        if fired:
            _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed: nothing left to cut
        sock.shutdown(socket.SHUT_RDWR)


def _watch_current(sock: Any) -> None:
    watchdog = getattr(_active, "watchdog", None)
    if watchdog is not None:
        watchdog.watch(sock)


class _WatchedHTTPConnection(HTTPConnection):
    def connect(self) -> None:
        super().connect()
        _watch_current(self.sock)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watch_current(self.sock)  # a kept-alive connection is reused without connect()
        super().request(*args, **kwargs)


class _WatchedHTTPSConnection(HTTPSConnection):
    def connect(self) -> None:
        super().connect()
        _watch_current(self.sock)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watch_current(self.sock)
        super().request(*args, **kwargs)


class _WatchedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


class _WatchedAdapter(HTTPAdapter):
    """Connections whose sockets the current request's watchdog can shut."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _WatchedHTTPPool,
            "https": _WatchedHTTPSPool,
        }


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    default = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port or default


def _show_origin(origin: tuple[str, str, int | None]) -> str:
    scheme, host, port = origin
    return f"{scheme}://{host}" + (f":{port}" if port else "")


def child(body: Any, *path: str) -> Any:
    """The value at ``path`` in an answer's body (``None`` where the body, or any object on
    the way, is not a JSON object or lacks the key)."""
    for key in path:
        body = body.get(key) if isinstance(body, dict) else None
    return body


def as_list(value: Any) -> list[Any]:
    """A JSON/XML child that may be absent, one object, or a list of objects."""
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _xml_to_dict(element: ET.Element) -> dict[str, Any]:
    result: dict[str, Any] = dict(element.attrib)
    for child in element:
        tag = child.tag.removeprefix(_XML_NS)
        value = _xml_to_dict(child)
        if tag in result:
            existing = result[tag]
            result[tag] = [*existing, value] if isinstance(existing, list) else [existing, value]
        else:
            result[tag] = value
    text = (element.text or "").strip()
    if text:
        result["value"] = text
    return result


def parse_body(response: requests.Response) -> dict[str, Any] | None:
    """The body as a dict (JSON, or Tableau's XML mapped to the JSON shape); None if empty.

    Raises ``ValueError`` with a short excerpt when the body is neither.
    """
    content = response.content
    if not content.strip():
        return None
    ctype = response.headers.get("Content-Type", "").lower()
    text = content.decode("utf-8", errors="replace")
    stripped = text.lstrip()
    if "json" in ctype or stripped.startswith(("{", "[")):
        return _json_body(text)
    if stripped.startswith("<") and "<html" not in stripped[:500].lower():
        return _xml_body(text)
    raise ValueError(f"not JSON or XML: {_excerpt(text)}")


def _json_body(text: str) -> dict[str, Any]:
    """A JSON body as a dict; ``ValueError`` where it is no JSON object."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"malformed JSON ({err.msg}): {_excerpt(text)}") from None
    except RecursionError:
        raise ValueError(f"JSON nested too deeply to read: {_excerpt(text)}") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object: {_excerpt(text)}")
    return data


def _xml_body(text: str) -> dict[str, Any]:
    """Tableau's XML body mapped to the JSON shape; ``ValueError`` where it is no XML."""
    try:
        root = ET.fromstring(text)  # noqa: S314
    except ET.ParseError as err:
        raise ValueError(f"malformed XML ({err}): {_excerpt(text)}") from None
    tag = root.tag.removeprefix(_XML_NS)
    try:
        converted = _xml_to_dict(root)
    except RecursionError:
        raise ValueError(f"XML nested too deeply to read: {_excerpt(text)}") from None
    return converted if tag == "tsResponse" else {tag: converted}


def _excerpt(text: str, limit: int = 160) -> str:
    """A short excerpt of a server's text for a message: scrubbed whole first, then cut, so
    that no fragment of a secret the client holds survives the cut."""
    flat = " ".join(scrub(text).split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "…")


def _retry_after(response: requests.Response | None) -> float | None:
    if response is None:
        return None
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _without_fragment(url: str) -> str:
    # Query strings here carry upload-session ids and filters, never credentials; the
    # fragment is dropped in case a caller put one there.
    return url.split("#", 1)[0]


@dataclass(frozen=True)
class _Outgoing:
    """One request as it goes out (and, after a redirect, where it goes next)."""

    method: str
    url: str
    shown: str
    data: Any
    headers: Mapping[str, str]
    params: Mapping[str, str] | None
    limit: float  # each socket operation
    deadline: float  # the whole exchange


class Transport:
    """HTTP to one Tableau server: base URL, session, timeouts, retries, errors."""

    def __init__(
        self,
        server: str,
        *,
        verify: bool | str = True,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        self.server = server.rstrip("/")
        self.origin = _origin(self.server)
        self.verify = verify
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.max_answer_bytes = max_answer_bytes
        if session is None:
            session = requests.Session()
            for prefix in ("http://", "https://"):
                session.mount(prefix, _WatchedAdapter())
        self.session = session
        self.sleep = sleep
        self.clock = clock
        #: Requests sent (every attempt), for what a workflow reports it cost.
        self.sent = 0
        self.session.headers["User-Agent"] = f"tabhyper-update/{__version__}"
        self.session.headers["Accept"] = "application/json"

    def url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else f"{self.server}/{path}"

    def close(self) -> None:
        self.session.close()

    def send_once(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        json_body: Any = None,
        data: Any = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        expected: tuple[int, ...] = (200,),
        timeout: float | None = None,
        resend_count: int = 0,
        raw: bool = False,
    ) -> tuple[requests.Response, dict[str, Any] | None]:
        """One request, no retry (``resend_count``: how many attempts of it went before, for
        its HTTP span). Errors come back as our exceptions. ``raw``: the answer is a file
        (a data source's), read by the caller from the response, not parsed here."""
        url = self.url(path)
        shown = _without_fragment(url)
        all_headers = dict(headers or {})
        if token is not None:
            all_headers[AUTH_HEADER] = token
        if json_body is not None:
            all_headers["Content-Type"] = "application/json"
            data = json.dumps(json_body)
        limit = timeout or self.timeout
        size = len(data) if isinstance(data, (bytes, str)) or hasattr(data, "__len__") else 0
        deadline = limit + size / _BODY_BYTES_PER_SECOND
        out = _Outgoing(method, url, shown, data, all_headers, params, limit, deadline)
        started = time.perf_counter()
        self.sent += 1
        with http_request(method, shown, resend_count) as answer:
            response = self._send_following(out)
            answer["status"] = response.status_code
        log.debug(
            "%s %s -> %s in %.3f s",
            method,
            shown,
            response.status_code,
            time.perf_counter() - started,
        )
        if raw and response.status_code in expected:
            return response, None
        return response, self._body(response, method, shown, expected)

    def _body(
        self, response: requests.Response, method: str, shown: str, expected: tuple[int, ...]
    ) -> dict[str, Any] | None:
        """The answer's JSON body; an unexpected status, an unreadable body or an error
        body under a success status raised as our error."""
        if response.status_code not in expected:
            raise self._error(response, method, shown)
        try:
            body = parse_body(response)
        except ValueError as err:
            raise TransportError(
                f"{method} {shown}: HTTP {response.status_code} with an unreadable body: {err}",
                method=method,
                url=shown,
            ) from None
        if body is not None and isinstance(body.get("error"), dict):
            # A success status carrying an error body is still an error.
            raise self._error(response, method, shown, body)
        return body

    def _check_redirect(self, out: _Outgoing, status: int, location: str) -> None:
        """Refuse a redirect (``status``) of ``out`` to ``location`` that is not followed:
        to another origin (credentials never leave this one), one that would turn the
        request into a GET, one whose body cannot be sent again; else rewind the body."""
        method, shown = out.method, out.shown
        if _origin(location) != self.origin:
            raise TransportError(
                f"{method} {shown}: the server redirected (HTTP {status}) "
                f"to another origin, {_show_origin(_origin(location))}; not followed, so "
                f"that credentials never leave {_show_origin(self.origin)}. Point the "
                "client at the server's real URL",
                method=method,
                url=shown,
            )
        if status in (301, 302, 303) and method not in ("GET", "HEAD"):
            raise TransportError(
                f"{method} {shown}: the server answered HTTP {status} (a "
                f"redirect to {_without_fragment(location)} that would turn the request into a "
                "GET); not followed",
                method=method,
                url=shown,
            )
        data = out.data
        if data is None or isinstance(data, (bytes, str)):
            return
        if not hasattr(data, "seek"):
            raise TransportError(
                f"{method} {shown}: redirected, and the body cannot be sent again",
                method=method,
                url=shown,
            )
        data.seek(0)

    def _send_following(self, out: _Outgoing) -> requests.Response:
        """Send, following same-origin redirects only; the answer read in full, capped."""
        method = out.method
        for _ in range(MAX_REDIRECTS + 1):
            response = self._send_read(out)
            if response.status_code not in _REDIRECTS or "Location" not in response.headers:
                return response
            location = urljoin(response.url or out.url, response.headers["Location"])
            self._check_redirect(out, response.status_code, location)
            log.info("%s %s redirected to %s", method, out.shown, _without_fragment(location))
            out = replace(out, url=location, shown=_without_fragment(location), params=None)
        raise TransportError(
            f"{method} {out.shown}: more than {MAX_REDIRECTS} redirects",
            method=method,
            url=out.shown,
        )

    def _send_read(self, out: _Outgoing) -> requests.Response:
        """One HTTP exchange under a watchdog; the answer read in full, capped."""
        method, shown = out.method, out.shown
        with _Watchdog(out.deadline) as watchdog:
            try:
                response = self.session.request(
                    method,
                    out.url,
                    data=out.data,
                    headers=dict(out.headers),
                    params=out.params,
                    timeout=out.limit,
                    verify=self.verify,
                    allow_redirects=False,
                    stream=True,
                )
                try:
                    chunks: list[bytes] = []
                    total = 0
                    for chunk in response.iter_content(64 * 1024):
                        total += len(chunk)
                        if total > self.max_answer_bytes:
                            raise TransportError(
                                f"{method} {shown}: the answer is larger than "
                                f"{self.max_answer_bytes:,} bytes; refused",
                                method=method,
                                url=shown,
                            )
                        chunks.append(chunk)
                finally:
                    response.close()
            except (requests.RequestException, OSError) as err:
                raise no_answer(
                    out.method, out.url, out.shown, out.limit, out.deadline, err, watchdog.fired
                ) from err
        response._content = b"".join(chunks)
        return response

    def _error(
        self, response: requests.Response, method: str, url: str, body: dict[str, Any] | None = None
    ) -> ApiError:
        status = response.status_code
        unreadable = None
        if body is None:
            try:
                body = parse_body(response)
            except ValueError as err:
                unreadable = f"unreadable error body: {err}"
        code, summary, detail = _error_fields(body, unreadable or response.reason or None)
        if status < 400:
            status = int(code[:3]) if code and code[:3].isdigit() else 500
        cls = _ERROR_CLASSES.get(status, ApiError)
        error = cls(
            status=status, code=code, summary=summary, detail=detail, method=method, url=url
        )
        error.retry_after = _retry_after(response)
        return error

    def call(
        self, method: str, path: str, *, retry: bool, **kwargs: Any
    ) -> tuple[requests.Response, dict[str, Any] | None]:
        """:meth:`send_once`, retried per the policy when ``retry`` is true."""
        if not retry:
            return self.send_once(method, path, **kwargs)
        policy = self.retry
        start = self.clock()

        def wait(state: RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome else None
            hinted = getattr(error, "retry_after", None)
            return float(hinted) if hinted is not None else policy.backoff(state.attempt_number)

        def stop(state: RetryCallState) -> bool:
            if state.attempt_number >= policy.max_attempts:
                return True
            return self.clock() - start + wait(state) > policy.max_total_seconds

        def before_sleep(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            log.warning(
                "%s %s failed (%s); retrying (attempt %d of %d)",
                method,
                _without_fragment(self.url(path)),
                error,
                state.attempt_number + 1,
                policy.max_attempts,
            )

        retrying = Retrying(
            retry=retry_if_exception(policy.is_retryable),
            stop=stop,
            wait=wait,
            sleep=self.sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
        attempts = 0
        own_timeout = kwargs.pop("timeout", None) or self.timeout
        try:
            for attempt in retrying:
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    # No attempt outlives the call's own bound.
                    remaining = policy.max_total_seconds - (self.clock() - start)
                    limit = max(0.05, min(own_timeout, remaining))
                    return self.send_once(
                        method, path, timeout=limit, resend_count=attempts - 1, **kwargs
                    )
        except TabHyperError as err:
            err.attempts = attempts
            raise
        raise AssertionError("unreachable")  # pragma: no cover


#: The error raised for an answer's status (any other: ApiError).
_ERROR_CLASSES: dict[int, type[ApiError]] = {401: AuthenticationError, 404: NotFoundError}


def _error_fields(
    body: dict[str, Any] | None, fallback: str | None
) -> tuple[str | None, str | None, str | None]:
    """An error answer's code, summary and detail: Tableau's ``{"error": {"code",
    "summary", "detail"}}``, or the VizQL Data Service's ``{"errorCode", "message",
    "tab-error-code"}``; ``fallback`` the summary where the body names none (a body of
    neither shape, or a Data Service error without a message)."""
    found = child(body, "error")
    if isinstance(found, dict):
        code = found.get("code")
        return (
            str(code) if code is not None else None,
            _text(found.get("summary")),
            _text(found.get("detail")),
        )
    if body is not None and ("errorCode" in body or "tab-error-code" in body):
        code_text = _text(body.get("errorCode")) or _text(body.get("tab-error-code"))
        return code_text, _text(body.get("message")) or fallback, None
    return None, fallback, None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):
        return _text(value.get("value"))
    return str(value)

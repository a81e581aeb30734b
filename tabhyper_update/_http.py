"""The transport seam: one session, JSON both ways, retries, error translation, redaction.

Every ``requests`` exception and every non-2xx answer becomes an error of our tree here,
with the cause chained. Retries (tenacity) happen only for requests the caller marks as
safe to repeat, on connection errors, timeouts, 429 (honouring ``Retry-After``) and
500/502/503/504, bounded by a number of attempts and by total time. The final error is
ours, never tenacity's ``RetryError``, and says how many attempts were made.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import requests
from tenacity import RetryCallState, Retrying, retry_if_exception

from ._version import __version__
from .errors import (
    ApiError,
    AuthenticationError,
    ConnectionFailedError,
    NotFoundError,
    RequestTimeoutError,
    TabHyperError,
    TransportError,
)

__all__ = ["RetryPolicy", "Transport", "as_list", "parse_body"]

log = logging.getLogger("tabhyper_update")

AUTH_HEADER = "X-Tableau-Auth"
_XML_NS = "{http://tableau.com/api}"


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to retry a request that is safe to repeat.

    Waits grow exponentially from ``initial_wait`` (with jitter) up to ``max_wait``; a
    ``Retry-After`` header is honoured instead. Retrying stops after ``max_attempts`` or
    when the next wait would pass ``max_total_seconds`` since the first attempt.
    """

    max_attempts: int = 5
    max_total_seconds: float = 120.0
    initial_wait: float = 0.5
    max_wait: float = 30.0
    jitter: float = 0.25
    statuses: frozenset[int] = field(default_factory=lambda: frozenset({429, 500, 502, 503, 504}))

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.max_total_seconds < 0 or self.initial_wait < 0 or self.max_wait < 0:
            raise ValueError("retry times must not be negative")

    def backoff(self, attempt: int) -> float:
        base = min(self.max_wait, self.initial_wait * (2 ** (attempt - 1)))
        jitter = 1.0 + self.jitter * random.random()  # noqa: S311 - not cryptographic
        return float(base * jitter)

    def is_retryable(self, error: BaseException) -> bool:
        if isinstance(error, (ConnectionFailedError, RequestTimeoutError)):
            return True
        return isinstance(error, ApiError) and error.status in self.statuses


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
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"malformed JSON ({err.msg}): {_excerpt(text)}") from None
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object: {_excerpt(text)}")
        return data
    if stripped.startswith("<") and "<html" not in stripped[:500].lower():
        try:
            root = ET.fromstring(text)  # noqa: S314
        except ET.ParseError as err:
            raise ValueError(f"malformed XML ({err}): {_excerpt(text)}") from None
        tag = root.tag.removeprefix(_XML_NS)
        converted = _xml_to_dict(root)
        return converted if tag == "tsResponse" else {tag: converted}
    raise ValueError(f"not JSON or XML: {_excerpt(text)}")


def _excerpt(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
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


def _redact_url(url: str) -> str:
    # Query strings here carry upload-session ids and filters, never credentials; the
    # fragment is dropped in case a caller put one there.
    return url.split("#", 1)[0]


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
    ) -> None:
        self.server = server.rstrip("/")
        self.verify = verify
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.session = session or requests.Session()
        self.sleep = sleep
        self.clock = clock
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
    ) -> tuple[requests.Response, dict[str, Any] | None]:
        """One request, no retry. Errors come back as our exceptions."""
        url = self.url(path)
        shown = _redact_url(url)
        all_headers = dict(headers or {})
        if token is not None:
            all_headers[AUTH_HEADER] = token
        if json_body is not None:
            all_headers["Content-Type"] = "application/json"
            data = json.dumps(json_body)
        started = time.perf_counter()
        try:
            response = self.session.request(
                method,
                url,
                data=data,
                headers=all_headers,
                params=params,
                timeout=timeout or self.timeout,
                verify=self.verify,
            )
        except requests.Timeout as err:
            raise RequestTimeoutError(
                f"{method} {shown}: no answer within {timeout or self.timeout:g} s",
                method=method,
                url=shown,
            ) from err
        except requests.RequestException as err:
            raise ConnectionFailedError(
                f"{method} {shown}: connection failed ({type(err).__name__})",
                method=method,
                url=shown,
            ) from err
        log.debug(
            "%s %s -> %s in %.3f s",
            method,
            shown,
            response.status_code,
            time.perf_counter() - started,
        )
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
        return response, body

    def _error(
        self, response: requests.Response, method: str, url: str, body: dict[str, Any] | None = None
    ) -> ApiError:
        status = response.status_code
        code = summary = detail = None
        if body is None:
            try:
                body = parse_body(response)
            except ValueError as err:
                summary = f"unreadable error body: {err}"
        err_obj = (body or {}).get("error")
        if isinstance(err_obj, dict):
            code = str(err_obj["code"]) if err_obj.get("code") is not None else None
            summary = _text(err_obj.get("summary"))
            detail = _text(err_obj.get("detail"))
        elif summary is None:
            summary = response.reason or None
        if status < 400:
            status = int(code[:3]) if code and code[:3].isdigit() else 500
        cls: type[ApiError] = ApiError
        if status == 401:
            cls = AuthenticationError
        elif status == 404:
            cls = NotFoundError
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
                _redact_url(self.url(path)),
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
        try:
            for attempt in retrying:
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    return self.send_once(method, path, **kwargs)
        except TabHyperError as err:
            err.attempts = attempts
            if attempts > 1:
                err.args = (f"{err.args[0] if err.args else err} (after {attempts} attempts)",)
            raise
        raise AssertionError("unreachable")  # pragma: no cover


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):
        return _text(value.get("value"))
    return str(value)

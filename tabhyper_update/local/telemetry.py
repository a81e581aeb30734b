"""Traces and metrics through OpenTelemetry, when ``opentelemetry-api`` is installed (the
``[otel]`` extra); without it every call here does nothing and imports nothing.

Spans: ``tabhyper_update.build``, ``tabhyper_update.update`` (one per update) and inside it
``tabhyper_update.upload`` and ``tabhyper_update.wait`` per part, ``tabhyper_update.readback``;
and one HTTP client span per attempt of every request, by OpenTelemetry's semantic
conventions (``http.request.method``, ``server.address``, ``server.port``, ``url.full``
without its query, ``http.response.status_code``, ``error.type``,
``http.request.resend_count``). Metrics: ``tabhyper_update.rows`` (counter of the rows an
update applied, by ``action``), ``tabhyper_update.uploaded`` (counter, unit ``By``: the
bytes the server received), ``tabhyper_update.quarantined`` (counter of the changes a
build set aside), ``tabhyper_update.update.duration`` and ``tabhyper_update.lag``
(histograms, unit ``s``), and ``http.client.request.duration`` (histogram, unit ``s``). A
deduplicated or skipped part adds nothing to the counters and says so in its attributes.
The tracer and meter carry the SDK's version and the conventions' schema URL. Attributes
name data sources, parts and counts; never a credential or a value.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .._version import __version__
from .optional import optional_module

__all__ = ["SCHEMA_URL", "enabled", "http_request", "record", "span"]

_NAME = "tabhyper_update"
#: The semantic conventions' version the attribute names follow.
SCHEMA_URL = "https://opentelemetry.io/schemas/1.26.0"
_instruments: dict[str, Any] = {}


def enabled() -> bool:
    """Whether ``opentelemetry-api`` can be imported (looked up once per process; a missing or
    broken install means no telemetry, never an error)."""
    return optional_module("opentelemetry.trace") is not None and (
        optional_module("opentelemetry.metrics") is not None
    )


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span ``tabhyper_update.<name>`` (a no-op without OpenTelemetry); an error leaving
    it is recorded on it."""
    if not enabled():
        yield None
        return
    trace: Any = optional_module("opentelemetry.trace")
    tracer = trace.get_tracer(_NAME, __version__, schema_url=SCHEMA_URL)
    shown = {f"tabhyper_update.{k}": v for k, v in attributes.items() if v is not None}
    with tracer.start_as_current_span(f"{_NAME}.{name}", attributes=shown) as current:
        yield current


@contextlib.contextmanager
def http_request(method: str, url: str, resend_count: int) -> Iterator[dict[str, Any]]:
    """An HTTP client span for one attempt, and its duration in
    ``http.client.request.duration``; the caller puts the answer's status in the yielded
    mapping (``status``). A no-op without OpenTelemetry."""
    answer: dict[str, Any] = {}
    if not enabled():
        yield answer
        return
    trace: Any = optional_module("opentelemetry.trace")
    where, attributes = _request_attributes(method, url, resend_count)
    tracer = trace.get_tracer(_NAME, __version__, schema_url=SCHEMA_URL)
    started = time.perf_counter()
    error: str | None = None
    with tracer.start_as_current_span(
        method, kind=trace.SpanKind.CLIENT, attributes=attributes, record_exception=False
    ) as current:
        try:
            yield answer
        except BaseException as exc:
            error = type(exc).__name__
            raise
        finally:
            _answered(trace, current, answer.get("status"), error, where)
            _meter_instruments()["http"].record(time.perf_counter() - started, where)


def _request_attributes(
    method: str, url: str, resend_count: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """An HTTP request's attributes: those its duration is recorded under, and its span's
    (the URL without its query and fragment, how many times it was sent before)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    where: dict[str, Any] = {
        "http.request.method": method,
        "server.address": parts.hostname or "",
        "server.port": port,
    }
    attributes = {**where, "url.full": urlunsplit(parts._replace(query="", fragment=""))}
    if resend_count:
        attributes["http.request.resend_count"] = resend_count
    return where, attributes


def _answered(
    trace: Any, current: Any, status: int | None, error: str | None, where: dict[str, Any]
) -> None:
    """The answer's ``status`` (and the ``error`` that ended the request) on the span
    ``current`` and among the duration's attributes (``where``)."""
    if status is not None:
        current.set_attribute("http.response.status_code", status)
        where["http.response.status_code"] = status
        if status >= 400:
            error = error or str(status)
    if error is not None:
        current.set_attribute("error.type", error)
        current.set_status(trace.Status(trace.StatusCode.ERROR))
        where["error.type"] = error


def _meter_instruments() -> dict[str, Any]:
    metrics: Any = optional_module("opentelemetry.metrics")
    meter = metrics.get_meter(_NAME, __version__, schema_url=SCHEMA_URL)
    made = _instruments
    if not made or made.get("meter") is not meter:
        made.clear()
        made["meter"] = meter
        made["rows"] = meter.create_counter(
            f"{_NAME}.rows", unit="{row}", description="rows an update applied, by action"
        )
        made["quarantined"] = meter.create_counter(
            f"{_NAME}.quarantined", unit="{row}", description="changes set aside, not applied"
        )
        made["bytes"] = meter.create_counter(
            f"{_NAME}.uploaded", unit="By", description="bytes the server received"
        )
        made["duration"] = meter.create_histogram(f"{_NAME}.update.duration", unit="s")
        made["lag"] = meter.create_histogram(f"{_NAME}.lag", unit="s")
        made["http"] = meter.create_histogram(
            "http.client.request.duration", unit="s", description="HTTP client request time"
        )
    return made


def record(
    *,
    rows: Mapping[str, int],
    size_bytes: int,
    seconds: float,
    lag: float | None,
    datasource: str,
    deduplicated: bool | None = False,
    skipped: bool = False,
    quarantined: int = 0,
) -> None:
    """One update's figures as metrics (a no-op without OpenTelemetry): ``rows`` and
    ``size_bytes`` are what this run applied and sent (zero for an update that was
    deduplicated or skipped, which its attributes say)."""
    if not enabled():
        return
    made = _meter_instruments()
    where = {
        "tabhyper_update.datasource": datasource,
        # An attribute cannot be None: "unknown" where the server's answer cannot tell.
        "tabhyper_update.deduplicated": "unknown" if deduplicated is None else deduplicated,
        "tabhyper_update.skipped": skipped,
    }
    for action, count in rows.items():
        made["rows"].add(count, {**where, "tabhyper_update.action": action})
    made["bytes"].add(size_bytes, where)
    if quarantined and not skipped and deduplicated is False:
        made["quarantined"].add(quarantined, where)
    made["duration"].record(seconds, where)
    if lag is not None:
        made["lag"].record(lag, where)

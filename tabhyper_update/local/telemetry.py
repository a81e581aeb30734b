"""Traces and metrics through OpenTelemetry, when ``opentelemetry-api`` is installed (the
``[otel]`` extra); without it every call here does nothing and imports nothing.

Spans: ``tabhyper_update.build``, ``tabhyper_update.update`` (one per update) and inside it
``tabhyper_update.upload`` and ``tabhyper_update.wait`` per part, ``tabhyper_update.readback``.
Metrics: ``tabhyper_update.rows`` (counter, by ``action``), ``tabhyper_update.bytes``
(counter), ``tabhyper_update.update.duration`` and ``tabhyper_update.lag`` (histograms, in
seconds). Attributes name data sources, parts and counts; never a credential or a value.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from .optional import optional_module

__all__ = ["enabled", "record", "span"]

_NAME = "tabhyper_update"
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
    tracer = trace.get_tracer(_NAME)
    shown = {f"tabhyper_update.{k}": v for k, v in attributes.items() if v is not None}
    with tracer.start_as_current_span(f"{_NAME}.{name}", attributes=shown) as current:
        yield current


def record(
    *,
    rows: Mapping[str, int],
    size_bytes: int,
    seconds: float,
    lag: float | None,
    datasource: str,
) -> None:
    """One update's figures as metrics (a no-op without OpenTelemetry)."""
    if not enabled():
        return
    metrics: Any = optional_module("opentelemetry.metrics")
    meter = metrics.get_meter(_NAME)
    made = _instruments
    if not made or made.get("meter") is not meter:
        made.clear()
        made["meter"] = meter
        made["rows"] = meter.create_counter(f"{_NAME}.rows", unit="{row}")
        made["bytes"] = meter.create_counter(f"{_NAME}.bytes", unit="By")
        made["duration"] = meter.create_histogram(f"{_NAME}.update.duration", unit="s")
        made["lag"] = meter.create_histogram(f"{_NAME}.lag", unit="s")
    where = {"tabhyper_update.datasource": datasource}
    for action, count in rows.items():
        made["rows"].add(count, {**where, "tabhyper_update.action": action})
    made["bytes"].add(size_bytes, where)
    made["duration"].record(seconds, where)
    if lag is not None:
        made["lag"].record(lag, where)

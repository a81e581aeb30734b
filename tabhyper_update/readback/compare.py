"""Values compared as the source means them, whichever side they come from: a row of a
payload's ``.hyper`` file, a Spark aggregate, or the VizQL Data Service's JSON.

Every value is first made *canonical* for its field's type (the service's ``dataType``):
integers as ``int``, reals as ``float`` (decimals too), text as ``str``, booleans as
``bool``, dates as :class:`datetime.date`, date-times as microseconds since 1970-01-01 UTC
(a naive value means UTC, as in payloads; an offset is applied). Then :func:`same` compares
two canonical values: NULL equals only NULL, reals within :class:`Tolerance` (NaN equals
NaN), date-times within ``Tolerance.seconds``.

>>> same(canonical("2024-01-01T10:00:00+02:00", "DATETIME"),
...      canonical(datetime(2024, 1, 1, 8), "DATETIME"), "DATETIME")
True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

from ..values.errors import InvalidArgumentError

__all__ = ["Tolerance", "canonical", "same"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Tolerance:
    """How far apart two values may be and still be the same: reals by ``relative`` (of
    the larger magnitude) or ``absolute``, date-times by ``seconds``."""

    relative: float = 1e-9
    absolute: float = 1e-12
    seconds: float = 0.0

    def __post_init__(self) -> None:
        for name in ("relative", "absolute", "seconds"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0 or math.isnan(value):
                raise InvalidArgumentError(
                    f"tolerance {name} must be a number >= 0, got {value!r}", argument=name
                )


def _micros(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    delta = moment - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _parse_moment(text: str) -> datetime:
    cleaned = text.strip().replace(" ", "T", 1)
    if cleaned.endswith(("Z", "z")):
        cleaned = cleaned[:-1] + "+00:00"
    try:
        return datetime.fromisoformat(cleaned)
    except ValueError:
        raise InvalidArgumentError(f"not a date-time: {text!r}") from None


def canonical(value: Any, data_type: str) -> Any:
    """``value`` as the comparable value of a field of ``data_type`` (``None`` for NULL)."""
    if value is None:
        return None
    if hasattr(value, "to_datetime"):  # a Hyper API Timestamp
        value = value.to_datetime()
    elif hasattr(value, "to_date"):  # a Hyper API Date
        value = value.to_date()
    made = _CANONICAL.get(data_type.upper())
    return value if made is None else made(value)


def _canonical_moment(value: Any) -> int:
    """Microseconds since the epoch."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)  # already microseconds (a Spark-side aggregate)
    if isinstance(value, datetime):
        return _micros(value)
    if isinstance(value, date):
        return _micros(datetime(value.year, value.month, value.day))
    return _micros(_parse_moment(str(value)))


def _canonical_date(value: Any) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    return _parse_moment(str(value)[:10]).date()


def _canonical_real(value: Any) -> float | Decimal:
    if isinstance(value, Decimal):
        return value  # an exact type: compared exactly (see :func:`same`)
    return float(value) if not isinstance(value, str) else float(value.strip())


def _canonical_integer(value: Any) -> int | float:
    if isinstance(value, (float, Decimal)) and value == int(value):
        return int(value)
    return int(value) if not isinstance(value, float) else value


def _canonical_boolean(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1")
    return bool(value)


#: How a value of each field type is made comparable (any other type: as it is).
_CANONICAL: dict[str, Callable[[Any], Any]] = {
    "DATETIME": _canonical_moment,
    "DATE": _canonical_date,
    "REAL": _canonical_real,
    "INTEGER": _canonical_integer,
    "BOOLEAN": _canonical_boolean,
    "STRING": str,
}


def same(a: Any, b: Any, data_type: str, tolerance: Tolerance | None = None) -> bool:
    """Whether two canonical values of a ``data_type`` field are the same value."""
    if a is None or b is None:
        return a is None and b is None
    tol = tolerance or Tolerance()
    kind = data_type.upper()
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return _same_decimal(a, b)
    if kind in ("REAL", "INTEGER") and (isinstance(a, float) or isinstance(b, float)):
        return _same_float(float(a), float(b), tol)
    if kind == "DATETIME" and isinstance(a, int) and isinstance(b, int):
        return abs(a - b) <= tol.seconds * 1_000_000
    return bool(a == b)


def _same_float(x: float, y: float, tol: Tolerance) -> bool:
    """Two doubles the same within ``tol`` (NaN the same as NaN only, an infinity as
    itself)."""
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):
        return x == y
    return abs(x - y) <= max(tol.absolute, tol.relative * max(abs(x), abs(y)))


def _same_decimal(a: Any, b: Any) -> bool:
    """A decimal is an exact type: equal only to the same number. A value the service sent
    as a JSON number is read as the shortest decimal that number is (``123456789.01``), and
    compared exactly, never within a tolerance."""

    def exact(value: Any) -> Decimal | None:
        if isinstance(value, Decimal):
            return value
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return Decimal(value)
        if isinstance(value, float):
            return Decimal(repr(value)) if math.isfinite(value) else None
        try:
            return Decimal(str(value).strip())
        except ArithmeticError:
            return None

    x, y = exact(a), exact(b)
    return x is not None and y is not None and x == y

"""The SDK's messages' common phrases: counts (``counted(1, "row")`` is "1 row",
``counted(2_000, "row")`` "2,000 rows") and a value that must be one of a few
(:func:`check_choice`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar, cast

__all__ = ["check_choice", "counted", "either"]

_T = TypeVar("_T")


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, its plural (``plural``, else ``noun + "s"``) unless ``n`` is 1."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


def either(choices: Sequence[object]) -> str:
    """``choices`` as a message says them: ``'a', 'b' or 'c'``."""
    shown = list(map(repr, choices))
    return " or ".join([", ".join(shown[:-1]), shown[-1]] if len(shown) > 1 else shown)


def check_choice(
    value: object, choices: Sequence[_T], what: str, error: Callable[[str], Exception]
) -> _T:
    """``value`` once it is one of ``choices`` (as their type); else ``error`` naming
    ``what``, its choices and the value given."""
    if value not in choices:
        raise error(f"{what} must be {either(choices)}, got {value!r}")
    return cast("_T", value)

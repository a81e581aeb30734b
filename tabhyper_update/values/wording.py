"""Counts in the SDK's messages: ``counted(1, "row")`` is "1 row", ``counted(2_000, "row")``
"2,000 rows"."""

from __future__ import annotations

__all__ = ["counted"]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, its plural (``plural``, else ``noun + "s"``) unless ``n`` is 1."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"

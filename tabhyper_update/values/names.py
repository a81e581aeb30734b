"""What the SDK takes as a name (of a table, a column, a file or a data source), and as
one name or several: every argument that names something is checked by these two."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeGuard

__all__ = ["is_name", "names_in"]


def is_name(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a name: a string, not empty, with no NUL character (which no
    table, column or file name can hold)."""
    return isinstance(value, str) and value != "" and "\x00" not in value


def names_in(value: object) -> tuple[str, ...] | None:
    """``value`` as one name (a string) or several (an iterable of them, one at least), as
    a tuple; ``None`` where it is anything else or holds anything but names."""
    if isinstance(value, str):
        value = (value,)
    held = tuple(value) if isinstance(value, Iterable) and not isinstance(value, bytes) else ()
    return held if held and all(map(is_name, held)) else None

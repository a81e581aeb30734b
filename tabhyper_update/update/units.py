"""What one update sends, part by part (:class:`Unit`), and :func:`step`, which names the
step an error of ours left and what that means for the update."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeVar

from ..values.actions import ActionBatch
from ..values.errors import TabHyperError
from ..values.parts import PayloadPart

__all__ = ["Unit", "step"]

_T = TypeVar("_T")


class Unit(NamedTuple):
    """One part's update: the part (None for a batch that reads no table) and its batch."""

    part: PayloadPart | None
    batch: ActionBatch


def step(step: str, consequence: str, fn: Callable[[], _T]) -> _T:
    """Run one step; an error of ours leaving it says which step and what it means."""
    try:
        return fn()
    except TabHyperError as err:
        err.at_step(step, consequence)
        raise

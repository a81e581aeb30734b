"""What one update sends, part by part (:class:`Unit`), one part as a run sends it
(:class:`PartRun`), and :func:`step`, which names the step an error of ours left and what
that means for the update."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

from ..values.actions import ActionBatch
from ..values.errors import TabHyperError
from ..values.parts import PayloadPart
from .results import PartUpdate
from .state import PartState

__all__ = ["PartRun", "Unit", "step"]

_T = TypeVar("_T")


class Unit(NamedTuple):
    """One part's update: the part (None for a batch that reads no table) and its batch."""

    part: PayloadPart | None
    batch: ActionBatch


@dataclass
class PartRun:
    """One part as a run sends it: its entry in the run's record (``state``, saved as it
    goes), its file (``part``; None for a batch that reads no table), its ``batch``, and
    the result's entry for it (``update``), filled as the part is uploaded, submitted and
    waited for."""

    state: PartState
    part: PayloadPart | None
    batch: ActionBatch
    update: PartUpdate

    @property
    def number(self) -> int:
        """The part's number, from 1, as messages name it."""
        return self.state.index + 1


def step(step: str, consequence: str, fn: Callable[[], _T]) -> _T:
    """Run one step; an error of ours leaving it says which step and what it means."""
    try:
        return fn()
    except TabHyperError as err:
        err.at_step(step, consequence)
        raise

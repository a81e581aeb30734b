"""The payload: its ``.hyper`` parts, tables and digest as one object (:class:`Payload`),
the check of a batch against it, its manifest on disk, and its verbs ``upload()`` and
``publish()`` (which is why it sits above the update workflows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import Payload

__all__ = ["Payload"]


def __getattr__(name: str) -> Any:
    if name == "Payload":
        from .model import Payload

        return Payload
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

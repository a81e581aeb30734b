"""Building a payload with Spark: the type table, last change wins per key, where staged
rows go, ranking small change sets in Hyper, the split plan and the ``.hyper`` parts, and
:func:`build_payload` (:mod:`.build`), which makes a :class:`~tabhyper_update.Payload`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .build import build_payload

__all__ = ["build_payload"]


def __getattr__(name: str) -> Any:
    if name == "build_payload":
        from .build import build_payload

        return build_payload
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

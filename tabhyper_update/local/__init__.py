"""What runs on this machine: the shared Hyper process, the SDK's folders, progress bars,
quiet local Spark sessions, and the local engine (:func:`apply` a batch to a ``.hyper``
file with Hyper). Imports only :mod:`tabhyper_update.values`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import apply

__all__ = ["apply"]


def __getattr__(name: str) -> Any:
    if name == "apply":
        from .engine import apply

        return apply
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

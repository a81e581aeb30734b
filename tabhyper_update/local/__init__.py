"""What runs on this machine: the shared Hyper process, the SDK's folders, progress bars,
quiet local Spark sessions, and the local engine (:func:`apply` a batch to a ``.hyper``
file with Hyper; :class:`SourceColumns`: how it meets source columns unlike the
target's). Imports only :mod:`tabhyper_update.values`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import SourceColumns, apply

__all__ = ["SourceColumns", "apply"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Optional packages (the extras), looked up once per process in a way that cannot raise.

A package that is missing, whose parent package is missing, or that is installed but fails
to import (a broken or mismatched install) counts as absent; a broken one is logged once at
WARNING with the error's class, so that a half-installed extra explains itself instead of
ending the job.
"""

from __future__ import annotations

import functools
import importlib
import logging
from types import ModuleType

__all__ = ["available", "optional_module"]

log = logging.getLogger("tabhyper_update")


@functools.cache
def optional_module(name: str) -> ModuleType | None:
    """The module ``name`` (e.g. ``"opentelemetry.trace"``), or ``None`` when it cannot be
    imported for any reason."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        if missing is None or not name.startswith(missing.split(".")[0]):
            # Present, but something it needs is not: a broken install.
            log.warning("%s is installed but cannot be imported (%s): left unused", name, exc)
        return None
    except Exception as exc:  # a package that raises on import is as good as absent
        log.warning(
            "%s is installed but failed to import (%s): left unused", name, type(exc).__name__
        )
        return None


def available(name: str) -> bool:
    """Whether ``name`` can be imported (looked up once per process)."""
    return optional_module(name) is not None

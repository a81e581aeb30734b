"""tabhyper_update: keep Tableau live-to-Hyper data sources fresh from Spark CDC jobs.

The one line in a CDC job::

    build_payload(df).upload().apply(actions)

The names here are the verbs, the models a job builds and the errors it catches most. Each
is imported on first use, so ``import tabhyper_update`` loads only what the caller touches.
Two more public modules complete the face and stay put whatever the layout inside:
:mod:`tabhyper_update.errors` (every exception, the tree drawn) and
:mod:`tabhyper_update.types` (what the calls return, the policies and options). Modules in
the layer folders are internal.
"""

from __future__ import annotations

import importlib
import logging as _logging
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .builder.build import build_payload
    from .builder.repair import repair
    from .builder.republish import Republish
    from .client import TableauClient
    from .payload.model import Payload
    from .readback.reconcile import reconcile
    from .rest.auth import ConnectedAppJWT, PersonalAccessToken, UsernamePassword
    from .streaming.debezium import Debezium
    from .streaming.sink import TableauSink
    from .update.results import UpdateResult
    from .values.actions import ActionBatch, Delete, Insert, Replace, Update, Upsert
    from .values.changeset import ChangeSet
    from .values.conditions import keys_match, source, target
    from .values.errors import (
        ApiError,
        ConfigurationError,
        DriftError,
        JobFailedError,
        NotFoundError,
        PayloadError,
        TabHyperError,
    )

#: The public names and the module each comes from.
_PUBLIC = {
    "build_payload": "builder.build",
    "reconcile": "readback.reconcile",
    "repair": "builder.repair",
    "TableauClient": "client",
    "Payload": "payload.model",
    "ChangeSet": "values.changeset",
    "Insert": "values.actions",
    "Update": "values.actions",
    "Delete": "values.actions",
    "Replace": "values.actions",
    "Upsert": "values.actions",
    "source": "values.conditions",
    "target": "values.conditions",
    "keys_match": "values.conditions",
    "ActionBatch": "values.actions",
    "PersonalAccessToken": "rest.auth",
    "UsernamePassword": "rest.auth",
    "ConnectedAppJWT": "rest.auth",
    "TableauSink": "streaming.sink",
    "Republish": "builder.republish",
    "Debezium": "streaming.debezium",
    "UpdateResult": "update.results",
    "TabHyperError": "values.errors",
    "ConfigurationError": "values.errors",
    "ApiError": "values.errors",
    "NotFoundError": "values.errors",
    "JobFailedError": "values.errors",
    "PayloadError": "values.errors",
    "DriftError": "values.errors",
}

__all__ = [
    "ActionBatch",
    "ApiError",
    "ChangeSet",
    "ConfigurationError",
    "ConnectedAppJWT",
    "Debezium",
    "Delete",
    "DriftError",
    "Insert",
    "JobFailedError",
    "NotFoundError",
    "Payload",
    "PayloadError",
    "PersonalAccessToken",
    "Replace",
    "Republish",
    "TabHyperError",
    "TableauClient",
    "TableauSink",
    "Update",
    "UpdateResult",
    "Upsert",
    "UsernamePassword",
    "__version__",
    "build_payload",
    "keys_match",
    "reconcile",
    "repair",
    "source",
    "target",
]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}{_elsewhere(name)}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value  # looked up once
    return value


def _elsewhere(name: str) -> str:
    """Where a public module keeps ``name`` (the types and the exceptions), as a hint. A
    private name (a tool's ``hasattr(module, "__wrapped__")``) is no public module's: none
    is imported to say so."""
    if name.startswith("_"):
        return ""
    for module in ("types", "errors"):
        if name in getattr(importlib.import_module(f".{module}", __name__), "__all__", ()):
            return f": import it from tabhyper_update.{module}"
    return ""


def __dir__() -> list[str]:
    return sorted(__all__)


# A library stays silent unless its user configures logging (the command line does).
_logging.getLogger("tabhyper_update").addHandler(_logging.NullHandler())

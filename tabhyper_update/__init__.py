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
import warnings
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

#: Names the package exported before 0.1's public modules: they still import from here, with
#: a DeprecationWarning naming the public module that keeps them (never a layer folder, which
#: may move). name → public module.
_MOVED_TO_TYPES = (
    "Action",
    "all_of",
    "any_of",
    "And",
    "Comparison",
    "Condition",
    "Const",
    "Or",
    "Tolerance",
    "DriftReport",
    "KeyDrift",
    "Job",
    "Project",
    "DataSourceRef",
    "RetryPolicy",
    "PollPolicy",
    "ColumnInfo",
    "TableInfo",
    "PayloadPart",
    "BootstrapResult",
    "PartUpdate",
    "BoundPayload",
)
_MOVED_TO_ERRORS = (
    "ApplyError",
    "ArgumentTypeError",
    "AuthenticationError",
    "ConnectionFailedError",
    "DataServiceError",
    "InvalidActionBatchError",
    "InvalidArgumentError",
    "JobCancelledError",
    "JobOutcomeUnknownError",
    "JobTimeoutError",
    "PayloadAppliedError",
    "PayloadArgumentError",
    "RequestTimeoutError",
    "SchemaDriftError",
    "TargetMismatchError",
    "TlsVerificationError",
    "TransportError",
    "UnsupportedServerError",
    "UpdateStateError",
)
_MOVED = {**dict.fromkeys(_MOVED_TO_TYPES, "types"), **dict.fromkeys(_MOVED_TO_ERRORS, "errors")}
#: The name the bound payload had before it was BoundPayload.
_RENAMED = {"UploadedPayload": ("types", "BoundPayload")}

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
    if name in _PUBLIC:
        value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    elif name in _MOVED or name in _RENAMED:
        module, attr = _RENAMED.get(name) or (_MOVED[name], name)
        warnings.warn(
            f"tabhyper_update.{name} moved: import {attr} from tabhyper_update.{module}",
            DeprecationWarning,
            stacklevel=2,
        )
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in _PUBLIC:
        globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


# A library stays silent unless its user configures logging (the command line does).
_logging.getLogger("tabhyper_update").addHandler(_logging.NullHandler())

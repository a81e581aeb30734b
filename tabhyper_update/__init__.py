"""tabhyper_update: keep Tableau live-to-Hyper data sources fresh from Spark CDC jobs.

The one line in a CDC job::

    build_payload(df).upload().apply(actions)

The names here are the verbs, the models a job builds and the errors it catches. Each is
imported on first use, so ``import tabhyper_update`` loads only what the caller touches;
everything else is importable from its module (the README's "Where things live").
"""

from __future__ import annotations

import importlib
import logging as _logging
import warnings
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .builder.build import build_payload
    from .builder.republish import Republish
    from .client import TableauClient
    from .payload.model import Payload
    from .readback.reconcile import reconcile
    from .repairs import repair
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
    "repair": "repairs",
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

#: Names the package exported before its layers were folders: they still import from
#: here, with a DeprecationWarning that names their module. (module, name in it)
_MOVED = {
    "Action": ("values.actions", "Action"),
    "all_of": ("values.conditions", "all_of"),
    "any_of": ("values.conditions", "any_of"),
    "And": ("values.conditions", "And"),
    "Comparison": ("values.conditions", "Comparison"),
    "Condition": ("values.conditions", "Condition"),
    "Const": ("values.conditions", "Const"),
    "Or": ("values.conditions", "Or"),
    "Tolerance": ("readback.compare", "Tolerance"),
    "DriftReport": ("readback.drift", "DriftReport"),
    "KeyDrift": ("readback.drift", "KeyDrift"),
    "Job": ("rest.jobs", "Job"),
    "Project": ("rest.projects", "Project"),
    "DataSourceRef": ("rest.refs", "DataSourceRef"),
    "RetryPolicy": ("values.policies", "RetryPolicy"),
    "PollPolicy": ("values.policies", "PollPolicy"),
    "ColumnInfo": ("values.parts", "ColumnInfo"),
    "TableInfo": ("values.parts", "TableInfo"),
    "PayloadPart": ("values.parts", "PayloadPart"),
    "BootstrapResult": ("update.publish", "BootstrapResult"),
    "PartUpdate": ("update.results", "PartUpdate"),
    "BoundPayload": ("update.chain", "BoundPayload"),
    "UploadedPayload": ("update.chain", "BoundPayload"),
    **{
        name: ("values.errors", name)
        for name in (
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
    },
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
    if name in _PUBLIC:
        value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    elif name in _MOVED:
        module, attr = _MOVED[name]
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

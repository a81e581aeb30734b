"""The types a job annotates with: what ``upload()``, ``apply()``, ``verify()`` and
``reconcile()`` return, the policies and options (:class:`BuildOptions` among them), and
the pieces of an action batch.

These names stay here whatever module defines them; the package root holds the verbs and
the everyday models, :mod:`tabhyper_update.errors` every exception. ::

    from tabhyper_update.types import BoundPayload, UpdateResult

    def send(payload: Payload) -> UpdateResult:
        bound: BoundPayload = payload.upload("Orders")
        return bound.apply()
"""

from __future__ import annotations

from .builder.options import BuildOptions
from .readback.compare import Tolerance
from .readback.drift import DriftReport, KeyDrift
from .rest.jobs import Job
from .rest.projects import Project
from .rest.refs import DataSourceRef
from .update.chain import BoundPayload
from .update.options import (
    ApplyOptions,
    BindOptions,
    BootstrapOptions,
    PublishOptions,
    UpdateOptions,
)
from .update.publish import BootstrapResult
from .update.results import PartUpdate, UpdateResult
from .update.schema_change import SchemaChange
from .values.actions import Action
from .values.conditions import And, Comparison, Condition, Const, Or, all_of, any_of
from .values.parts import ColumnInfo, PayloadPart, TableInfo
from .values.policies import PollPolicy, RetryPolicy
from .values.probes import ProbeResult

__all__ = [
    "Action",
    "And",
    "ApplyOptions",
    "BindOptions",
    "BootstrapOptions",
    "BootstrapResult",
    "BoundPayload",
    "BuildOptions",
    "ColumnInfo",
    "Comparison",
    "Condition",
    "Const",
    "DataSourceRef",
    "DriftReport",
    "Job",
    "KeyDrift",
    "Or",
    "PartUpdate",
    "PayloadPart",
    "PollPolicy",
    "ProbeResult",
    "Project",
    "PublishOptions",
    "RetryPolicy",
    "SchemaChange",
    "TableInfo",
    "Tolerance",
    "UpdateOptions",
    "UpdateResult",
    "all_of",
    "any_of",
]

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

from .builder.options import BuildOptions, BuildSettings
from .builder.quarantine import QuarantineDestination
from .builder.staging import StagingMode
from .readback.compare import Tolerance
from .readback.drift import DriftReport, KeyDrift
from .rest.auth import Credentials
from .rest.caller import ProgressCallback, RestCaller
from .rest.jobs import Job, JobSource
from .rest.projects import Project
from .rest.refs import DataSourceRef
from .rest.session import RestSession
from .rest.settings import ClientSettings
from .streaming.debezium_values import TimeUnit
from .update.chain import BoundPayload
from .update.options import (
    ApplyOptions,
    ApplySettings,
    BindOptions,
    BootstrapOptions,
    ProbeOptions,
    PublishMode,
    PublishOptions,
    SchemaChange,
    UpdateOptions,
)
from .update.publish import BootstrapResult
from .update.results import PartUpdate, PlannedPart, UpdatePlan, UpdateResult
from .update.state import PartState, StateStore, UpdateRecord
from .values.actions import Action, BatchLike
from .values.changeset import History, SoftDelete
from .values.conditions import (
    And,
    Comparison,
    Condition,
    Const,
    ConstType,
    Or,
    SourceColumn,
    TargetColumn,
    all_of,
    any_of,
)
from .values.narrowing import ColumnType, DeclaredColumn
from .values.parts import ColumnInfo, PayloadLike, PayloadPart, TableInfo
from .values.policies import PollPolicy, RetryPolicy
from .values.probes import ProbeResult
from .values.quarantine import QuarantineReport

__all__ = [
    "Action",
    "And",
    "ApplyOptions",
    "ApplySettings",
    "BatchLike",
    "BindOptions",
    "BootstrapOptions",
    "BootstrapResult",
    "BoundPayload",
    "BuildOptions",
    "BuildSettings",
    "ClientSettings",
    "ColumnInfo",
    "ColumnType",
    "Comparison",
    "Condition",
    "Const",
    "ConstType",
    "Credentials",
    "DataSourceRef",
    "DeclaredColumn",
    "DriftReport",
    "History",
    "Job",
    "JobSource",
    "KeyDrift",
    "Or",
    "PartState",
    "PartUpdate",
    "PayloadLike",
    "PayloadPart",
    "PlannedPart",
    "PollPolicy",
    "ProbeOptions",
    "ProbeResult",
    "ProgressCallback",
    "Project",
    "PublishMode",
    "PublishOptions",
    "QuarantineDestination",
    "QuarantineReport",
    "RestCaller",
    "RestSession",
    "RetryPolicy",
    "SchemaChange",
    "SoftDelete",
    "SourceColumn",
    "StagingMode",
    "StateStore",
    "TableInfo",
    "TargetColumn",
    "TimeUnit",
    "Tolerance",
    "UpdateOptions",
    "UpdatePlan",
    "UpdateRecord",
    "UpdateResult",
    "all_of",
    "any_of",
]

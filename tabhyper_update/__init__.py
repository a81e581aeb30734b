"""tabhyper_update: keep Tableau live-to-Hyper data sources fresh from Spark CDC jobs.

The one line in a CDC job::

    build_payload(df).upload().apply(actions)
"""

import logging as _logging

from ._version import __version__
from .actions import Action, ActionBatch, Delete, Insert, Replace, Update, Upsert
from .auth import ConnectedAppJWT, PersonalAccessToken, UsernamePassword
from .build import build_payload
from .cdc import ChangeSet
from .client import TableauClient
from .compare import Tolerance
from .conditions import (
    And,
    Comparison,
    Condition,
    Const,
    Or,
    all_of,
    any_of,
    keys_match,
    source,
    target,
)
from .drift import DriftReport, KeyDrift
from .errors import (
    ApiError,
    ApplyError,
    ArgumentTypeError,
    AuthenticationError,
    ConfigurationError,
    ConnectionFailedError,
    DataServiceError,
    DriftError,
    InvalidActionBatchError,
    InvalidArgumentError,
    JobCancelledError,
    JobFailedError,
    JobOutcomeUnknownError,
    JobTimeoutError,
    NotFoundError,
    PayloadAppliedError,
    PayloadArgumentError,
    PayloadError,
    RequestTimeoutError,
    SchemaDriftError,
    TabHyperError,
    TargetMismatchError,
    TlsVerificationError,
    TransportError,
    UnsupportedServerError,
    UpdateStateError,
)
from .jobs import Job
from .payload import ColumnInfo, Payload, PayloadPart, TableInfo
from .policies import PollPolicy, RetryPolicy
from .projects import Project
from .publish import BootstrapResult
from .reconcile import reconcile, repair
from .refs import DataSourceRef
from .results import PartUpdate, UpdateResult
from .roundtrip import BoundPayload, UploadedPayload
from .streaming import Debezium, TableauSink

__all__ = [
    "Action",
    "ActionBatch",
    "And",
    "ApiError",
    "ApplyError",
    "ArgumentTypeError",
    "AuthenticationError",
    "BootstrapResult",
    "BoundPayload",
    "ChangeSet",
    "ColumnInfo",
    "Comparison",
    "Condition",
    "ConfigurationError",
    "ConnectedAppJWT",
    "ConnectionFailedError",
    "Const",
    "DataServiceError",
    "DataSourceRef",
    "Debezium",
    "Delete",
    "DriftError",
    "DriftReport",
    "Insert",
    "InvalidActionBatchError",
    "InvalidArgumentError",
    "Job",
    "JobCancelledError",
    "JobFailedError",
    "JobOutcomeUnknownError",
    "JobTimeoutError",
    "KeyDrift",
    "NotFoundError",
    "Or",
    "PartUpdate",
    "Payload",
    "PayloadAppliedError",
    "PayloadArgumentError",
    "PayloadError",
    "PayloadPart",
    "PersonalAccessToken",
    "PollPolicy",
    "Project",
    "Replace",
    "RequestTimeoutError",
    "RetryPolicy",
    "SchemaDriftError",
    "TabHyperError",
    "TableInfo",
    "TableauClient",
    "TableauSink",
    "TargetMismatchError",
    "TlsVerificationError",
    "Tolerance",
    "TransportError",
    "UnsupportedServerError",
    "Update",
    "UpdateResult",
    "UpdateStateError",
    "UploadedPayload",
    "Upsert",
    "UsernamePassword",
    "__version__",
    "all_of",
    "any_of",
    "build_payload",
    "keys_match",
    "reconcile",
    "repair",
    "source",
    "target",
]

# A library stays silent unless its user configures logging (the command line does).
_logging.getLogger("tabhyper_update").addHandler(_logging.NullHandler())

"""tabhyper_update: keep Tableau live-to-Hyper data sources fresh from Spark CDC jobs.

The one line in a CDC job::

    build_payload(df).upload().apply(actions)
"""

from ._version import __version__
from .actions import Action, ActionBatch, Delete, Insert, Replace, Update, Upsert
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
from .errors import (
    ApiError,
    AuthenticationError,
    ConnectionFailedError,
    InvalidActionBatchError,
    JobCancelledError,
    JobFailedError,
    JobTimeoutError,
    NotFoundError,
    PayloadError,
    RequestTimeoutError,
    TabHyperError,
    TransportError,
    UnsupportedServerError,
)
from .payload import ColumnInfo, Payload, PayloadPart, TableInfo, build_payload

__all__ = [
    "Action",
    "ActionBatch",
    "And",
    "ApiError",
    "AuthenticationError",
    "ColumnInfo",
    "Comparison",
    "Condition",
    "ConnectionFailedError",
    "Const",
    "Delete",
    "Insert",
    "InvalidActionBatchError",
    "JobCancelledError",
    "JobFailedError",
    "JobTimeoutError",
    "NotFoundError",
    "Or",
    "Payload",
    "PayloadError",
    "PayloadPart",
    "Replace",
    "RequestTimeoutError",
    "TabHyperError",
    "TableInfo",
    "TransportError",
    "UnsupportedServerError",
    "Update",
    "Upsert",
    "__version__",
    "all_of",
    "any_of",
    "build_payload",
    "keys_match",
    "source",
    "target",
]

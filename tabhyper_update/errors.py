"""Every exception tabhyper_update raises, importable from here whatever module raises it.

A CDC job can catch :class:`TabHyperError` alone; the tree below says what each branch
means for the update::

    TabHyperError
    ├── ApiError
    │   ├── AuthenticationError
    │   ├── DataServiceError
    │   │   └── QueryBudgetError
    │   └── NotFoundError
    ├── ApplyError
    ├── ConfigurationError (also ValueError)
    ├── DriftError
    ├── InvalidActionBatchError (also ValueError)
    ├── InvalidArgumentError (also ValueError)
    │   ├── ArgumentTypeError (also TypeError)
    │   └── PayloadArgumentError (also PayloadError)
    ├── JobCancelledError
    ├── JobFailedError
    │   └── OutOfOrderError
    ├── JobOutcomeUnknownError
    ├── JobTimeoutError (also TimeoutError)
    ├── PayloadError (also ValueError)
    │   ├── PayloadAppliedError
    │   └── SchemaDriftError
    ├── ProbeError
    ├── TargetMismatchError
    ├── TransportError
    │   ├── ConnectionFailedError (also ConnectionError)
    │   │   ├── TlsVerificationError
    │   │   └── UnknownHostError
    │   └── RequestTimeoutError (also TimeoutError)
    ├── UnsupportedServerError
    └── UpdateStateError

- Bad input (``InvalidArgumentError``, ``ArgumentTypeError``, ``InvalidActionBatchError``,
  ``ConfigurationError``, ``PayloadError`` before a request) is found before anything is
  sent: nothing was uploaded or applied.
- ``TransportError`` and ``ApiError``: the server or the network; the update's record says
  how far it got, and running the same job again resumes it.
- ``JobFailedError`` (``OutOfOrderError``: a stale change the ordering guard refused),
  ``JobCancelledError``: that part applied nothing (batches are atomic).
  ``JobOutcomeUnknownError``, ``JobTimeoutError``: whether it applied is not known yet.
- ``DriftError``: the update was applied, and reading it back found a difference.

Every error's message is scrubbed of the secrets the SDK's clients hold. An invalid batch's
``problems`` are :class:`Problem` s; an error that stopped an update part-way carries its
:class:`UpdateProgress`. :func:`tree` draws the tree above from the classes themselves.
"""

from __future__ import annotations

from .values.errors import (
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
    OutOfOrderError,
    PayloadAppliedError,
    PayloadArgumentError,
    PayloadError,
    ProbeError,
    Problem,
    QueryBudgetError,
    RequestTimeoutError,
    SchemaDriftError,
    TabHyperError,
    TargetMismatchError,
    TlsVerificationError,
    TransportError,
    UnknownHostError,
    UnsupportedServerError,
    UpdateProgress,
    UpdateStateError,
)

__all__ = [
    "ApiError",
    "ApplyError",
    "ArgumentTypeError",
    "AuthenticationError",
    "ConfigurationError",
    "ConnectionFailedError",
    "DataServiceError",
    "DriftError",
    "InvalidActionBatchError",
    "InvalidArgumentError",
    "JobCancelledError",
    "JobFailedError",
    "JobOutcomeUnknownError",
    "JobTimeoutError",
    "NotFoundError",
    "OutOfOrderError",
    "PayloadAppliedError",
    "PayloadArgumentError",
    "PayloadError",
    "ProbeError",
    "Problem",
    "QueryBudgetError",
    "RequestTimeoutError",
    "SchemaDriftError",
    "TabHyperError",
    "TargetMismatchError",
    "TlsVerificationError",
    "TransportError",
    "UnknownHostError",
    "UnsupportedServerError",
    "UpdateProgress",
    "UpdateStateError",
    "tree",
]


def tree() -> str:
    """The exception tree, drawn from the classes (first base under its parent, the other
    bases named beside it)."""
    classes = [
        v for v in globals().values() if isinstance(v, type) and issubclass(v, TabHyperError)
    ]
    lines: list[str] = []

    def draw(cls: type, prefix: str, last: bool, top: bool) -> None:
        also = [b.__name__ for b in cls.__bases__[1:]]
        label = cls.__name__ + (f" (also {', '.join(also)})" if also else "")
        lines.append(label if top else f"{prefix}{'└── ' if last else '├── '}{label}")
        kids = sorted((c for c in classes if c.__bases__[0] is cls), key=lambda c: c.__name__)
        below = "" if top else prefix + ("    " if last else "│   ")
        for i, kid in enumerate(kids):
            draw(kid, below, i == len(kids) - 1, False)

    draw(TabHyperError, "", True, True)
    return "\n".join(lines)

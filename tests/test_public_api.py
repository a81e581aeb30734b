"""The public surface is explicit; a change to it is a deliberate change to this list."""

from __future__ import annotations

import tabhyper_update

EXPECTED = {
    "Action",
    "ActionBatch",
    "And",
    "ApiError",
    "ApplyError",
    "AuthenticationError",
    "ColumnInfo",
    "Comparison",
    "Condition",
    "ConfigurationError",
    "ConnectedAppJWT",
    "ConnectionFailedError",
    "Const",
    "DataSourceRef",
    "Delete",
    "Insert",
    "InvalidActionBatchError",
    "Job",
    "JobCancelledError",
    "JobFailedError",
    "JobTimeoutError",
    "NotFoundError",
    "Or",
    "Payload",
    "PayloadError",
    "PayloadPart",
    "PersonalAccessToken",
    "PollPolicy",
    "Replace",
    "RequestTimeoutError",
    "RetryPolicy",
    "TabHyperError",
    "TableInfo",
    "TableauClient",
    "TransportError",
    "UnsupportedServerError",
    "UpdateStateError",
    "PartUpdate",
    "UpdateResult",
    "UploadedPayload",
    "ArgumentTypeError",
    "InvalidArgumentError",
    "TlsVerificationError",
    "Update",
    "Upsert",
    "UsernamePassword",
    "__version__",
    "all_of",
    "any_of",
    "build_payload",
    "keys_match",
    "source",
    "target",
}


def test_public_surface_is_pinned() -> None:
    assert set(tabhyper_update.__all__) == EXPECTED
    for name in tabhyper_update.__all__:
        assert hasattr(tabhyper_update, name), name

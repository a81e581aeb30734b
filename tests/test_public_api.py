"""The public surface is explicit; a change to it is a deliberate change to this list."""

from __future__ import annotations

import tabhyper_update

EXPECTED = {
    "Action",
    "ActionBatch",
    "And",
    "ApiError",
    "AuthenticationError",
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
    "PayloadError",
    "Replace",
    "RequestTimeoutError",
    "TabHyperError",
    "TransportError",
    "UnsupportedServerError",
    "Update",
    "Upsert",
    "__version__",
    "all_of",
    "any_of",
    "keys_match",
    "source",
    "target",
}


def test_public_surface_is_pinned() -> None:
    assert set(tabhyper_update.__all__) == EXPECTED
    for name in tabhyper_update.__all__:
        assert hasattr(tabhyper_update, name), name

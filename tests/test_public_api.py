"""The public surface is explicit; a change to it is a deliberate change to this list."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import tabhyper_update
import tabhyper_update.testing
from tabhyper_update import (
    ChangeSet,
    Debezium,
    Payload,
    TableauClient,
    TableauSink,
    UploadedPayload,
    build_payload,
)

EXPECTED = {
    "Action",
    "ActionBatch",
    "And",
    "ApiError",
    "ApplyError",
    "AuthenticationError",
    "BootstrapResult",
    "ChangeSet",
    "ColumnInfo",
    "Comparison",
    "Condition",
    "ConfigurationError",
    "ConnectedAppJWT",
    "ConnectionFailedError",
    "Const",
    "DataSourceRef",
    "Debezium",
    "Delete",
    "Insert",
    "InvalidActionBatchError",
    "Job",
    "JobCancelledError",
    "JobFailedError",
    "JobOutcomeUnknownError",
    "JobTimeoutError",
    "NotFoundError",
    "Or",
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
    "TargetMismatchError",
    "TableInfo",
    "TableauClient",
    "TableauSink",
    "TransportError",
    "UnsupportedServerError",
    "UpdateStateError",
    "PartUpdate",
    "UpdateResult",
    "UploadedPayload",
    "BoundPayload",
    "DataServiceError",
    "DriftError",
    "DriftReport",
    "KeyDrift",
    "Tolerance",
    "reconcile",
    "repair",
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


def test_renamed_public_names_keep_working() -> None:
    # The payload bound to a target was called UploadedPayload; it need not be uploaded yet.
    assert tabhyper_update.UploadedPayload is tabhyper_update.BoundPayload
    # build_payload's argument misuse is an InvalidArgumentError, and still a PayloadError.
    assert issubclass(tabhyper_update.PayloadArgumentError, tabhyper_update.PayloadError)
    assert issubclass(tabhyper_update.PayloadArgumentError, tabhyper_update.InvalidArgumentError)
    # The one strict JSON reader of action batches answers to both of its names.
    text = '{"actions": [{"action": "insert", "source-table": "s", "target-table": "t"}]}'
    batch = tabhyper_update.ActionBatch.from_json(text)
    assert tabhyper_update.ActionBatch.from_wire(text) == batch
    # Snake-case keys are not what Tableau takes: the reader refuses them.
    with pytest.raises(tabhyper_update.InvalidActionBatchError, match="source_table"):
        tabhyper_update.ActionBatch.from_json(text.replace("source-table", "source_table"))


@pytest.mark.parametrize(
    ("function", "parameters"),
    [
        (
            build_payload,
            "source, changes, *, table, schema, database_version, complex_as_json, "
            "staging_dir, output_dir, max_payload_mb, keep_files, progress, staging",
        ),
        (
            ChangeSet,
            "key, *, op_column, order_by, op_map, keep_columns, upsert_table, delete_table, "
            "order_as",
        ),
        (Payload.upload, "self, target, *, client, progress, state_dir"),
        (
            UploadedPayload.apply,
            "self, actions, *, target_table, target_schema, request_id, wait, timeout, verify",
        ),
        (
            TableauClient.update_datasource,
            "self, target, payload, *, actions, target_table, target_schema, request_id, "
            "wait, timeout, progress, state_dir, verify",
        ),
        (Payload.derived_actions, "self, part, *, target_table, target_schema"),
        (
            TableauSink,
            "target, changes, *, client, actions, prepare, target_table, target_schema, "
            "sink_id, max_payload_mb, staging_dir, state_dir, timeout, staging",
        ),
        (Debezium, "row_schema, *, key, connector, position, table, truncate"),
    ],
)
def test_the_round_trip_signatures_are_pinned(
    function: Callable[..., Any], parameters: str
) -> None:
    shown = []
    for p in inspect.signature(function).parameters.values():
        if p.kind is p.KEYWORD_ONLY and "*" not in shown:
            shown.append("*")
        shown.append(p.name)
    assert ", ".join(shown) == parameters


def test_the_testing_package_exports_the_fake_and_its_faults() -> None:
    assert set(tabhyper_update.testing.__all__) == {"FakeTableauServer", "Fault"}

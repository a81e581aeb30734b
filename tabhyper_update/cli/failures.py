"""How the command line fails: its two errors of its own, and the SDK's messages written
with the command's flags instead of Python keywords."""

from __future__ import annotations

import re

from ..values.errors import ConfigurationError, TabHyperError

__all__ = ["Refused", "UsageError", "as_flags"]


class UsageError(ConfigurationError):
    """The command line asks for something it cannot do (exit code 2)."""


class Refused(TabHyperError):
    """A request the command cannot carry out as asked (exit code 1)."""


#: Python keywords in the SDK's messages → this command's flags (messages name an option as
#: the caller writes it).
_FLAG_OF = {
    "complex_as_json": "--complex-as-json",
    "max_payload_mb": "--max-payload-mb",
    "staging_dir": "--staging-dir",
    "output_dir": "--output-dir",
    "state_dir": "--state-dir",
    "target_table": "--target-table",
    "target_schema": "--target-schema",
    "request_id": "--request-id",
    "database_version": "--database-version",
    "op_column": "--op-column",
    "order_by": "--order-by",
    "op_map": "--op-map",
    "target_columns": "--target-columns",
    "quarantine_format": "--quarantine-format",
}
_KEYWORD = re.compile(r"\b(" + "|".join(_FLAG_OF) + r")\b(?:=True\b|=(?=[\s/,.)]|$))?")
_MODE = re.compile(r"mode='(create|overwrite|append)'")


#: The SDK's advice in Python terms → the command's own.
_ADVICE = (
    (" (or pass verify='/path/to/ca-bundle.pem')", ""),
    ("only for a test server, TABLEAU_VERIFY_TLS=false", "only for a test server, --insecure"),
    ("or the server= you passed", "or --server"),
    (
        "pass actions= (only a payload built with a ChangeSet derives its own)",
        "pass --actions (a folder from `build` with a change set derives its own from its "
        "manifest: give the folder, not one of its part files)",
    ),
)
#: A job waited on past its deadline: wait again from the command line.
_WAIT_AGAIN = re.compile(
    r"job (\S+) (did not finish within [^;]*); it may still complete: call wait\(\) on it again"
)


def as_flags(message: str) -> str:
    """``message`` with the SDK's Python keywords written as this command's flags."""
    for python, command in _ADVICE:
        message = message.replace(python, command)
    message = _WAIT_AGAIN.sub(
        r"job \1 \2; it may still complete: `tabhyper-update job wait \1` waits for it again "
        r"(or run the same apply again: it resumes, never sends it twice)",
        message,
    )
    message = _MODE.sub(r"--mode \1", message)
    return _KEYWORD.sub(lambda m: _FLAG_OF[m.group(1)], message)

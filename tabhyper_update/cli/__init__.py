"""The ``tabhyper-update`` command.

Exit codes are declared once, with their meanings, in ``exit_codes.py`` (``--help`` shows
the table). With ``--json`` every outcome, failures included, is one JSON object on standard
output.

The command lives in five modules: ``parser.py`` (commands, options, help), ``commands.py``
(what each does, imported when a command runs), ``inputs.py`` (what they read, checked before
Spark starts), ``failures.py`` (its own errors, and messages in its flags) and
``exit_codes.py``; this module runs it.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..local.folders import check_folder
from ..values.errors import (
    ApiError,
    AuthenticationError,
    ConfigurationError,
    InvalidArgumentError,
    JobCancelledError,
    JobFailedError,
    JobOutcomeUnknownError,
    JobTimeoutError,
    NotFoundError,
    TabHyperError,
    TransportError,
    UnsupportedServerError,
)
from .exit_codes import (
    EXIT_AUTH,
    EXIT_DRIFT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_JOB,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_SERVER,
    EXIT_USAGE,
)
from .failures import Refused, UsageError, as_flags
from .parser import build_parser, configured_logging

if TYPE_CHECKING:
    from .commands import action_batch_schema, schema_text

__all__ = [
    "EXIT_DRIFT",
    "EXIT_FAILED",
    "EXIT_FOR",
    "EXIT_JOB",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_SERVER",
    "EXIT_USAGE",
    "Refused",
    "UsageError",
    "action_batch_schema",
    "build_parser",
    "console_main",
    "exit_code_for",
    "main",
    "schema_text",
]


def __getattr__(name: str) -> Any:
    # The schema helpers load the action models: only when asked for.
    if name in ("action_batch_schema", "schema_text"):
        from . import commands

        return getattr(commands, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    args.verbose = getattr(args, "verbose", 0) or 0
    args.quiet = getattr(args, "quiet", False) or False
    with configured_logging(args):
        try:
            # A folder flag is checked (and named as written) before the command does anything.
            check_folder(getattr(args, "state_dir", None), "--state-dir", create=False)
            code: int = args.func(args)
        except UsageError as err:
            return _fail(args, err, EXIT_USAGE)
        except KeyboardInterrupt:
            print(_interrupted(getattr(args.func, "name", "")), file=sys.stderr)
            return EXIT_INTERRUPTED
        except (TabHyperError, OSError) as err:
            return _fail(args, err, exit_code_for(err))
        return code


#: The exit code of each error, the first class that matches winning (what the reference's
#: table of exceptions is drawn from).
EXIT_FOR: tuple[tuple[type[BaseException], int], ...] = (
    (NotFoundError, EXIT_NOT_FOUND),
    (AuthenticationError, EXIT_AUTH),
    (JobFailedError, EXIT_JOB),
    (JobCancelledError, EXIT_JOB),
    (JobOutcomeUnknownError, EXIT_JOB),
    (JobTimeoutError, EXIT_JOB),
    (TransportError, EXIT_SERVER),
    (ApiError, EXIT_SERVER),
    (UnsupportedServerError, EXIT_SERVER),
    (ConfigurationError, EXIT_USAGE),
    (InvalidArgumentError, EXIT_USAGE),
    # Invalid batches, payloads, change sets, records.
    (TabHyperError, EXIT_FAILED),
    # A file named on the command line.
    (OSError, EXIT_USAGE),
)


def exit_code_for(err: BaseException) -> int:
    """The exit code the command line gives ``err``."""
    return next(code for cls, code in EXIT_FOR if isinstance(err, cls))


def _interrupted(command: str) -> str:
    """What a stopped command says: what it left, and how to go on."""
    if command in ("apply", "publish"):
        return (
            f"tabhyper-update: {command} interrupted. Parts applied before the stop stay "
            "applied and are recorded in the state folder (`tabhyper-update status` shows "
            "them); running the same command again resumes where it stopped and applies "
            "nothing twice"
        )
    return f"tabhyper-update: {command or 'command'} interrupted; what it had created was removed"


def _fail(args: argparse.Namespace, err: BaseException, code: int) -> int:
    """Report a failure: one line on stderr, or one JSON object on stdout with --json."""
    message = as_flags(str(err))
    if isinstance(err, OSError) and not isinstance(err, TabHyperError):
        message = f"{err.filename}: {err.strerror}" if err.filename else message
    if getattr(args, "json", False):
        error = {"class": type(err).__name__, "message": message, "exit_code": code}
        print(json.dumps({"error": error}))
    else:
        prefix = "error: " if code == EXIT_USAGE else ""
        print(f"tabhyper-update: {prefix}{message}", file=sys.stderr)
    return code


def _terminate(signum: int, frame: object) -> None:
    # Leave through the normal unwinding, so that every command removes what it created
    # (staging folders, unfinished part files) when it is stopped with SIGTERM.
    raise KeyboardInterrupt


def console_main() -> None:
    """Entry point of the installed console script."""
    signal.signal(signal.SIGTERM, _terminate)
    sys.exit(main())

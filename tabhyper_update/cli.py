"""The ``tabhyper-update`` command.

Exit codes: 0 success; 1 invalid input or a failed job; 2 usage error; 3 server or network
error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._version import __version__
from .actions import ActionBatch
from .errors import InvalidActionBatchError

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_SERVER",
    "EXIT_USAGE",
    "action_batch_schema",
    "console_main",
    "main",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SERVER = 3

SCHEMA_ID = "https://tabhyper-update.dev/schemas/action_batch.schema.json"


def action_batch_schema() -> dict[str, Any]:
    """The JSON Schema of an action batch, generated from the models."""
    schema = ActionBatch.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "Tableau Hyper update action batch",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def schema_text() -> str:
    return json.dumps(action_batch_schema(), indent=2, sort_keys=True) + "\n"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own exit code 2 is ours too
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _cmd_validate(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        text = sys.stdin.read() if args.file == "-" else path.read_text(encoding="utf-8")
    except OSError as err:
        print(f"cannot read {args.file}: {err.strerror}", file=sys.stderr)
        return EXIT_USAGE
    except UnicodeDecodeError:
        print(f"{args.file}: not UTF-8 text", file=sys.stderr)
        return EXIT_FAILED
    try:
        batch = ActionBatch.from_json(text)
    except InvalidActionBatchError as err:
        if args.json:
            print(
                json.dumps(
                    {
                        "valid": False,
                        "problems": [{"path": p.path, "message": p.message} for p in err.problems],
                    }
                )
            )
        else:
            for problem in err.problems:
                print(problem)
        return EXIT_FAILED
    if args.json:
        print(json.dumps({"valid": True, "actions": len(batch.actions)}))
    else:
        print("OK")
    return EXIT_OK


def _cmd_schema(args: argparse.Namespace) -> int:
    text = schema_text()
    if args.check:
        current = Path(args.check).read_text(encoding="utf-8") if Path(args.check).exists() else ""
        if current != text:
            print(
                f"{args.check} is out of date: run `tabhyper-update schema -o {args.check}`",
                file=sys.stderr,
            )
            return EXIT_FAILED
        print("OK")
        return EXIT_OK
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tabhyper-update",
        description="Keep Tableau live-to-Hyper data sources fresh from Spark CDC jobs.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("validate", help="check an action batch JSON file")
    p.add_argument("file", help="the action batch (JSON); '-' reads standard input")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("schema", help="print the JSON Schema of an action batch")
    g = p.add_mutually_exclusive_group()
    g.add_argument("-o", "--output", help="write the schema to this file")
    g.add_argument("--check", metavar="FILE", help="fail when FILE differs from the schema")
    p.set_defaults(func=_cmd_schema)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    code: int = args.func(args)
    return code


def console_main() -> None:
    """Entry point of the installed console script."""
    sys.exit(main())

"""The ``tabhyper-update`` command line: its commands, options and help."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .._version import __version__
from .exit_codes import (
    EXIT_CODES,
    EXIT_USAGE,
)


class _Command:
    """A subcommand's function, imported when it runs: ``--help`` loads none of the SDK."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, args: argparse.Namespace) -> int:
        from .commands import COMMANDS

        return COMMANDS[self.name](args)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Help that shows each meaningful default and keeps the exit-code table as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" not in text
            and default not in (None, False, True, [], argparse.SUPPRESS)
            and action.option_strings
        ):
            shown = " ".join(default) if isinstance(default, list) else default
            text += f" (default: {shown})"
        return text


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:  # argparse's own exit code 2 is ours too
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _add_connection_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("server (defaults from TABLEAU_* environment variables)")
    g.add_argument("--server", help="server URL (TABLEAU_SERVER_URL)")
    g.add_argument("--site", help="site content URL (TABLEAU_SITE)")
    g.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _add_verbosity(p: argparse.ArgumentParser, default: Any) -> None:
    """-v/-q before or after the command (``default`` SUPPRESS: a subcommand's default must
    not overwrite what was given before it)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=default,
        help="say more: the SDK's steps (-v), every request (-vv), Spark's warnings",
    )
    g.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default,
        help="only errors: no warnings, no progress bars",
    )


@contextmanager
def configured_logging(args: argparse.Namespace) -> Iterator[None]:
    """The SDK's log lines on stderr while a command runs: warnings by default, more with -v,
    none with -q. The logger is left as it was found when the command returns, so that a
    program calling :func:`main` keeps its own logging."""
    verbose, quiet = getattr(args, "verbose", 0) or 0, getattr(args, "quiet", False)
    level = (
        logging.ERROR
        if quiet
        else {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    )
    logger = logging.getLogger("tabhyper_update")
    before = logger.level
    logger.setLevel(level)
    handler = _CommandLineHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tabhyper-update: %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


class _CommandLineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The command line's own handler, there while a command runs."""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tabhyper-update",
        description="Keep Tableau live-to-Hyper data sources fresh from Spark CDC jobs.",
        epilog=EXIT_CODES,
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_verbosity(parser, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    _add_validate(sub)
    _add_schema(sub)
    _add_build(sub)
    _add_apply(sub)
    _add_publish(sub)
    _add_probe(sub)
    _add_verify(sub)
    _add_job(sub)
    _add_state(sub)
    _add_status(sub)
    _add_demo(sub)
    _add_serve_local(sub)
    _add_rows(sub)
    return parser


def _add_state_dir(p: Any, what: str) -> None:
    """``--state-dir``: the folder where ``what`` (update records live, ...)."""
    p.add_argument("--state-dir", help=f"where {what} (default: $XDG_STATE_HOME/tabhyper-update)")


def _add_validate(sub: Any) -> None:
    p = sub.add_parser("validate", help="check an action batch JSON file")
    p.add_argument("file", help="the action batch (JSON); '-' reads standard input")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_verbosity(p, argparse.SUPPRESS)
    p.set_defaults(func=_Command("validate"))


def _add_schema(sub: Any) -> None:
    p = sub.add_parser("schema", help="print the JSON Schema of an action batch")
    g = p.add_mutually_exclusive_group()
    g.add_argument("-o", "--output", help="write the schema to this file")
    g.add_argument("--check", metavar="FILE", help="fail when FILE differs from the schema")
    _add_verbosity(p, argparse.SUPPRESS)
    p.set_defaults(func=_Command("schema"))


#: The build command's options: each flag with its argparse settings.
_BUILD_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--input", {"nargs": "+", "help": "Parquet (or CSV) files or directories"}),
    (
        "--format",
        {"choices": ["parquet", "csv"], "default": "parquet", "help": "format of --input"},
    ),
    ("--spark-table", {"help": "a table in the Spark catalog instead of files"}),
    ("--name", {"default": "Extract", "help": "payload table name (plain mode)"}),
    ("--key", {"nargs": "+", "help": "key column(s): read the input as a change set"}),
    ("--op-column", {"help": "the change set's operation column"}),
    ("--order-by", {"nargs": "+", "help": "column(s) ordering changes per key"}),
    (
        "--op-map",
        {
            "nargs": "+",
            "metavar": "VALUE=MEANING",
            "help": "op values and their meaning (upsert, delete, preimage, ignore)",
        },
    ),
    (
        "--order-as",
        {
            "nargs": "+",
            "metavar": "COLUMN=HOW",
            "help": "how a text --order-by column orders: number, text, binlog-file, hex-lsn or "
            "number-list (text columns are refused without it)",
        },
    ),
    (
        "--history",
        {
            "action": "store_true",
            "help": "keep every change as a version (_valid_from, _valid_to, _is_current)",
        },
    ),
    (
        "--soft-delete",
        {
            "action": "store_true",
            "help": "flag a deleted row (_deleted, _deleted_at) instead of removing it",
        },
    ),
    (
        "--quarantine",
        {
            "metavar": "DIR",
            "help": "set aside the changes the target would refuse (by --target-columns) as "
            "Parquet in DIR, and build the rest",
        },
    ),
    (
        "--quarantine-format",
        {
            "choices": ["parquet", "delta"],
            "default": "parquet",
            "help": "--quarantine DIR holds Parquet files, or a Delta table (delta-rs)",
        },
    ),
    (
        "--target-columns",
        {
            "metavar": "DDL",
            "help": "the target's columns, e.g. 'id BIGINT NOT NULL, amount NUMERIC(12,2)'",
        },
    ),
    (
        "--database-version",
        {
            "type": int,
            "default": 2,
            "help": "Hyper file format (2 is read by every supported Tableau release)",
        },
    ),
    (
        "--max-payload-mb",
        {
            "type": float,
            "default": 100,
            "help": "split the payload into parts under this size (the server's update cap)",
        },
    ),
    (
        "--complex-as-json",
        {
            "action": "store_true",
            "help": "write array, map and struct columns as JSON text (refused without it)",
        },
    ),
    (
        "--staging-dir",
        {
            "help": "where Spark stages the rows (default: the temporary folder); on a "
            "cluster, a path the driver and every executor see"
        },
    ),
    (
        "--output-dir",
        {
            "default": "payload",
            "help": "a new or empty folder: the parts and manifest.json are written there",
        },
    ),
    ("--json", {"action": "store_true", "help": "machine-readable output"}),
)


def _add_build(sub: Any) -> None:
    p = sub.add_parser("build", help="build a .hyper payload from files or a Spark table")
    for flag, settings in _BUILD_OPTIONS:
        p.add_argument(flag, **settings)
    _add_verbosity(p, argparse.SUPPRESS)
    p.set_defaults(func=_Command("build"))


def _add_apply(sub: Any) -> None:
    p = sub.add_parser("apply", help="upload a payload and apply actions to a data source")
    p.add_argument(
        "--payload",
        help="a payload folder written by `build`, or any .hyper file (never removed)",
    )
    p.add_argument("--actions", help="an action batch JSON file (default: derived actions)")
    p.add_argument(
        "--target-table",
        help="the table a change set's derived actions update (default: Extract)",
    )
    p.add_argument(
        "--target-schema",
        help="the schema of --target-table (default: Extract)",
    )
    p.add_argument("--datasource", help="data source name or LUID (TABLEAU_DATASOURCE)")
    p.add_argument(
        "--request-id",
        help="the update's identity, e.g. the date partition a job publishes (default: the "
        "change set's position; a new update for anything else)",
    )
    p.add_argument(
        "--no-wait",
        dest="wait",
        action="store_false",
        help="return once the last part is submitted (default: wait until applied)",
    )
    p.add_argument("--wait", dest="wait", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait")
    p.add_argument("--keep", action="store_true", help="keep the payload files afterwards")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="sign in, look the data source up, check the actions, keys and columns (and the "
        "target tables where they are known by name), print the parts and their actions and "
        "any table only the server can confirm; send nothing that changes data",
    )
    _add_state_dir(p, "update records live")
    _add_connection_options(p)
    _add_verbosity(p, argparse.SUPPRESS)
    p.set_defaults(func=_Command("apply"))


def _add_verify(sub: Any) -> None:
    p = sub.add_parser(
        "verify",
        help="reconcile a published data source with its source (exit 6 on drift)",
        description="Compare a published data source with the source it should mirror, "
        "through the VizQL Data Service, without downloading either: row counts and "
        "aggregates by key range, narrowed down to the keys that differ.",
    )
    p.add_argument("datasource", metavar="DATASOURCE", help="the data source's name or LUID")
    p.add_argument("--project", help="the data source's project (a path from the top, or LUID)")
    p.add_argument("--key", nargs="+", required=True, help="key column(s), unique in the source")
    p.add_argument("--input", nargs="+", help="the source: Parquet (or CSV) files or directories")
    p.add_argument(
        "--format", choices=["parquet", "csv"], default="parquet", help="format of --input"
    )
    p.add_argument("--spark-table", help="the source: a table in the Spark catalog")
    p.add_argument("--columns", nargs="+", help="compare only these columns (and the key)")
    p.add_argument(
        "--repair",
        action="store_true",
        help="apply one update that makes the differing keys hold the source's rows, then "
        "reconcile again",
    )
    p.add_argument("--sample", type=int, default=20, help="differing keys shown per kind of drift")
    p.add_argument(
        "--budget",
        type=int,
        help="spend at most this many VizQL Data Service queries (Tableau Cloud allows 100 "
        "per hour per Creator license, site-wide); exit 7 when it stops short",
    )
    _add_connection_options(p)
    _add_verbosity(p, argparse.SUPPRESS)
    p.set_defaults(func=_Command("verify"))


def _add_publish(sub: Any) -> None:
    p = sub.add_parser("publish", help="publish a .hyper file or a payload as a data source")
    p.add_argument("source", metavar="FILE|DIR", help="a .hyper file, or a folder from `build`")
    p.add_argument("--name", required=True, help="the data source's name")
    p.add_argument(
        "--project",
        help="project name, path from the top (Sales/EMEA) or LUID (default: the default project)",
    )
    p.add_argument(
        "--mode",
        choices=["create", "overwrite", "append"],
        default="create",
        help="create (refused if the name exists), overwrite its data, or append rows",
    )
    p.add_argument("--description", help="the data source's description")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait for the publish")
    _add_connection_options(p)
    _add_verbosity(p, argparse.SUPPRESS)
    p.set_defaults(func=_Command("publish"))


def _add_probe(sub: Any) -> None:
    p = sub.add_parser(
        "probe",
        help="measure what the server does where Tableau's docs are silent (on a canary)",
        description="Publishes a small canary data source into --project, runs scripted "
        "updates whose outcomes differ by semantics (a key matched twice, NULL into NOT NULL, "
        "a narrowed decimal, a repeated RequestID, a stale update under the ordering guard), "
        "reads each back from the canary's rows, removes the canary (unless --keep) and "
        "remembers the result per server and site in the state folder. At most 200 requests; "
        "nothing but the canary is touched. ChangeSet(guard=True) is sent only to a server "
        "whose probe found the guard working.",
    )
    p.add_argument("--project", required=True, help="the project the canary is published into")
    p.add_argument("--keep", action="store_true", help="leave the canary data source in place")
    p.add_argument(
        "--cap", action="store_true", help="also find the update cap (uploads up to ~100 MB)"
    )
    _add_state_dir(p, "the result is remembered")
    _add_connection_options(p)
    _add_verbosity(p, argparse.SUPPRESS)
    p.set_defaults(func=_Command("probe"))


def _add_job(sub: Any) -> None:
    p = sub.add_parser("job", help="show, wait for or cancel a job")
    p.add_argument("action", choices=["status", "wait", "cancel"], help="what to do")
    p.add_argument("job_id", help="the job's id, as `apply` prints it")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait (wait)")
    _add_state_dir(p, "update records live (a job found succeeded is recorded as applied)")
    _add_connection_options(p)
    _add_verbosity(p, argparse.SUPPRESS)
    p.set_defaults(func=_Command("job"))


def _add_state(sub: Any) -> None:
    p = sub.add_parser("state", help="list or clear resume records")
    p.add_argument("action", choices=["list", "clear"], help="list (reads only) or clear")
    _add_state_dir(p, "update records live")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_verbosity(p, argparse.SUPPRESS)
    p.set_defaults(func=_Command("state"))


def _add_status(sub: Any) -> None:
    p = sub.add_parser(
        "status",
        help="what the state folder knows: last updates, unfinished ones, sinks",
        description="Per data source the last update applied (position, jobs, when) and the "
        "updates unfinished (a re-run resumes them), and each streaming sink's progress. "
        "Reads the state folder only: no sign-in.",
    )
    _add_state_dir(p, "update records live")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _add_verbosity(p, argparse.SUPPRESS)
    p.set_defaults(func=_Command("status"))


def _add_rows(sub: Any) -> None:
    p = sub.add_parser(
        "rows",
        help="show a data source's rows (through the VizQL Data Service)",
        description="Print a published data source's rows, each table's first --limit, read "
        "through the VizQL Data Service (a serve-local fake, Tableau Cloud, Tableau Server "
        "2025.1 and later).",
    )
    p.add_argument("datasource", metavar="DATASOURCE", help="the data source's name or LUID")
    p.add_argument("--project", help="the data source's project (a path from the top, or LUID)")
    p.add_argument("--limit", type=int, default=20, help="rows per table (default: 20)")
    _add_connection_options(p)
    _add_verbosity(p, argparse.SUPPRESS)
    p.set_defaults(func=_Command("rows"))


def _add_demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the end-to-end demo against the built-in fake server")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    _add_verbosity(p, argparse.SUPPRESS)
    p.set_defaults(func=_Command("demo"))


def _add_serve_local(sub: Any) -> None:
    p = sub.add_parser("serve-local", help="serve a fake Tableau server on 127.0.0.1")
    p.add_argument(
        "--datasource",
        nargs="*",
        default=[],
        metavar="NAME=FILE.hyper",
        help="publish a copy of FILE.hyper as data source NAME (default: a sample data "
        "source Orders: id, name, qty)",
    )
    p.add_argument(
        "--pat",
        nargs="+",
        default=["local:local-secret"],
        metavar="NAME:SECRET",
        help="personal access tokens the server accepts",
    )
    p.add_argument("--project", default="Default", help="project of the data sources")
    p.add_argument("--site-url", default="", help="the site's content URL")
    p.add_argument(
        "--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)"
    )
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument(
        "--directory",
        help="where data sources and uploads are kept (default: a temporary directory)",
    )
    p.add_argument(
        "--discard-uploads",
        action="store_true",
        help="count upload bytes without keeping them (transfer benchmarks)",
    )
    _add_verbosity(p, argparse.SUPPRESS)
    p.set_defaults(func=_Command("serve_local"))

"""One shared Hyper process per database version, and safe SQL quoting.

Starting ``hyperd`` is cheap (tens of milliseconds) but not free, so processes are shared
and closed at interpreter exit. Telemetry is off unless ``TABHYPER_HYPER_TELEMETRY=1`` and
Hyper writes no log files.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from tableauhyperapi import (
    Connection,
    CreateMode,
    HyperException,
    HyperProcess,
    Telemetry,
    escape_name,
    escape_string_literal,
)

from ..values.errors import InvalidArgumentError

__all__ = [
    "DEFAULT_DATABASE_VERSION",
    "SUPPORTED_DATABASE_VERSIONS",
    "attach_read_only",
    "connect",
    "create_tables",
    "hyper_process",
    "quote_literal",
    "quote_name",
    "table_ref",
]

#: Hyper file format written by default: every supported Tableau release reads it.
DEFAULT_DATABASE_VERSION = 2
SUPPORTED_DATABASE_VERSIONS = (0, 1, 2, 3, 4)

_lock = threading.Lock()
_processes: dict[int, HyperProcess] = {}


def hyper_process(database_version: int = DEFAULT_DATABASE_VERSION) -> HyperProcess:
    """The shared Hyper process that creates files of ``database_version``."""
    if database_version not in SUPPORTED_DATABASE_VERSIONS:
        raise InvalidArgumentError(
            f"database_version must be one of {SUPPORTED_DATABASE_VERSIONS}, "
            f"got {database_version!r}"
        )
    with _lock:
        process = _processes.get(database_version)
        if process is None or not process.is_open:
            telemetry = (
                Telemetry.SEND_USAGE_DATA_TO_TABLEAU
                if os.environ.get("TABHYPER_HYPER_TELEMETRY") == "1"
                else Telemetry.DO_NOT_SEND_USAGE_DATA_TO_TABLEAU
            )
            process = HyperProcess(
                telemetry,
                parameters={
                    "log_config": "",
                    "default_database_version": str(database_version),
                },
            )
            _processes[database_version] = process
        return process


@atexit.register
def _shutdown() -> None:
    with _lock:
        for process in _processes.values():
            with contextlib.suppress(Exception):  # nothing useful to do at exit
                process.close()
        _processes.clear()


@contextmanager
def connect(
    database: str | os.PathLike[str] | None = None,
    *,
    create: bool = False,
    read_only: bool = False,
    database_version: int = DEFAULT_DATABASE_VERSION,
) -> Iterator[Connection]:
    """A connection to ``database`` (created, replacing any file, when ``create``; only read
    when ``read_only``: see :func:`attach_read_only`).

    Paths are made absolute here: the shared Hyper process keeps the working directory it
    started in, so a relative path would name another file."""
    process = hyper_process(database_version)
    kwargs: dict[str, Any] = {}
    if database is not None and not read_only:
        kwargs["database"] = os.path.abspath(database)
        kwargs["create_mode"] = CreateMode.CREATE_AND_REPLACE if create else CreateMode.NONE
    with Connection(process.endpoint, **kwargs) as connection:
        if database is not None and read_only:
            # The one database attached: unqualified names resolve in it, as in the main one,
            # and under the alias Hyper gives a main database (the file's stem).
            attach_read_only(connection, database, os.path.splitext(os.path.basename(database))[0])
        yield connection


#: Whether this Hyper attaches a database for reading only (``None``: not tried yet).
_read_only_attach: bool | None = None


def attach_read_only(connection: Connection, path: str | os.PathLike[str], alias: str) -> None:
    """Attach the ``.hyper`` file ``path`` as ``alias`` for reading only.

    A file the SDK reads may be the caller's own (``Payload.from_hyper``): attached for
    writing, Hyper may write into it even when nothing is changed (its header, measured
    under load). Read-only (``access_mode 'readonly'``), Hyper refuses to. A Hyper that
    does not know the option attaches it as before."""
    global _read_only_attach
    statement = f"ATTACH DATABASE {quote_name(os.path.abspath(path))} AS {quote_name(alias)}"
    if _read_only_attach is not False:
        try:
            connection.execute_command(f"{statement} WITH (access_mode = 'readonly')")
        except HyperException as err:
            text = str(err).lower()
            unknown = "access_mode" in text or "attach option" in text or "syntax" in text
            if _read_only_attach or not unknown:
                raise
            _read_only_attach = False
        else:
            _read_only_attach = True
            return
    connection.execute_command(statement)


def quote_name(name: str) -> str:
    """A SQL identifier, quoted so that any name (quotes, dots, spaces) is taken literally."""
    return str(escape_name(name))


def quote_literal(value: str) -> str:
    """A SQL string literal."""
    return str(escape_string_literal(value))


def table_ref(schema: str | None, table: str, database: str | None = None) -> str:
    parts = [p for p in (database, schema) if p is not None] + [table]
    return ".".join(map(quote_name, parts))


def create_tables(
    path: str | os.PathLike[str],
    tables: Mapping[str, tuple[str, Sequence[str]]],
    *,
    schema: str = "Extract",
) -> None:
    """Create (or replace) the ``.hyper`` file ``path`` holding ``tables`` in ``schema``:
    name → (column DDL, rows as SQL value tuples)."""
    with connect(path, create=True) as conn:
        conn.execute_command(f"CREATE SCHEMA {quote_name(schema)}")
        for name, (ddl, rows) in tables.items():
            conn.execute_command(f"CREATE TABLE {table_ref(schema, name)} ({ddl})")
            if rows:
                conn.execute_command(
                    f"INSERT INTO {table_ref(schema, name)} VALUES {', '.join(rows)}"
                )

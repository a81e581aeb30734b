"""Small ``.hyper`` helpers for tests and examples: make a file from SQL, read a table back,
run a statement."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..local.hyper import connect, create_tables, table_ref

__all__ = ["make_hyper", "read_table", "run_sql"]


def make_hyper(
    path: str | os.PathLike[str],
    tables: Mapping[str, tuple[str, Sequence[str]]],
    *,
    schema: str = "Extract",
) -> Path:
    """A ``.hyper`` file with ``tables``: name → (column DDL, rows as SQL value tuples).

    >>> make_hyper("t.hyper", {"Extract": ("id INT, v TEXT", ["(1, 'a')"])})  # doctest: +SKIP
    """
    create_tables(path, tables, schema=schema)
    return Path(path)


def _python(value: Any) -> Any:
    if hasattr(value, "to_datetime"):
        return value.to_datetime()
    if hasattr(value, "to_date"):
        return value.to_date()
    return value


def read_table(
    path: str | os.PathLike[str], table: str, *, schema: str = "Extract", order_by: str = "1"
) -> list[tuple[Any, ...]]:
    """Every row of a table as Python values, ordered by ``order_by`` (SQL)."""
    with connect(path) as conn:
        rows = conn.execute_list_query(
            f"SELECT * FROM {table_ref(schema, table)} ORDER BY {order_by}"
        )
    return [tuple(map(_python, row)) for row in rows]


def run_sql(path: str | os.PathLike[str], statement: str) -> int:
    """Run one SQL statement on a ``.hyper`` file (e.g. a change behind the SDK's back, as
    a test or an example needs); returns the rows it affected."""
    with connect(path) as conn:
        return int(conn.execute_command(statement))

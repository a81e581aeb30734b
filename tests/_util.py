"""Test helpers: read a .hyper table back as Python values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tabhyper_update._hyper import connect, table_ref


def to_python(value: Any) -> Any:
    if hasattr(value, "to_datetime"):
        return value.to_datetime()
    if hasattr(value, "to_date"):
        return value.to_date()
    return value


def read_rows(
    path: Path | str, table: str, schema: str = "Extract", order_by: str = "1"
) -> list[tuple[Any, ...]]:
    with connect(path) as conn:
        rows = conn.execute_list_query(
            f"SELECT * FROM {table_ref(schema, table)} ORDER BY {order_by}"
        )
    return [tuple(to_python(v) for v in row) for row in rows]


def read_columns(
    path: Path | str, table: str, schema: str = "Extract"
) -> list[tuple[str, str, bool]]:
    from tableauhyperapi import Nullability, TableName

    with connect(path) as conn:
        definition = conn.catalog.get_table_definition(TableName(schema, table))
    return [
        (c.name.unescaped, str(c.type), c.nullability == Nullability.NULLABLE)
        for c in definition.columns
    ]

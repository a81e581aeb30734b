"""Test helpers: read a .hyper table back as Python values."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tabhyper_update._hyper import connect
from tabhyper_update.testing.files import read_table

if TYPE_CHECKING:
    import pytest

    from tabhyper_update.testing import FakeTableauServer


def read_rows(
    path: Path | str, table: str, schema: str = "Extract", order_by: str = "1"
) -> list[tuple[Any, ...]]:
    return read_table(path, table, schema=schema, order_by=order_by)


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


def use_environment(
    monkeypatch: pytest.MonkeyPatch, server: FakeTableauServer, state: Path, datasource: str
) -> None:
    """Configure a CDC job the way it runs in production: from TABLEAU_* variables only."""
    for key, value in {
        "TABLEAU_SERVER_URL": server.url,
        "TABLEAU_SITE": "",
        "TABLEAU_PAT_NAME": "ci",
        "TABLEAU_PAT_SECRET": "pat-secret",
        "TABLEAU_DATASOURCE": datasource,
        "XDG_STATE_HOME": str(state),
    }.items():
        monkeypatch.setenv(key, value)

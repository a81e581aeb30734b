"""Test helpers: a client of the fake server, .hyper tables read back as Python values."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tabhyper_update import PersonalAccessToken, TableauClient
from tabhyper_update.local.hyper import connect
from tabhyper_update.testing.files import read_table
from tabhyper_update.values.policies import PollPolicy, RetryPolicy

if TYPE_CHECKING:
    import pytest

    from tabhyper_update.testing import FakeTableauServer

#: The credentials the shared ``server`` fixture accepts (a PAT, a user, a connected app).
PAT = ("ci", "pat-secret")
USER = ("ana", "pw")
CONNECTED_APP = {"client_id": "cid", "secret_id": "kid", "secret_value": "app-secret"}


def client_for(server: FakeTableauServer | str, **options: Any) -> TableauClient:
    """A client of ``server`` (or of a URL) signing in with :data:`PAT`: retries and polls
    are quick unless ``options`` say otherwise (any ``TableauClient`` keyword)."""
    options.setdefault("retry", RetryPolicy(initial_wait=0.01, max_total_seconds=20))
    options.setdefault("poll", PollPolicy(initial=0.01, maximum=0.05, timeout=30))
    url = server if isinstance(server, str) else server.url
    return TableauClient(url, "", PersonalAccessToken(*PAT), **options)


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
        "TABLEAU_PAT_NAME": PAT[0],
        "TABLEAU_PAT_SECRET": PAT[1],
        "TABLEAU_DATASOURCE": datasource,
        "XDG_STATE_HOME": str(state),
    }.items():
        monkeypatch.setenv(key, value)

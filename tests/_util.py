"""Test helpers: a client of the fake server, .hyper tables read back as Python values."""

from __future__ import annotations

import threading
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


class Crash(BaseException):
    """A process "killed" mid-flow (raised past every handler the SDK has)."""


def crash_after(obj: Any, name: str, calls: int = 1, *, before: bool = False) -> None:
    """Make ``obj.name`` "kill the process" after (or before) its ``calls``-th call."""
    real = getattr(obj, name)
    count = [0]

    lock = threading.Lock()

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with lock:  # an upload's blocks may go from several threads at once
            count[0] += 1
            mine = count[0]
        if before and mine == calls:
            raise Crash(name)
        result = real(*args, **kwargs)
        if mine == calls:
            raise Crash(name)
        return result

    setattr(obj, name, wrapper)


#: Where a job is killed before it runs again, one per delivery of a multi-delivery test:
#: (the client's method, its call, whether before the call runs).
RERUN_CRASHES = [
    ("update_data", 1, True),
    ("update_data", 1, False),
    ("job", 1, False),
    ("datasource", 1, False),
]


def update_after_a_crash(
    server: FakeTableauServer, payload: Any, state: Path, crash: tuple[str, int, bool]
) -> Any:
    """Update data source ``Orders`` by a job killed at ``crash``, then by the same job run
    again (a new client, the same state folder); what the second run returns."""
    import pytest

    method, calls, before = crash
    doomed = client_for(server)
    crash_after(doomed, method, calls, before=before)
    with pytest.raises(Crash):
        doomed.update_datasource("Orders", payload, state_dir=state)
    with client_for(server) as again:
        return again.update_datasource("Orders", payload, state_dir=state)

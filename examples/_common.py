"""What every example shares: a target data source on the fake server, or on a real one.

With ``TABLEAU_SERVER_URL`` set (and the other ``TABLEAU_*`` variables of
``TableauClient.from_env``), the examples update the real data source named by
``TABLEAU_DATASOURCE``, which must already have the example's tables. Otherwise they start the
built-in fake server on 127.0.0.1 and publish a small data source for the run.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tabhyper_update import PersonalAccessToken, TableauClient
from tabhyper_update.testing import FakeTableauServer, local_spark, make_hyper, read_table, run_sql

__all__ = ["Target", "local_spark", "show", "target"]


@dataclass
class Target:
    client: TableauClient
    datasource: str
    state_dir: Path
    #: Reads a table of the data source back (fake server only; None on a real server).
    read: Callable[[str], list[tuple[Any, ...]]] | None
    #: Runs SQL on the fake server's copy of the data source (None on a real server).
    sql: Callable[[str], None] | None = None


@contextmanager
def target(name: str, tables: Mapping[str, tuple[str, Sequence[str]]] | None) -> Iterator[Target]:
    """A client and the data source ``name``; on the fake server it is published with
    ``tables`` first, or left for the example to publish when ``tables`` is None."""
    work = Path(tempfile.mkdtemp(prefix="tabhyper-example-"))
    try:
        if os.environ.get("TABLEAU_SERVER_URL"):
            with TableauClient.from_env() as client:
                yield Target(
                    client, os.environ.get("TABLEAU_DATASOURCE", name), work / "state", None
                )
            return
        with FakeTableauServer(
            pats={"examples": "examples-secret"}, directory=work / "server"
        ) as server:
            if tables is not None:
                server.add_datasource(name, make_hyper(work / "start.hyper", tables))

            def path() -> Path:
                (luid,) = [d.id for d in server.backend.sources.values() if d.name == name]
                return server.datasource_path(luid)

            def read(table: str) -> list[tuple[Any, ...]]:
                return read_table(path(), table)

            def sql(text: str) -> None:
                run_sql(path(), text)

            with TableauClient(
                server.url, "", PersonalAccessToken("examples", "examples-secret")
            ) as client:
                yield Target(client, name, work / "state", read, sql)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def show(
    rows: Sequence[tuple[Any, ...]] | Mapping[str, Sequence[tuple[Any, ...]]] | None,
) -> str:
    """The published table(s) as a reader wants to see them: one row per line."""
    if rows is None:
        return "applied to your data source (read it in Tableau to see the result)"
    tables = rows if isinstance(rows, Mapping) else {"the data source's table": rows}
    lines = []
    for name, held in tables.items():
        lines.append(f"{name} now holds {len(held)} row(s):")
        lines += ["  " + " | ".join("NULL" if v is None else str(v) for v in row) for row in held]
    return "\n".join(lines)

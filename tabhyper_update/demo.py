"""The end-to-end demo: a Spark change set applied to a data source on the built-in fake server.

``tabhyper-update demo`` starts the fake Tableau server on 127.0.0.1, publishes a small
``Orders`` data source, generates a change set in Spark (inserts, updates, deletes, keys
changed several times), then runs build → upload → apply (which waits) and prints the table before
and after, the actions sent and the time of each step. Everything it creates lives in one
temporary directory that is removed at the end.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from .client import TableauClient
from .local.hyper import connect, quote_name, table_ref
from .local.spark import local_spark
from .rest.auth import PersonalAccessToken

__all__ = ["run_demo"]

INITIAL = [
    (1, "apple", 3, "2024-05-01 09:00:00"),
    (2, "banana", 12, "2024-05-01 09:05:00"),
    (3, "cherry", 7, "2024-05-01 09:10:00"),
    (4, "damson", 1, "2024-05-01 09:15:00"),
    (5, "elder", 9, "2024-05-01 09:20:00"),
]

# (order_id, product, qty, updated_at, op, seq): a Debezium-style change feed.
CHANGES = [
    (2, "banana", 15, "2024-05-02 10:00:00", "u", 1),
    (2, "banana", 18, "2024-05-02 10:05:00", "u", 2),  # updated twice: the last wins
    (3, "cherry", 7, "2024-05-02 10:01:00", "d", 1),  # deleted
    (6, "fig", 4, "2024-05-02 10:02:00", "c", 1),  # inserted
    (7, "grape", 2, "2024-05-02 10:03:00", "c", 1),  # inserted, then deleted
    (7, "grape", 2, "2024-05-02 10:04:00", "d", 2),
    (4, "damson", 1, "2024-05-02 10:06:00", "d", 1),  # deleted, then inserted again
    (4, "damson", 6, "2024-05-02 10:07:00", "c", 2),
    (8, "guava", 5, "2024-05-02 10:08:00", "c", 1),  # inserted, then updated
    (8, "guava", 11, "2024-05-02 10:09:00", "u", 2),
]

COLUMNS = ("order_id", "product", "qty", "updated_at")


def expected_after() -> list[tuple[Any, ...]]:
    """The table the change set must produce, computed in plain Python."""
    rows = {r[0]: r for r in INITIAL}
    latest: dict[int, tuple[Any, ...]] = {}
    for change in sorted(CHANGES, key=lambda c: (c[0], c[5])):
        latest[change[0]] = change
    for key, change in latest.items():
        if change[4] == "d":
            rows.pop(key, None)
        else:
            rows[key] = change[:4]
    return [rows[k] for k in sorted(rows)]


def _table_text(rows: Sequence[tuple[Any, ...]]) -> str:
    cells = [list(COLUMNS)] + [list(map(str, r)) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join("    " + line for line in lines)


def _read(path: Path) -> list[tuple[Any, ...]]:
    with connect(path) as conn:
        rows = conn.execute_list_query(
            f"SELECT * FROM {table_ref('Extract', 'Extract')} ORDER BY 1"
        )
    return [(r[0], r[1], r[2], str(r[3].to_datetime())) for r in rows]


def _publishable(path: Path) -> Path:
    with connect(path, create=True) as conn:
        conn.execute_command(f"CREATE SCHEMA {quote_name('Extract')}")
        conn.execute_command(
            f"CREATE TABLE {table_ref('Extract', 'Extract')} (order_id BIGINT NOT NULL, "
            "product TEXT, qty INTEGER, updated_at TIMESTAMP)"
        )
        values = ", ".join(f"({i}, '{p}', {q}, TIMESTAMP '{t}')" for i, p, q, t in INITIAL)
        conn.execute_command(f"INSERT INTO {table_ref('Extract', 'Extract')} VALUES {values}")
    return path


def _change_set(spark: Any) -> Any:
    """The demo's change set as a CDC job's DataFrame (Debezium-style ops and positions)."""
    return spark.createDataFrame(
        CHANGES, "order_id long, product string, qty int, updated_at string, op string, seq long"
    ).selectExpr(
        "order_id", "product", "qty", "CAST(updated_at AS TIMESTAMP) AS updated_at", "op", "seq"
    )


def _apply(
    url: str, payload: Any, work: Path, progress: bool | None, out: TextIO
) -> list[tuple[str, float]]:
    """Upload ``payload`` to data source ``Orders`` and apply it, printing the actions and
    the job; the seconds of each step."""
    with TableauClient(url, "", PersonalAccessToken("demo", "demo-secret")) as client:
        started = time.perf_counter()  # upload() signs in, looks up, uploads
        uploaded = payload.upload(
            "Orders", client=client, progress=progress, state_dir=work / "state"
        )
        print("\nActions sent:", file=out)
        print(
            json.dumps(payload.derived_actions(target_table="Extract").to_dict(), indent=2),
            file=out,
        )
        result = uploaded.apply(target_table="Extract", timeout=60)  # once applied, or raises
        applied = time.perf_counter() - started
    part = result.parts[0]
    print(
        f"\nApplied as job {part.job_id} (RequestID {part.request_id}, derived from the change "
        "set's positions: a re-run of this slice is not applied twice)",
        file=out,
    )
    return [
        ("upload", part.seconds.get("upload", 0.0)),
        ("submit update", part.seconds.get("submit", 0.0)),
        ("wait for the job", part.seconds.get("wait", 0.0)),
        ("sign-in, lookup", applied - sum(part.seconds.values())),
    ]


def run_demo(out: TextIO, *, progress: bool | None = None, verbose: bool = False) -> bool:
    """Run the demo, printing to ``out``; returns whether the result matched."""
    from .builder.build import build_payload
    from .testing import FakeTableauServer
    from .values.changeset import ChangeSet

    timings: list[tuple[str, float]] = []

    def step(name: str, fn: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        value = fn()
        timings.append((name, time.perf_counter() - started))
        return value

    work = Path(tempfile.mkdtemp(prefix="tabhyper-demo-"))
    try:
        with FakeTableauServer(pats={"demo": "demo-secret"}, directory=work / "server") as srv:
            luid = srv.add_datasource("Orders", _publishable(work / "orders.hyper"), project="Demo")
            print(f"Fake Tableau server on {srv.url}; data source 'Orders' ({luid})", file=out)
            print("\nBefore:", file=out)
            print(_table_text(_read(srv.datasource_path(luid))), file=out)
            with local_spark(verbose, few_rows=True) as spark:
                changes = step("Spark change set", lambda: _change_set(spark))
                keys = len({c[0] for c in CHANGES})
                print(
                    f"\nChange set: {len(CHANGES)} Debezium-style changes to {keys} keys", file=out
                )
                payload = step(
                    "build_payload",
                    lambda: build_payload(
                        changes,
                        ChangeSet("order_id", op_column="op", order_by="seq"),
                        staging_dir=work / "stage",
                        output_dir=work / "payload",
                        progress=progress,
                    ),
                )
            timings += _apply(srv.url, payload, work, progress, out)
            after = _read(srv.datasource_path(luid))
        print("\nAfter:", file=out)
        print(_table_text(after), file=out)
        print("\nTime per step:", file=out)
        for name, seconds in timings:
            print(f"    {name:<18} {seconds:6.2f} s", file=out)
        ok = after == expected_after()
        print(
            "\nOK: the data source matches the expected table."
            if ok
            else "\nMISMATCH: the data source differs from the expected table.",
            file=out,
        )
        return ok
    finally:
        shutil.rmtree(work, ignore_errors=True)

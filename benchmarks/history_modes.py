"""Benchmark: what history mode and soft deletes cost against the plain update.

    python benchmarks/history_modes.py [--changes 200000] [--keys 50000] [--runs 3]

One change set (``BIGINT`` key, a text value, a ``BIGINT`` position; ``--changes`` changes
over ``--keys`` keys, about a tenth of them deletes, so a key changes several times) is
built four ways: plain (last change per key), ``soft_delete=True``, ``history=True`` and
both; each in one part (``max_payload_mb=None``), ``--runs`` times, alternating. Each
payload is then sent to the fake server (over HTTP on 127.0.0.1) into an empty data source
of its columns. Printed per mode: the payload's rows per table, its bytes and bytes per
change (medians), the build's median seconds and its ratio to the plain build's, and the
REST calls and seconds of its update.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tabhyper_update import ChangeSet, PersonalAccessToken, TableauClient, build_payload
from tabhyper_update.testing import FakeTableauServer, local_spark, make_hyper

#: Per mode: (history, soft deletes).
MODES: dict[str, tuple[bool, bool]] = {
    "plain": (False, False),
    "soft_delete": (False, True),
    "history": (True, False),
    "history+soft_delete": (True, True),
}
DATA = "id BIGINT NOT NULL, v TEXT, seq BIGINT"
ADDED = {
    "soft_delete": ", _deleted BOOLEAN, _deleted_at BIGINT",
    "history": ", _valid_from BIGINT, _valid_to BIGINT, _is_current BOOLEAN",
}


def columns(mode: str) -> str:
    return DATA + "".join(text for name, text in ADDED.items() if name in mode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="history-modes-"))
    found: dict[str, Any] = {"changes": args.changes, "keys": args.keys}
    with local_spark() as spark:
        frame = spark.range(args.changes).selectExpr(
            f"id * 7919 % {args.keys} AS id",
            "concat('value-', id) AS v",
            "CASE WHEN id % 10 = 9 THEN 'D' ELSE 'U' END AS op",
            "1000 + id AS seq",
        )
        frame = frame.cache()
        frame.count()
        seconds: dict[str, list[float]] = {m: [] for m in MODES}
        sizes: dict[str, list[int]] = {m: [] for m in MODES}
        rows: dict[str, dict[str, int]] = {}
        for run in range(args.runs + 1):  # the first round warms up
            for mode, (history, soft) in MODES.items():
                spec = ChangeSet(
                    "id",
                    op_column="op",
                    order_by="seq",
                    keep_columns="seq",
                    history=history,
                    soft_delete=soft,
                )
                started = time.perf_counter()
                with build_payload(frame, spec, max_payload_mb=None, progress=False) as built:
                    took = time.perf_counter() - started
                    (part,) = built.parts
                    if run:
                        seconds[mode].append(took)
                        sizes[mode].append(part.size_bytes)
                    rows[mode] = {name: t.row_count for name, t in part.tables.items()}
                    if run == args.runs:
                        found.setdefault("update", {})[mode] = send(built, mode, work)
        plain = statistics.median(seconds["plain"])
        for mode in MODES:
            size = statistics.median(sizes[mode])
            found[mode] = {
                "rows": rows[mode],
                "bytes": size,
                "bytes_per_change": round(size / args.changes, 1),
                "bytes_vs_plain": round(size / statistics.median(sizes["plain"]), 2),
                "build_s": round(statistics.median(seconds[mode]), 2),
                "build_vs_plain": round(statistics.median(seconds[mode]) / plain, 2),
            }
    print(json.dumps(found, indent=2))


def send(built: Any, mode: str, work: Path) -> dict[str, Any]:
    """The payload's update into an empty data source of its columns: REST calls, seconds."""
    start = make_hyper(work / f"{mode}.hyper", {"Extract": (columns(mode), [])})
    with FakeTableauServer(pats={"bench": "bench-secret"}) as server:
        server.add_datasource("Orders", start)
        state = work / f"state-{mode}"
        server.remember_probe(state)
        client = TableauClient(server.url, "", PersonalAccessToken("bench", "bench-secret"))
        with client:
            client.sign_in()
            before = sum(server.counts.values())
            started = time.perf_counter()
            client.update_datasource("Orders", built, state_dir=state)
            took = time.perf_counter() - started
            calls = sum(server.counts.values()) - before
    return {"rest_calls": calls, "seconds": round(took, 2)}


if __name__ == "__main__":
    main()

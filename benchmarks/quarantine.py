"""Benchmark: what a quarantine costs a build.

    python benchmarks/quarantine.py [--changes 1000000] [--runs 3]

One change set (``BIGINT`` key, a text, an integer and a ``DECIMAL(12,4)``; every key once,
a tenth deletes) built three ways, alternating, after a warm-up: plain; with
``on_bad_rows="quarantine"`` checking each upsert against a target of
``VARCHAR(40) NOT NULL``, ``INTEGER`` and ``NUMERIC(12,2)`` with no row set aside; and the
same with one change in a thousand set aside (a text too long, a quantity out of range, an
amount with four decimal places), written as Parquet. Printed: each build's median seconds
and its ratio to the plain build's, the payload's bytes, and the rows set aside.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tabhyper_update import ChangeSet, build_payload
from tabhyper_update.testing import local_spark

TARGET = "id BIGINT NOT NULL, name VARCHAR(40) NOT NULL, qty INTEGER, amount NUMERIC(12,2)"


def frame(spark: Any, changes: int, bad: bool) -> Any:
    """The change set; with ``bad``, one change in a thousand the target would refuse."""
    flaw = "id % 1000 = 7" if bad else "false"
    return spark.range(changes).selectExpr(
        "id",
        f"CASE WHEN {flaw} THEN repeat('x', 50) ELSE concat('name-', id) END AS name",
        f"CASE WHEN {flaw} THEN 3000000000 ELSE id % 100000 END AS qty",
        f"CAST(CASE WHEN {flaw} THEN 1.2345 ELSE (id % 10000) / 100 END AS DECIMAL(12, 4))"
        " AS amount",
        "CASE WHEN id % 10 = 9 THEN 'D' ELSE 'U' END AS op",
        "id AS seq",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="quarantine-bench-"))
    spec = ChangeSet("id", op_column="op", order_by="seq")
    found: dict[str, Any] = {"changes": args.changes}
    try:
        with local_spark() as spark:
            frames = {
                "plain": frame(spark, args.changes, False).cache(),
                "checked": frame(spark, args.changes, False).cache(),
                "checked_bad": frame(spark, args.changes, True).cache(),
            }
            for df in frames.values():
                df.count()
            seconds: dict[str, list[float]] = {name: [] for name in frames}
            for run in range(args.runs + 1):  # the first round warms up
                for name, df in frames.items():
                    folder = work / f"q-{name}-{run}"
                    options: dict[str, Any] = (
                        {}
                        if name == "plain"
                        else {
                            "on_bad_rows": "quarantine",
                            "quarantine": folder,
                            "target_columns": TARGET,
                        }
                    )
                    started = time.perf_counter()
                    with build_payload(df, spec, progress=False, **options) as built:
                        took = time.perf_counter() - started
                        report = built.quarantined
                        found.setdefault(name, {})["bytes"] = built.size_bytes
                        found[name]["set_aside"] = 0 if report is None else report.rows
                    if run:
                        seconds[name].append(took)
                    shutil.rmtree(folder, ignore_errors=True)
            plain = statistics.median(seconds["plain"])
            for name in frames:
                median = statistics.median(seconds[name])
                found[name]["build_s"] = round(median, 2)
                found[name]["vs_plain"] = round(median / plain, 2)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()

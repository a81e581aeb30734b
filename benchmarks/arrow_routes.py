"""Benchmark: the rows' way to the driver as Arrow batches, pyspark's own Arrow stream (a
private route, taken where the running pyspark has it) against the public route every
supported pyspark has (``toLocalIterator()``, rows made into Arrow batches on the driver).

    python benchmarks/arrow_routes.py                 # 1M rows, 3 rounds
    python benchmarks/arrow_routes.py --rows 200000 --rounds 5

Both routes read the same DataFrame in the same Spark session (``local[2]``), alternating,
after a warm-up of each: the rows of ``payload_build.py``'s synthetic table staged as a
build stages them (timestamps as microseconds, dates as days), written as Parquet on the
driver exactly as ``staging="driver"`` writes them. Reported: the median seconds of each
route and their ratio, and that both wrote the same rows (their count and a digest of
their values).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))


def staged(spark: Any, rows: int) -> Any:
    """The synthetic rows as the build stages them: plain values only."""
    from payload_build import synthetic

    df = synthetic(spark, rows)
    exprs = []
    for field in df.schema.fields:
        kind = type(field.dataType).__name__
        if kind == "TimestampType":
            exprs.append(f"unix_micros(`{field.name}`) AS `{field.name}`")
        elif kind == "DateType":
            exprs.append(f"unix_date(`{field.name}`) AS `{field.name}`")
        else:
            exprs.append(f"`{field.name}`")
    return df.selectExpr(*exprs).repartition(8).cache()


def digest(folder: Path) -> tuple[int, str]:
    """How many rows the Parquet files under ``folder`` hold, and a digest of their values
    in a fixed order."""
    import pyarrow.parquet as pq

    table = pq.read_table(sorted(folder.glob("*.parquet")))
    ordered = table.sort_by([(name, "ascending") for name in table.column_names])
    hashed = hashlib.sha256()
    for column in ordered.columns:
        hashed.update(repr(column.to_pylist()).encode())
    return table.num_rows, hashed.hexdigest()[:16]


def timed(df: Any, route: str, work: Path) -> tuple[float, Path]:
    from tabhyper_update.builder.staging import write_on_driver

    target = work / f"{route}-{time.monotonic_ns()}"
    started = time.perf_counter()
    write_on_driver(df, target, route=route)
    return time.perf_counter() - started, target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from tabhyper_update.local.spark import local_spark
    from tabhyper_update.local.spark_versions import arrow_route, pyspark_version

    with local_spark() as spark:
        df = staged(spark, args.rows)
        df.count()
        fast = arrow_route(df)
        if fast == "rows":
            raise SystemExit("this pyspark offers no Arrow stream: nothing to compare")
        work = Path(tempfile.mkdtemp(prefix="arrow-routes-"))
        try:
            seconds: dict[str, list[float]] = {fast: [], "rows": []}
            written: dict[str, tuple[int, str]] = {}
            for route in seconds:  # warm-up
                _, folder = timed(df.limit(1000), route, work)
                shutil.rmtree(folder)
            for _ in range(args.rounds):
                for route in seconds:
                    took, folder = timed(df, route, work)
                    seconds[route].append(took)
                    written[route] = digest(folder)
                    shutil.rmtree(folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    median = {route: statistics.median(times) for route, times in seconds.items()}
    print(f"pyspark {pyspark_version()[2]}, {args.rows:,} rows, {args.rounds} rounds")
    for route, times in seconds.items():
        shown = " / ".join(f"{t:.2f}" for t in times)
        rows, hashed = written[route]
        print(f"  {route:>8}: median {median[route]:.2f} s ({shown}); {rows:,} rows, {hashed}")
    print(f"  public route / {fast}: {median['rows'] / median[fast]:.2f}x")
    if written["rows"] != written[fast]:
        raise SystemExit("the two routes wrote different rows")


if __name__ == "__main__":
    main()

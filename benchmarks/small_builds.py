"""Benchmark: what a small build costs, against Spark's own floor measured beside it.

    python benchmarks/small_builds.py

In one fresh local Spark session (``local[2]``): the first build after the session starts,
then warm builds of 10 rows, plain and as a change set, the change set also with
``staging="driver"`` (median of the runs after two warm-ups), beside the floor of the same
rows through Spark into a no-op sink. The first build's excess over a warm one is the JVM
warming up (class loading, code generation), not the SDK's own work.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from tabhyper_update import ChangeSet, build_payload
from tabhyper_update.demo import local_spark


def _median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times[2:]) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with local_spark() as spark:
        rows = [(i, f"v{i}", "U", i) for i in range(10)]
        changes = spark.createDataFrame(rows, "id long, v string, op string, seq long")
        plain = changes.select("id", "v")
        change_set = ChangeSet("id", op_column="op", order_by="seq")

        def build_plain() -> None:
            with build_payload(plain, progress=False):
                pass

        def build_changes() -> None:
            with build_payload(changes, change_set, progress=False):
                pass

        def build_changes_on_driver() -> None:
            with build_payload(changes, change_set, progress=False, staging="driver"):
                pass

        started = time.perf_counter()
        build_plain()
        first = time.perf_counter() - started
        warm_plain = _median_ms(build_plain, args.runs)
        warm_changes = _median_ms(build_changes, args.runs)
        warm_driver = _median_ms(build_changes_on_driver, args.runs)
        floor = _median_ms(lambda: plain.write.format("noop").mode("overwrite").save(), args.runs)
    print(f"first build after the session started   {first * 1000:8.0f} ms")
    print(f"warm 10-row plain build (median)         {warm_plain:8.0f} ms")
    print(f"warm 10-row change set build (median)    {warm_changes:8.0f} ms")
    print(f"  the same with staging='driver'         {warm_driver:8.0f} ms")
    print(f"Spark floor: the rows into a no-op sink  {floor:8.0f} ms")
    print(f"=> plain {warm_plain / floor:.1f}x, change set {warm_changes / floor:.1f}x the floor")


if __name__ == "__main__":
    main()

"""Benchmark: what a small build costs, against Spark's own floor measured beside it.

    python benchmarks/small_builds.py

In one fresh local Spark session (``local[2]``): the first build after the session starts,
then warm builds of 10 rows made in Python, plain and as a change set (the default
``staging="auto"``: Spark cannot size Python-made rows, but their plan only reads them, so
a probe of at most 10,000 rows brings them to the driver, and Hyper ranks the change set),
the change set also with ``staging="shared"`` (Spark's Parquet write into the staging
folder, Spark's ranking after a shuffle) and as the same rows in a VALUES list, which Spark
sizes as it does a Delta or Parquet read (``auto``: Spark tags them, Hyper ranks them on
the driver), each the median of the runs after two warm-ups, beside the floor
of the same rows through Spark into a no-op sink. The first build is broken down: Hyper's
process start and Spark's first query (the same rows into a no-op sink) are timed on their
own first, then the build's Spark staging, Hyper's work and the rest (the SDK's own Python)
come from the build's debug log. What the first build spends beyond a warm one is the JVM's
first queries of their kind (class loading, code generation), not the SDK's own work.
"""

from __future__ import annotations

import argparse
import logging
import re
import statistics
import time
from collections.abc import Callable

from tabhyper_update import ChangeSet, build_payload
from tabhyper_update.testing import local_spark


def _median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times[2:]) * 1000


class _Stages(logging.Handler):
    """The build's debug lines: seconds Spark staged and Hyper wrote."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seconds: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        for stage, pattern in (
            ("spark", r"Spark staged .* in ([0-9.]+) s"),
            ("hyper", r"Hyper wrote .* in ([0-9.]+) s"),
        ):
            found = re.search(pattern, record.getMessage())
            if found:
                self.seconds[stage] = float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    from tabhyper_update.local.hyper import hyper_process

    started = time.perf_counter()
    with local_spark() as spark:
        session_s = time.perf_counter() - started
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

        # The same rows as a VALUES list: a relation Spark sizes (as it does a Delta or
        # Parquet read), so auto ranks them in Hyper; Python-made rows have no size.
        values = ", ".join(f"({i}L, 'v{i}', 'U', {i}L)" for i in range(10))
        sized = spark.sql(f"SELECT * FROM VALUES {values} AS t(id, v, op, seq)")

        def build_sized() -> None:
            with build_payload(sized, change_set, progress=False):
                pass

        def build_changes_shared() -> None:
            with build_payload(changes, change_set, progress=False, staging="shared"):
                pass

        started = time.perf_counter()
        hyper_process()
        hyper_s = time.perf_counter() - started
        started = time.perf_counter()
        changes.write.format("noop").mode("overwrite").save()
        first_query_s = time.perf_counter() - started
        stages = _Stages()
        build_log = logging.getLogger("tabhyper_update.builder.build")
        build_log.addHandler(stages)
        build_log.setLevel(logging.DEBUG)
        started = time.perf_counter()
        build_changes()
        first = time.perf_counter() - started
        build_log.removeHandler(stages)
        build_log.setLevel(logging.NOTSET)
        warm_plain = _median_ms(build_plain, args.runs)
        warm_changes = _median_ms(build_changes, args.runs)
        warm_shared = _median_ms(build_changes_shared, args.runs)
        warm_sized = _median_ms(build_sized, args.runs)
        floor = _median_ms(lambda: plain.write.format("noop").mode("overwrite").save(), args.runs)
    spark_s, hyper_w = stages.seconds.get("spark", 0.0), stages.seconds.get("hyper", 0.0)
    print(f"Spark session start                      {session_s * 1000:8.0f} ms")
    print(f"Hyper process start                      {hyper_s * 1000:8.0f} ms")
    print(f"Spark's first query (the rows -> no-op)  {first_query_s * 1000:8.0f} ms")
    print(f"first build (a change set) after them    {first * 1000:8.0f} ms")
    print(f"  Spark staging                          {spark_s * 1000:8.0f} ms")
    print(f"  Hyper statistics and part              {hyper_w * 1000:8.0f} ms")
    print(f"  the rest (plan, folders, Python)       {(first - spark_s - hyper_w) * 1000:8.0f} ms")
    print(f"warm 10-row plain build (median)         {warm_plain:8.0f} ms")
    print(f"warm 10-row change set build (median)    {warm_changes:8.0f} ms")
    print(f"  the same with staging='shared'         {warm_shared:8.0f} ms")
    print(f"  the same rows as VALUES (Spark sizes them: Hyper ranks) {warm_sized:5.0f} ms")
    print(f"Spark floor: the rows into a no-op sink  {floor:8.0f} ms")
    print(f"=> plain {warm_plain / floor:.1f}x, change set {warm_changes / floor:.1f}x the floor")


if __name__ == "__main__":
    main()

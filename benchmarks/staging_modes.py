"""Benchmark: staging="driver" against staging="shared" (Parquet in a shared folder).

    python benchmarks/staging_modes.py                  # 1M and 4M rows
    python benchmarks/staging_modes.py --rows 1000000

For each size, both modes are measured side by side, each in a fresh process with its own
Spark session (``local[2]``, driver memory 1g), on the same synthetic rows as
``payload_build.py`` (8 typed columns, ~5% NULLs) in ``--partitions`` partitions (a
round-robin repartition, done in both modes): the build's wall time (after a small
warm-up build) and the peak resident memory of the driver's Python process and of the
Spark JVM (in local mode the JVM is the driver and the executors at once, so its peak
includes the executors' work).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

from tabhyper_update.builder.staging import StagingMode


def _jvm_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(rows: int, staging: StagingMode, partitions: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from payload_build import synthetic

    from tabhyper_update import build_payload
    from tabhyper_update.local.spark import own_spark

    with own_spark("staging-modes", conf={"spark.driver.memory": "1g"}) as spark:
        with build_payload(synthetic(spark, 1000), staging=staging, progress=False):
            pass  # warm-up
        started = time.perf_counter()
        rows_df = synthetic(spark, rows).repartition(partitions)
        with build_payload(rows_df, staging=staging, progress=False) as payload:
            seconds = time.perf_counter() - started
            size = payload.size_bytes
        jvm = spark.sparkContext._gateway.proc.pid
        said = {
            "seconds": seconds,
            "bytes": size,
            "python_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "jvm_peak_mb": _jvm_peak_mb(jvm),
        }
    print("RESULT " + json.dumps(said), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 4_000_000])
    parser.add_argument(
        "--partitions",
        type=int,
        default=16,
        help="partitions of the source (the driver holds about one with staging='driver')",
    )
    parser.add_argument("--child", nargs=2, metavar=("ROWS", "STAGING"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), cast(StagingMode, args.child[1]), args.partitions)
        return
    print(f"{'rows':>10} {'staging':>8} {'build':>8} {'payload':>9} {'py peak':>8} {'JVM peak':>9}")
    partitions = ["--partitions", str(args.partitions)]
    for rows in args.rows:
        for staging in ("shared", "driver"):
            done = subprocess.run(
                [sys.executable, __file__, "--child", str(rows), staging, *partitions],
                capture_output=True,
                text=True,
                timeout=1800,
                check=True,
            )
            (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
            r = json.loads(line.removeprefix("RESULT "))
            print(
                f"{rows:>10,} {staging:>8} {r['seconds']:>7.2f}s {r['bytes'] / 2**20:>7.1f}MB "
                f"{r['python_peak_mb']:>6.0f}MB {r['jvm_peak_mb']:>7.0f}MB",
                flush=True,
            )


if __name__ == "__main__":
    main()

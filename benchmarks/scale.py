"""Benchmark: a large change set split into parts — build and upload throughput, peak memory.

    python benchmarks/scale.py                          # 20,000,000 changes, 100 MB parts
    python benchmarks/scale.py --rows 5000000 --max-mb 50

One process, Spark ``local[2]`` with a 1 GB driver, the synthetic change set of
``payload_build.py --cdc`` (8 typed columns, ~5% NULLs, an op and an order column, one
change per key). It measures:

* the build (``build_payload(df, ChangeSet(...), max_payload_mb=...)``) and its stages:
  Spark staging the last change per key, then Hyper reading the staged statistics and
  writing the parts (the two run one after the other);
* Spark computing the same change set into a no-op sink (what the staging costs beyond it
  is the staged write);
* the upload of every part with the client's chunked upload to the fake server on
  127.0.0.1, which counts the bytes and keeps none (``serve-local --discard-uploads``);
* the peak resident memory of the driver's Python process and of the Spark JVM (in local
  mode the JVM is the driver and the executors at once).

It prints the per-stage rates that the cluster model in ``benchmarks/README.md`` is fed
with. Nothing is applied: applying 20M changes measures the server, not the SDK.
"""

from __future__ import annotations

import argparse
import logging
import re
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

MB = 1024 * 1024


class _StageTimes(logging.Handler):
    """The build's own debug lines: how long Spark staged and Hyper wrote."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seconds: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        for stage, pattern in (
            ("spark", r"Spark staged the change set in ([0-9.]+) s"),
            ("hyper", r"Hyper wrote \d+ part\(s\) in ([0-9.]+) s"),
        ):
            found = re.search(pattern, text)
            if found:
                self.seconds[stage] = float(found.group(1))


def jvm_peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--max-mb", type=float, default=100, help="max_payload_mb")
    args = parser.parse_args()

    from payload_build import synthetic
    from upload import start_server

    from tabhyper_update import ChangeSet, PersonalAccessToken, TableauClient, build_payload
    from tabhyper_update.builder.cdc import CdcSpec
    from tabhyper_update.local.spark import own_spark

    stages = _StageTimes()
    build_log = logging.getLogger("tabhyper_update.builder.build")
    build_log.addHandler(stages)
    build_log.setLevel(logging.DEBUG)
    work = Path(tempfile.mkdtemp(prefix="tabhyper-scale-"))
    server_dir = tempfile.mkdtemp(prefix="tabhyper-scale-server-")
    proc, url = start_server(server_dir)
    try:
        with own_spark("scale", conf={"spark.driver.memory": "1g"}) as spark:
            changes = ChangeSet("order_id", op_column="op", order_by="seq")

            def change_set(rows: int) -> Any:
                return synthetic(spark, rows).selectExpr(
                    "*",
                    "CASE order_id % 10 WHEN 0 THEN 'D' WHEN 1 THEN 'I' ELSE 'U' END AS op",
                    "order_id * 3 AS seq",
                )

            with build_payload(change_set(100_000), changes, progress=False):
                pass  # warm-up
            df = change_set(args.rows)
            started = time.perf_counter()
            payload = build_payload(
                df, changes, max_payload_mb=args.max_mb, output_dir=work, progress=False
            )
            build_s = time.perf_counter() - started
            python_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            jvm_peak = jvm_peak_mb(spark.sparkContext._gateway.proc.pid)
            with payload:
                sizes = [part.size_bytes for part in payload.parts]
                rows = {n: t.row_count for n, t in payload.tables.items()}
                with TableauClient(url, "", PersonalAccessToken("bench", "bench-secret")) as client:
                    client.sign_in()
                    started = time.perf_counter()
                    for part in payload.parts:
                        client.upload(part.path)
                    upload_s = time.perf_counter() - started
            spec = CdcSpec.create(df.columns, changes)
            started = time.perf_counter()
            spec.latest_changes(df).write.format("noop").mode("overwrite").save()
            noop_s = time.perf_counter() - started
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(server_dir, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
        build_log.removeHandler(stages)

    total_mb = sum(sizes) / MB
    spark_s = stages.seconds.get("spark", float("nan"))
    hyper_s = stages.seconds.get("hyper", float("nan"))
    print(
        f"{args.rows:,} changes (Spark local[2]): {len(sizes)} part(s) under "
        f"{args.max_mb:g} MB, {total_mb:,.0f} MB in all, tables {rows}"
    )
    print(f"  {'build, whole':<44} {build_s:8.2f} s  {args.rows / build_s / 1e6:6.2f} M rows/s")
    print(f"  {'  Spark staging (last change per key)':<44} {spark_s:8.2f} s")
    print(f"  {'  Hyper statistics and parts':<44} {hyper_s:8.2f} s")
    print(f"  {'Spark into a no-op sink (same change set)':<44} {noop_s:8.2f} s")
    print(
        f"  {'upload of every part (chunked)':<44} {upload_s:8.2f} s  "
        f"{total_mb / upload_s:6.1f} MB/s"
    )
    print(f"  {'driver peak RSS: Python / JVM':<44} {python_peak:6.0f} / {jvm_peak:.0f} MB")
    print("  per-stage rates (for the cluster model):")
    print(f"    Spark staging  {args.rows / spark_s / 1e6:6.2f} M rows/s on 2 cores")
    print(f"    Hyper          {args.rows / hyper_s / 1e6:6.2f} M rows/s on the driver")
    print(
        f"    upload         {total_mb / upload_s:6.1f} MB/s, "
        f"{total_mb / args.rows * 1e6:.1f} MB per M rows"
    )


if __name__ == "__main__":
    main()

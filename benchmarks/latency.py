"""Benchmark: a warm 1,000-change CDC micro-batch end to end against the fake server.

    python benchmarks/latency.py                    # 1,000 changes, 15 batches
    python benchmarks/latency.py --changes 10000 --batches 9
    python benchmarks/latency.py --staging shared   # the sink staging in a shared folder

A streaming CDC job pays this on every trigger. One run measures, in Spark ``local[2]`` with
a warm session and a warm Hyper, against the built-in fake server on 127.0.0.1:

* each micro-batch through ``TableauSink`` (what ``foreachBatch`` calls): build the payload,
  upload it, submit the update, wait until the job is applied; the median and its parts
  (build, upload, submit, wait);
* the floor measured in the same run: Spark computing the same last-change-wins into a
  no-op sink (the least one Spark job per batch costs), one authenticated GET to the
  server (the least a request costs), and the server's own work on each update (the fake's
  job from the moment it was queued to the moment Hyper committed: a job the SDK only
  waits for); the ratio of the median to that floor.

Each batch holds new positions (a later slice of the feed), so every batch is a new update.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGET_ROWS = 100_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=1000, help="changes per micro-batch")
    parser.add_argument("--batches", type=int, default=15, help="measured micro-batches")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="log each step's time")
    parser.add_argument(
        "--staging",
        choices=["auto", "shared", "driver"],
        default="auto",
        help="the sink's staging mode (default: the SDK's own, 'auto')",
    )
    args = parser.parse_args()
    if args.profile:
        logging.basicConfig(
            level=logging.DEBUG, format="%(relativeCreated)8.0f %(name)s %(message)s"
        )
        for noisy in ("py4j", "urllib3", "tabhyper_update.rest.transport"):
            logging.getLogger(noisy).setLevel(logging.WARNING)

    from tabhyper_update.testing import local_spark

    work = Path(tempfile.mkdtemp(prefix="tabhyper-latency-"))
    try:
        with local_spark() as spark:  # the demo's session: local[2], loopback, no UI
            run(spark, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(spark: Any, args: argparse.Namespace, work: Path) -> None:
    from tabhyper_update import ChangeSet, PersonalAccessToken, TableauClient, TableauSink
    from tabhyper_update.builder.cdc import CdcSpec
    from tabhyper_update.testing import FakeTableauServer
    from tabhyper_update.testing.files import make_hyper

    start = make_hyper(
        work / "start.hyper",
        {
            "Extract": (
                "order_id BIGINT NOT NULL, status TEXT, amount DOUBLE PRECISION, day DATE",
                [],
            )
        },
    )
    changes = ChangeSet("order_id", op_column="op", order_by="seq")

    def batch(index: int) -> Any:
        # A later slice of the feed each time: updates of existing keys, some deletes and
        # inserts, several changes per key, new positions.
        base = index * args.changes * 10
        return spark.range(args.changes).selectExpr(
            f"(id * 7919) % {TARGET_ROWS} AS order_id",
            "CONCAT('status-', CAST(id % 5 AS STRING)) AS status",
            f"CAST(id * 1.5 + {index} AS DOUBLE) AS amount",
            "DATE_ADD(DATE'2024-01-01', CAST(id % 365 AS INT)) AS day",
            "CASE id % 10 WHEN 0 THEN 'D' WHEN 1 THEN 'I' ELSE 'U' END AS op",
            f"{base} + id AS seq",
        )

    with FakeTableauServer(pats={"bench": "bench-secret"}, directory=work / "server") as server:
        server.add_datasource("Orders", start)
        with TableauClient(server.url, "", PersonalAccessToken("bench", "bench-secret")) as client:
            # Fill the target so that the updates touch a table of realistic size.
            seed = spark.range(TARGET_ROWS).selectExpr(
                "id AS order_id",
                "'seed' AS status",
                "CAST(id AS DOUBLE) AS amount",
                "DATE'2024-01-01' AS day",
                "'I' AS op",
                "0L AS seq",
            )
            sink = TableauSink(
                "Orders",
                changes,
                client=client,
                sink_id="bench",
                state_dir=work / "state",
                build={"staging": args.staging},
            )
            sink(seed, 0)
            spec = CdcSpec.create(batch(0).columns, changes)

            totals: list[float] = []
            parts: dict[str, list[float]] = {"build": [], "upload": [], "submit": [], "wait": []}
            server_work: list[float] = []
            for i in range(1, args.warmup + args.batches + 1):
                df = batch(i)
                started = time.perf_counter()
                sink(df, i)
                elapsed = time.perf_counter() - started
                result = sink.last_result
                assert result is not None
                assert not result.deduplicated
                if i <= args.warmup:
                    continue
                totals.append(elapsed)
                seconds = result.parts[0].seconds
                network = sum(seconds.get(k, 0.0) for k in ("upload", "submit", "wait"))
                parts["build"].append(elapsed - network)
                for k in ("upload", "submit", "wait"):
                    parts[k].append(seconds.get(k, 0.0))
                job = server.backend.job(str(result.parts[0].job_id))
                assert job.finished_at is not None
                server_work.append(job.finished_at - job.queued_at)

            def floor_spark() -> float:
                started = time.perf_counter()
                spec.latest_changes(batch(0)).write.format("noop").mode("overwrite").save()
                return time.perf_counter() - started

            def floor_request() -> float:
                started = time.perf_counter()
                client.datasource("Orders")
                return time.perf_counter() - started

            spark_floor = statistics.median(floor_spark() for _ in range(args.batches))
            request_floor = statistics.median(floor_request() for _ in range(args.batches))

    median = statistics.median(totals)
    overhead = statistics.median(t - w for t, w in zip(totals, server_work, strict=True))
    print(
        f"micro-batch of {args.changes:,} changes, {args.batches} batches "
        f"(after {args.warmup} warm-up)"
    )
    print(f"  {'end to end (TableauSink), median':<48} {median:7.3f} s   (target <= 0.75 s)")
    print(f"  {'  less the server job, median':<48} {overhead:7.3f} s")
    print(f"  {'  min / max':<48} {min(totals):7.3f} / {max(totals):.3f} s")
    for k, values in parts.items():
        print(f"  {'  ' + k + ', median':<48} {statistics.median(values):7.3f} s")
    print(f"  {'floor a: Spark last-change-wins -> noop':<48} {spark_floor:7.3f} s")
    print(f"  {'floor b: one authenticated GET':<48} {request_floor:7.3f} s")
    job_floor = statistics.median(server_work)
    print(f"  {'floor c: the server job (queued -> committed)':<48} {job_floor:7.3f} s")
    floor = spark_floor + request_floor + job_floor
    print(f"  => end to end / floor (a + b + c): {median / floor:.2f}x")


if __name__ == "__main__":
    main()

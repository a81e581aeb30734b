"""Benchmark: a micro-batch of Debezium events Spark cannot size, built as the default
``staging="auto"`` chooses against the shared folder, in the same run.

    python benchmarks/debezium_batches.py                 # 30 events a batch, 15 runs
    python benchmarks/debezium_batches.py --events 3000 --runs 9

In one local Spark session (``local[2]``), each batch's events (JSON lines, a fifth of them
updates that move their key, one redelivered) come three ways: as ``foreachBatch`` hands a
micro-batch from a source that reports no size, such as Kafka's (rows an RDD of Spark's own
holds, with no size estimate), as rows made in Python (``spark.createDataFrame``, also no
size), and as a text file Spark sizes (as Debezium's files are). Each is built with
``staging="auto"`` and with ``staging="shared"`` (Spark's Parquet write into the staging
folder and Spark's ranking after a shuffle: where an unsized batch went before its sources
were counted), alternating, and the medians of the runs after two warm-ups are printed
with the ratio auto / shared. Both builds of a batch must give the same payload (its
digest), or the run fails.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from tabhyper_update import build_payload  # noqa: E402
from tabhyper_update.streaming import Debezium  # noqa: E402
from tabhyper_update.testing import local_spark  # noqa: E402

EVENTS = Debezium("id BIGINT, name STRING, qty INT", key="id", connector="postgresql")


def lines(count: int, batch: int) -> list[str]:
    """``count`` events of batch ``batch``: creates, updates (a fifth move their key),
    deletes, the last one delivered twice."""
    out = []
    for i in range(count):
        lsn = batch * count + i
        key = lsn % max(1, count // 2)
        op = "c" if i % 4 == 0 else "d" if i % 9 == 0 else "u"
        moved = op == "u" and i % 5 == 0
        after = None if op == "d" else {"id": key + (10**6 if moved else 0), "name": f"n{lsn}"}
        before = None if op == "c" else {"id": key, "name": "old", "qty": 1}
        source = {"lsn": lsn, "table": "orders"}
        out.append(
            json.dumps({"before": before, "after": after, "op": op, "ts_ms": lsn, "source": source})
        )
    return [*out, out[-1]]


def frames(spark: Any, batch: list[str], folder: Path) -> dict[str, Any]:
    """The batch as each source gives it."""
    from pyspark.sql import DataFrame

    (folder / "events.json").write_text("".join(f"{line}\n" for line in batch))
    sized = spark.read.text(str(folder))
    # What foreachBatch hands a Kafka micro-batch: Spark's rows in an RDD, no size estimate.
    jvm = spark._jsparkSession.internalCreateDataFrame(
        sized._jdf.queryExecution().toRdd(), sized._jdf.schema(), False
    )
    return {
        "Kafka-like micro-batch (no size)": DataFrame(jvm, spark),
        "rows made in Python (no size)": spark.createDataFrame(
            [(line,) for line in batch], "value string"
        ),
        "a file Spark sizes": sized,
    }


def build(df: Any, staging: str) -> tuple[float, str]:
    started = time.perf_counter()
    with build_payload(EVENTS.changes(df), EVENTS.change_set, progress=False, staging=staging) as p:  # type: ignore[arg-type]
        digest = p.digest
    return time.perf_counter() - started, digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=30, help="events per batch")
    parser.add_argument("--runs", type=int, default=15, help="batches per source (2 warm-ups)")
    args = parser.parse_args()
    times: dict[tuple[str, str], list[float]] = {}
    with local_spark() as spark:
        for run in range(args.runs):
            folder = Path(tempfile.mkdtemp(prefix="debezium-batch-"))
            for source, df in frames(spark, lines(args.events, run), folder).items():
                order = ("auto", "shared") if run % 2 else ("shared", "auto")
                digests = set()
                for staging in order:
                    seconds, digest = build(df, staging)
                    times.setdefault((source, staging), []).append(seconds)
                    digests.add(digest)
                if len(digests) != 1:
                    raise SystemExit(f"{source}, batch {run}: auto and shared payloads differ")
            shutil.rmtree(folder)
    print(f"{args.events} events a batch (+1 redelivered), median of runs 3-{args.runs}:")
    print(f"{'events as':36} {'auto':>8} {'shared':>8} {'auto/shared':>12}")
    for source in dict.fromkeys(s for s, _ in times):
        auto = statistics.median(times[(source, "auto")][2:])
        shared = statistics.median(times[(source, "shared")][2:])
        print(f"{source:36} {auto:7.3f}s {shared:7.3f}s {auto / shared:12.2f}")


if __name__ == "__main__":
    main()

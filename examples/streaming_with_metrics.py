"""A streaming job whose figures are exported: every micro-batch's update as one JSON line
(rows by action, bytes, seconds per step, jobs, server seconds, position, lag) for a metrics
system to read, and, with ``opentelemetry-api`` installed (``pip install
'tabhyper-update[otel]'``), OpenTelemetry spans and metrics through whatever exporter the job
configures.

The change feed arrives as JSON files, one per micro-batch; ``availableNow`` processes what
is there and stops, as a scheduled streaming job does.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from _common import local_spark, show, target

from tabhyper_update import ChangeSet, TableauSink

START = {"Extract": ("id BIGINT NOT NULL, status TEXT, qty INTEGER", ["(1, 'new', 1)"])}
SCHEMA = "id BIGINT, status STRING, qty INT, op STRING, seq BIGINT"
BATCHES: list[list[tuple[int, str | None, int | None, str, int]]] = [
    [(2, "new", 5, "U", 1), (1, "paid", 1, "U", 2)],
    [(3, "new", 7, "U", 3), (2, None, None, "D", 4)],
]


def export_metrics(path: Path) -> logging.Handler:
    """Every update's figures as a JSON line in ``path`` (the ``tabhyper_update.metrics``
    logger speaks only when set to INFO)."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(message)s"))
    metrics = logging.getLogger("tabhyper_update.metrics")
    metrics.setLevel(logging.INFO)
    metrics.addHandler(handler)
    return handler


def main() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="streaming-metrics-") as folder:
        return run(Path(folder))


def run(work: Path) -> list[dict[str, Any]]:
    feed, exported = work / "feed", work / "metrics.jsonl"
    feed.mkdir()
    for i, batch in enumerate(BATCHES):
        lines = [
            json.dumps({"id": r[0], "status": r[1], "qty": r[2], "op": r[3], "seq": r[4]})
            for r in batch
        ]
        (feed / f"batch-{i}.json").write_text("\n".join(lines) + "\n")
    handler = export_metrics(exported)
    try:
        with local_spark() as spark, target("Orders", START) as where:
            sink = TableauSink(
                where.datasource,
                ChangeSet("id", op_column="op", order_by="seq"),
                client=where.client,
                state_dir=where.state_dir,
            )
            query = (
                spark.readStream.option("maxFilesPerTrigger", 1)
                .schema(SCHEMA)
                .json(str(feed))
                .writeStream.foreachBatch(sink)
                .option("checkpointLocation", str(work / "checkpoint"))
                .trigger(availableNow=True)
                .start()
            )
            query.awaitTermination()
            print(show(where.read("Extract") if where.read else None))
    finally:
        logging.getLogger("tabhyper_update.metrics").removeHandler(handler)
        handler.close()
    figures = [json.loads(line) for line in exported.read_text().splitlines()]
    for f in figures:
        print(
            f"up to seq {f['position']['seq']}: rows {f['rows']}, {f['bytes']} bytes, "
            f"{f['total_seconds']} s (server {f['server_seconds']} s), jobs {f['jobs']}"
        )
    return figures


if __name__ == "__main__":
    main()

"""A Structured Streaming query of Debezium change events, applied to a data source by the sink.

The events arrive as JSON files (what a Kafka topic's values look like with the JSON
converter, schema wrapper on); with Kafka, ``spark.readStream.format("kafka")`` gives the same
``value`` column. Each file is one micro-batch (``maxFilesPerTrigger``); ``availableNow``
processes what is there and stops, as a scheduled job does. Run it twice against the same
checkpoint and nothing is applied twice: the second run finds no new batch.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from _common import local_spark, show, target

from tabhyper_update import Debezium, TableauSink

ROW = "order_id BIGINT, status STRING, amount DOUBLE"
START = {
    "Orders": (
        "order_id BIGINT NOT NULL, status TEXT, amount DOUBLE PRECISION",
        [
            "(1, 'new', 10.0)",
            "(2, 'new', 20.0)",
        ],
    )
}


def event(op: str, before: Any, after: Any, lsn: int) -> str:
    envelope = {
        "before": before,
        "after": after,
        "op": op,
        "ts_ms": 1_700_000_000_000 + lsn,
        "source": {"connector": "postgresql", "table": "orders", "lsn": lsn},
    }
    return json.dumps({"schema": {"type": "struct", "optional": False}, "payload": envelope})


BATCHES = [
    # order 1 ships, order 3 arrives
    [
        event("u", None, {"order_id": 1, "status": "shipped", "amount": 10.0}, 100),
        event("c", None, {"order_id": 3, "status": "new", "amount": 30.0}, 101),
    ],
    # order 2 is deleted (then its tombstone), order 3 is paid
    [
        event("d", {"order_id": 2, "status": None, "amount": None}, None, 102),
        "null",
        event("u", None, {"order_id": 3, "status": "paid", "amount": 30.0}, 103),
    ],
]


def main() -> list[tuple[Any, ...]] | None:
    with local_spark() as spark, target("Shop", START) as t:
        work = Path(tempfile.mkdtemp(prefix="tabhyper-stream-", dir=t.state_dir.parent))
        events, checkpoint = work / "events", work / "checkpoint"
        events.mkdir()
        for i, lines in enumerate(BATCHES):
            (events / f"batch-{i}.json").write_text("\n".join(lines) + "\n", encoding="utf-8")

        sink = TableauSink(
            t.datasource,
            Debezium(ROW, key="order_id"),  # ordered by source.lsn, then ts_ms
            client=t.client,
            target_table="Orders",
            state_dir=t.state_dir,
        )
        for run in (1, 2):  # the second run finds nothing new
            before = dict(sink.counts)
            # start() checks the target first; await_termination() raises the SDK's own
            # error if a batch failed.
            query = sink.start(
                spark.readStream.option("maxFilesPerTrigger", 1)
                .text(str(events))
                .writeStream.option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
            )
            sink.await_termination(query)
            ran = {k: sink.counts[k] - before[k] for k in sink.counts}
            if not any(ran.values()):
                print(f"run {run}: nothing new (the checkpoint had every event)")
            else:
                said = ", ".join(f"{n} {kind}" for kind, n in ran.items() if n)
                print(f"run {run}: {sum(ran.values())} batch(es): {said}")
        return t.read("Orders") if t.read else None


if __name__ == "__main__":
    print(show(main()))

"""Publish a snapshot when the data source does not exist yet, then apply two CDC slices.

The same call runs on every trigger of the job: ``client.bootstrap`` publishes the snapshot
on the first run (the data source is missing) and applies the change set on every later run.
Only the payload needed is built. The job keeps its own position in the feed (here the
Delta-style commit version): after a publish it starts the feed at the snapshot's version.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from _common import local_spark, show, target

from tabhyper_update import ChangeSet, Payload, build_payload

SNAPSHOT = [(1, "new", 10.0), (2, "new", 20.0), (3, "new", 30.0)]
SLICES: list[list[tuple[Any, ...]]] = [
    # version 2: order 1 ships, order 4 arrives
    [(1, "shipped", 10.0, "update_postimage", 2), (4, "new", 40.0, "insert", 2)],
    # version 3: order 2 is cancelled (deleted), order 4 is paid
    [(2, "new", 20.0, "delete", 3), (4, "paid", 40.0, "update_postimage", 3)],
]
FEED = "order_id long, status string, amount double, _change_type string, _commit_version long"


def main() -> list[tuple[Any, ...]] | None:
    with local_spark() as spark, target("Orders", None) as t:

        def snapshot() -> Payload:
            table = spark.createDataFrame(SNAPSHOT, "order_id long, status string, amount double")
            return build_payload(table, max_payload_mb=None)  # published in one file

        def changes(rows: list[tuple[Any, ...]]) -> Callable[[], Payload]:
            return lambda: build_payload(spark.createDataFrame(rows, FEED), ChangeSet("order_id"))

        # The first run finds no data source and publishes; the others apply their slice.
        for rows in [[], *SLICES]:
            result = t.client.bootstrap(
                t.datasource, snapshot=snapshot, changes=changes(rows), state_dir=t.state_dir
            )
            print("published the snapshot" if result.published else result.update)
        return t.read("Extract") if t.read else None


if __name__ == "__main__":
    print(show(main()))

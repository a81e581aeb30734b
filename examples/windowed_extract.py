"""Windowed extract: delete rows older than a cutoff, then insert the newest window."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from _common import local_spark, show, target

from tabhyper_update import Delete, Insert, build_payload
from tabhyper_update import target as column

CUTOFF = datetime(2024, 1, 3, tzinfo=timezone.utc)


def main() -> list[tuple[Any, ...]] | None:
    start = {
        "Extract": (
            "event_time TIMESTAMP, value INTEGER",
            [
                "(TIMESTAMP '2024-01-01 00:00:00', 1)",
                "(TIMESTAMP '2024-01-02 12:00:00', 2)",
                "(TIMESTAMP '2024-01-03 00:00:00', 3)",
            ],
        )
    }
    with local_spark() as spark, target("Events", start) as t:
        window = spark.createDataFrame(
            [
                (datetime(2024, 1, 4, tzinfo=timezone.utc), 4),
                (datetime(2024, 1, 5, 6, tzinfo=timezone.utc), 5),
            ],
            "event_time timestamp, value int",
        )
        build_payload(window, table="new_window").upload(
            t.datasource, client=t.client, state_dir=t.state_dir
        ).apply(
            [
                Delete(target_table="Extract", condition=column("event_time") < CUTOFF),
                Insert(target_table="Extract", source_table="new_window"),
            ]
        )
        return t.read("Extract") if t.read else None


if __name__ == "__main__":
    print(show(main()))

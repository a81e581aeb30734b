"""Single-table append: insert new rows into the data source's one table."""

from __future__ import annotations

from typing import Any

from _common import local_spark, show, target

from tabhyper_update import Insert, build_payload


def main() -> list[tuple[Any, ...]] | None:
    start = {"Extract": ("id BIGINT, city TEXT", ["(1, 'Oslo')", "(2, 'Lima')"])}
    with local_spark() as spark, target("Cities", start) as t:
        new_rows = spark.createDataFrame([(3, "Pune"), (4, "Quito")], "id long, city string")
        build_payload(new_rows, table="new_rows").upload(
            t.datasource, client=t.client, state_dir=t.state_dir
        ).apply([Insert(target_table="Extract", source_table="new_rows")])
        return t.read("Extract") if t.read else None


if __name__ == "__main__":
    print(show(main()))

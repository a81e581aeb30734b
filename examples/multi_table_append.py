"""Multi-table append: one payload with two tables, each appended to its own target table."""

from __future__ import annotations

from typing import Any

from _common import local_spark, show, target

from tabhyper_update import Insert, build_payload


def main() -> dict[str, list[tuple[Any, ...]]] | None:
    start = {
        "Orders": ("order_id BIGINT, amount DOUBLE PRECISION", ["(1, 9.5)"]),
        "Returns": ("order_id BIGINT, reason TEXT", []),
    }
    with local_spark() as spark, target("Shop", start) as t:
        orders = spark.createDataFrame([(2, 20.0), (3, 30.5)], "order_id long, amount double")
        returns = spark.createDataFrame([(1, "damaged")], "order_id long, reason string")
        build_payload({"new_orders": orders, "new_returns": returns}).upload(
            t.datasource, client=t.client, state_dir=t.state_dir
        ).apply(
            [
                Insert(target_table="Orders", source_table="new_orders"),
                Insert(target_table="Returns", source_table="new_returns"),
            ]
        )
        if t.read is None:
            return None
        return {"Orders": t.read("Orders"), "Returns": t.read("Returns")}


if __name__ == "__main__":
    print(show(main()))

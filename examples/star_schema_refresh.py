"""Star-schema incremental refresh: replace the dimension tables, append the new facts."""

from __future__ import annotations

from typing import Any

from _common import local_spark, show, target

from tabhyper_update import Insert, Replace, build_payload


def main() -> dict[str, list[tuple[Any, ...]]] | None:
    start = {
        "Customers": ("customer_id BIGINT, name TEXT", ["(1, 'Ada')", "(2, 'Bo')"]),
        "Products": ("product_id BIGINT, title TEXT", ["(10, 'Pen')"]),
        "Sales": ("customer_id BIGINT, product_id BIGINT, qty INTEGER", ["(1, 10, 2)"]),
    }
    with local_spark() as spark, target("Sales star", start) as t:
        customers = spark.createDataFrame(
            [(1, "Ada L."), (2, "Bo"), (3, "Cy")], "customer_id long, name string"
        )
        products = spark.createDataFrame(
            [(10, "Pen"), (11, "Ink")], "product_id long, title string"
        )
        sales = spark.createDataFrame(
            [(3, 11, 5), (2, 10, 1)], "customer_id long, product_id long, qty int"
        )
        build_payload({"Customers": customers, "Products": products, "Sales": sales}).upload(
            t.datasource, client=t.client, state_dir=t.state_dir
        ).apply(
            [
                Replace(target_table="Customers", source_table="Customers"),
                Replace(target_table="Products", source_table="Products"),
                Insert(target_table="Sales", source_table="Sales"),
            ]
        )
        if t.read is None:
            return None
        return {name: t.read(name) for name in ("Customers", "Products", "Sales")}


if __name__ == "__main__":
    print(show(main()))

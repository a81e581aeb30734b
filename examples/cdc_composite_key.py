"""CDC on a composite key: inserts, updates and deletes from a Delta Change Data Feed."""

from __future__ import annotations

from typing import Any

from _common import local_spark, show, target

from tabhyper_update import ChangeSet, build_payload


def main() -> list[tuple[Any, ...]] | None:
    start = {
        "Extract": (
            "region TEXT NOT NULL, order_id BIGINT NOT NULL, status TEXT",
            ["('eu', 1, 'new')", "('eu', 2, 'new')", "('us', 1, 'new')"],
        )
    }
    changes = [
        ("eu", 1, "new", "update_preimage", 5),
        ("eu", 1, "shipped", "update_postimage", 5),
        ("eu", 2, "new", "delete", 6),
        ("us", 2, "new", "insert", 6),
        ("us", 2, "paid", "update_postimage", 7),
        ("us", 1, "new", "delete", 7),
        ("us", 1, "again", "insert", 8),
    ]
    with local_spark() as spark, target("Orders", start) as t:
        feed = spark.createDataFrame(
            changes,
            "region string, order_id long, status string, "
            "_change_type string, _commit_version long",
        )
        # Actions are derived: delete then upsert, keyed on (region, order_id).
        build_payload(
            feed,
            ChangeSet(["region", "order_id"], op_column="_change_type", order_by="_commit_version"),
        ).upload(t.datasource, client=t.client, state_dir=t.state_dir).apply()
        return t.read("Extract") if t.read else None


if __name__ == "__main__":
    print(show(main()))

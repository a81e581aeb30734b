"""Delete by constant: remove rows matching a condition, with no payload at all."""

from __future__ import annotations

from typing import Any

from _common import show, target

from tabhyper_update import ActionBatch, Delete
from tabhyper_update import target as column


def main() -> list[tuple[Any, ...]] | None:
    start = {
        "Extract": (
            "sku TEXT, product_name TEXT",
            ["('a', 'Lamp')", "('b', 'Chair DISCONTINUED')", "('c', 'Desk')"],
        )
    }
    with target("Products", start) as t:
        batch = ActionBatch(
            actions=[
                Delete(
                    target_table="Extract",
                    condition=column("product_name").contains("DISCONTINUED"),
                )
            ]
        )
        ref = t.client.datasource(t.datasource)
        t.client.update_data(ref, batch).wait(timeout=600)  # nothing to upload
        return t.read("Extract") if t.read else None


if __name__ == "__main__":
    print(show(main()))

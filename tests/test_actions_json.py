"""Each action and operator serialises to the exact JSON Tableau expects."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tabhyper_update import (
    Delete,
    Insert,
    Replace,
    Update,
    Upsert,
    keys_match,
    source,
    target,
)
from tabhyper_update.values.actions import ActionBatch
from tabhyper_update.values.conditions import Const, all_of, any_of

BATCHES = Path(__file__).resolve().parent.parent / "examples" / "batches"


def wire(batch: ActionBatch) -> Any:
    return json.loads(batch.to_json())


def test_single_table_append() -> None:
    batch = ActionBatch(actions=[Insert(target_table="Extract", source_table="new_rows")])
    assert wire(batch) == {
        "actions": [
            {
                "action": "insert",
                "target-schema": "Extract",
                "target-table": "Extract",
                "source-schema": "Extract",
                "source-table": "new_rows",
            }
        ]
    }


def test_multi_table_append() -> None:
    batch = ActionBatch(
        actions=[
            Insert(target_table="Orders", source_table="orders_new"),
            Insert(
                target_table="Returns",
                target_schema="public",
                source_table="returns_new",
                source_schema="staging",
            ),
        ]
    )
    assert wire(batch)["actions"] == [
        {
            "action": "insert",
            "target-schema": "Extract",
            "target-table": "Orders",
            "source-schema": "Extract",
            "source-table": "orders_new",
        },
        {
            "action": "insert",
            "target-schema": "public",
            "target-table": "Returns",
            "source-schema": "staging",
            "source-table": "returns_new",
        },
    ]


def test_star_schema_refresh_replaces_dimensions_and_inserts_facts() -> None:
    batch = ActionBatch(
        actions=[
            Replace(target_table="Customers", source_table="Customers"),
            Replace(target_table="Products", source_table="Products"),
            Insert(target_table="Sales", source_table="Sales"),
        ]
    )
    with open(BATCHES / "star_schema_refresh.json", encoding="utf-8") as f:
        assert wire(batch) == json.load(f)


def test_windowed_delete_by_datetime_then_insert() -> None:
    cutoff = datetime(2024, 1, 1, tzinfo=timezone.utc)
    batch = ActionBatch(
        actions=[
            Delete(target_table="Events", condition=target("event_time") < cutoff),
            Insert(target_table="Events", source_table="new_events"),
        ]
    )
    with open(BATCHES / "windowed_extract.json", encoding="utf-8") as f:
        assert wire(batch) == json.load(f)
    # No source table on the delete: nothing to upload for it.
    assert not batch.actions[0].reads_source
    assert "source-table" not in wire(batch)["actions"][0]


def test_cdc_on_two_column_key() -> None:
    key = keys_match("region", "order_id")
    batch = ActionBatch(
        actions=[
            Delete(target_table="Orders", source_table="deletes", condition=key),
            Upsert(target_table="Orders", source_table="upserts", condition=key),
        ]
    )
    with open(BATCHES / "cdc_composite_key.json", encoding="utf-8") as f:
        assert wire(batch) == json.load(f)


def test_update_on_key_with_one_column() -> None:
    batch = ActionBatch(
        actions=[Update(target_table="T", source_table="S", condition=keys_match("id"))]
    )
    assert wire(batch)["actions"][0] == {
        "action": "update",
        "target-schema": "Extract",
        "target-table": "T",
        "source-schema": "Extract",
        "source-table": "S",
        "condition": {"op": "eq", "target-col": "id", "source-col": "id"},
    }


def test_delete_with_string_contains() -> None:
    batch = ActionBatch(
        actions=[
            Delete(
                target_table="Extract", condition=target("product_name").contains("DISCONTINUED")
            )
        ]
    )
    with open(BATCHES / "delete_by_constant.json", encoding="utf-8") as f:
        assert wire(batch) == json.load(f)


@pytest.mark.parametrize(
    ("built", "expected"),
    [
        (target("a") == source("b"), {"op": "eq", "target-col": "a", "source-col": "b"}),
        (target("a") != source("b"), {"op": "neq", "target-col": "a", "source-col": "b"}),
        (target("a") > source("b"), {"op": "gt", "target-col": "a", "source-col": "b"}),
        (target("a") < source("b"), {"op": "lt", "target-col": "a", "source-col": "b"}),
        (target("a") >= source("b"), {"op": "gte", "target-col": "a", "source-col": "b"}),
        (target("a") <= source("b"), {"op": "lte", "target-col": "a", "source-col": "b"}),
        (target("a").is_(source("b")), {"op": "is", "target-col": "a", "source-col": "b"}),
        (target("a").contains(source("b")), {"op": "has", "target-col": "a", "source-col": "b"}),
        # A source column on the left flips the operator so the meaning is kept.
        (source("b") < target("a"), {"op": "gt", "target-col": "a", "source-col": "b"}),
        (source("b") >= target("a"), {"op": "lte", "target-col": "a", "source-col": "b"}),
        (source("b") == 3, {"op": "eq", "source-col": "b", "const": {"type": "integer", "v": 3}}),
        (
            target("flag") == True,
            {
                "op": "eq",
                "target-col": "flag",
                "const": {"type": "boolean", "v": "true"},
            },
        ),
        (
            target("x") != False,
            {
                "op": "neq",
                "target-col": "x",
                "const": {"type": "boolean", "v": "false"},
            },
        ),
        (
            target("x") >= 2.5,
            {"op": "gte", "target-col": "x", "const": {"type": "double", "v": 2.5}},
        ),
        (
            target("x") <= Decimal("10.25"),
            {"op": "lte", "target-col": "x", "const": {"type": "double", "v": 10.25}},
        ),
        (
            target("s") == "it's; --",
            {"op": "eq", "target-col": "s", "const": {"type": "string", "v": "it's; --"}},
        ),
        (
            target("x").is_(None),
            {"op": "is", "target-col": "x", "const": {"type": "string", "v": None}},
        ),
        (
            target("x").is_null(type="integer"),
            {"op": "is", "target-col": "x", "const": {"type": "integer", "v": None}},
        ),
        (
            target("x").is_(None, type="double"),
            {"op": "is", "target-col": "x", "const": {"type": "double", "v": None}},
        ),
    ],
)
def test_every_operator_serialises_exactly(built: Any, expected: dict[str, Any]) -> None:
    assert built.to_dict() == expected


def test_datetime_constants_are_sent_in_utc_with_z() -> None:
    plus_one = timezone(timedelta(hours=1))
    assert Const.of(datetime(2007, 12, 3, 10, 15, 30, tzinfo=plus_one)).to_dict() == {
        "type": "datetime",
        "v": "2007-12-03T09:15:30Z",
    }
    # A naive datetime means UTC.
    assert Const.of(datetime(2007, 12, 3, 10, 15, 30)).v == "2007-12-03T10:15:30Z"
    assert Const.of(datetime(2007, 12, 3, 10, 15, 30, 120000)).v == "2007-12-03T10:15:30.12Z"
    assert Const.of(date(2024, 2, 29)).v == "2024-02-29T00:00:00Z"
    assert Const.of(datetime(1, 1, 1)).v == "0001-01-01T00:00:00Z"


def test_decimal_that_a_double_cannot_hold_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be sent exactly"):
        Const.of(Decimal("12345678901234567890.123"))


def test_unsupported_python_constant_is_refused() -> None:
    with pytest.raises(TypeError, match="bytes"):
        Const.of(b"raw")
    with pytest.raises(ValueError, match="finite"):
        Const.of(float("nan"))


def test_and_or_nest_and_flatten() -> None:
    a = target("a") == source("a")
    b = target("b") == source("b")
    c = target("c") > 1
    assert ((a & b) & c).to_dict() == {"op": "and", "args": [a.to_dict(), b.to_dict(), c.to_dict()]}
    assert ((a & b) | c).to_dict() == {
        "op": "or",
        "args": [{"op": "and", "args": [a.to_dict(), b.to_dict()]}, c.to_dict()],
    }
    assert (a | (b | c)).to_dict()["args"] == [a.to_dict(), b.to_dict(), c.to_dict()]
    deep = all_of(any_of(a, all_of(b, any_of(c, a))), b)
    assert (
        ActionBatch.from_json(
            ActionBatch(
                actions=[Update(target_table="t", source_table="s", condition=deep)]
            ).to_json()
        )
        .actions[0]
        .condition
        == deep
    )


def test_python_and_keyword_is_refused() -> None:
    with pytest.raises(TypeError, match=r"use & and \|"):
        (target("a") == source("a")) and (target("b") == source("b"))


def test_keys_match_with_renamed_source_column() -> None:
    assert keys_match(("id", "src_id")).to_dict() == {
        "op": "eq",
        "target-col": "id",
        "source-col": "src_id",
    }
    with pytest.raises(ValueError, match="at least one key"):
        keys_match()


def test_explicit_every_row_condition_is_emitted_only_when_asked() -> None:
    batch = ActionBatch(actions=[Delete(target_table="Extract", condition=True)])
    assert wire(batch)["actions"][0]["condition"] is True


def test_json_round_trip_is_exact_for_hand_written_json() -> None:
    text = json.dumps(
        {
            "actions": [
                {
                    "action": "update",
                    "target-schema": "Extract",
                    "target-table": "T",
                    "source-schema": "Extract",
                    "source-table": "S",
                    "condition": {
                        "op": "and",
                        "args": [
                            {"op": "eq", "target-col": "id", "source-col": "id"},
                            {
                                "op": "gte",
                                "target-col": "ts",
                                "const": {"type": "datetime", "v": "2024-01-01T00:00:00+0100"},
                            },
                            {
                                "op": "eq",
                                "source-col": "ok",
                                "const": {"type": "boolean", "v": "TRUE"},
                            },
                        ],
                    },
                }
            ]
        }
    )
    assert json.loads(ActionBatch.from_json(text).to_json()) == json.loads(text)


def test_missing_schemas_are_filled_with_the_default() -> None:
    batch = ActionBatch.from_json(
        '{"actions": [{"action": "insert", "target-table": "T", "source-table": "S"}]}'
    )
    assert wire(batch)["actions"][0]["target-schema"] == "Extract"
    assert wire(batch)["actions"][0]["source-schema"] == "Extract"


def test_coerce_accepts_lists_and_text() -> None:
    ins = Insert(target_table="T", source_table="S")
    assert ActionBatch.coerce([ins]) == ActionBatch(actions=[ins])
    assert ActionBatch.coerce(ActionBatch(actions=[ins]).to_json()).actions == [ins]
    assert ActionBatch.coerce({"actions": [ins.to_dict()]}).actions == [ins]
    assert ActionBatch(actions=[ins]).reads_source
    assert not ActionBatch(
        actions=[Delete(target_table="T", condition=target("a") == 1)]
    ).reads_source

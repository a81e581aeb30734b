"""A corpus of batches Tableau would refuse: each is refused with a message naming the problem."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tabhyper_update.values.actions import ActionBatch
from tabhyper_update.values.errors import InvalidActionBatchError


def ins(**extra: Any) -> dict[str, Any]:
    return {"action": "insert", "target-table": "T", "source-table": "S", **extra}


def upd(condition: Any, **extra: Any) -> dict[str, Any]:
    return {
        "action": "update",
        "target-table": "T",
        "source-table": "S",
        "condition": condition,
        **extra,
    }


def dele(condition: Any, **extra: Any) -> dict[str, Any]:
    return {"action": "delete", "target-table": "T", "condition": condition, **extra}


KEY = {"op": "eq", "target-col": "id", "source-col": "id"}


def leaf(op: str, ctype: str, v: Any) -> dict[str, Any]:
    return {"op": op, "target-col": "c", "const": {"type": ctype, "v": v}}


# (case id, document, JSON path of the problem, words the message must contain)
CASES: list[tuple[str, Any, str, str]] = [
    ("not-an-object", 42, "$", "valid dictionary"),
    ("empty-batch", {"actions": []}, "$.actions", "at least one action"),
    ("empty-list", [], "$.actions", "at least one action"),
    ("no-actions-key", {}, "$", "missing required field 'actions'"),
    ("unknown-top-level-key", {"actions": [ins()], "extra": 1}, "$", "unknown key 'extra'"),
    ("action-not-object", {"actions": ["insert"]}, "$.actions[0]", "must be a JSON object"),
    (
        "missing-action",
        {"actions": [{"target-table": "T"}]},
        "$.actions[0]",
        "missing required field 'action'",
    ),
    (
        "unknown-action",
        {"actions": [{"action": "merge", "target-table": "T"}]},
        "$.actions[0]",
        "unknown action 'merge'",
    ),
    (
        "missing-target-table",
        {"actions": [{"action": "insert", "source-table": "S"}]},
        "$.actions[0]",
        "missing required field 'target-table'",
    ),
    (
        "empty-target-table",
        {"actions": [ins(**{"target-table": ""})]},
        "$.actions[0].target-table",
        "at least 1 character",
    ),
    (
        "target-table-number",
        {"actions": [ins(**{"target-table": 5})]},
        "$.actions[0].target-table",
        "valid string",
    ),
    (
        "unknown-action-key",
        {"actions": [ins(columns=["a"])]},
        "$.actions[0]",
        "unknown key 'columns'",
    ),
    (
        "snake-case-key",
        {"actions": [ins(target_table="T")]},
        "$.actions[0]",
        "unknown key 'target_table'",
    ),
    (
        "insert-without-source",
        {"actions": [{"action": "insert", "target-table": "T"}]},
        "$.actions[0]",
        "'source-table' is required",
    ),
    (
        "replace-without-source",
        {"actions": [{"action": "replace", "target-table": "T"}]},
        "$.actions[0]",
        "replace reads a payload table",
    ),
    (
        "upsert-without-source",
        {"actions": [{"action": "upsert", "target-table": "T", "condition": KEY}]},
        "$.actions[0]",
        "upsert reads a payload table",
    ),
    (
        "insert-with-condition",
        {"actions": [ins(condition=KEY)]},
        "$.actions[0]",
        "insert takes no 'condition'",
    ),
    (
        "replace-with-condition",
        {
            "actions": [
                {"action": "replace", "target-table": "T", "source-table": "S", "condition": KEY}
            ]
        },
        "$.actions[0]",
        "replace takes no 'condition'",
    ),
    (
        "update-without-condition",
        {"actions": [{"action": "update", "target-table": "T", "source-table": "S"}]},
        "$.actions[0]",
        "update needs a 'condition'",
    ),
    (
        "delete-without-condition",
        {"actions": [{"action": "delete", "target-table": "T"}]},
        "$.actions[0]",
        "delete needs a 'condition'",
    ),
    (
        "source-schema-without-table",
        {"actions": [dele(leaf("eq", "integer", 1), **{"source-schema": "Extract"})]},
        "$.actions[0]",
        "'source-schema' but no 'source-table'",
    ),
    (
        "delete-by-constant-reads-source",
        {"actions": [dele(KEY)]},
        "$.actions[0]",
        "condition reads source column(s) 'id'",
    ),
    (
        "condition-not-object",
        {"actions": [upd("id = id")]},
        "$.actions[0].condition",
        "must be an object",
    ),
    (
        "condition-without-op",
        {"actions": [upd({"target-col": "a", "source-col": "a"})]},
        "$.actions[0].condition",
        "missing required field 'op'",
    ),
    (
        "unknown-op",
        {"actions": [upd({"op": "like", "target-col": "a", "source-col": "a"})]},
        "$.actions[0].condition.op",
        "'eq', 'neq'",
    ),
    (
        "two-right-sides",
        {
            "actions": [
                upd(
                    {
                        "op": "eq",
                        "target-col": "a",
                        "source-col": "a",
                        "const": {"type": "integer", "v": 1},
                    }
                )
            ]
        },
        "$.actions[0].condition",
        "exactly one left and one right side",
    ),
    (
        "no-right-side",
        {"actions": [upd({"op": "eq", "target-col": "a"})]},
        "$.actions[0].condition",
        "exactly one left and one right side",
    ),
    (
        "const-only",
        {"actions": [upd({"op": "eq", "const": {"type": "integer", "v": 1}})]},
        "$.actions[0].condition",
        "exactly one left and one right side",
    ),
    (
        "unknown-leaf-key",
        {"actions": [upd({**KEY, "negate": True})]},
        "$.actions[0].condition",
        "unknown key 'negate'",
    ),
    (
        "empty-column-name",
        {"actions": [upd({"op": "eq", "target-col": "", "source-col": "a"})]},
        "$.actions[0].condition.target-col",
        "at least 1 character",
    ),
    (
        "and-without-args",
        {"actions": [upd({"op": "and"})]},
        "$.actions[0].condition",
        "missing required field 'args'",
    ),
    (
        "and-empty-args",
        {"actions": [upd({"op": "and", "args": []})]},
        "$.actions[0].condition.args",
        "at least one condition",
    ),
    (
        "or-args-not-list",
        {"actions": [upd({"op": "or", "args": KEY})]},
        "$.actions[0].condition.args",
        "valid list",
    ),
    (
        "and-in-docs-style-without-args",
        {"actions": [upd({"op": "and", "list": [KEY]})]},
        "$.actions[0].condition",
        "unknown key 'list'",
    ),
    (
        "nested-bad-leaf",
        {
            "actions": [
                upd(
                    {
                        "op": "and",
                        "args": [KEY, {"op": "or", "args": [{"op": "gt", "target-col": "a"}]}],
                    }
                )
            ]
        },
        "$.actions[0].condition.args[1].args[0]",
        "exactly one left and one right side",
    ),
    (
        "has-integer",
        {"actions": [upd(leaf("has", "integer", 1))]},
        "$.actions[0].condition",
        "'has' tests substring containment and takes a string constant",
    ),
    (
        "integer-abc",
        {"actions": [upd(leaf("eq", "integer", "abc"))]},
        "$.actions[0].condition.const",
        "integer constant must be a whole number, got 'abc'",
    ),
    (
        "integer-float",
        {"actions": [upd(leaf("eq", "integer", 1.5))]},
        "$.actions[0].condition.const",
        "whole number",
    ),
    (
        "integer-bool",
        {"actions": [upd(leaf("eq", "integer", True))]},
        "$.actions[0].condition.const",
        "whole number",
    ),
    (
        "integer-overflow",
        {"actions": [upd(leaf("eq", "integer", 2**63))]},
        "$.actions[0].condition.const",
        "does not fit in 64 bits",
    ),
    (
        "double-text",
        {"actions": [upd(leaf("eq", "double", "ten"))]},
        "$.actions[0].condition.const",
        "double constant must be a number",
    ),
    (
        "double-infinite",
        {"actions": [upd(leaf("eq", "double", "inf"))]},
        "$.actions[0].condition.const",
        "finite",
    ),
    (
        "boolean-yes",
        {"actions": [upd(leaf("eq", "boolean", "yes"))]},
        "$.actions[0].condition.const",
        "boolean constant must be true or false",
    ),
    (
        "string-number",
        {"actions": [upd(leaf("eq", "string", 5))]},
        "$.actions[0].condition.const",
        "string constant must be a string",
    ),
    (
        "datetime-no-offset",
        {"actions": [upd(leaf("lt", "datetime", "2024-01-01T00:00:00"))]},
        "$.actions[0].condition.const",
        "with an offset",
    ),
    (
        "datetime-garbage",
        {"actions": [upd(leaf("lt", "datetime", "yesterday"))]},
        "$.actions[0].condition.const",
        "not an ISO-8601 datetime",
    ),
    (
        "datetime-feb-30",
        {"actions": [upd(leaf("lt", "datetime", "2023-02-30T00:00:00Z"))]},
        "$.actions[0].condition.const",
        "not a valid datetime",
    ),
    (
        "unknown-const-type",
        {"actions": [upd(leaf("eq", "date", "2024-01-01"))]},
        "$.actions[0].condition.const.type",
        "'boolean', 'integer'",
    ),
    (
        "const-missing-v",
        {"actions": [upd({"op": "eq", "target-col": "c", "const": {"type": "integer"}})]},
        "$.actions[0].condition.const",
        "missing required field 'v'",
    ),
    (
        "const-extra-key",
        {
            "actions": [
                upd(
                    {
                        "op": "eq",
                        "target-col": "c",
                        "const": {"type": "integer", "v": 1, "unit": "s"},
                    }
                )
            ]
        },
        "$.actions[0].condition.const",
        "unknown key 'unit'",
    ),
    (
        "eq-null",
        {"actions": [upd(leaf("eq", "string", None))]},
        "$.actions[0].condition",
        "use 'is' for null-safe equality",
    ),
    ("condition-false", {"actions": [dele(False)]}, "$.actions[0].condition", "must be an object"),
    (
        "second-action-bad",
        {"actions": [ins(), {"action": "delete", "target-table": "T"}]},
        "$.actions[1]",
        "delete needs a 'condition'",
    ),
]


@pytest.mark.parametrize(
    ("doc", "path", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_invalid_batch_is_refused_naming_the_problem(doc: Any, path: str, words: str) -> None:
    with pytest.raises(InvalidActionBatchError) as caught:
        ActionBatch.from_json(json.dumps(doc))
    problems = caught.value.problems
    assert any(p.path == path and words in p.message for p in problems), problems
    assert words in str(caught.value)


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30


def test_malformed_json_text_is_refused() -> None:
    with pytest.raises(InvalidActionBatchError, match="not valid JSON"):
        ActionBatch.from_json('{"actions": [')


def test_several_problems_are_all_reported() -> None:
    doc = {
        "actions": [
            {"action": "insert", "target-table": "T"},
            {"action": "merge", "target-table": "T"},
        ]
    }
    problems = ActionBatch.problems(doc)
    assert [p.path for p in problems] == ["$.actions[0]", "$.actions[1]"]


def test_builders_refuse_invalid_shapes_too() -> None:
    from tabhyper_update import Insert, Update, source, target

    with pytest.raises(ValueError, match="update needs a 'condition'"):
        Update(target_table="T", source_table="S")
    with pytest.raises(ValueError, match="insert takes no 'condition'"):
        Insert(target_table="T", source_table="S", condition=target("a") == source("a"))
    with pytest.raises(TypeError, match="source column or a constant"):
        target("a") == target("b")  # noqa: B015
    with pytest.raises(TypeError, match="'has' takes a string"):
        target("a").contains(5)  # type: ignore[arg-type]

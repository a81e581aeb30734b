"""Random valid batches survive JSON and validate against the published schema."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from tabhyper_update import Delete, Insert, Replace, Update, Upsert
from tabhyper_update.cli import action_batch_schema
from tabhyper_update.values.actions import ActionBatch
from tabhyper_update.values.conditions import And, Comparison, Const, Or

names = st.text(min_size=1, max_size=12)

consts = st.one_of(
    st.booleans().map(Const.of),
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(Const.of),
    st.floats(allow_nan=False, allow_infinity=False).map(Const.of),
    st.text(max_size=20).map(Const.of),
    st.datetimes(
        timezones=st.just(timezone.utc),
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
    ).map(Const.of),
)


@st.composite
def leaves(draw: st.DrawFn, with_source: bool) -> Comparison:
    op = draw(st.sampled_from(["eq", "neq", "gt", "lt", "gte", "lte", "is", "has"]))
    if with_source and draw(st.booleans()):
        return Comparison(op=op, target_col=draw(names), source_col=draw(names))
    const = draw(consts)
    if op == "has":
        const = Const.of(draw(st.text(max_size=10)))
    side = "source_col" if with_source and draw(st.booleans()) else "target_col"
    return Comparison(op=op, const=const, **{side: draw(names)})


def conditions(with_source: bool) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves(with_source),
        lambda children: st.one_of(
            st.lists(children, min_size=1, max_size=3).map(lambda a: And(args=a)),
            st.lists(children, min_size=1, max_size=3).map(lambda a: Or(args=a)),
        ),
        max_leaves=8,
    )


@st.composite
def actions(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["insert", "update", "delete", "replace", "upsert"]))
    common = {"target_table": draw(names), "target_schema": draw(names)}
    src = {"source_table": draw(names), "source_schema": draw(names)}
    if kind == "insert":
        return Insert(**common, **src)
    if kind == "replace":
        return Replace(**common, **src)
    if kind == "delete" and draw(st.booleans()):
        return Delete(**common, condition=draw(conditions(with_source=False)))
    cls = {"update": Update, "delete": Delete, "upsert": Upsert}[kind]
    return cls(**common, **src, condition=draw(conditions(with_source=True)))


batches = st.lists(actions(), min_size=1, max_size=5).map(lambda a: ActionBatch(actions=a))
VALIDATOR = jsonschema.Draft202012Validator(action_batch_schema())


@settings(max_examples=200, deadline=None)
@given(batches)
def test_json_round_trip_is_exact(batch: ActionBatch) -> None:
    text = batch.to_json()
    again = ActionBatch.from_json(text)
    assert again == batch
    assert again.to_json() == text
    assert again.canonical_json() == batch.canonical_json()


@settings(max_examples=100, deadline=None)
@given(batches)
def test_every_valid_batch_satisfies_the_schema(batch: ActionBatch) -> None:
    VALIDATOR.validate(json.loads(batch.to_json()))

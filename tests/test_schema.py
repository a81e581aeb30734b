"""The checked-in JSON Schema matches the models, and every example batch satisfies it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tabhyper_update.cli import schema_text
from tabhyper_update.values.actions import ActionBatch

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_FILE = ROOT / "schemas" / "action_batch.schema.json"


def example_batches() -> list[Path]:
    return sorted((ROOT / "examples").rglob("*.json"))


def test_checked_in_schema_has_not_drifted() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), (
        "schemas/action_batch.schema.json is stale: run "
        "`tabhyper-update schema -o schemas/action_batch.schema.json`"
    )


def test_there_are_example_batches() -> None:
    assert len(example_batches()) >= 4


@pytest.mark.parametrize("path", example_batches(), ids=lambda p: p.name)
def test_example_batch_satisfies_schema_and_models(path: Path) -> None:
    doc: Any = json.loads(path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text())).validate(doc)
    assert json.loads(ActionBatch.from_dict(doc).to_json()) == doc


@pytest.mark.parametrize(
    "doc",
    [
        {"actions": []},
        {"actions": [{"action": "insert", "target-table": "T"}]},
        {"actions": [{"action": "update", "target-table": "T", "source-table": "S"}]},
        {
            "actions": [
                {
                    "action": "insert",
                    "target-table": "T",
                    "source-table": "S",
                    "condition": {"op": "eq", "target-col": "a", "source-col": "a"},
                }
            ]
        },
        {
            "actions": [
                {
                    "action": "delete",
                    "target-table": "T",
                    "condition": {"op": "like", "target-col": "a", "source-col": "a"},
                }
            ]
        },
    ],
)
def test_schema_refuses_what_the_models_refuse(doc: Any) -> None:
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    assert not validator.is_valid(doc)
    assert ActionBatch.problems(doc)

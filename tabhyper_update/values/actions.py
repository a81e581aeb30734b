"""Action batches: what the server does with an uploaded payload.

Each action names a target table (in the published data source) and, where it reads one, a
source table (in the payload)::

    from tabhyper_update import ActionBatch, Delete, Insert, Upsert, keys_match, target

    batch = ActionBatch(actions=[
        Delete(target_table="Extract", condition=target("ts") < cutoff),
        Insert(target_table="Extract", source_table="new_rows"),
        Upsert(target_table="Extract", source_table="changes", condition=keys_match("id")),
    ])
    batch.to_json()   # exactly the JSON Tableau expects, keys in kebab-case

Schemas default to ``"Extract"`` (the schema the payload builder writes and the one most
published extracts use) and are always sent: an omitted schema is a known cause of failed
jobs with empty notes. :meth:`ActionBatch.from_json` fills the same defaults, so JSON written
by :meth:`ActionBatch.to_json` reads back to an equal batch and writes out unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, TypeAlias

from pydantic import (
    Discriminator,
    Field,
    GetJsonSchemaHandler,
    PrivateAttr,
    Tag,
    ValidationError,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from .conditions import (
    MAX_CONDITION_DEPTH,
    And,
    Comparison,
    Or,
    _Model,
    all_of,
    condition_columns,
    condition_depth,
    keys_match,
    source,
    target,
)
from .errors import InvalidActionBatchError, InvalidArgumentError, Problem
from .problems import ACTION_NAMES, problems_from

__all__ = [
    "ACTION_NAMES",
    "DEFAULT_SCHEMA",
    "DEFAULT_TABLE",
    "Action",
    "ActionBatch",
    "BatchLike",
    "BookkeepingRole",
    "Delete",
    "Insert",
    "Replace",
    "Update",
    "Upsert",
    "bookkeeping_role",
    "position_guard",
    "positions_record",
    "wire_problems",
]

#: The SDK's own actions in a guarded change set's batch: the ``"guard"`` (an update that
#: fails a stale batch) and the ``"positions"`` record (each touched key's position).
BookkeepingRole: TypeAlias = Literal["guard", "positions"]

#: The schema and the table a published extract keeps its rows in, by Tableau's convention
#: (``Extract.Extract``): the defaults of a payload's schema and of derived actions' target.
DEFAULT_SCHEMA = "Extract"
DEFAULT_TABLE = "Extract"

#: What a function taking an action batch accepts: a batch, a list of actions (models or
#: parsed JSON), a parsed JSON object, or JSON text (read by :meth:`ActionBatch.from_json`).
BatchLike: TypeAlias = "ActionBatch | Iterable[Any] | Mapping[str, Any] | str | bytes"

ActionCondition: TypeAlias = Annotated[
    Annotated[Comparison, Tag("comparison")]
    | Annotated[And, Tag("and")]
    | Annotated[Or, Tag("or")]
    | Annotated[Literal[True], Tag("true")],
    Discriminator(
        lambda v: (
            "true"
            if v is True
            else (
                v.get("op")
                if isinstance(v, dict) and v.get("op") in ("and", "or")
                else getattr(v, "op", None)
                if isinstance(v, (And, Or))
                else "comparison"
                if isinstance(v, (dict, Comparison))
                else None
            )
        ),
        custom_error_type="invalid_condition",
        custom_error_message="a condition must be an object with an 'op' (or true for every row)",
    ),
]


class _Action(_Model):
    """Fields shared by every action; subclasses fix ``action`` and what it needs."""

    _reads_source: ClassVar[Literal["required", "optional"]] = "required"
    _condition_rule: ClassVar[Literal["required", "forbidden"]] = "required"

    action: str
    target_schema: str = Field(default=DEFAULT_SCHEMA, alias="target-schema", min_length=1)
    target_table: str = Field(alias="target-table", min_length=1)
    source_schema: str | None = Field(default=None, alias="source-schema", min_length=1)
    source_table: str | None = Field(default=None, alias="source-table", min_length=1)
    condition: ActionCondition | None = None
    #: Set where the SDK makes one of its own bookkeeping actions (never on the wire).
    _role: BookkeepingRole | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _default_source_schema(cls, data: Any) -> Any:
        if isinstance(data, dict):
            has_table = data.get("source-table") is not None or data.get("source_table") is not None
            has_schema = "source-schema" in data or "source_schema" in data
            if has_table and not has_schema:
                data = {**data, "source-schema": DEFAULT_SCHEMA}
        return data

    @model_validator(mode="after")
    def _check_shape(self) -> _Action:
        # Each rule of an action's shape: whether the action breaks it, and what it says.
        rules = (
            (
                self._reads_source == "required" and self.source_table is None,
                "reads a payload table: 'source-table' is required",
            ),
            (
                self.source_table is None and self.source_schema is not None,
                "has a 'source-schema' but no 'source-table'",
            ),
            (
                self._condition_rule == "required" and self.condition is None,
                "needs a 'condition' that selects the target rows",
            ),
            (
                self._condition_rule == "forbidden" and self.condition is not None,
                "takes no 'condition' (it applies to every source row)",
            ),
        )
        for broken, says in rules:
            if broken:
                raise InvalidArgumentError(f"{self.action} {says}")
        if self.source_table is None and self.condition is not None and self.condition is not True:
            _, sources = condition_columns(self.condition)
            if sources:
                cols = ", ".join(map(repr, sorted(sources)))
                raise InvalidArgumentError(
                    f"{self.action} has no 'source-table' but its condition reads source "
                    f"column(s) {cols}"
                )
        return self

    @property
    def reads_source(self) -> bool:
        """Whether this action reads a payload table (and so needs an upload)."""
        return self.source_table is not None

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # The per-action rules of _check_shape, stated in the schema too.
        schema = handler.resolve_ref_schema(handler(core_schema))
        required = ["action", "target-table"]
        if cls._reads_source == "required":
            required.append("source-table")
        if cls._condition_rule == "required":
            required.append("condition")
        else:
            schema["properties"].pop("condition", None)
        schema["required"] = required
        return schema


class Insert(_Action):
    """Append every row of the source table; columns are matched by name."""

    _condition_rule = "forbidden"
    action: Literal["insert"] = "insert"


class Update(_Action):
    """Set the source's column values on the target rows its condition matches."""

    action: Literal["update"] = "update"


class Delete(_Action):
    """Delete the target rows the condition matches (source table optional)."""

    _reads_source = "optional"
    action: Literal["delete"] = "delete"


class Replace(_Action):
    """Delete every target row, then insert the source (names and types must match)."""

    _condition_rule = "forbidden"
    action: Literal["replace"] = "replace"


class Upsert(_Action):
    """Update matching target rows, then insert the source rows that matched none."""

    action: Literal["upsert"] = "upsert"


Action: TypeAlias = Annotated[
    Annotated[Insert, Tag("insert")]
    | Annotated[Update, Tag("update")]
    | Annotated[Delete, Tag("delete")]
    | Annotated[Replace, Tag("replace")]
    | Annotated[Upsert, Tag("upsert")],
    Discriminator(
        lambda v: v.get("action") if isinstance(v, dict) else getattr(v, "action", None),
        custom_error_type="invalid_action",
        custom_error_message="each action needs an 'action' key: "
        "insert, update, delete, replace or upsert",
    ),
]


class ActionBatch(_Model):
    """An ordered list of actions, applied by the server in one transaction.

    >>> ActionBatch(actions=[Insert(target_table="Extract", source_table="new_rows")]).to_dict()
    {'actions': [{'target-schema': 'Extract', 'target-table': 'Extract', \
'source-schema': 'Extract', 'source-table': 'new_rows', 'action': 'insert'}]}
    """

    actions: list[Action] = Field(min_length=1)

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def reads_source(self) -> bool:
        """Whether any action reads a payload table (otherwise no upload is needed)."""
        return any(a.reads_source for a in self.actions)

    def to_json(self, *, indent: int | None = None) -> str:
        """The request body Tableau expects, as JSON text."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def canonical_json(self) -> str:
        """A stable text of the batch (sorted keys, no spaces), e.g. for idempotency keys."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> ActionBatch:
        """Read a batch from JSON text exactly as Tableau takes it: an object with
        ``actions`` and kebab-case keys (what ``schemas/`` describes); every problem is
        reported with its JSON path. The one reader of JSON text: the command line and the
        fake server read with it too. (Python values go through :meth:`from_dict`.)"""
        try:
            data = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise InvalidActionBatchError([Problem("$", f"not valid JSON: {err}")]) from None
        except RecursionError:
            raise InvalidActionBatchError(
                [
                    Problem(
                        "$",
                        f"nested too deeply to read (conditions nest at most "
                        f"{MAX_CONDITION_DEPTH} levels)",
                    )
                ]
            ) from None
        problems = wire_problems(data)
        if problems:
            # Every problem at once: what the wire format forbids, then what the batch
            # would still lack were it written the wire's way.
            problems += [p for p in cls.problems(data) if p not in problems]
            raise InvalidActionBatchError(problems)
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: object) -> ActionBatch:
        """Read a batch from parsed JSON (a dict with ``actions``, or a bare list)."""
        if isinstance(data, list):
            data = {"actions": data}
        if isinstance(data, dict) and isinstance(data.get("actions"), list):
            for i, action in enumerate(data["actions"]):
                condition = action.get("condition") if isinstance(action, dict) else None
                if condition_depth(condition) > MAX_CONDITION_DEPTH:
                    raise InvalidActionBatchError(
                        [
                            Problem(
                                f"$.actions[{i}].condition",
                                f"conditions nest deeper than {MAX_CONDITION_DEPTH} levels",
                            )
                        ]
                    )
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            raise InvalidActionBatchError(problems_from(err)) from None

    @classmethod
    def coerce(cls, value: BatchLike) -> ActionBatch:
        """Accept a batch, a list of actions, parsed JSON or JSON text."""
        if isinstance(value, ActionBatch):
            return value
        if isinstance(value, (str, bytes)):
            return cls.from_json(value)
        if isinstance(value, Mapping):
            return cls.from_dict(dict(value))
        items = list(value)
        return cls.from_dict([a.to_dict() if isinstance(a, _Model) else a for a in items])

    @classmethod
    def problems(cls, data: object) -> list[Problem]:
        """Every problem in parsed JSON, or an empty list when it is a valid batch."""
        try:
            cls.from_dict(data)
        except InvalidActionBatchError as err:
            return err.problems
        return []


_WIRE_NAMES = {
    "target_table": "target-table",
    "target_schema": "target-schema",
    "source_table": "source-table",
    "source_schema": "source-schema",
    "target_col": "target-col",
    "source_col": "source-col",
}


def wire_problems(data: object) -> list[Problem]:
    """Where parsed JSON departs from Tableau's wire format in ways :meth:`ActionBatch.from_dict`
    forgives Python values: a bare list instead of ``{"actions": [...]}``, snake_case
    instead of kebab-case."""
    if isinstance(data, list):
        return [Problem("$", 'a batch is an object with "actions": [...], not a bare list')]
    problems: list[Problem] = []
    stack: list[tuple[object, str]] = [(data, "$")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                where = f"{path}.{key}"
                if key in _WIRE_NAMES:
                    problems.append(
                        Problem(where, f"'{key}' is not a wire name: write '{_WIRE_NAMES[key]}'")
                    )
                stack.append((value, where))
        elif isinstance(node, list):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node))
    return sorted(problems, key=lambda p: p.path)


def position_guard(
    key: Sequence[str],
    position: str,
    *,
    target_schema: str,
    target_table: str,
    source_schema: str,
    guard_table: str,
) -> Update:
    """The guard of a change set's update: an update of the data source's positions table
    (``target_table``) from each touched key's position (``guarded`` NULL), matching the
    keys that hold a later position. None match: it changes nothing. One does: it would set
    that key's NOT NULL ``guarded`` column to NULL, which Hyper refuses, failing the whole
    atomic batch before any change. It rests on NOT NULL alone (never on how a key matched
    twice is treated)."""
    guard = Update(
        target_schema=target_schema,
        target_table=target_table,
        source_schema=source_schema,
        source_table=guard_table,
        condition=all_of(keys_match(*key), target(position) > source(position)),
    )
    guard._role = "guard"
    return guard


def positions_record(
    key: Sequence[str],
    *,
    target_schema: str,
    target_table: str,
    source_schema: str,
    positions_table: str,
) -> Upsert:
    """The record of a guarded change set's positions: every touched key's position (its
    deleted keys' included) upserted into the data source's positions table, which the
    next batch's guard reads."""
    record = Upsert(
        target_schema=target_schema,
        target_table=target_table,
        source_schema=source_schema,
        source_table=positions_table,
        condition=keys_match(*key),
    )
    record._role = "positions"
    return record


def bookkeeping_role(action: object) -> BookkeepingRole | None:
    """Which of the SDK's bookkeeping actions ``action`` is (``None``: a change of the
    user's rows). Known from where the action was made, never from a table's name, which a
    user's own table can share."""
    return getattr(action, "_role", None) if isinstance(action, _Action) else None

"""Which data source and table an update goes to: the target named (or the environment's
``TABLEAU_DATASOURCE``), and the table of a change set's derived actions, checked before
anything is sent."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..rest.refs import DataSourceRef
from ..rest.session import RestSession
from ..values.actions import DEFAULT_SCHEMA, DEFAULT_TABLE, ActionBatch, Replace
from ..values.errors import ConfigurationError, InvalidArgumentError, PayloadError
from ..values.names import is_name

if TYPE_CHECKING:
    from ..values.parts import PayloadLike

__all__ = [
    "check_target",
    "derived_target",
    "refuse_replace_from_nothing",
    "resolve_target",
    "target_name",
]


def resolve_target(
    client: RestSession,
    target: DataSourceRef | str | None,
    env: Mapping[str, str] | None = None,
) -> DataSourceRef:
    """A data source reference from ``target`` or ``TABLEAU_DATASOURCE`` (``TABLEAU_PROJECT``,
    ``TABLEAU_CONNECTION`` optional)."""
    if isinstance(target, DataSourceRef):
        return target
    e = os.environ if env is None else env
    name = target_name(target, e)
    return client.datasource(
        name,
        project=e.get("TABLEAU_PROJECT") or None,
        connection=e.get("TABLEAU_CONNECTION") or None,
    )


def target_name(target: str | None, env: Mapping[str, str]) -> str:
    """The data source's name or LUID: ``target``, else ``TABLEAU_DATASOURCE``; refused when
    neither is there (checked before any request)."""
    name = target or env.get("TABLEAU_DATASOURCE")
    if not name:
        raise ConfigurationError(
            "no target data source: pass one to upload() or set TABLEAU_DATASOURCE"
        )
    return name


def refuse_replace_from_nothing(batch: ActionBatch) -> None:
    """A replace from an empty payload would empty its target: never done by omission."""
    for action in batch.actions:
        if isinstance(action, Replace):
            raise PayloadError(
                f"the payload holds no rows, so replacing table {action.target_table!r} from it "
                "would empty that table; the SDK does not do that by omission. Skip the update "
                "when the source is empty, or empty the table on purpose with "
                "Delete(target_table=..., condition=...)"
            )


def derived_target(
    payload: PayloadLike,
    actions: ActionBatch | None,
    target_table: str | None,
    target_schema: str | None,
) -> dict[str, str]:
    """The target of a change set's derived actions, checked against what was asked: a
    target only goes with derived actions, and actions are needed without a change set."""
    named = target_table or target_schema
    if actions is None and not payload.is_cdc and (payload.parts or named):
        raise InvalidArgumentError(
            "no actions to apply: pass actions= (only a payload built with a ChangeSet "
            "derives its own)"
        )
    return check_target(actions is not None, target_table, target_schema)


def check_target(
    with_actions: bool, target_table: str | None, target_schema: str | None
) -> dict[str, str]:
    """``target_table`` / ``target_schema`` of derived actions, with their defaults; refused
    together with actions (which name their own targets) or when not a name."""
    named = [n for n, v in (("target_table", target_table), ("target_schema", target_schema)) if v]
    if with_actions and named:
        raise InvalidArgumentError(
            f"{' and '.join(named)}= choose the target of a change set's derived actions; the "
            "actions passed name their own target tables"
        )
    target = {
        "target_table": target_table or DEFAULT_TABLE,
        "target_schema": target_schema or DEFAULT_SCHEMA,
    }
    for what, value in target.items():
        if not is_name(value):
            raise InvalidArgumentError(f"{what}= must be a non-empty name, got {value!r}")
    return target

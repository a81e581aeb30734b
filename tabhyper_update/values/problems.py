"""Pydantic's validation errors read as this SDK's problems: each with the JSON path of the
place in the batch it concerns and a message in the batch's own words (its wire names)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from .errors import InvalidActionBatchError, Problem

__all__ = ["ACTION_NAMES", "problems_from"]

ACTION_NAMES: tuple[str, ...] = ("insert", "update", "delete", "replace", "upsert")
#: The tags of the discriminated unions: pydantic's bookkeeping in error places.
_TAGS = frozenset({*ACTION_NAMES, "comparison", "and", "or", "true"})


def _json_path(loc: Sequence[int | str]) -> str:
    path = "$"
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in _TAGS:
            continue  # union tags are pydantic's bookkeeping, not part of the document
        else:
            path += f".{part}"
    return path


def _problem(error: ErrorDetails) -> Problem:
    loc = list(error["loc"])
    kind = error["type"]
    message = error["msg"].removeprefix("Value error, ")
    if kind == "missing":
        field = loc.pop() if loc else "?"
        message = f"missing required field '{field}'"
    elif kind == "extra_forbidden":
        field = loc.pop() if loc else "?"
        message = f"unknown key '{field}'"
    elif kind == "invalid_action":
        given = error.get("input")
        if not isinstance(given, dict):
            message = f"an action must be a JSON object, got {given!r}"
        elif "action" not in given:
            message = f"missing required field 'action' ({', '.join(ACTION_NAMES)})"
        else:
            message = (
                f"unknown action {given['action']!r}; expected one of {', '.join(ACTION_NAMES)}"
            )
    elif kind == "invalid_condition":
        given = error.get("input")
        if isinstance(given, dict) and "op" not in given:
            message = "a condition needs an 'op'"
        elif not isinstance(given, dict):
            message = f"a condition must be an object with an 'op' (or true), got {given!r}"
    elif kind in ("too_short",) and loc and loc[-1] in ("actions", "args"):
        what = (
            "an action batch needs at least one action"
            if loc[-1] == "actions"
            else ("'and' / 'or' need at least one condition in 'args'")
        )
        message = what
    elif kind not in ("value_error", "invalid_action", "invalid_condition"):
        shown = error.get("input")
        if not isinstance(shown, (dict, list)):
            message = f"{message} (got {shown!r})"
    return Problem(_json_path(loc), message)


def problems_from(err: ValidationError) -> list[Problem]:
    """Our problems (JSON path + message) from a pydantic validation error."""
    seen: list[Problem] = []
    for e in err.errors(include_url=False):
        inner = (e.get("ctx") or {}).get("error")
        if isinstance(inner, InvalidActionBatchError):
            # Raised by one of our models inside this validation: keep its problems, under
            # this error's place in the document.
            base = _json_path(e["loc"])
            found = [
                Problem(base + p.path[1:] if p.path.startswith("$") else base, p.message)
                for p in inner.problems
            ]
        else:
            found = [_problem(e)]
        for p in found:
            if p not in seen:
                seen.append(p)
    return seen

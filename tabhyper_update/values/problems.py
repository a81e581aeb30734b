"""Pydantic's validation errors read as this SDK's problems: each with the JSON path of the
place in the batch it concerns and a message in the batch's own words (its wire names)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def _named_field(template: str) -> _Reword:
    """A rewording naming the field the error's place ends with (taken off the place)."""

    def reworded(error: ErrorDetails, loc: list[int | str]) -> str | None:
        return template.format(loc.pop() if loc else "?")

    return reworded


def _action(error: ErrorDetails, loc: list[int | str]) -> str:
    given = error.get("input")
    if not isinstance(given, dict):
        return f"an action must be a JSON object, got {given!r}"
    if "action" not in given:
        return f"missing required field 'action' ({', '.join(ACTION_NAMES)})"
    return f"unknown action {given['action']!r}; expected one of {', '.join(ACTION_NAMES)}"


def _condition(error: ErrorDetails, loc: list[int | str]) -> str | None:
    given = error.get("input")
    if not isinstance(given, dict):
        return f"a condition must be an object with an 'op' (or true), got {given!r}"
    return "a condition needs an 'op'" if "op" not in given else None


def _too_short(error: ErrorDetails, loc: list[int | str]) -> str | None:
    return _EMPTY.get(str(loc[-1])) if loc else None


#: A rewording of pydantic's message (from the error and its place, which it may shorten);
#: ``None`` keeps pydantic's own.
_Reword = Callable[[ErrorDetails, list[int | str]], "str | None"]
#: What an empty list of actions or of a condition's arguments is told.
_EMPTY = {
    "actions": "an action batch needs at least one action",
    "args": "'and' / 'or' need at least one condition in 'args'",
}
#: The errors said in the batch's own words, by pydantic's error type.
_REWORDED: dict[str, _Reword] = {
    "missing": _named_field("missing required field '{}'"),
    "extra_forbidden": _named_field("unknown key '{}'"),
    "invalid_action": _action,
    "invalid_condition": _condition,
    "too_short": _too_short,
}
#: Errors whose own message says what was given (no "(got …)" added).
_SAYS_GIVEN = frozenset({"value_error", "invalid_action", "invalid_condition"})


def _problem(error: ErrorDetails) -> Problem:
    loc = list(error["loc"])
    kind = error["type"]
    message = error["msg"].removeprefix("Value error, ")
    reworded = _REWORDED[kind](error, loc) if kind in _REWORDED else None
    if reworded is not None:
        return Problem(_json_path(loc), reworded)
    shown = error.get("input")
    if kind not in _SAYS_GIVEN and not isinstance(shown, (dict, list)):
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

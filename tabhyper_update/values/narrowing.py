"""The narrowing rules, stated once: what a value of one column type can lose in a column of
another, and what Hyper does with a value that does not fit.

The schema check (:mod:`tabhyper_update.update.schema`) reads them from the type names the
payload and the data source declare, to refuse a narrower target before anything is sent;
the local engine (:mod:`tabhyper_update.local.engine`) reads them from Hyper's own types, to
find the values a batch would change (and, under strict semantics, refuse them).

Hyper (measured with tableauhyperapi 0.0.26963 and its SQL reference): a decimal with more
decimal places than the column keeps is rounded; a text longer than ``VARCHAR(n)`` is cut
to ``n`` characters; an integer outside the column's range, or a decimal with more whole
digits than it keeps, fails the statement; a double keeps about 15 significant digits (an
integer exactly up to 2^53).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["ColumnType", "DeclaredColumn", "Loss", "column_type", "declared_columns", "losses"]

Kind = Literal["integer", "numeric", "float", "text"]
#: What Hyper does with a value the target column cannot keep as it is.
Outcome = Literal["refuses", "rounds", "truncates"]

#: The range of each integer type, and its decimal digits.
INTEGER_RANGE = {
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INTEGER": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
}
INTEGER_DIGITS = {"SMALLINT": 5, "INTEGER": 10, "BIGINT": 19}
#: The largest integer a double holds exactly, and the significant digits it keeps.
EXACT_IN_DOUBLE = 2**53
DOUBLE_DIGITS = 15


@dataclass(frozen=True)
class ColumnType:
    """A column's type as the rules read it: its ``kind`` (``integer``, ``numeric``,
    ``float``, ``text``, or another name: then only the same kind fits), its ``name``
    (``SMALLINT``, ``INTEGER``, ``BIGINT``, ``NUMERIC``, ``VARCHAR``, ...), a numeric's
    ``precision`` and ``scale``, a text's ``length`` (None: unlimited)."""

    kind: str
    name: str
    precision: int | None = None
    scale: int | None = None
    length: int | None = None

    @property
    def whole_digits(self) -> int | None:
        if self.kind == "integer":
            return INTEGER_DIGITS.get(self.name, 19)
        if self.kind == "numeric":
            return (self.precision or 18) - (self.scale or 0)
        return None


_TYPE = re.compile(r"^\s*([A-Z][A-Z ]*?)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*$")
#: Each SQL type name's kind, as the rules read it.
_KINDS = {
    "SMALLINT": "integer",
    "INTEGER": "integer",
    "INT": "integer",
    "BIGINT": "integer",
    "NUMERIC": "numeric",
    "DOUBLE PRECISION": "float",
    "REAL": "float",
    "TEXT": "text",
    "VARCHAR": "text",
    "CHAR": "text",
    "BOOLEAN": "boolean",
    "BOOL": "boolean",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "TIMESTAMP WITH TIME ZONE": "timestamptz",
    "TIMESTAMPTZ": "timestamptz",
}


def column_type(text: str) -> ColumnType | None:
    """A column's type from its SQL spelling (``NUMERIC(12,2)``, ``VARCHAR(40)``, ``INT``);
    None for a spelling the rules do not read."""
    found = _TYPE.match(text.upper())
    if found is None:
        return None
    name = found.group(1)
    kind = _KINDS.get(name)
    if kind is None:
        return None
    precision = int(found.group(2)) if found.group(2) else None
    scale = int(found.group(3)) if found.group(3) else None
    name = "INTEGER" if name == "INT" else name
    if kind == "text":
        return ColumnType(kind, name, length=precision)
    return ColumnType(kind, name, precision, scale)


_ITEM = re.compile(r'^\s*("(?:[^"]|"")+"|[^\s"]+)\s+(.+?)\s*$', re.S)
_NOT_NULL = re.compile(r"\s+NOT\s+NULL\s*$", re.I)
#: A comma that separates two column declarations (not one inside a type's parentheses).
_OUTSIDE_PARENTHESES = re.compile(r",(?![^(]*\))")


@dataclass(frozen=True)
class DeclaredColumn:
    """A column as a caller declared it: its type's text, as the rules read it (None: a
    type they do not read), and whether it is NOT NULL."""

    name: str
    text: str
    type: ColumnType | None
    not_null: bool


def declared_columns(
    value: object, what: str, error: Callable[..., Exception]
) -> dict[str, DeclaredColumn]:
    """Columns declared as DDL (``"id BIGINT NOT NULL, amount NUMERIC(12,2)"``) or as a
    mapping of name to type (``NOT NULL`` where the column is); anything else raises
    ``error`` naming ``what`` and the item it cannot read."""
    items = _declared_items(value, what, error)
    found: dict[str, DeclaredColumn] = {}
    for name, text in items:
        bare = _NOT_NULL.sub("", text).strip()
        if not name or not bare:
            raise error(f"{what}: {name!r} has no type", argument=what)
        found[name] = DeclaredColumn(name, bare, column_type(bare), bare != text.strip())
    if not found:
        raise error(f"{what} is empty", argument=what)
    return found


def _declared_items(
    value: object, what: str, error: Callable[..., Exception]
) -> list[tuple[str, str]]:
    """(name, type text) per declared column: a mapping's items, or a DDL list's, split at
    the commas outside parentheses (a quoted name keeps its quotes' contents)."""
    if isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return list(value.items())
    if not isinstance(value, str):
        raise error(
            f"{what} takes columns as DDL ('id BIGINT NOT NULL, amount NUMERIC(12,2)') or a "
            f"mapping of name to type, got {value!r}",
            argument=what,
        )
    items = []
    for part in _OUTSIDE_PARENTHESES.split(value):
        match = _ITEM.match(part)
        if match is None:
            raise error(
                f"{what}: cannot read {part.strip()!r} as 'name TYPE [NOT NULL]'", argument=what
            )
        items.append((match.group(1).strip('"').replace('""', '"'), match.group(2)))
    return items


@dataclass(frozen=True)
class Loss:
    """One way a value can fail to fit: ``what`` (``range`` of an integer, ``whole_digits``
    or ``scale`` of a decimal, ``length`` of a text, ``inexact`` in a double), the ``limit``
    the target keeps (for ``range``, its ``low``..``limit``), what Hyper does with such a
    value, and the words that say so."""

    what: Literal["range", "whole_digits", "scale", "length", "inexact"]
    limit: int
    hyper: Outcome
    says: str
    low: int = 0


def losses(source: ColumnType, target: ColumnType) -> tuple[Loss, ...] | None:
    """What a ``source`` value can lose in a ``target`` column: nothing (``()``), the ways
    it can (narrowing), or ``None`` when the target holds another kind of value."""
    rule = _LOSS_RULES.get((source.kind, target.kind))
    if rule is not None:
        return rule(source, target)
    # The SDK writes an instant as its UTC wall-clock time, which Hyper takes into a
    # TIMESTAMPTZ column as that instant (a timestamp_ntz's wall clock as if UTC).
    if source.kind == target.kind or (source.kind, target.kind) == ("timestamp", "timestamptz"):
        return ()
    return None


def _text_losses(s: ColumnType, t: ColumnType) -> tuple[Loss, ...]:
    if t.length is not None and (s.length is None or s.length > t.length):
        return (Loss("length", t.length, "truncates", f"cuts text longer than {t.length}"),)
    return ()


def _integer_losses(s: ColumnType, t: ColumnType) -> tuple[Loss, ...]:
    low, high = INTEGER_RANGE.get(t.name, INTEGER_RANGE["BIGINT"])
    if INTEGER_RANGE.get(s.name, INTEGER_RANGE["BIGINT"]) == (low, high) or (
        (s.whole_digits or 19) < (t.whole_digits or 19)
    ):
        return ()
    said = f"holds {t.whole_digits} whole digits, not {s.whole_digits}"
    return (Loss("range", high, "refuses", said, low=low),)


def _numeric_losses(s: ColumnType, t: ColumnType) -> tuple[Loss, ...]:
    found: list[Loss] = []
    places = t.scale or 0
    if (s.scale or 0) > places:
        found.append(Loss("scale", places, "rounds", f"rounds to {places} decimal places"))
    held, kept = s.whole_digits, t.whole_digits
    if held is not None and kept is not None and held > kept:
        said = f"holds {kept} whole digits, not {held}"
        found.append(Loss("whole_digits", kept, "refuses", said))
    return tuple(found)


def _float_losses(s: ColumnType, t: ColumnType) -> tuple[Loss, ...]:
    if s.kind == "integer" and s.name == "BIGINT":
        return (Loss("inexact", EXACT_IN_DOUBLE, "rounds", "is exact only up to 2^53"),)
    if s.kind == "numeric" and (s.precision or 18) > DOUBLE_DIGITS:
        said = f"keeps about {DOUBLE_DIGITS} significant digits"
        return (Loss("inexact", DOUBLE_DIGITS, "rounds", said),)
    return ()


#: How a value of one kind (source, target) can be narrowed, per pair of kinds.
_LOSS_RULES: dict[tuple[str, str], Callable[[ColumnType, ColumnType], tuple[Loss, ...]]] = {
    ("text", "text"): _text_losses,
    ("integer", "integer"): _integer_losses,
    ("integer", "numeric"): _numeric_losses,
    ("numeric", "numeric"): _numeric_losses,
    ("integer", "float"): _float_losses,
    ("numeric", "float"): _float_losses,
}

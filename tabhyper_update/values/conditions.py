"""Conditions of update / delete / upsert actions, and builders that read naturally.

Wire format (Tableau's "Update Data in Hyper Data Source"):

* a leaf compares a target column with a source column, or a (target or source) column with
  a typed constant: ``{"op": "eq", "target-col": "id", "source-col": "id"}``,
  ``{"op": "lt", "target-col": "ts", "const": {"type": "datetime", "v": "2024-01-01T00:00:00Z"}}``;
* ``{"op": "and" | "or", "args": [...]}`` nest to any depth.

Builders::

    from datetime import datetime, timezone
    from tabhyper_update import target, source, keys_match

    target("id") == source("id")
    target("ts") < datetime(2024, 1, 1, tzinfo=timezone.utc)
    (target("a") == source("a")) & (target("b") == source("b"))
    keys_match("region", "order_id")            # the same composite-key condition

Python constants become typed constants: ``bool`` → boolean, ``int`` → integer, ``float`` and
``Decimal`` → double, ``str`` → string, ``datetime`` / ``date`` → datetime. A datetime is sent
in UTC with a ``Z`` suffix; a *naive* datetime is taken to be UTC (the same convention the
payload builder uses for Spark timestamps), and a ``date`` means midnight UTC.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal, TypeAlias, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationError,
    model_serializer,
    model_validator,
)

from .errors import ArgumentTypeError, InvalidActionBatchError, InvalidArgumentError, Problem
from .names import is_name
from .problems import problems_from

__all__ = [
    "COMPARISON_OPS",
    "And",
    "Comparison",
    "Condition",
    "Const",
    "ConstType",
    "Or",
    "SourceColumn",
    "TargetColumn",
    "all_of",
    "any_of",
    "condition_columns",
    "key_pairs",
    "keys_match",
    "parse_datetime_constant",
    "source",
    "target",
]

ComparisonOp: TypeAlias = Literal["eq", "neq", "gt", "lt", "gte", "lte", "is", "has"]
COMPARISON_OPS: tuple[str, ...] = ("eq", "neq", "gt", "lt", "gte", "lte", "is", "has")
ConstType: TypeAlias = Literal["boolean", "integer", "double", "string", "datetime"]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_INT_TEXT = re.compile(r"^[+-]?\d+$")
_DATETIME_TEXT = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
    r"(Z|z|[+-]\d{2}(?::?\d{2})?)$"
)


def _offset(offset_text: str, text: str) -> timezone:
    """The time zone of a datetime's offset (``Z``, ``+01:00`` or ``+0100``; ``text``: the
    whole datetime, for the error)."""
    if offset_text in ("Z", "z"):
        return timezone.utc
    sign = -1 if offset_text[0] == "-" else 1
    digits = offset_text[1:].replace(":", "")
    hours = int(digits[:2])
    minutes = int(digits[2:4] or 0)
    if hours > 23 or minutes > 59:
        raise InvalidArgumentError(f"{text!r} has an invalid offset {offset_text!r}")
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def parse_datetime_constant(text: str) -> datetime:
    """Parse an ISO-8601 datetime *with an offset* (``Z``, ``+01:00`` or ``+0100``).

    >>> parse_datetime_constant("2007-12-03T10:15:30+0100").isoformat()
    '2007-12-03T10:15:30+01:00'
    """
    m = _DATETIME_TEXT.match(text)
    if m is None:
        raise InvalidArgumentError(
            f"{text!r} is not an ISO-8601 datetime with an offset "
            "(e.g. '2007-12-03T10:15:30Z' or '2007-12-03T10:15:30+01:00')"
        )
    year, month, day, hour, minute = (int(m.group(i)) for i in range(1, 6))
    second = int(m.group(6) or 0)
    fraction = (m.group(7) or "").ljust(6, "0")[:6]
    tz = _offset(m.group(8), text)
    try:
        return datetime(year, month, day, hour, minute, second, int(fraction), tzinfo=tz)
    except ValueError as err:
        raise InvalidArgumentError(f"{text!r} is not a valid datetime: {err}") from None


def _format_datetime(value: datetime) -> str:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
    try:
        utc = aware.astimezone(timezone.utc)
    except OverflowError:
        raise InvalidArgumentError(
            f"datetime constant {value.isoformat()} is outside years 1-9999 once converted to UTC"
        ) from None
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond:06d}".rstrip("0")
    # strftime pads years < 1000 inconsistently across platforms; build the year ourselves.
    return f"{utc.year:04d}{text[text.index('-') :]}Z"


class _Model(BaseModel):
    """Strict outgoing model: unknown keys refused, kebab-case on the wire."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=True,
        serialize_by_alias=True,
        validate_by_alias=True,
        validate_by_name=True,
    )

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as err:
            # Pydantic's error is not ours: the same problems, with JSON paths, in our tree.
            raise InvalidActionBatchError(problems_from(err)) from None

    def to_dict(self) -> dict[str, Any]:
        """The wire JSON of this node as a plain dict (``None`` fields omitted)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def _check_boolean(v: object) -> None:
    if not (isinstance(v, bool) or (isinstance(v, str) and v.lower() in ("true", "false"))):
        raise InvalidArgumentError(f"boolean constant must be true or false, got {v!r}")


def _check_integer(v: object) -> None:
    whole = isinstance(v, int) and not isinstance(v, bool)
    if not (whole or (isinstance(v, str) and _INT_TEXT.match(v))):
        raise InvalidArgumentError(f"integer constant must be a whole number, got {v!r}")
    if not _INT64_MIN <= int(cast("int | str", v)) <= _INT64_MAX:
        raise InvalidArgumentError(f"integer constant {v!r} does not fit in 64 bits")


def _check_double(v: object) -> None:
    try:
        number = None if isinstance(v, bool) else float(cast("str | float", v))
    except ValueError:
        number = None
    if number is None:
        raise InvalidArgumentError(f"double constant must be a number, got {v!r}")
    if not math.isfinite(number):
        raise InvalidArgumentError(f"double constant must be finite, got {v!r}")


def _check_string(v: object) -> None:
    if not isinstance(v, str):
        raise InvalidArgumentError(f"string constant must be a string, got {v!r}")


def _check_datetime(v: object) -> None:
    if not isinstance(v, str):
        raise InvalidArgumentError(f"datetime constant must be an ISO-8601 string, got {v!r}")
    parse_datetime_constant(v)


#: How a constant's value is checked, per its type.
_CHECKS: dict[str, Callable[[object], None]] = {
    "boolean": _check_boolean,
    "integer": _check_integer,
    "double": _check_double,
    "string": _check_string,
    "datetime": _check_datetime,
}


class Const(_Model):
    """A typed constant: ``{"type": "integer", "v": 42}``.

    Build one from a Python value with :meth:`Const.of`; ``v`` may be null (useful with
    ``is``). Values are kept as given so that JSON read in is written out unchanged.
    """

    type: ConstType
    v: bool | int | float | str | None = Field(...)

    @model_serializer(mode="wrap")
    def _keep_null_value(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A null `v` is meaningful (`is` NULL): never drop it with the other None fields.
        data: dict[str, Any] = handler(self)
        data["v"] = self.v
        return data

    @model_validator(mode="after")
    def _check_value(self) -> Const:
        v = self.v
        if v is None:
            return self
        _CHECKS[self.type](v)
        return self

    @classmethod
    def of(cls, value: object, *, type: ConstType | None = None) -> Const:
        """The constant for a Python value (see the module docstring for the mapping).

        ``Const.of(None, type="integer")`` is a typed NULL; an untyped ``None`` is a string
        NULL.
        """
        if isinstance(value, Const):
            return value
        if value is None:
            return cls(type=type or "string", v=None)
        # The first kind the value is (a bool is an int, a datetime a date).
        for kind, made in _CONSTANTS:
            if isinstance(value, kind):
                wire_type, wire_value = made(value, type)
                return cls(type=wire_type, v=wire_value)
        raise ArgumentTypeError(
            f"cannot make a Tableau constant from {type_name(value)}: {value!r}"
        )

    def python_value(self) -> bool | int | float | str | datetime | None:
        """The constant as a Python value (datetimes timezone-aware)."""
        if self.v is None:
            return None
        return _PYTHON_VALUES.get(self.type, str)(self.v)


def _boolean(v: object) -> bool:
    """A boolean constant's value (given as a boolean or as its text)."""
    return v if isinstance(v, bool) else str(v).lower() == "true"


#: How a constant of each type is read as a Python value (any other type: its text).
_PYTHON_VALUES: dict[str, Callable[[Any], bool | int | float | str | datetime]] = {
    "boolean": _boolean,
    "integer": int,
    "double": float,
    "datetime": lambda v: parse_datetime_constant(str(v)),
}


def type_name(value: object) -> str:
    return type(value).__name__


class _ConditionOps:
    """``&`` and ``|`` on every condition node; nested ``and`` in ``and`` flattens."""

    def __and__(self, other: Condition) -> And:
        return all_of(cast("Condition", self), other)

    def __or__(self, other: Condition) -> Or:
        return any_of(cast("Condition", self), other)

    # Guard against Python's `and` / `or` keywords, which cannot be overloaded.
    def __bool__(self) -> bool:
        raise ArgumentTypeError("use & and | to combine conditions, not `and` / `or`")


class Comparison(_ConditionOps, _Model):
    """A leaf: a column compared with a source column or a constant."""

    op: ComparisonOp
    target_col: str | None = Field(default=None, alias="target-col", min_length=1)
    source_col: str | None = Field(default=None, alias="source-col", min_length=1)
    const: Const | None = None

    @model_validator(mode="after")
    def _check_sides(self) -> Comparison:
        given = [
            name
            for name, value in (
                ("target-col", self.target_col),
                ("source-col", self.source_col),
                ("const", self.const),
            )
            if value is not None
        ]
        if len(given) != 2:
            raise InvalidArgumentError(
                f"a '{self.op}' comparison needs exactly one left and one right side "
                "('target-col' with 'source-col' or 'const', or 'source-col' with 'const'); "
                f"got {', '.join(map(repr, given)) if given else 'none'}"
            )
        if self.const is not None:
            _check_constant(self.op, self.const)
        return self

    @property
    def left(self) -> tuple[Literal["t", "s"], str]:
        """The left side: the target's column (``"t"``), else the source's (``"s"``; its
        right side is then a constant)."""
        if self.target_col is not None:
            return "t", self.target_col
        return "s", cast("str", self.source_col)


#: Conditions nest at most this deep (Tableau's own limit is not documented; deeper trees
#: are a sign of a generated condition gone wrong, and would exhaust Python's recursion).
MAX_CONDITION_DEPTH = 64


def condition_depth(node: Any) -> int:
    """How deep a condition (a model or its parsed JSON) nests; counted without recursion."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_CONDITION_DEPTH + 1:
            break
        args = item.get("args") if isinstance(item, dict) else getattr(item, "args", None)
        if isinstance(args, list):
            stack.extend((child, depth + 1) for child in args)
    return deepest


def _check_depth(node: Any) -> None:
    if condition_depth(node) > MAX_CONDITION_DEPTH:
        raise InvalidActionBatchError(
            [Problem("", f"conditions nest deeper than {MAX_CONDITION_DEPTH} levels")]
        )


class And(_ConditionOps, _Model):
    """All of ``args`` hold."""

    op: Literal["and"]
    args: list[Condition] = Field(min_length=1)

    def __init__(self, *args: Any, **data: Any) -> None:
        if args:
            data["args"] = list(args[0]) if len(args) == 1 and _is_iterable(args[0]) else args
        data.setdefault("op", "and")
        super().__init__(**data)
        _check_depth(self)


class Or(_ConditionOps, _Model):
    """At least one of ``args`` holds."""

    op: Literal["or"]
    args: list[Condition] = Field(min_length=1)

    def __init__(self, *args: Any, **data: Any) -> None:
        if args:
            data["args"] = list(args[0]) if len(args) == 1 and _is_iterable(args[0]) else args
        data.setdefault("op", "or")
        super().__init__(**data)
        _check_depth(self)


def _is_iterable(value: object) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes, BaseModel))


def _condition_tag(value: Any) -> str | None:
    op = value.get("op") if isinstance(value, dict) else getattr(value, "op", None)
    if op in ("and", "or"):
        return str(op)
    if isinstance(value, (dict, Comparison)):
        return "comparison"
    return None


Condition: TypeAlias = Annotated[
    Annotated[Comparison, Tag("comparison")]
    | Annotated[And, Tag("and")]
    | Annotated[Or, Tag("or")],
    Discriminator(
        _condition_tag,
        custom_error_type="invalid_condition",
        custom_error_message="a condition must be an object with an 'op'",
    ),
]

And.model_rebuild()
Or.model_rebuild()


class _Column:
    """A named column on one side of a comparison; compare it to build a condition."""

    side: ClassVar[str]
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, name: str) -> None:
        if not is_name(name):
            raise InvalidArgumentError("a column name must be a non-empty string")
        self.name = name

    def __repr__(self) -> str:
        return f"{type(self).__name__.removesuffix('Column').lower()}({self.name!r})"

    def _compare(self, op: str, other: object) -> Comparison:
        raise NotImplementedError

    def __eq__(self, other: object) -> Comparison:  # type: ignore[override]
        return self._compare("eq", other)

    def __ne__(self, other: object) -> Comparison:  # type: ignore[override]
        return self._compare("neq", other)

    def __lt__(self, other: object) -> Comparison:
        return self._compare("lt", other)

    def __le__(self, other: object) -> Comparison:
        return self._compare("lte", other)

    def __gt__(self, other: object) -> Comparison:
        return self._compare("gt", other)

    def __ge__(self, other: object) -> Comparison:
        return self._compare("gte", other)

    def is_(self, other: object, *, type: ConstType | None = None) -> Comparison:
        """Null-safe equality (``IS NOT DISTINCT FROM``); ``is_(None)`` tests for NULL."""
        if type is not None and not isinstance(other, _Column):
            return self._compare("is", Const.of(other, type=type))
        return self._compare("is", other)

    def is_null(self, *, type: ConstType = "string") -> Comparison:
        """The column is NULL (``is`` against a typed null constant)."""
        return self._compare("is", Const(type=type, v=None))

    def contains(self, text: str | SourceColumn) -> Comparison:
        """Substring containment (``has``)."""
        if not isinstance(text, (str, _Column)):
            raise ArgumentTypeError(f"'has' takes a string, got {type_name(text)}")
        return self._compare("has", text)


class TargetColumn(_Column):
    side = "target-col"

    def _compare(self, op: str, other: object) -> Comparison:
        if isinstance(other, SourceColumn):
            return Comparison(op=op, target_col=self.name, source_col=other.name)
        if isinstance(other, TargetColumn):
            raise ArgumentTypeError("a comparison needs a source column or a constant on the right")
        return Comparison(op=op, target_col=self.name, const=Const.of(other))


class SourceColumn(_Column):
    side = "source-col"

    def _compare(self, op: str, other: object) -> Comparison:
        if isinstance(other, TargetColumn):
            # target-col / source-col is symmetric only for equality-like operators.
            flipped = {"lt": "gt", "gt": "lt", "lte": "gte", "gte": "lte"}.get(op, op)
            if op == "has":
                raise ArgumentTypeError("write target(...).contains(source(...)) for 'has'")
            return Comparison(op=flipped, target_col=other.name, source_col=self.name)
        if isinstance(other, SourceColumn):
            raise ArgumentTypeError(
                "a comparison needs a target column or a constant on the other side"
            )
        return Comparison(op=op, source_col=self.name, const=Const.of(other))


def target(name: str) -> TargetColumn:
    """A column of the target table: ``target("id") == source("id")``."""
    return TargetColumn(name)


def source(name: str) -> SourceColumn:
    """A column of the source (payload) table."""
    return SourceColumn(name)


def all_of(*conditions: Condition) -> And:
    """``and`` of the conditions, flattening nested ``and`` nodes."""
    args: list[Condition] = []
    for c in conditions:
        args.extend(c.args if isinstance(c, And) else [c])
    return And(args=args)


def any_of(*conditions: Condition) -> Or:
    """``or`` of the conditions, flattening nested ``or`` nodes."""
    args: list[Condition] = []
    for c in conditions:
        args.extend(c.args if isinstance(c, Or) else [c])
    return Or(args=args)


def keys_match(*columns: str | tuple[str, str]) -> Condition:
    """Equality on a (composite) key: ``keys_match("region", "id")``.

    A column named differently in the payload is given as ``(target_name, source_name)``.
    One key gives a single comparison; several give their ``and``.
    """
    if not columns:
        raise InvalidArgumentError("keys_match needs at least one key column")
    leaves: list[Condition] = []
    for c in columns:
        t, s = (c, c) if isinstance(c, str) else c
        leaves.append(target(t) == source(s))
    return leaves[0] if len(leaves) == 1 else all_of(*leaves)


def condition_columns(condition: Condition) -> tuple[set[str], set[str]]:
    """The (target, source) column names a condition reads."""
    targets: set[str] = set()
    sources: set[str] = set()
    stack: list[Condition] = [condition]
    while stack:
        node = stack.pop()
        if isinstance(node, Comparison):
            if node.target_col is not None:
                targets.add(node.target_col)
            if node.source_col is not None:
                sources.add(node.source_col)
        else:
            stack.extend(node.args)
    return targets, sources


def key_pairs(condition: Condition | bool | None) -> list[tuple[str, str]] | None:
    """The (target, source) column pairs when ``condition`` is key equality (one column
    equality, or a conjunction of them); ``None`` for any other condition, or none."""
    if isinstance(condition, Comparison):
        if condition.op == "eq" and condition.target_col and condition.source_col:
            return [(condition.target_col, condition.source_col)]
        return None
    if isinstance(condition, And):
        pairs: list[tuple[str, str]] = []
        for arg in condition.args:
            sub = key_pairs(arg)
            if sub is None:
                return None
            pairs += sub
        return pairs
    return None


def _integer(value: int, asked: ConstType | None) -> tuple[ConstType, object]:
    """An int: an integer, or a double where ``type="double"`` asks for one."""
    return ("double", float(value)) if asked == "double" else ("integer", value)


def _double(value: float, asked: ConstType | None) -> tuple[ConstType, object]:
    if not math.isfinite(value):
        raise InvalidArgumentError(f"a constant must be finite, got {value!r}")
    return "double", value


def _decimal(value: Decimal, asked: ConstType | None) -> tuple[ConstType, object]:
    """A Decimal a double holds exactly (Tableau's numeric constants are doubles)."""
    as_float = float(value)
    if not value.is_finite() or Decimal(repr(as_float)) != value:
        raise InvalidArgumentError(
            f"Decimal {value} cannot be sent exactly: Tableau's numeric constants are "
            "doubles; round it to at most 15 significant digits"
        )
    return "double", as_float


def _day(value: date, asked: ConstType | None) -> tuple[ConstType, object]:
    return "datetime", _format_datetime(datetime(value.year, value.month, value.day))


#: How each kind of Python value becomes a constant's wire type and value, in the order
#: tried (a bool before an int, a datetime before a date).
_CONSTANTS: tuple[tuple[type, Callable[[Any, ConstType | None], tuple[ConstType, object]]], ...] = (
    (bool, lambda v, _: ("boolean", "true" if v else "false")),
    (int, _integer),
    (float, _double),
    (Decimal, _decimal),
    (str, lambda v, _: ("string", v)),
    (datetime, lambda v, _: ("datetime", _format_datetime(v))),
    (date, _day),
)


def _check_constant(op: str, const: Const) -> None:
    """Refuse a constant comparison ``op`` cannot make: ``has`` of anything but a string;
    a null constant but with ``is`` (any other never matches, as in SQL)."""
    if op == "has" and const.type != "string":
        raise InvalidArgumentError(
            f"'has' tests substring containment and takes a string constant, got {const.type!r}"
        )
    if const.v is None and op != "is":
        raise InvalidArgumentError(
            f"'{op}' against a null constant never matches (SQL NULL semantics); "
            "use 'is' for null-safe equality"
        )

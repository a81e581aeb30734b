"""``ChangeSet``: how to read a DataFrame as a change set.

A change set is a DataFrame with an operation column. These conventions are understood
out of the box (their values do not collide, so one table serves them all):

| convention              | upsert                          | delete   | pre-image          |
|-------------------------|---------------------------------|----------|--------------------|
| Delta Change Data Feed  | insert, update_postimage        | delete   | update_preimage    |
| Spark's changelog       | insert, update_postimage        | delete   | update_preimage    |
| Iceberg's changelog view| INSERT, UPDATE_AFTER            | DELETE   | UPDATE_BEFORE      |
| Debezium (``op``)       | c (create), r (snapshot), u     | d        | (``Debezium``)     |
| plain                   | I, U                            | D        |                    |

``op_map`` replaces that table with the caller's own: each op value maps to ``"upsert"``
(``"insert"`` and ``"update"`` are accepted as synonyms), ``"delete"``, ``"preimage"`` or
``"ignore"``. How the changes of one key come down to the last one is
:mod:`tabhyper_update.builder.cdc`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .errors import ArgumentTypeError, PayloadArgumentError
from .names import is_name
from .positions import OrderAs, check_order_as

__all__ = [
    "DEFAULT_OP_MAP",
    "GUARD_COLUMN",
    "METADATA_COLUMNS",
    "MISSING_OP",
    "PARTIAL_UPDATE_OP",
    "RESERVED_PREFIX",
    "ChangeSet",
    "History",
    "OpMeaning",
    "SoftDelete",
]

OpMeaning = Literal["upsert", "delete", "preimage", "ignore"]
DEFAULT_OP_MAP: dict[str, OpMeaning] = {
    # Delta Change Data Feed
    "insert": "upsert",
    "update_postimage": "upsert",
    "update_preimage": "preimage",
    "delete": "delete",
    # Debezium
    "c": "upsert",
    "r": "upsert",
    "u": "upsert",
    "d": "delete",
    # plain
    "I": "upsert",
    "U": "upsert",
    "D": "delete",
    # Iceberg's changelog view (create_changelog_view)
    "INSERT": "upsert",
    "UPDATE_AFTER": "upsert",
    "UPDATE_BEFORE": "preimage",
    "DELETE": "delete",
}

#: Change-feed bookkeeping that never reaches the payload unless kept explicitly.
METADATA_COLUMNS = (
    "_change_type",
    "_commit_version",
    "_commit_timestamp",
    "_change_ordinal",
    "_commit_snapshot_id",
)

#: The op of a Debezium event that is no tombstone but has no ``op``: refused by name.
MISSING_OP = "(no op)"
#: The op of a MongoDB update that carries only what changed (``updateDescription``), not
#: the document: refused by name.
PARTIAL_UPDATE_OP = "(partial update)"

#: Columns added to the staged change set (never part of the payload tables). Every
#: internal column starts with this prefix, which user columns may not.
RESERVED_PREFIX = "__tabhyper_"


def _normalise_op_map(op_map: Mapping[str, str] | None) -> dict[str, OpMeaning]:
    if op_map is None:
        return dict(DEFAULT_OP_MAP)
    synonyms: dict[str, OpMeaning] = {
        "upsert": "upsert",
        "insert": "upsert",
        "update": "upsert",
        "delete": "delete",
        "preimage": "preimage",
        "ignore": "ignore",
    }
    result: dict[str, OpMeaning] = {}
    for value, meaning in op_map.items():
        if meaning not in synonyms:
            raise PayloadArgumentError(
                f"op_map[{value!r}] is {meaning!r}; expected 'upsert' (or 'insert' / "
                "'update'), 'delete', 'preimage' or 'ignore'"
            )
        result[str(value)] = synonyms[meaning]
    if not result:
        raise PayloadArgumentError("op_map is empty")
    return result


def _names(value: Any, what: str, *, at_least_one: bool = False) -> tuple[str, ...]:
    """One column name or several, as a tuple; anything else (or none, ``at_least_one``)
    is refused naming ``what``."""
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise ArgumentTypeError(
            f"ChangeSet {what}= takes a column name or a list of column names, got {value!r}"
        )
    if at_least_one and not value:
        raise PayloadArgumentError(f"ChangeSet {what}= must name at least one column")
    return tuple(value)


#: ChangeSet's arguments that are no column names: each one's type, and what it takes.
_ARGUMENT_TYPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    "op_column": ((str, type(None)), "a name"),
    "upsert_table": (str, "a name"),
    "delete_table": (str, "a name"),
    "op_map": ((Mapping, type(None)), "a mapping"),
    "guard": (bool, "True or False"),
}


def _column_name(value: object, what: str) -> str:
    if not is_name(value):
        raise ArgumentTypeError(f"{what}= takes a column name, got {value!r}")
    if value.lower().startswith(RESERVED_PREFIX):
        raise PayloadArgumentError(
            f"{what}={value!r}: names starting with {RESERVED_PREFIX!r} are the SDK's own"
        )
    return value


@dataclass(frozen=True)
class History:
    """Keep every version of a row (a slowly changing dimension of type 2): pass it as
    ``ChangeSet(history=History(...))`` (``history=True`` takes the defaults).

    Each change of a key becomes a version row, valid from its start (``valid_from``) to
    the next version's start (``valid_to``, NULL while it is current), flagged ``current``;
    a delete closes the key's current version. A version starts at the change's position
    (the one ``order_by`` column) or, given ``at``, at that column's value (a commit time,
    say). The names are the data source's columns, the SDK's to write."""

    valid_from: str = "_valid_from"
    valid_to: str = "_valid_to"
    current: str = "_is_current"
    at: str | None = None

    def __post_init__(self) -> None:
        names = [
            _column_name(getattr(self, n), f"History {n}")
            for n in ("valid_from", "valid_to", "current")
        ]
        if self.at is not None:
            _column_name(self.at, "History at")
        if len(set(names)) != len(names):
            raise PayloadArgumentError(f"History names a column twice: {names}")

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns the SDK adds to the data source."""
        return (self.valid_from, self.valid_to, self.current)


@dataclass(frozen=True)
class SoftDelete:
    """Keep a deleted row, flagged: pass it as ``ChangeSet(soft_delete=SoftDelete(...))``
    (``soft_delete=True`` takes the defaults).

    A delete sets ``deleted`` TRUE and ``deleted_at`` to the delete's position (or, given
    ``at``, that column's value) instead of removing the row; a later change of the key
    writes the row again with ``deleted`` FALSE and ``deleted_at`` NULL. With
    :class:`History`, the delete flags the version it closes."""

    deleted: str = "_deleted"
    deleted_at: str = "_deleted_at"
    at: str | None = None

    def __post_init__(self) -> None:
        names = [
            _column_name(getattr(self, n), f"SoftDelete {n}") for n in ("deleted", "deleted_at")
        ]
        if self.at is not None:
            _column_name(self.at, "SoftDelete at")
        if len(set(names)) != len(names):
            raise PayloadArgumentError(f"SoftDelete names a column twice: {names}")

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns the SDK adds to the data source."""
        return (self.deleted, self.deleted_at)


def _mode(value: object, kind: type[Any], what: str) -> Any:
    """``True`` → the mode's defaults, ``None`` / ``False`` → off, a mode object as is."""
    if value is True:
        return kind()
    if value is None or value is False:
        return None
    if isinstance(value, kind):
        return value
    if isinstance(value, Mapping):
        try:
            return kind(**value)
        except TypeError as err:
            raise ArgumentTypeError(f"ChangeSet {what}=: {err}") from None
    raise ArgumentTypeError(
        f"ChangeSet {what}= takes True, a {kind.__name__}(...) or None, got {value!r}"
    )


#: The positions table's NOT NULL column that a stale update's guard sets to NULL (which
#: fails the atomic batch: Hyper enforces NOT NULL).
GUARD_COLUMN = "guarded"


@dataclass(frozen=True, init=False)
class ChangeSet:
    """How to read a DataFrame as a change set: pass it to :func:`build_payload`.

    ``key``: the column(s) that identify a row. ``op_column``: the operation column (found
    by itself for ``_change_type``, ``op`` and ``__op``). ``order_by``: the column(s) that
    order the changes of one key (``_commit_version`` by itself for a Delta change feed);
    the greatest wins. ``order_as``: how a text ``order_by`` column orders, ``"number"``
    (``"999"`` before ``"1000"``) or ``"text"``; text columns are refused without it.
    ``op_map``: op value → ``"upsert"``, ``"delete"``, ``"preimage"`` or ``"ignore"``
    instead of the built-in conventions. ``keep_columns``: change-feed columns to keep in
    the payload. ``upsert_table`` / ``delete_table``: the payload's two table names::

        build_payload(changes, ChangeSet(key=["region", "id"], op_column="_change_type",
                                         order_by="_commit_version"))

    The target table of the derived actions is a choice of the update:
    ``.apply(target_table=...)``.

    ``guard=True``: updates that reach the server out of source order never leave an older
    value. The data source holds a table ``<target table>_positions`` (the key, the one
    ``order_by`` column, and a ``guarded`` BOOLEAN NOT NULL column) where each update
    records the position of every key it touched, deleted keys included; the data table
    holds the position only when ``keep_columns`` names it. Every update first checks
    there, in the same atomic batch, that no key it touches holds a later position: its
    first action sets ``guarded`` to NULL on every key that does, which the NOT NULL column
    refuses, so the whole update fails and applies nothing
    (:class:`~tabhyper_update.values.errors.OutOfOrderError`).

    ``history=True`` (or a :class:`History`): every change becomes a version row with the
    span it was valid, instead of only the latest row. ``soft_delete=True`` (or a
    :class:`SoftDelete`): a delete flags the row instead of removing it. Both set some
    columns of rows the data source holds and leave the others as they are, which a
    server must first be shown to do (``tabhyper-update probe``: ``partial_update``).
    """

    key: tuple[str, ...]
    op_column: str | None = None
    order_by: tuple[str, ...] | None = None
    op_map: Mapping[str, OpMeaning] | None = field(default=None, hash=False)
    keep_columns: tuple[str, ...] = ()
    upsert_table: str = "upserts"
    delete_table: str = "deletes"
    order_as: Mapping[str, OrderAs] | None = field(default=None, hash=False)
    guard: bool = False
    history: History | None = None
    soft_delete: SoftDelete | None = None

    def __init__(
        self,
        key: Sequence[str] | str,
        *,
        op_column: str | None = None,
        order_by: Sequence[str] | str | None = None,
        op_map: Mapping[str, str] | None = None,
        keep_columns: Sequence[str] | str = (),
        upsert_table: str = "upserts",
        delete_table: str = "deletes",
        order_as: Mapping[str, str] | None = None,
        guard: bool = False,
        history: History | bool | None = None,
        soft_delete: SoftDelete | bool | None = None,
    ) -> None:
        keys = _names(key, "key", at_least_one=True)
        orders = None if order_by is None else _names(order_by, "order_by", at_least_one=True)
        given = {
            "op_column": op_column,
            "upsert_table": upsert_table,
            "delete_table": delete_table,
            "op_map": op_map,
            "guard": guard,
        }
        for what, value in given.items():
            expected, takes = _ARGUMENT_TYPES[what]
            if not isinstance(value, expected):
                raise ArgumentTypeError(f"ChangeSet {what}= takes {takes}, got {value!r}")
        if upsert_table == delete_table:
            raise PayloadArgumentError(
                f"ChangeSet upsert_table and delete_table must differ (both {upsert_table!r})"
            )
        kept = _names(keep_columns, "keep_columns")
        ordering = check_order_as(order_as, orders)
        object.__setattr__(self, "key", keys)
        object.__setattr__(self, "op_column", op_column)
        object.__setattr__(self, "order_by", orders)
        object.__setattr__(
            self, "op_map", _normalise_op_map(op_map) if op_map is not None else None
        )
        object.__setattr__(self, "keep_columns", kept)
        object.__setattr__(self, "upsert_table", upsert_table)
        object.__setattr__(self, "delete_table", delete_table)
        object.__setattr__(self, "order_as", ordering)
        object.__setattr__(self, "guard", guard)
        object.__setattr__(self, "history", _mode(history, History, "history"))
        object.__setattr__(self, "soft_delete", _mode(soft_delete, SoftDelete, "soft_delete"))
        added = self.added_columns
        if len(set(added)) != len(added):
            raise PayloadArgumentError(
                f"ChangeSet history and soft_delete name a column twice: {added}"
            )

    @property
    def added_columns(self) -> tuple[str, ...]:
        """The columns the SDK writes beside the source's (history's, soft deletes')."""
        return (
            *(self.history.columns if self.history else ()),
            *(self.soft_delete.columns if self.soft_delete else ()),
        )

    @property
    def updates_in_place(self) -> bool:
        """Whether its updates set some columns of a row and leave the others as they are
        (closing a version, flagging a deletion): what a server must be shown to do."""
        return self.history is not None or self.soft_delete is not None

    @property
    def guard_table(self) -> str:
        """The payload table of the positions the guard checks (each key once, its
        ``guarded`` column NULL)."""
        return f"{self.upsert_table}_guard"

    @property
    def positions_table(self) -> str:
        """The payload table of the positions the update records (each key once, its
        ``guarded`` column TRUE)."""
        return f"{self.upsert_table}_positions"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (what a payload manifest records)."""
        return {
            "key": list(self.key),
            "op_column": self.op_column,
            "order_by": list(self.order_by) if self.order_by is not None else None,
            "op_map": dict(self.op_map) if self.op_map is not None else None,
            "keep_columns": list(self.keep_columns),
            "upsert_table": self.upsert_table,
            "delete_table": self.delete_table,
            "order_as": dict(self.order_as) if self.order_as is not None else None,
            "guard": self.guard,
            "history": asdict(self.history) if self.history else None,
            "soft_delete": asdict(self.soft_delete) if self.soft_delete else None,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ChangeSet:
        return cls(
            doc["key"],
            op_column=doc.get("op_column"),
            order_by=doc.get("order_by"),
            op_map=doc.get("op_map"),
            keep_columns=doc.get("keep_columns") or (),
            upsert_table=doc.get("upsert_table") or "upserts",
            delete_table=doc.get("delete_table") or "deletes",
            order_as=doc.get("order_as"),
            guard=bool(doc.get("guard", False)),
            history=doc.get("history"),
            soft_delete=doc.get("soft_delete"),
        )

"""Last change wins per key, in SQL that Spark runs (and Hyper, for a small change set Spark
only tags: :mod:`tabhyper_update.builder.hyper_ranking`), for a
:class:`~tabhyper_update.values.changeset.ChangeSet`.

For each key the change with the greatest ``order_by`` wins. Inserts and updates become
*upserts* (so a replayed change set is harmless) and deletes keep only the key columns.

A **pre-image** is the row as it was before an update. It reads as "this key held a row
before this position": a delete of its key that every other change at the same position
outranks. So an update that keeps its key (pre- and post-image share key and position)
upserts, and one that moves a row to another key (``SET id = 2 WHERE id = 1``, or
``SET id = id + 1`` over many rows) deletes the old key and upserts the new one, exactly,
without pairing images (the feed does not say which post-image belongs to which pre-image).

Positions order as their source means them: a text ``order_by`` column is refused unless
``order_as`` says how it orders (``"number"``: whole numbers written as text; ``"text"``:
its text order is its meaning), and a change without a position (a NULL ``order_by``
value) is an error, never silently the oldest.
Every check that needs the data (NULL keys, unknown op values, ties on ``order_by``) is
folded into the same single pass that produces the result: offending rows are tagged and
staged beside the others, never collected, and reported from there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from ..values.changeset import (
    DEFAULT_OP_MAP,
    METADATA_COLUMNS,
    MISSING_OP,
    PARTIAL_UPDATE_OP,
    ChangeSet,
    History,
    OpMeaning,
    SoftDelete,
)
from ..values.errors import ArgumentTypeError, PayloadArgumentError, PayloadError
from ..values.names import is_name
from ..values.positions import order_sql, position_type
from ..values.spark_sql import query_over, sql_name, sql_text

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "BAD_COLUMN",
    "BAD_REASON",
    "FIRST_COLUMN",
    "KIND_DELETE",
    "KIND_ERRORS",
    "KIND_QUARANTINED",
    "KIND_UPSERT",
    "LAST_COLUMN",
    "PRIORITY_COLUMN",
    "BadRow",
    "CdcSpec",
    "latest_of",
    "position_column",
    "resolve_change_sets",
    "without_carry_overs",
]

KIND_UPSERT = "U"
KIND_DELETE = "D"
#: A change the target would refuse, set aside (``on_bad_rows="quarantine"``): it ranks as
#: any change, so a key whose last change is set aside keeps the value it had.
KIND_QUARANTINED = "Q"
KIND_NULL_KEY = "E_NULL_KEY"
KIND_UNKNOWN_OP = "E_UNKNOWN_OP"
KIND_TIE = "E_TIE"
KIND_NULL_ORDER = "E_NULL_ORDER"
KIND_ERRORS = (KIND_NULL_KEY, KIND_UNKNOWN_OP, KIND_NULL_ORDER, KIND_TIE)

KIND_COLUMN = "__tabhyper_kind"
OP_TEXT_COLUMN = "__tabhyper_op"
ORDER_TEXT_COLUMN = "__tabhyper_order"
#: A change's priority at its position: a pre-image 0, anything else 1.
PRIORITY_COLUMN = "__tabhyper_priority"
#: A change's commit time in microseconds since the epoch (:attr:`CdcSpec.committed`).
COMMITTED_COLUMN = "__tabhyper_committed"
#: The change-feed column that says when its source committed a change (Delta's change
#: data feed and Spark's changelog).
COMMIT_TIME_COLUMN = "_commit_timestamp"
#: History mode: whether a change is its key's first in the change set (its row ends the
#: data source's current version), and its last (its position is the key's, for the guard).
FIRST_COLUMN = "__tabhyper_first"
LAST_COLUMN = "__tabhyper_last"
_RANK_COLUMN = "__tabhyper_rank"
_TIES_COLUMN = "__tabhyper_n"
_DELETES_COLUMN = "__tabhyper_deletes"
_UPSERTS_COLUMN = "__tabhyper_upserts"
#: The ``order_by`` of a commit's changelog (Delta's change data feed and Spark's
#: changelog: ``_commit_version``; Iceberg's changelog view: ``_change_ordinal``).
COMMIT_ORDERS = (("_commit_version",), ("_change_ordinal",))


#: A set-aside change's reason and the column it names (tag columns of the changes).
BAD_REASON = "__tabhyper_reason"
BAD_COLUMN = "__tabhyper_column"


class BadRow(NamedTuple):
    """A row the target would refuse: the ``reason`` it is set aside for, the ``column``
    it names, and the Spark SQL ``condition`` over the source's row that finds it."""

    reason: str
    column: str
    condition: str


class Tagging(NamedTuple):
    """A change's tags in Spark SQL: its kind (upsert, delete, the error it is, or NULL for
    an ignored change) and the tag columns, each ``expr AS name``."""

    kind: str
    tags: list[str]


class Texts(NamedTuple):
    """Spark SQL of a change's op and its position as text (for error messages)."""

    op: str
    position: str


def position_column(index: int) -> str:
    """The tagged column holding a change's ``index``-th position, typed for ranking."""
    return f"__tabhyper_o{index}"


def latest_of(
    tagged: str,
    *,
    quote: Callable[[str], str],
    keys: Sequence[str],
    positions: int,
    keep: Sequence[str],
    op_text: str,
    order_text: str,
    carry_overs: Sequence[str] = (),
) -> str:
    """SQL that Spark and Hyper both read: the last change per key among the tagged rows
    of the relation ``tagged`` (:meth:`CdcSpec.tag_query`'s columns), as ``keep`` and the
    final kind, with the op and position texts for the error rows only.

    ``carry_overs`` (a commit's changelog: the row's columns): a delete and an upsert of one
    key at one position whose columns are all equal are a *carry-over* (a row a commit
    rewrote unchanged, or an update that changed nothing): both are left out before the
    ranking, so that the key's last real change, if any, wins.

    ``quote`` quotes a name in the engine's dialect; ``keys``, ``keep``, ``op_text`` and
    ``order_text`` are expressions over ``tagged`` in it. Error rows rank first, so a later
    valid change never hides them; rows sharing the key, the greatest positions and the
    priority are a tie. Positions are compared greatest first with NULLs last, spelled out
    (Spark puts NULLs last by default, Hyper first).
    """
    kind, rank, ties = quote(KIND_COLUMN), quote(_RANK_COLUMN), quote(_TIES_COLUMN)
    is_error = f"(substr({kind}, 1, 2) = 'E_')"
    if carry_overs:
        tagged = without_carry_overs(
            tagged, quote=quote, keys=keys, positions=positions, columns=carry_overs
        )
    ordering = (
        f"PARTITION BY {', '.join(keys)} ORDER BY {is_error} DESC, "
        + "".join(f"{quote(position_column(i))} DESC NULLS LAST, " for i in range(positions))
        + f"{quote(PRIORITY_COLUMN)} DESC"
    )
    # Over the same ordering, the rows up to and including the current row's peers: for a
    # row ranked first, how many share its place (one sort serves both).
    tied = f"count(1) OVER ({ordering} RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
    final_kind = (
        f"CASE WHEN {is_error} THEN {kind} WHEN {ties} > 1 THEN '{KIND_TIE}' ELSE {kind} END"
    )
    failed = f"substr({final_kind}, 1, 2) = 'E_'"
    latest = (
        f"SELECT * FROM (SELECT *, rank() OVER ({ordering}) AS {rank}, {tied} AS {ties} "
        f"FROM ({tagged}) AS tagged) AS ranked WHERE {rank} = 1"
    )
    return (
        f"SELECT {', '.join(keep)}, {final_kind} AS {kind}, "
        f"CASE WHEN {failed} THEN {op_text} END AS {quote(OP_TEXT_COLUMN)}, "
        f"CASE WHEN {failed} THEN {order_text} END AS {quote(ORDER_TEXT_COLUMN)} "
        f"FROM ({latest}) AS latest"
    )


def without_carry_overs(
    tagged: str,
    *,
    quote: Callable[[str], str],
    keys: Sequence[str],
    positions: int,
    columns: Sequence[str],
) -> str:
    """SQL that Spark and Hyper both read: the tagged rows of ``tagged`` but the
    carry-overs, a delete and an upsert of one key at one position whose ``columns`` are
    all equal (see :func:`latest_of`)."""
    kind = quote(KIND_COLUMN)
    # NULLs fall into one partition: a NULL equals a NULL here, as a carry-over's do.
    same = ", ".join([*keys, *(quote(position_column(i)) for i in range(positions)), *columns])
    deletes, upserts = quote(_DELETES_COLUMN), quote(_UPSERTS_COLUMN)
    return (
        f"SELECT * FROM (SELECT *, "
        f"count(CASE WHEN {kind} = '{KIND_DELETE}' THEN 1 END) OVER (PARTITION BY {same}) "
        f"AS {deletes}, "
        f"count(CASE WHEN {kind} = '{KIND_UPSERT}' THEN 1 END) OVER (PARTITION BY {same}) "
        f"AS {upserts} FROM ({tagged}) AS both_kinds) AS carried "
        f"WHERE NOT ({deletes} = 1 AND {upserts} = 1 AND {kind} IN "
        f"('{KIND_DELETE}', '{KIND_UPSERT}'))"
    )


def resolve_change_sets(
    tables: Sequence[str], changes: ChangeSet | Mapping[str, ChangeSet] | None
) -> dict[str, ChangeSet] | None:
    """Which change set reads which DataFrame (``tables`` are the DataFrames' names), with the
    payload table names each one writes. One :class:`ChangeSet` reads one DataFrame; a mapping
    gives each table of a multi-table change set its own, whose payload tables are then
    ``<table>_upserts`` and ``<table>_deletes`` unless named otherwise."""
    if changes is None:
        return None
    if isinstance(changes, ChangeSet):
        if len(tables) != 1:
            raise PayloadArgumentError(
                f"one ChangeSet reads one DataFrame, and {len(tables)} were given "
                f"({', '.join(map(repr, tables))}): give a mapping of the same table names to "
                "their ChangeSets, e.g. {'Orders': ChangeSet('order_id'), 'Customers': "
                "ChangeSet('customer_id')}"
            )
        resolved = {tables[0]: changes}
    else:
        resolved = _per_table(tables, changes)
    _check_payload_tables(resolved)
    return resolved


def _per_table(tables: Sequence[str], changes: Mapping[str, ChangeSet]) -> dict[str, ChangeSet]:
    """A multi-table change set: one ChangeSet per DataFrame, by the same names, each with
    its own payload tables (``<table>_upserts``, ``<table>_deletes`` unless named)."""
    _check_mapping(tables, changes)
    resolved = {}
    for name in tables:
        cs = changes[name]
        upserts = cs.upsert_table if cs.upsert_table != "upserts" else f"{name}_upserts"
        deletes = cs.delete_table if cs.delete_table != "deletes" else f"{name}_deletes"
        resolved[name] = replace(cs, upsert_table=upserts, delete_table=deletes)
    return resolved


def _check_mapping(tables: Sequence[str], changes: Mapping[str, ChangeSet]) -> None:
    """Refuse a mapping of change sets that is empty, holds anything but ChangeSets, or
    names other tables than the DataFrames'."""
    if not changes:
        raise PayloadArgumentError("the mapping of change sets is empty")
    for name, cs in changes.items():
        if not isinstance(cs, ChangeSet):
            raise ArgumentTypeError(
                f"change set {name!r}: expected a ChangeSet, got {type(cs).__name__} "
                "(build_payload's second argument is a ChangeSet(key=..., op_column=..., "
                "order_by=...) or a mapping of table name → ChangeSet)"
            )
    missing = [t for t in tables if t not in changes]
    extra = [str(t) for t in changes if t not in tables]
    said = [f"no ChangeSet for table(s) {', '.join(map(repr, missing))}"] if missing else []
    said += [f"no DataFrame for change set(s) {', '.join(map(repr, extra))}"] if extra else []
    if said:
        raise PayloadArgumentError(
            f"{'; '.join(said)}: a multi-table change set maps the same table names to "
            "DataFrames and to ChangeSets"
        )


def _check_payload_tables(resolved: Mapping[str, ChangeSet]) -> None:
    """Refuse a payload table name that is empty or written by two change sets."""
    owner: dict[str, str] = {}
    for name, cs in resolved.items():
        for value, what in ((cs.upsert_table, "upsert_table"), (cs.delete_table, "delete_table")):
            if not is_name(value):
                raise PayloadArgumentError(f"change set {name!r}: {what} must be a non-empty name")
            if value in owner:
                raise PayloadArgumentError(
                    f"change sets {owner[value]!r} and {name!r} both write payload table "
                    f"{value!r}: give them different upsert_table / delete_table names"
                )
            owner[value] = name


_GUARD_TYPES = ("tinyint", "smallint", "int", "bigint", "decimal", "date", "timestamp")


def _named_columns(
    change_set: ChangeSet, columns: Sequence[str], fail: Callable[[str], PayloadError]
) -> tuple[str, tuple[str, ...]]:
    """The columns ``change_set`` names, checked against the DataFrame's ``columns``: its
    key, op, order_by and keep_columns; its op column and order_by columns returned."""
    keys = change_set.key
    if len(set(keys)) != len(keys):
        raise fail(f"key names a column twice: {list(keys)}")
    _need(keys, "key", columns, fail)
    op_column, orders = _feed_columns(change_set, columns, fail)
    if op_column in keys or set(orders) & set(keys):
        raise fail("the op and order_by columns cannot be key columns")
    _need(change_set.keep_columns, "keep_columns", columns, fail)
    return op_column, orders


def _feed_columns(
    change_set: ChangeSet, columns: Sequence[str], fail: Callable[[str], PayloadError]
) -> tuple[str, tuple[str, ...]]:
    """The change set's op column and its order_by columns: as it names them, else
    recognised by a change feed's own names (Delta's, Spark's and Iceberg's changelogs,
    flattened Debezium rows)."""
    op_column = change_set.op_column
    if op_column is None:
        op_column = next((c for c in ("_change_type", "op", "__op") if c in columns), None)
        if op_column is None:
            raise fail(
                "a change set needs op_column= (no '_change_type', 'op' or '__op' column was found)"
            )
    _need([op_column], "op", columns, fail)
    order_by = change_set.order_by
    if order_by is None:
        order_by = next((o for o in COMMIT_ORDERS if o[0] in columns), None)
        if order_by is None:
            raise fail(
                "order_by= is required to pick the last change per key (e.g. a commit "
                "version, a log sequence number or an event timestamp)"
            )
    _need(order_by, "order_by", columns, fail)
    return op_column, tuple(order_by)


def _need(
    names: Sequence[str], role: str, columns: Sequence[str], fail: Callable[[str], PayloadError]
) -> None:
    """Refuse a ``role`` column (key, op, order_by, keep_columns) the change set lacks."""
    for name in names:
        if name not in columns:
            raise fail(
                f"{role} column {name!r} is not in the change set; its columns are "
                f"{', '.join(map(repr, columns))}"
            )


def _guard(
    orders: Sequence[str],
    change_set: ChangeSet,
    types: Mapping[str, str],
    fail: Callable[[str], PayloadError],
) -> dict[str, Any]:
    """The guard's settings of a :class:`CdcSpec` (none without ``guard=True``), checked:
    its tables, and the position column staged for them alone (the positions table holds
    it, not the data), unless ``keep_columns`` keeps it."""
    if not change_set.guard:
        return {"guard_only": ()}
    _check_guard(orders, change_set, types, fail)
    return {
        "guard_table": change_set.guard_table,
        "positions_table": change_set.positions_table,
        "guard_only": () if orders[0] in change_set.keep_columns else (orders[0],),
    }


def _commits(op_column: str, orders: Sequence[str], types: Mapping[str, str]) -> dict[str, Any]:
    """Whether a change set is a commit's changelog (:data:`COMMIT_ORDERS`), and the Spark
    SQL of its commit time in microseconds where the feed has one (a timestamp)."""
    timed = types.get(COMMIT_TIME_COLUMN) == "timestamp"
    return {
        "commit": op_column == "_change_type" and tuple(orders) in COMMIT_ORDERS,
        "committed": f"unix_micros({sql_name(COMMIT_TIME_COLUMN)})" if timed else "",
    }


def _check_guard(
    orders: Sequence[str],
    change_set: ChangeSet,
    types: Mapping[str, str],
    fail: Callable[[str], PayloadError],
) -> None:
    """A guard compares one position column as the data source holds it."""
    if len(orders) != 1:
        raise fail(
            f"ChangeSet(guard=True) compares one position column; order_by names "
            f"{len(orders)} ({', '.join(map(repr, orders))})"
        )
    kind = (types.get(orders[0]) or "").lower()
    if change_set.order_as or (kind and not kind.startswith(_GUARD_TYPES)):
        raise fail(
            f"ChangeSet(guard=True) needs order_by {orders[0]!r} to be a number, a date or a "
            f"timestamp (the data source compares it as one), not {kind or 'text'}"
        )


_MODE_NAMES = {"history": "History", "soft_delete": "SoftDelete"}


def _at_sql(
    at: str | None,
    orders: Sequence[str],
    columns: Sequence[str],
    what: str,
    fail: Callable[[str], PayloadError],
) -> str:
    """Spark SQL of the value a mode (history, soft deletes) dates a change by: its ``at``
    column, else its position (one ``order_by`` column)."""
    if at is not None:
        _need([at], f"{what} at", columns, fail)
        return sql_name(at)
    if len(orders) != 1:
        raise fail(
            f"ChangeSet({what}=...) dates a change by its position, and order_by names "
            f"{len(orders)} columns ({', '.join(map(repr, orders))}): name the column that "
            f"dates it, e.g. {what}={_MODE_NAMES[what]}(at='_commit_timestamp')"
        )
    return sql_name(orders[0])


def _modes(
    change_set: ChangeSet,
    orders: Sequence[str],
    columns: Sequence[str],
    fail: Callable[[str], PayloadError],
) -> dict[str, Any]:
    """History mode's and soft deletes' settings of a :class:`CdcSpec`, checked: the value
    each dates a change by, and no column of theirs among the source's."""
    _check_added(change_set, columns, fail)
    found: dict[str, Any] = {}
    if change_set.history is not None:
        found["history"] = change_set.history
        found["history_at"] = _at_sql(change_set.history.at, orders, columns, "history", fail)
    if change_set.soft_delete is not None:
        found["soft_delete"] = change_set.soft_delete
        found["deleted_at"] = _at_sql(
            change_set.soft_delete.at, orders, columns, "soft_delete", fail
        )
    return found


def _check_added(
    change_set: ChangeSet, columns: Sequence[str], fail: Callable[[str], PayloadError]
) -> None:
    """A column the SDK writes for history or soft deletes must not be one of the source's."""
    clash = [c for c in change_set.added_columns if c in columns]
    if clash:
        raise fail(
            f"column {clash[0]!r} is in the change set and is also a column the SDK writes "
            "for history or soft deletes: rename it, or give the mode other names, e.g. "
            "History(valid_from='valid_since')"
        )


def _among(op: str, values: Sequence[str]) -> str:
    """Spark SQL: whether the op (``op``: its SQL) is one of ``values``; NULL-safe (a NULL
    op is no known value)."""
    if not values:
        return "false"
    return f"coalesce({op} IN ({', '.join(map(sql_text, values))}), false)"


@dataclass(frozen=True)
class CdcSpec:
    """A validated description of a change set: key, op column, ordering, op meanings."""

    key: tuple[str, ...]
    op_column: str
    order_by: tuple[str, ...]
    op_map: Mapping[str, OpMeaning]
    dropped_columns: tuple[str, ...]
    #: The table this change set feeds, named in errors (a multi-table change set).
    table: str | None = None
    #: Per ``order_by`` column, the Spark SQL that orders it as its source means it (a
    #: number written as text becomes a number; anything it cannot read becomes NULL,
    #: which is an error).
    order_sql: tuple[str, ...] = ()
    #: Per ``order_by`` column, Spark's type of its position (``None``: not known).
    position_types: tuple[str | None, ...] = ()
    #: The tables of the positions that guard the update (each key's twice) and that it
    #: records (once) (``ChangeSet(guard=True)``).
    guard_table: str | None = None
    positions_table: str | None = None
    #: Columns staged only for the guard's tables, not sent in the upsert table (the
    #: position the guard compares, unless ``keep_columns`` names it).
    guard_only: tuple[str, ...] = ()
    #: A commit's changelog (:data:`COMMIT_ORDERS`): one commit's delete and insert of a
    #: key are one update, and a carry-over is no change.
    commit: bool = False
    #: Spark SQL of a change's commit time in microseconds since the epoch, when the change
    #: feed says it (:data:`COMMIT_TIME_COLUMN`, a timestamp); empty otherwise.
    committed: str = ""
    #: History mode (every change a version row) and soft deletes (a delete flags the row),
    #: with the Spark SQL of the value each dates a change by (:func:`_at_sql`).
    history: History | None = None
    history_at: str = ""
    soft_delete: SoftDelete | None = None
    deleted_at: str = ""
    #: ``on_bad_rows="quarantine"``: a NULL key and the upserts ``bad_rows`` find are set
    #: aside (:data:`KIND_QUARANTINED`), not errors.
    quarantine: bool = False
    bad_rows: tuple[BadRow, ...] = ()

    @classmethod
    def create(
        cls,
        columns: Sequence[str],
        change_set: ChangeSet,
        *,
        table: str | None = None,
        types: Mapping[str, str] | None = None,
    ) -> CdcSpec:
        """The change set ``change_set`` of a DataFrame with ``columns``; ``types`` (column →
        Spark's type name) lets text ``order_by`` columns be checked before any job."""
        where = f"table {table!r}: " if table is not None else ""

        def fail(message: str) -> PayloadError:
            return PayloadError(where + message)

        known = types or {}
        keys = change_set.key
        op_column, orders = _named_columns(change_set, columns, fail)
        guard = _guard(orders, change_set, known, fail)
        kept = (*change_set.keep_columns, *guard["guard_only"])
        metadata = {op_column, *orders, *(m for m in METADATA_COLUMNS if m in columns)}
        order_as = change_set.order_as or {}
        return cls(
            keys,
            op_column,
            orders,
            dict(change_set.op_map if change_set.op_map is not None else DEFAULT_OP_MAP),
            tuple(c for c in columns if c in metadata and c not in kept),
            table,
            tuple(order_sql(o, known.get(o), order_as.get(o), fail) for o in orders),
            tuple(position_type(known.get(o), order_as.get(o)) for o in orders),
            **guard,
            **_commits(op_column, orders, known),
            **_modes(change_set, orders, columns, fail),
        )

    def data_columns(self, columns: Sequence[str]) -> list[str]:
        """The payload's columns (everything but the change-feed metadata)."""
        return [c for c in columns if c not in self.dropped_columns]

    def latest_changes(self, df: DataFrame) -> DataFrame:
        """Last change per key, tagged with its kind; error rows are kept and tagged.

        One shuffle (two windows over the same key partitioning; none when ``df`` is one
        partition); nothing is collected. The plan is one Spark SQL query over ``df``.
        """
        return query_over(df, self.latest_query(df.columns))

    def tags(self) -> Tagging:
        """Spark SQL of a change's kind (:data:`KIND_COLUMN`: upsert, delete or the error it
        is; NULL for an ignored change) and the tag columns beside it, each ``expr AS name``:
        the kind, the priority (:data:`PRIORITY_COLUMN`) and the typed positions
        (:func:`position_column`). Over the source's own columns."""
        op = self.texts().op
        among = {
            m: _among(op, [v for v, meaning in self.op_map.items() if meaning == m])
            for m in ("upsert", "delete", "preimage", "ignore")
        }
        null_key = " OR ".join(f"{sql_name(k)} IS NULL" for k in self.key)
        order_sql = self.order_sql or tuple(map(sql_name, self.order_by))
        bad = self._bad_rows(null_key, among["upsert"])
        kind = self._kind_sql(among, null_key, self._unpositioned(order_sql), bad)
        preimage, delete = among["preimage"], among["delete"]
        return Tagging(
            kind,
            [
                f"{kind} AS {sql_name(KIND_COLUMN)}",
                # A pre-image says its key held a row before this position: every other change
                # at the same position outranks it. In a commit's changelog an insert also
                # outranks a delete of its key: the commit replaced the row (an update written
                # as a delete and an insert, as Iceberg's copy-on-write tables write it).
                f"CASE WHEN {preimage} THEN 0 WHEN {delete} THEN {1 if self.commit else 2} "
                f"ELSE 2 END AS {sql_name(PRIORITY_COLUMN)}",
                *(f"{o} AS {sql_name(position_column(i))}" for i, o in enumerate(order_sql)),
                *([f"{self.committed} AS {sql_name(COMMITTED_COLUMN)}"] if self.committed else []),
                *(
                    [f"{bad[0]} AS {sql_name(BAD_REASON)}", f"{bad[1]} AS {sql_name(BAD_COLUMN)}"]
                    if bad
                    else []
                ),
            ],
        )

    def _kind_sql(
        self, among: Mapping[str, str], null_key: str, null_order: str, bad: tuple[str, str] | None
    ) -> str:
        """Spark SQL of a change's kind (``among``: whether its op means each meaning;
        ``null_key`` / ``null_order``: whether its key / position is missing; ``bad``: why it
        is set aside). Ignored changes go first (a Debezium truncate has no key), then
        unknown ops."""
        upsert, delete, preimage = among["upsert"], among["delete"], among["preimage"]
        no_key = KIND_QUARANTINED if self.quarantine else KIND_NULL_KEY
        return (
            f"CASE WHEN {among['ignore']} THEN NULL "
            f"WHEN NOT ({upsert} OR {delete} OR {preimage}) THEN '{KIND_UNKNOWN_OP}' "
            f"WHEN {null_key} THEN '{no_key}' "
            f"WHEN {null_order} THEN '{KIND_NULL_ORDER}' "
            + (f"WHEN {bad[0]} IS NOT NULL THEN '{KIND_QUARANTINED}' " if bad else "")
            + f"WHEN {upsert} THEN '{KIND_UPSERT}' ELSE '{KIND_DELETE}' END"
        )

    def _unpositioned(self, order_sql: Sequence[str]) -> str:
        """Spark SQL: whether a change has no position (``order_sql``: its values' SQL). The
        first ``order_by`` value is NULL, or a value is there but cannot be read as the
        position it should be; a later NULL only ranks lowest (a tie-breaker). In history
        mode dated by a column of its own, a change without a date is no version either."""
        unread = [
            f"({sql_name(raw)} IS NOT NULL AND ({o}) IS NULL)"
            for raw, o in zip(self.order_by, order_sql, strict=True)
            if o != sql_name(raw)
        ]
        undated = [f"{self.history_at} IS NULL"] if self.history and self.history.at else []
        return " OR ".join([f"({order_sql[0]}) IS NULL", *unread, *undated])

    def _bad_rows(self, null_key: str, upsert: str) -> tuple[str, str] | None:
        """Spark SQL of why a change is set aside and the column it names (NULL: it is not),
        first reason first: a NULL key, then each of :attr:`bad_rows` on an upsert (a
        delete sends its key alone). None unless ``on_bad_rows="quarantine"``."""
        if not self.quarantine:
            return None
        checks = [("null_key", f"{self.key[0]}", null_key)] + [
            (b.reason, b.column, f"{upsert} AND ({b.condition})") for b in self.bad_rows
        ]
        reason = "CASE " + " ".join(f"WHEN {c} THEN {sql_text(r)}" for r, _, c in checks) + " END"
        nulls = [f"WHEN {sql_name(k)} IS NULL THEN {sql_text(k)}" for k in self.key]
        column = (
            f"CASE {' '.join(nulls)} "
            + " ".join(f"WHEN {c} THEN {sql_text(col)}" for r, col, c in checks[1:])
            + " END"
        )
        return reason, column

    def tag_query(self) -> Callable[[str], str]:
        """Spark SQL over a source named in the text: every change but the ignored ones,
        with its :meth:`tags`. No ranking: :func:`latest_of` ranks these rows, in Spark or
        in Hyper."""
        tags = ", ".join(self.tags().tags)
        kind_col = sql_name(KIND_COLUMN)

        def query(source: str) -> str:
            return (
                f"SELECT * FROM (SELECT *, {tags} FROM {source}) AS changes "
                f"WHERE {kind_col} IS NOT NULL"
            )

        return query

    def texts(self) -> Texts:
        """Spark SQL of a change's op and position as text (named in error messages)."""
        raw_orders = ", ".join(map(sql_name, self.order_by))
        # to_json names the fields after the columns.
        return Texts(
            f"CAST({sql_name(self.op_column)} AS STRING)", f"to_json(struct({raw_orders}))"
        )

    def latest_query(self, columns: Sequence[str]) -> Callable[[str], str]:
        """:meth:`latest_changes` as Spark SQL text over a source named in the text."""
        tagged = self.tag_query()
        op_text, order_text = self.texts()
        keys = list(map(sql_name, self.key))
        data = list(map(sql_name, columns))
        # A carry-over's delete and insert differ only in the change feed's own columns.
        row = list(map(sql_name, self.data_columns(columns)))

        def query(source: str) -> str:
            return latest_of(
                tagged(source),
                quote=sql_name,
                keys=keys,
                positions=len(self.order_by),
                keep=data,
                op_text=op_text,
                order_text=order_text,
                carry_overs=row if self.commit else (),
            )

        return query

    def _sql_of(self, column: str) -> str:
        if not self.order_sql:
            return sql_name(column)
        return self.order_sql[self.order_by.index(column)]

    def describe_error(
        self, kind: str, key_values: Sequence[object], op: object, order: object, count: int
    ) -> str:
        where = f"table {self.table!r}: " if self.table is not None else ""
        return where + self._describe_error(kind, key_values, op, order, count)

    def _describe_error(
        self, kind: str, key_values: Sequence[object], op: object, order: object, count: int
    ) -> str:
        key_text = ", ".join(f"{k}={v!r}" for k, v in zip(self.key, key_values, strict=True))
        more = f" ({count} offending rows in the change set)" if count > 1 else ""
        if kind == KIND_NULL_KEY:
            nulls = [k for k, v in zip(self.key, key_values, strict=True) if v is None]
            return (
                f"key column {nulls[0]!r} is NULL in the change set, e.g. the row with key "
                f"({key_text}), op {op!r}{more}; a NULL key cannot identify a target row"
            )
        if kind == KIND_UNKNOWN_OP:
            return self._unknown_op(op, key_text, more)
        if kind == KIND_NULL_ORDER:
            return self._no_position(op, order, key_text, more)
        return (
            f"several changes for key ({key_text}) share the greatest order_by value "
            f"{order} in column(s) {', '.join(map(repr, self.order_by))}{more}: "
            "the last change cannot be told; order by a column that is unique per key"
        )

    def _unknown_op(self, op: object, key_text: str, more: str) -> str:
        """An op the op map does not know: an event that is no change envelope, a MongoDB
        update without its document, a truncate, or another value."""
        if op == MISSING_OP:
            return (
                f"the change set holds an event without an 'op'{more}, e.g. with key "
                f"({key_text}): not a Debezium change event envelope (a row flattened by "
                "ExtractNewRecordState is a plain change set: read it with a ChangeSet "
                "naming its op column)"
            )
        if op == PARTIAL_UPDATE_OP:
            return (
                f"the change set holds a MongoDB update that carries only what changed "
                f"(updateDescription), not the document{more}, e.g. with key ({key_text}): "
                "a row cannot be replaced from it. Set the connector's capture.mode to "
                "change_streams_update_full (or change_streams_update_full_with_pre_image)"
            )
        if op == "t" and self.op_map.get("d") == "delete" and "c" in self.op_map:
            return (
                f"the change set holds a Debezium truncate (op 't'){more}: a truncate has "
                "no key and no order against other partitions' events, so no update can "
                "place it. Clear or republish the target yourself, or drop truncates with "
                "Debezium(..., truncate='ignore') (op_map={'t': 'ignore'})"
            )
        known = ", ".join(map(repr, self.op_map))
        return (
            f"op column {self.op_column!r} holds the unknown value {op!r}, e.g. for key "
            f"({key_text}){more}; known values: {known} (pass op_map= to map others)"
        )

    def _no_position(self, op: object, order: object, key_text: str, more: str) -> str:
        """A change whose position is NULL (or does not read as the position it should be),
        with what a Debezium user sets for it."""
        read = [o for o in self.order_by if self._sql_of(o) != sql_name(o)]
        unread = (
            f" (first column), or a value that does not read as the position it should "
            f"be in {', '.join(map(repr, read))}"
            if read
            else " (first column)"
        )
        debezium = (
            " (Debezium: the events lack that position field; pass connector= naming "
            "their connector, e.g. Debezium(..., connector='mysql'), or position=; a row "
            "ExtractNewRecordState flattened carries it where its add.fields names it, "
            "e.g. add.fields=op,lsn)"
            if any(o.startswith("__source_") for o in self.order_by)
            else ""
        )
        dated = (
            f", or its History(at={self.history.at!r}) column is NULL (a version needs "
            "the date it starts at)"
            if self.history and self.history.at
            else ""
        )
        return (
            f"the change for key ({key_text}), op {op!r}, has no position: order_by "
            f"values {order} hold NULL{unread}{dated}{more}{debezium}; a change without a "
            "position cannot be ordered against the others"
        )

"""Change-set conventions and last-change-wins per key, computed by Spark.

A change set is a DataFrame with an operation column. These conventions are understood
out of the box (their values do not collide, so one table serves them all):

| convention              | upsert                          | delete   | dropped            |
|-------------------------|---------------------------------|----------|--------------------|
| Delta Change Data Feed  | insert, update_postimage        | delete   | update_preimage    |
| Debezium (``op``)       | c (create), r (snapshot), u     | d        |                    |
| plain                   | I, U                            | D        |                    |

``op_map`` replaces that table with the caller's own: each op value maps to ``"upsert"``
(``"insert"`` and ``"update"`` are accepted as synonyms), ``"delete"`` or ``"ignore"``.

For each key the change with the greatest ``order_by`` wins. Inserts and updates become
*upserts* (so a replayed change set is harmless) and deletes keep only the key columns.
Every check that needs the data (NULL keys, unknown op values, ties on ``order_by``) is
folded into the same single Spark pass that produces the result: offending rows are tagged
and written aside, never collected, and reported from there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Literal

from .actions import Delete, Upsert, _Action
from .conditions import keys_match
from .errors import PayloadError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "DEFAULT_OP_MAP",
    "KIND_DELETE",
    "KIND_ERRORS",
    "KIND_UPSERT",
    "METADATA_COLUMNS",
    "CdcSpec",
    "derived_actions",
]

OpMeaning = Literal["upsert", "delete", "ignore"]

DEFAULT_OP_MAP: dict[str, OpMeaning] = {
    # Delta Change Data Feed
    "insert": "upsert",
    "update_postimage": "upsert",
    "update_preimage": "ignore",
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
}

#: Change-feed bookkeeping that never reaches the payload unless kept explicitly.
METADATA_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")

KIND_UPSERT = "U"
KIND_DELETE = "D"
KIND_NULL_KEY = "E_NULL_KEY"
KIND_UNKNOWN_OP = "E_UNKNOWN_OP"
KIND_TIE = "E_TIE"
KIND_ERRORS = (KIND_NULL_KEY, KIND_UNKNOWN_OP, KIND_TIE)

#: Columns added to the staged change set (never part of the payload tables). Every
#: internal column starts with this prefix, which user columns may not.
RESERVED_PREFIX = "__tabhyper_"
KIND_COLUMN = "__tabhyper_kind"
OP_TEXT_COLUMN = "__tabhyper_op"
ORDER_TEXT_COLUMN = "__tabhyper_order"


def _normalise_op_map(op_map: Mapping[str, str] | None) -> dict[str, OpMeaning]:
    if op_map is None:
        return dict(DEFAULT_OP_MAP)
    synonyms: dict[str, OpMeaning] = {
        "upsert": "upsert",
        "insert": "upsert",
        "update": "upsert",
        "delete": "delete",
        "ignore": "ignore",
    }
    result: dict[str, OpMeaning] = {}
    for value, meaning in op_map.items():
        if meaning not in synonyms:
            raise PayloadError(
                f"op_map[{value!r}] is {meaning!r}; expected 'upsert' (or 'insert' / "
                "'update'), 'delete' or 'ignore'"
            )
        result[str(value)] = synonyms[meaning]
    if not result:
        raise PayloadError("op_map is empty")
    return result


@dataclass(frozen=True)
class CdcSpec:
    """A validated description of a change set: key, op column, ordering, op meanings."""

    key: tuple[str, ...]
    op_column: str
    order_by: tuple[str, ...]
    op_map: Mapping[str, OpMeaning]
    dropped_columns: tuple[str, ...]

    @classmethod
    def create(
        cls,
        columns: Sequence[str],
        *,
        key: Sequence[str] | str,
        op_column: str | None,
        order_by: Sequence[str] | str | None,
        op_map: Mapping[str, str] | None,
        keep_columns: Sequence[str] = (),
    ) -> CdcSpec:
        keys = (key,) if isinstance(key, str) else tuple(key)
        if not keys:
            raise PayloadError("key must name at least one column")
        present = set(columns)

        def need(name: str, role: str) -> None:
            if name not in present:
                raise PayloadError(
                    f"{role} column {name!r} is not in the change set; its columns are "
                    f"{', '.join(repr(c) for c in columns)}"
                )

        if len(set(keys)) != len(keys):
            raise PayloadError(f"key names a column twice: {list(keys)}")
        for k in keys:
            need(k, "key")
        if op_column is None:
            op_column = next((c for c in ("_change_type", "op", "__op") if c in present), None)
            if op_column is None:
                raise PayloadError(
                    "a change set needs op_column= (no '_change_type', 'op' or '__op' column "
                    "was found)"
                )
        need(op_column, "op")
        if order_by is None:
            if "_commit_version" not in present:
                raise PayloadError(
                    "order_by= is required to pick the last change per key (e.g. a commit "
                    "version, a log sequence number or an event timestamp)"
                )
            order_by = ("_commit_version",)
        orders = (order_by,) if isinstance(order_by, str) else tuple(order_by)
        if not orders:
            raise PayloadError("order_by must name at least one column")
        for o in orders:
            need(o, "order_by")
        if op_column in keys or set(orders) & set(keys):
            raise PayloadError("the op and order_by columns cannot be key columns")
        for c in keep_columns:
            need(c, "keep_columns")
        metadata = {op_column, *orders, *(m for m in METADATA_COLUMNS if m in present)}
        dropped = tuple(c for c in columns if c in metadata and c not in keep_columns)
        return cls(keys, op_column, orders, _normalise_op_map(op_map), dropped)

    def data_columns(self, columns: Sequence[str]) -> list[str]:
        """The payload's columns (everything but the change-feed metadata)."""
        return [c for c in columns if c not in self.dropped_columns]

    def latest_changes(self, df: DataFrame) -> DataFrame:
        """Last change per key, tagged with its kind; error rows are kept and tagged.

        One shuffle (two windows over the same key partitioning); nothing is collected.
        """
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        def col(name: str) -> Column:
            # Quoted, so that a name with a dot or a backtick is one column, not a path.
            return F.col("`" + name.replace("`", "``") + "`")

        op = col(self.op_column).cast("string")
        by_meaning: dict[str, list[str]] = {"upsert": [], "delete": [], "ignore": []}
        for value, meaning in self.op_map.items():
            by_meaning[meaning].append(value)

        def among(values: list[str]) -> Column:
            return op.isin(values) if values else F.lit(False)

        null_key = reduce(lambda a, b: a | b, [col(k).isNull() for k in self.key])
        kind = (
            F.when(null_key, F.lit(KIND_NULL_KEY))
            .when(among(by_meaning["upsert"]), F.lit(KIND_UPSERT))
            .when(among(by_meaning["delete"]), F.lit(KIND_DELETE))
            .when(among(by_meaning["ignore"]), F.lit(None))
            .otherwise(F.lit(KIND_UNKNOWN_OP))
        )
        is_error = F.col(KIND_COLUMN).startswith("E_")
        tagged = df.withColumn(KIND_COLUMN, kind).filter(F.col(KIND_COLUMN).isNotNull())
        keys = [col(k) for k in self.key]
        # Error rows sort first so that a later valid change can never hide them.
        ranked = Window.partitionBy(*keys).orderBy(
            is_error.desc(), *[col(o).desc() for o in self.order_by]
        )
        latest = (
            tagged.withColumn("__tabhyper_rank", F.rank().over(ranked))
            .filter(F.col("__tabhyper_rank") == 1)
            .withColumn("__tabhyper_n", F.count(F.lit(1)).over(Window.partitionBy(*keys)))
        )
        final_kind = (
            F.when(is_error, F.col(KIND_COLUMN))
            .when(F.col("__tabhyper_n") > 1, F.lit(KIND_TIE))
            .otherwise(F.col(KIND_COLUMN))
        )
        order_text = F.to_json(F.struct(*[col(o) for o in self.order_by]))
        final_is_error = final_kind.startswith("E_")
        return (
            latest.withColumn(KIND_COLUMN, final_kind)
            .withColumn(OP_TEXT_COLUMN, F.when(final_is_error, op))
            .withColumn(ORDER_TEXT_COLUMN, F.when(final_is_error, order_text))
            .drop("__tabhyper_rank", "__tabhyper_n")
        )

    def describe_error(
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
            known = ", ".join(repr(v) for v in self.op_map)
            return (
                f"op column {self.op_column!r} holds the unknown value {op!r}, e.g. for key "
                f"({key_text}){more}; known values: {known} (pass op_map= to map others)"
            )
        return (
            f"several changes for key ({key_text}) share the greatest order_by value "
            f"{order} in column(s) {', '.join(repr(o) for o in self.order_by)}{more}: "
            "the last change cannot be told; order by a column that is unique per key"
        )


def derived_actions(
    key: Sequence[str],
    *,
    target_schema: str,
    target_table: str,
    source_schema: str,
    delete_table: str | None,
    upsert_table: str | None,
) -> list[_Action]:
    """Delete (by key) then upsert (by key), for the tables that hold rows."""
    condition = keys_match(*key)
    actions: list[_Action] = []
    if delete_table is not None:
        actions.append(
            Delete(
                target_schema=target_schema,
                target_table=target_table,
                source_schema=source_schema,
                source_table=delete_table,
                condition=condition,
            )
        )
    if upsert_table is not None:
        actions.append(
            Upsert(
                target_schema=target_schema,
                target_table=target_table,
                source_schema=source_schema,
                source_table=upsert_table,
                condition=condition,
            )
        )
    return actions

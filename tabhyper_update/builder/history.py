"""History mode and soft deletes: a change set's changes as the rows and payload tables that
keep every version of a row, or a deleted row flagged
(:class:`~tabhyper_update.values.changeset.History`,
:class:`~tabhyper_update.values.changeset.SoftDelete`).

**History.** Each change of a key at its own position is kept (what :func:`latest_of` keeps
of the changes at one position: a pre-image and a commit's replaced row are outranked, and
a tie is an error). Ordered by position, an upsert is a *version* valid from its date (its
position, or the mode's ``at`` column) to the next change's date, current where no change
follows; a delete ends the version before it. The payload holds the versions (upserted by
key and start, so a re-run writes the same rows again) and, per key, its first change's date:
the data source's current version of the key ends there (an update that sets only the end
and the current flag, on versions that started earlier, so a re-run closes nothing more).

**Soft deletes.** Without history, the last change per key is kept as ever; an upsert writes
the row with the flag FALSE and the deletion's date NULL, a delete sets only the flag and
the date on the row. With history, a delete flags the version it ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..local.hyper import quote_name
from ..values.spark_sql import sql_name
from .cdc import (
    FIRST_COLUMN,
    KIND_COLUMN,
    KIND_DELETE,
    KIND_UPSERT,
    LAST_COLUMN,
    CdcSpec,
    latest_of,
    position_column,
)
from .hyper_parts import STAGED_BUCKET, Staged, kind_is, size_sql
from .hyper_types import ColumnPlan, plan_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Added", "added_columns", "mode_tables", "versions_query"]

#: The next change's date, and its kind (NULL: no change of the key follows).
_END_COLUMN = "__tabhyper_end"
_NEXT_COLUMN = "__tabhyper_next"


class Added(NamedTuple):
    """A column the SDK writes beside the source's: its plan (named as the data source
    holds it), its value as Spark SQL over the ranked changes, and its role."""

    plan: ColumnPlan
    sql: str
    role: str


def versions_query(spec: CdcSpec, columns: Sequence[str]) -> Callable[[str], str]:
    """Spark SQL over a source named in the text: every change kept as a version or an end
    (one per key and position), with the next change's date and kind and whether it is the
    key's first and last; errors tagged as :meth:`CdcSpec.latest_query` tags them."""
    tagged = spec.tag_query()
    op_text, order_text = spec.texts()
    keys = list(map(sql_name, spec.key))
    positions = [sql_name(position_column(i)) for i in range(len(spec.order_by))]
    row = list(map(sql_name, spec.data_columns(columns)))
    kind = sql_name(KIND_COLUMN)
    ascending = f"PARTITION BY {', '.join(keys)} ORDER BY " + ", ".join(
        f"{p} ASC NULLS FIRST" for p in positions
    )

    def query(source: str) -> str:
        each = latest_of(
            tagged(source),
            quote=sql_name,
            keys=[*keys, *positions],
            positions=len(positions),
            keep=[*(sql_name(c) for c in columns), *positions],
            op_text=op_text,
            order_text=order_text,
            carry_overs=row if spec.commit else (),
        )
        return (
            f"SELECT *, lead({spec.history_at}) OVER ({ascending}) AS {sql_name(_END_COLUMN)}, "
            f"lead({kind}) OVER ({ascending}) AS {sql_name(_NEXT_COLUMN)}, "
            f"row_number() OVER ({ascending}) = 1 AS {sql_name(FIRST_COLUMN)}, "
            f"lead(1) OVER ({ascending}) IS NULL AS {sql_name(LAST_COLUMN)} "
            f"FROM ({each}) AS changes"
        )

    return query


def added_columns(spec: CdcSpec, df: DataFrame, table: str, database_version: int) -> list[Added]:
    """The columns history and soft deletes write, planned from the type of the column
    that dates a change; none for a change set in neither mode."""
    from pyspark.sql.types import BooleanType, StructField

    fields = {sql_name(f.name): f for f in df.schema.fields}

    def planned(name: str, at: str | None, nullable: bool = True) -> ColumnPlan:
        data_type = fields[at].dataType if at is not None else BooleanType()
        field = StructField(name, data_type, nullable)
        return plan_column(field, table=table, database_version=database_version)

    kind, end, nxt = sql_name(KIND_COLUMN), sql_name(_END_COLUMN), sql_name(_NEXT_COLUMN)
    found: list[Added] = []
    history, soft = spec.history, spec.soft_delete
    if history is not None:
        at = spec.history_at
        found += [
            Added(planned(history.valid_from, at), at, "version"),
            Added(planned(history.valid_to, at), end, "version"),
            Added(planned(history.current, None, False), f"{nxt} IS NULL", "version"),
        ]
    if soft is not None and history is not None:
        gone = f"{nxt} <=> '{KIND_DELETE}'"
        found += [
            Added(planned(soft.deleted, None, False), gone, "version"),
            Added(
                planned(soft.deleted_at, spec.history_at),
                f"CASE WHEN {gone} THEN {end} END",
                "version",
            ),
            # The end of the data source's version: flagged where the key's first change
            # is a delete.
            Added(planned(soft.deleted, None, False), f"{kind} = '{KIND_DELETE}'", "end"),
            Added(
                planned(soft.deleted_at, spec.history_at),
                f"CASE WHEN {kind} = '{KIND_DELETE}' THEN {spec.history_at} END",
                "end",
            ),
        ]
    elif soft is not None:
        found.append(
            Added(
                planned(soft.deleted_at, spec.deleted_at),
                f"CASE WHEN {kind} = '{KIND_DELETE}' THEN {spec.deleted_at} END",
                "both",
            )
        )
    return found


def mode_tables(
    spec: CdcSpec,
    name: str,
    delete_table: str,
    plans: Sequence[ColumnPlan],
    staged_names: Sequence[str],
    added: Sequence[Added],
    files: list[Path],
    counts: dict[str, int],
    key_idx: Sequence[int],
    sent: Sequence[int],
    ends: tuple[tuple[Any, ...] | None, float | None],
) -> list[Staged]:
    """The payload tables of a change set in history mode or with soft deletes (``plans``
    and ``staged_names``: the source's columns then ``added``'s, in order; ``sent``: the
    source's columns the data source receives; ``ends``: the greatest position and the
    latest commit time among the changes)."""
    size = size_sql(plans, staged_names)
    data = len(plans) - len(added)
    roles = {i + data: a.role for i, a in enumerate(added)}

    def picked(*wanted: str) -> list[int]:
        return [i for i, role in roles.items() if role in wanted]

    position, committed_at = ends
    history, soft = spec.history, spec.soft_delete
    # The version's start (the first added column) also names the end of the data
    # source's version: a key's first date ends it.
    plans = [*plans, replace(plans[data], name=history.valid_to if history else "")]
    staged_names = [*staged_names, staged_names[data]]

    def staged(table: str, columns: Sequence[int], rows: int, where: str, **more: Any) -> Staged:
        return Staged(
            table,
            [plans[i] for i in columns],
            [staged_names[i] for i in columns],
            files,
            rows,
            where=where,
            bucket_of=STAGED_BUCKET,
            size_of=size,
            **more,
        )

    # Without history an upsert writes its row as not deleted (with history, per version).
    not_deleted = ((soft.deleted, "FALSE"),) if soft is not None and history is None else ()
    upserted = staged(
        name,
        [*sent, *picked("version", "both")],
        counts[KIND_UPSERT],
        kind_is(KIND_UPSERT),
        position=position,
        committed_at=committed_at,
        constants=not_deleted,
    )
    if history is not None:
        ended = staged(
            delete_table,
            [*key_idx, *picked("end"), len(plans) - 1],
            counts[FIRST_COLUMN],
            quote_name(FIRST_COLUMN),
            constants=((history.current, "FALSE"),),
        )
        return [upserted, ended]
    assert soft is not None
    flagged = staged(
        delete_table,
        [*key_idx, *picked("both")],
        counts[KIND_DELETE],
        kind_is(KIND_DELETE),
        constants=((soft.deleted, "TRUE"),),
    )
    return [upserted, flagged]

"""Spark ranks a change set: each key's last change, staged with its kind, counted as it is
written (what Hyper's ranking does where it can: :mod:`.hyper_ranking`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ..local.spark_versions import observe
from ..values.spark_sql import sql_name
from .cdc import (
    FIRST_COLUMN,
    KIND_COLUMN,
    KIND_DELETE,
    KIND_QUARANTINED,
    KIND_UPSERT,
    LAST_COLUMN,
    OP_TEXT_COLUMN,
    ORDER_TEXT_COLUMN,
    CdcSpec,
)
from .history import versions_query
from .hyper_parts import change_identity_sql
from .staging import selected

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["rank_in_spark"]


def rank_in_spark(
    df: DataFrame,
    spec: CdcSpec,
    columns: Sequence[str],
    values: Sequence[str],
    write: Callable[[DataFrame], None],
) -> tuple[dict[str, int], tuple[Any, ...] | None, float | None]:
    """Spark keeps each key's last change of ``df`` and ``write`` stages it with its kind
    (``columns``: the staged columns, ``values``: their values as Spark SQL); the rows per
    kind (upserts, deletes, errors), observed as they are written, the greatest position
    among the changes and their latest commit time (epoch seconds, where the change feed
    says it), both observed as Spark reads them."""
    from pyspark.sql import functions as F

    kind = sql_name(KIND_COLUMN)
    types = spec.position_types or (None,) * len(spec.order_by)
    read, greatest_of = _observe_positions(df, spec, types)
    query, flags = spec.latest_query(df.columns), []
    # What is counted as the rows are written: each kind, and the errors.
    tallies = {k: f"{kind} = '{k}'" for k in (KIND_UPSERT, KIND_DELETE, KIND_QUARANTINED)}
    tallies["errors"] = f"substr({kind}, 1, 2) = 'E_'"
    if spec.history is not None:
        # Every change a version; the first of each key ends the data source's version.
        query = versions_query(spec, df.columns)
        flags = [sql_name(FIRST_COLUMN), sql_name(LAST_COLUMN)]
        tallies[FIRST_COLUMN] = flags[0]
    staged = [*columns, *change_identity_sql(spec, values, kind), kind]
    staged += [sql_name(OP_TEXT_COLUMN), sql_name(ORDER_TEXT_COLUMN), *flags]
    rows, counted = observe(
        selected(read, staged, query),
        **{k: F.expr(f"sum(CASE WHEN {c} THEN 1 ELSE 0 END)") for k, c in tallies.items()},
    )
    # One data set with the kind beside each row, not a folder per kind: a partitioned
    # write makes Spark sort every row by the kind first. Hyper reads each kind apart.
    write(rows)
    found = counted()
    counts = {k: int(found.get(k) or 0) for k in tallies}
    if not any(counts.values()):
        # No change came through (Spark may then drop the observed step): no position.
        return counts, None, None
    got = greatest_of()
    greatest = [_observed(got.get(f"last{i}"), t) for i, t in enumerate(types)]
    committed = got.get("committed")
    return (
        counts,
        None if greatest[0] is None else tuple(greatest),
        None if committed is None else int(committed) / 1e6,
    )


def _observe_positions(
    df: DataFrame, spec: CdcSpec, types: Sequence[str | None]
) -> tuple[DataFrame, Callable[[], dict[str, Any]]]:
    """``df`` observed as Spark reads it: each position column at the greatest position
    (``last<i>``), and the latest commit time where the change feed says it
    (``committed``)."""
    from pyspark.sql import functions as F

    ordered = spec.order_sql or tuple(map(sql_name, spec.order_by))
    # One scalar per position column (a struct metric of an empty change set is a NULL
    # row, which PySpark cannot take).
    return observe(
        df,
        **{
            f"last{i}": F.expr(
                _observable(f"max_by({o}, struct({', '.join(ordered)}))", spark_type)
            )
            for i, (o, spark_type) in enumerate(zip(ordered, types, strict=True))
        },
        **({"committed": F.expr(f"max({spec.committed})")} if spec.committed else {}),
    )


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

#: A position of each Spark type that is not handed back alike (by its type's name, an
#: array's as "array"): the Spark SQL that observes it (``{}``: the position) and how its
#: observed value is read back.
_OBSERVED: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "timestamp": ("unix_micros({})", lambda v: _EPOCH + timedelta(microseconds=int(v))),
    "timestamp_ntz": (
        "date_format({}, 'yyyy-MM-dd HH:mm:ss.SSSSSS')",
        lambda v: datetime.strptime(str(v), "%Y-%m-%d %H:%M:%S.%f"),
    ),
    "date": ("unix_date({})", lambda v: date(1970, 1, 1) + timedelta(days=int(v))),
    "array": (
        "to_json({})",
        lambda v: json.loads(str(v), parse_float=Decimal, parse_int=Decimal),
    ),
}


def _observation(spark_type: str | None) -> tuple[str, Callable[[Any], Any]]:
    """How a position of ``spark_type`` is observed and read back (:data:`_OBSERVED`; a
    number or a text as it is)."""
    kind = "array" if (spark_type or "").startswith("array<") else spark_type
    return _OBSERVED.get(kind or "", ("{}", lambda v: v))


def _observable(expr: str, spark_type: str | None) -> str:
    """``expr`` (a position of ``spark_type``) as a value every supported pyspark hands back
    alike from an observation: pyspark 3.x gives a metric as the JVM's object (a date, an
    instant or an array stays a Java object), 4.x as Python's. A number or a text passes as
    it is; :func:`_observed` reads the others back."""
    return _observation(spark_type)[0].format(expr)


def _observed(value: Any, spark_type: str | None) -> Any:
    """The Python value of a position observed as :func:`_observable` made it: an instant
    in UTC (as Hyper gives it), a date, a wall-clock time, a list of decimals."""
    return None if value is None else _observation(spark_type)[1](value)

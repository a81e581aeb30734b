"""Spark ranks a change set: each key's last change, staged with its kind, counted as it is
written (what Hyper's ranking does where it can: :mod:`.hyper_ranking`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..values.spark_sql import sql_name
from .cdc import KIND_COLUMN, KIND_DELETE, KIND_UPSERT, OP_TEXT_COLUMN, ORDER_TEXT_COLUMN, CdcSpec
from .hyper_parts import change_identity_sql
from .staging import selected

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["metric", "rank_in_spark"]


def rank_in_spark(
    df: DataFrame,
    spec: CdcSpec,
    columns: Sequence[str],
    values: Sequence[str],
    write: Callable[[DataFrame], None],
) -> tuple[dict[str, int], tuple[Any, ...] | None]:
    """Spark keeps each key's last change of ``df`` and ``write`` stages it with its kind
    (``columns``: the staged columns, ``values``: their values as Spark SQL); the rows per
    kind (upserts, deletes, errors), observed as they are written, and the greatest position
    among the changes (observed as Spark reads them)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    kind = sql_name(KIND_COLUMN)
    observed = Observation(f"tabhyper-staged-{uuid.uuid4().hex}")
    read = Observation(f"tabhyper-read-{uuid.uuid4().hex}")
    ordered = spec.order_sql or tuple(sql_name(o) for o in spec.order_by)
    rows = selected(
        # Each position column at the greatest position, one scalar each (a struct metric
        # of an empty change set is a NULL row, which PySpark cannot take).
        df.observe(
            read,
            *(
                F.expr(f"max_by({o}, struct({', '.join(ordered)}))").alias(f"last{i}")
                for i, o in enumerate(ordered)
            ),
        ),
        [
            *columns,
            *change_identity_sql(spec, values, kind),
            kind,
            sql_name(OP_TEXT_COLUMN),
            sql_name(ORDER_TEXT_COLUMN),
        ],
        spec.latest_query(df.columns),
    ).observe(
        observed,
        F.expr(f"sum(CASE WHEN {kind} = '{KIND_UPSERT}' THEN 1 ELSE 0 END)").alias("U"),
        F.expr(f"sum(CASE WHEN {kind} = '{KIND_DELETE}' THEN 1 ELSE 0 END)").alias("D"),
        F.expr(f"sum(CASE WHEN substr({kind}, 1, 2) = 'E_' THEN 1 ELSE 0 END)").alias("errors"),
    )
    # One data set with the kind beside each row, not a folder per kind: a partitioned
    # write makes Spark sort every row by the kind first. Hyper reads each kind apart.
    write(rows)
    counts = {k: metric(observed, k) for k in (KIND_UPSERT, KIND_DELETE, "errors")}
    if not any(counts.values()):
        # No change came through (Spark may then drop the observed step): no position.
        return counts, None
    greatest = [read.get.get(f"last{i}") for i in range(len(ordered))]
    if greatest[0] is None:
        return counts, None
    # Spark gives an instant as the driver's local time: as Hyper gives it, in UTC.
    instants = [t == "timestamp" for t in spec.position_types] or [False] * len(greatest)
    last = tuple(
        v.astimezone(timezone.utc) if instant and isinstance(v, datetime) else v
        for v, instant in zip(greatest, instants, strict=True)
    )
    return counts, last


def metric(observed: Any, name: str) -> int:
    """An observed count (0 when the observation saw no row)."""
    value = observed.get.get(name)
    return int(value or 0)

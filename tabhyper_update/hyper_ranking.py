"""A small change set's last change per key, ranked by Hyper on the driver.

For a change set staged through the driver that Spark estimates small, Spark only tags
each change (its kind, priority and typed positions: :meth:`CdcSpec.tags`, the same SQL
as always) and stages every change with its tags; Hyper then leaves out the ignored ones
(no kind), ranks the others with the ranking text Spark would have run
(:func:`~tabhyper_update.cdc.latest_of`) and writes the result as the staged Parquet the
rest of the build reads. Spark's job is then a projection (no sort, no
window), which is most of a micro-batch's Spark time.

Only where both engines compare alike: keys and positions of whole-number, decimal,
boolean, date, timestamp or plain string type (strings compare by their UTF-8 bytes in
both). Anything else (floating-point keys or positions, whose NaN and -0.0 Spark
normalises; collated strings; arrays such as LSN parts) is ranked by Spark.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ._hyper import connect, quote_literal, quote_name
from .cdc import (
    KIND_COLUMN,
    OP_TEXT_COLUMN,
    ORDER_TEXT_COLUMN,
    CdcSpec,
    latest_of,
)
from .errors import PayloadError
from .hyper_parts import BucketStats, bucket_stats, external
from .hyper_types import ColumnPlan

__all__ = ["rank_in_hyper", "ranks_in_hyper"]

#: Spark types (``simpleString``) that Hyper orders and compares as Spark does.
_ALIKE = re.compile(
    r"boolean|tinyint|smallint|int|bigint|date|timestamp|timestamp_ntz|string|"
    r"decimal\(\d+,\d+\)"
)


def ranks_in_hyper(spec: CdcSpec, plans: Sequence[ColumnPlan]) -> bool:
    """Whether Hyper ranks ``spec``'s changes exactly as Spark would: every key a staged
    column of a type both compare alike (staged as itself, or as its microseconds, days or
    text: one staged value per value), every position of such a type."""
    by_name = {p.name: p for p in plans}
    for key in spec.key:
        plan = by_name.get(key)
        if plan is None or not _ALIKE.fullmatch(plan.spark_type):
            return False
    types = spec.position_types
    return len(types) == len(spec.order_by) and all(
        t is not None and _ALIKE.fullmatch(t) for t in types
    )


def rank_in_hyper(
    spec: CdcSpec,
    keys: Sequence[str],
    keep: Sequence[str],
    tagged: Sequence[Path],
    out: Path,
) -> tuple[int, dict[str, BucketStats]]:
    """Rank the tagged changes staged in ``tagged`` into one Parquet file under ``out``
    (none without tagged changes).

    ``keys`` and ``keep`` are staged column names (the keys' staged values; the columns the
    ranked rows keep). Returns how many tagged changes Hyper read and the ranked rows'
    bucket statistics by kind (read in the same connection: the build does not read them
    again)."""
    if not tagged:
        return 0, {}
    out.mkdir(parents=True, exist_ok=True)
    target = out / "part-00000.parquet"
    source = external(tagged)
    kind_col = quote_name(KIND_COLUMN)
    ranked = latest_of(
        # Ignored changes carry no kind: left out here, as Spark's own ranking leaves them.
        f"SELECT * FROM {source} WHERE {kind_col} IS NOT NULL",
        quote=quote_name,
        keys=[quote_name(k) for k in keys],
        positions=len(spec.order_by),
        keep=[quote_name(k) for k in keep],
        op_text=quote_name(OP_TEXT_COLUMN),
        order_text=quote_name(ORDER_TEXT_COLUMN),
    )
    with connect() as conn:
        counted = conn.execute_list_query(f"SELECT COUNT(*), COUNT({kind_col}) FROM {source}")
        read, kept = (int(n or 0) for n in counted[0])
        conn.execute_command(
            f"COPY ({ranked}) TO {quote_literal(str(target))} WITH (FORMAT parquet)"
        )
        stats = bucket_stats(conn, external([target]), by=KIND_COLUMN)
    if kept and not stats:
        # Every key read has a last change: none ranked would report an empty change set.
        ignored = f" ({read - kept} ignored change(s) left out)" if read > kept else ""
        raise PayloadError(
            f"Hyper read {kept} tagged change(s) but ranked none into {out}{ignored}"
        )
    return read, {str(kind): found for kind, found in stats.items()}

"""A small change set's last change per key, ranked by Hyper on the driver.

For a change set staged through the driver that Spark estimates small, Spark only tags
each change (its kind, priority and typed positions: :meth:`CdcSpec.tags`, the same SQL
as always) and stages every change with its tags; Hyper then leaves out the ignored ones
(no kind), ranks the others with the ranking text Spark would have run
(:func:`~tabhyper_update.builder.cdc.latest_of`) and writes the result as the staged Parquet the
rest of the build reads. Spark's job is then a projection (no sort, no
window), which is most of a micro-batch's Spark time.

Only where both engines compare alike: keys and positions of whole-number, decimal,
boolean, date, timestamp or plain string type (strings compare by their UTF-8 bytes in
both). Anything else (floating-point keys or positions, whose NaN and -0.0 Spark
normalises; collated strings; arrays such as LSN parts) is ranked by Spark.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..local.folders import make_private
from ..local.hyper import connect, quote_literal, quote_name
from ..values.errors import PayloadError
from ..values.spark_sql import sql_name
from .cdc import (
    COMMITTED_COLUMN,
    KIND_COLUMN,
    OP_TEXT_COLUMN,
    ORDER_TEXT_COLUMN,
    CdcSpec,
    latest_of,
    position_column,
    without_carry_overs,
)
from .hyper_parts import (
    BUCKET_COLUMN,
    ROWHASH_COLUMN,
    STAGED_BUCKET,
    BucketStats,
    bucket_stats,
    external,
    kind_counts,
    size_sql,
)
from .hyper_types import ColumnPlan
from .staging import probe_to_driver, staged_files, write_on_driver

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from tableauhyperapi import Connection

__all__ = ["Ranked", "rank_in_hyper", "ranks_in_hyper", "stage_and_rank"]


class Ranked(NamedTuple):
    """What Hyper ranked: the ranked rows' bucket statistics by kind, the change set's last
    position (its greatest ``order_by`` values; ``None`` without a valid change) and the
    latest commit time among its changes (epoch seconds, where the change feed says it)."""

    stats: dict[str, BucketStats]
    last: tuple[Any, ...] | None
    committed_at: float | None


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


def stage_and_rank(
    df: DataFrame,
    spec: CdcSpec,
    plans: Sequence[ColumnPlan],
    staged_names: Sequence[str],
    tagged: Sequence[str],
    target: Path,
    probe: int = 0,
    name: str = "",
) -> Ranked | None:
    """Stage every change of ``df`` (table ``name``'s), tagged (``tagged``: the staged
    columns, the identity and :meth:`CdcSpec.tags`, over ``df``'s columns), through the
    driver and let Hyper rank them into ``target``: the ranked rows' bucket statistics by
    kind. The driver counts the rows it receives, so no observation is needed: Hyper must
    read exactly that many.

    One projection of ``df``, no view and no filter: Spark analyses and optimizes one node,
    which a micro-batch feels while the JVM warms up. Ignored changes (a NULL kind) come
    too, and Hyper leaves them out when it ranks. The op and position texts that only an
    error's message names are left out as well (their JSON is a measurable share of a fresh
    micro-batch's Spark step: ``benchmarks/README.md``, "Costs behind the build's
    choices"); when Hyper ranks error rows, the change set is read and ranked
    again with them, for the message.

    Returns the statistics, the change set's last position (its greatest ``order_by``
    values, as ranked; ``None`` without a valid change) and its latest commit time.
    ``probe`` > 0: take at most ``probe`` + 1 changes; when that many come, drop them and
    return ``None`` (the change set is larger than a probe: the caller stages it shared)."""
    op_text, order_text = spec.texts()
    named = [
        f"{op_text} AS {sql_name(OP_TEXT_COLUMN)}",
        f"{order_text} AS {sql_name(ORDER_TEXT_COLUMN)}",
    ]
    by_name = dict(zip((p.name for p in plans), staged_names, strict=True))
    keys = [by_name[k] for k in spec.key]
    keep = [*staged_names, ROWHASH_COLUMN, BUCKET_COLUMN]
    size = size_sql(plans, staged_names)
    raw = target.with_name(target.name + "-tagged")

    def one_pass(texts: bool) -> Ranked | None:
        query = df.selectExpr(*tagged, *(named if texts else []))
        for made in (raw, target):  # an earlier pass's files
            shutil.rmtree(made, ignore_errors=True)
        sent = probe_to_driver(query, raw, probe, name) if probe else write_on_driver(query, raw)
        if sent is None:
            return None
        files = staged_files(raw)
        read, ranked = rank_in_hyper(spec, keys, keep, files, target, texts, size)
        if read != sent:
            raise PayloadError(
                f"Spark sent {sent} change(s) to the driver but Hyper read {read} from the "
                f"{len(files)} file(s) staged in {str(raw)!r}"
            )
        return ranked

    ranked = one_pass(texts=False)
    errors = 0 if ranked is None else kind_counts(ranked.stats)["errors"]
    if not errors:
        return ranked
    again = one_pass(texts=True)
    if again is None or not kind_counts(again.stats)["errors"]:
        raise PayloadError(
            f"table {name!r}: {errors} change(s) could not be applied (a NULL key or "
            "position, an unknown op, a tie) when Spark first read the change set, but "
            f"{'more than ' + format(probe, ',') + ' changes came' if again is None else 'none'}"
            " when it read it again to name them: the DataFrame gives other rows each time "
            "it is read. Persist it (df.persist()) before build_payload, or read a fixed "
            "version of its source"
        )
    return again


def rank_in_hyper(
    spec: CdcSpec,
    keys: Sequence[str],
    keep: Sequence[str],
    tagged: Sequence[Path],
    out: Path,
    texts: bool,
    size: str,
) -> tuple[int, Ranked]:
    """Rank the tagged changes staged in ``tagged`` into one Parquet file under ``out``
    (none without tagged changes).

    ``keys`` and ``keep`` are staged column names (the keys' staged values; the columns the
    ranked rows keep). ``texts``: the tagged changes hold the op and position texts (else
    the ranked rows' are NULL). ``size``: Hyper SQL of a ranked row's size estimate.
    Returns how many tagged changes Hyper read and what it ranked: the ranked rows' bucket
    statistics by kind (read in the same connection: the build does not read them again),
    the greatest position among the changes (``None`` without one) and their latest commit
    time."""
    if not tagged:
        return 0, Ranked({}, None, None)
    make_private(out)
    target = out / "part-00000.parquet"
    source = external(tagged)
    # The row's own columns: its identity columns differ between a delete and an insert.
    row = [quote_name(k) for k in keep if k not in (ROWHASH_COLUMN, BUCKET_COLUMN)]
    with connect() as conn:
        read, kept, greatest, micros = _counts(conn, spec, source)
        ranked = _ranked_sql(spec, source, keys, keep, row, texts)
        conn.execute_command(
            f"COPY ({ranked}) TO {quote_literal(str(target))} WITH (FORMAT parquet)"
        )
        stats = bucket_stats(
            conn, external([target]), by=KIND_COLUMN, bucket=STAGED_BUCKET, size=size
        )
    if kept and not stats:
        _none_ranked(spec, source, keys, row, read, kept, out)
    return read, Ranked(
        {str(kind): found for kind, found in stats.items()},
        greatest,
        None if micros is None else int(micros) / 1e6,
    )


def _ranked_sql(
    spec: CdcSpec,
    source: str,
    keys: Sequence[str],
    keep: Sequence[str],
    row: Sequence[str],
    texts: bool,
) -> str:
    """Hyper SQL of the last change per key of the tagged changes in ``source`` (``row``:
    the quoted columns a commit's carry-overs are recognised by)."""
    no_text = "CAST(NULL AS TEXT)"
    return latest_of(
        # Ignored changes carry no kind: left out here, as Spark's own ranking leaves them.
        f"SELECT * FROM {source} WHERE {quote_name(KIND_COLUMN)} IS NOT NULL",
        quote=quote_name,
        keys=list(map(quote_name, keys)),
        positions=len(spec.order_by),
        keep=list(map(quote_name, keep)),
        op_text=quote_name(OP_TEXT_COLUMN) if texts else no_text,
        order_text=quote_name(ORDER_TEXT_COLUMN) if texts else no_text,
        carry_overs=row if spec.commit else (),
    )


def _none_ranked(
    spec: CdcSpec,
    source: str,
    keys: Sequence[str],
    row: Sequence[str],
    read: int,
    kept: int,
    out: Path,
) -> None:
    """Hyper read ``kept`` changes to rank (of ``read``) and ranked none: refused (every
    key read has a last change; none ranked would report an empty change set), but where
    a commit's changelog held carry-overs only (they rank none)."""
    if spec.commit:
        kept = _without_carry_overs(spec, source, keys, list(row))
    if kept:
        ignored = f" ({read - kept} ignored change(s) left out)" if read > kept else ""
        raise PayloadError(
            f"Hyper read {kept} tagged change(s) but ranked none into {out}{ignored}"
        )


def _counts(
    conn: Connection, spec: CdcSpec, source: str
) -> tuple[int, int, tuple[Any, ...] | None, Any]:
    """Of the tagged changes in ``source``: how many were read, how many have a kind (the
    rest are ignored), the greatest position among those (``None`` without one) and their
    latest commit time in microseconds (``None`` without one)."""
    kind_col = quote_name(KIND_COLUMN)
    committed = (
        f"MAX(CASE WHEN {kind_col} IS NOT NULL THEN {quote_name(COMMITTED_COLUMN)} END)"
        if spec.committed
        else "NULL"
    )
    ordered = [quote_name(position_column(i)) for i in range(len(spec.order_by))]
    if len(ordered) == 1:
        # One position: its greatest read in the same scan as the counts.
        ((read, kept, micros, top),) = conn.execute_list_query(
            f"SELECT COUNT(*), COUNT({kind_col}), {committed}, "
            f"MAX(CASE WHEN {kind_col} IS NOT NULL THEN {ordered[0]} END) FROM {source}"
        )
        return int(read or 0), int(kept or 0), None if top is None else (top,), micros
    ((read, kept, micros),) = conn.execute_list_query(
        f"SELECT COUNT(*), COUNT({kind_col}), {committed} FROM {source}"
    )
    greatest = conn.execute_list_query(
        f"SELECT {', '.join(ordered)} FROM {source} WHERE {kind_col} IS NOT NULL "
        f"AND {ordered[0]} IS NOT NULL ORDER BY "
        + ", ".join(f"{o} DESC NULLS LAST" for o in ordered)
        + " LIMIT 1"
    )
    return int(read or 0), int(kept or 0), tuple(greatest[0]) if greatest else None, micros


def _without_carry_overs(spec: CdcSpec, source: str, keys: Sequence[str], row: list[str]) -> int:
    """How many of the tagged changes in ``source`` are left once a commit's carry-overs
    (a delete and an insert of equal rows) are taken out."""
    kind_col = quote_name(KIND_COLUMN)
    with connect() as conn:
        left = conn.execute_scalar_query(
            "SELECT COUNT(*) FROM ("
            + without_carry_overs(
                f"SELECT * FROM {source} WHERE {kind_col} IS NOT NULL",
                quote=quote_name,
                keys=list(map(quote_name, keys)),
                positions=len(spec.order_by),
                columns=row,
            )
            + ") AS changes"
        )
    return int(left or 0)

"""A change set's rows the target would refuse, set aside rather than failing the update
(``build_payload(..., on_bad_rows="quarantine", quarantine=..., target_columns=...)``).

What the target refuses is read from its columns as the caller gives them
(``target_columns``: ``"id BIGINT NOT NULL, amount NUMERIC(12,2)"`` or a mapping of name to
type) by the narrowing rules (:mod:`tabhyper_update.values.narrowing`): a NULL key, a NULL
into a NOT NULL column, an integer out of the column's range, a decimal with more whole
digits than it keeps (Hyper refuses both), one with more decimal places (Hyper rounds it),
a text longer than the column (Hyper cuts it), a number a double cannot hold exactly.
A change set aside ranks as any change: a key whose last change is set aside keeps the
value it had in the data source (an older change of it is never applied in its place), and
that change is written, whole, with its reason and column, where the caller said: a folder
of Parquet files (one sub-folder per set of rows, named by them, so a re-run of the same
positions writes them once) or a function taking the rows and that name.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Union

from ..local.optional import optional_module
from ..local.spark_versions import arrow_batches
from ..values.errors import ConfigurationError, PayloadArgumentError, PayloadError
from ..values.narrowing import (
    ColumnType,
    DeclaredColumn,
    Loss,
    column_type,
    declared_columns,
    losses,
)
from ..values.quarantine import KEYS_LISTED, QuarantineReport
from ..values.spark_sql import query_over, sql_name
from .cdc import (
    BAD_COLUMN,
    BAD_REASON,
    KIND_COLUMN,
    KIND_QUARANTINED,
    PRIORITY_COLUMN,
    BadRow,
    CdcSpec,
    position_column,
)
from .hyper_types import ColumnPlan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "QUARANTINE_COLUMNS",
    "QuarantineDestination",
    "bad_rows",
    "check_delta_writer",
    "check_destination",
    "set_aside",
    "target_columns",
]

#: Where set-aside rows go: a folder, or a function taking them and their batch's name.
QuarantineDestination = Union[str, "os.PathLike[str]", Callable[["DataFrame", str], None]]
#: The columns a set-aside row carries beside its own: why, which column, which batch.
QUARANTINE_COLUMNS = ("_quarantine_reason", "_quarantine_column", "_quarantine_batch")
_RANK = "__tabhyper_qrank"
#: Each narrowing's reason.
_REASONS = {
    "range": "out_of_range",
    "whole_digits": "too_many_digits",
    "scale": "rounded",
    "length": "too_long",
    "inexact": "inexact",
}


def target_columns(value: object) -> dict[str, DeclaredColumn]:
    """``target_columns=`` read (:func:`~tabhyper_update.values.narrowing.declared_columns`)."""
    return declared_columns(value, "target_columns", PayloadArgumentError)


def check_destination(value: object) -> None:
    """``quarantine=``: a folder path or a function; anything else is refused."""
    if callable(value) or isinstance(value, (str, os.PathLike)):
        return
    raise PayloadArgumentError(
        "quarantine takes a folder to write the set-aside rows to (Parquet), or a function "
        f"taking them (a Spark DataFrame) and their batch's name, got {value!r}",
        argument="quarantine",
    )


def bad_rows(
    plans: list[ColumnPlan], target: Mapping[str, DeclaredColumn], key: tuple[str, ...], table: str
) -> tuple[BadRow, ...]:
    """The checks that find an upsert the target would refuse or change, per payload column
    the target declares (a column it lacks is the schema check's to refuse)."""
    found: list[BadRow] = []
    for plan in plans:
        declared = target.get(plan.name)
        if declared is None:
            continue
        quoted = sql_name(plan.name)
        if declared.not_null and plan.name not in key:
            found.append(BadRow("null_into_not_null", plan.name, f"{quoted} IS NULL"))
        source = column_type(plan.hyper_type)
        if source is None or declared.type is None:
            continue
        lost = losses(source, declared.type)
        if lost is None:
            raise PayloadError(
                f"table {table!r}: column {plan.name!r} is {plan.hyper_type} in the change "
                f"set and {declared.text} in the target: another kind of value, which no row "
                "of it fits; cast it, or correct target_columns"
            )
        for loss in lost:
            condition = _condition(loss, quoted, source)
            if condition:
                found.append(BadRow(_REASONS[loss.what], plan.name, condition))
    return tuple(found)


def _condition(loss: Loss, quoted: str, source: ColumnType) -> str:
    """Spark SQL: the value of ``quoted`` (of ``source``'s type) suffers ``loss``."""
    scale = source.scale or 0
    exact = f"CAST({quoted} AS DECIMAL(38, {scale}))"
    if loss.what == "range":
        return f"({quoted} < {loss.low} OR {quoted} > {loss.limit})"
    if loss.what == "whole_digits":
        if loss.limit >= 38 - scale:
            return ""
        return f"abs({exact}) >= CAST('1{'0' * loss.limit}' AS DECIMAL(38, 0))"
    if loss.what == "scale":
        return f"{quoted} <> round({quoted}, {loss.limit})"
    if loss.what == "length":
        return f"char_length({quoted}) > {loss.limit}"
    return f"CAST(CAST({quoted} AS DOUBLE) AS DECIMAL(38, {scale})) <> {exact}"


def quarantine_query(spec: CdcSpec, columns: list[str]) -> Callable[[str], str]:
    """Spark SQL over a source named in the text: the changes set aside that are their
    key's last (every one with a NULL key), whole, with their reason and column."""
    tagged = spec.tag_query()
    keys = ", ".join(map(sql_name, spec.key))
    order = ", ".join(
        [f"{sql_name(position_column(i))} DESC NULLS LAST" for i in range(len(spec.order_by))]
        + [f"{sql_name(PRIORITY_COLUMN)} DESC"]
    )
    null_key = " OR ".join(f"{sql_name(k)} IS NULL" for k in spec.key)
    kept = ", ".join(map(sql_name, columns))
    reason, column = QUARANTINE_COLUMNS[:2]

    def query(source: str) -> str:
        return (
            f"SELECT {kept}, {sql_name(BAD_REASON)} AS {reason}, "
            f"{sql_name(BAD_COLUMN)} AS {column} FROM (SELECT *, row_number() OVER "
            f"(PARTITION BY {keys} ORDER BY {order}) AS {sql_name(_RANK)} "
            f"FROM ({tagged(source)}) AS tagged) AS ranked "
            f"WHERE {sql_name(KIND_COLUMN)} = '{KIND_QUARANTINED}' "
            f"AND ({sql_name(_RANK)} = 1 OR {null_key})"
        )

    return query


def set_aside(
    df: DataFrame, spec: CdcSpec, destination: QuarantineDestination, form: str = "parquet"
) -> QuarantineReport:
    """Write ``df``'s changes set aside where ``destination`` says (a folder of ``form``:
    Parquet, or a Delta table), once per set of rows; what was set aside."""
    from pyspark.sql import functions as F

    rows = query_over(df, quarantine_query(spec, list(df.columns))).cache()
    try:
        # Per reason its rows and their hashes' sum, in one pass (summed as decimals: a
        # long's sum overflows, which ANSI refuses).
        hashed = f"CAST(xxhash64({', '.join(map(sql_name, df.columns))}) AS DECIMAL(38, 0))"
        counted = (
            rows.groupBy(QUARANTINE_COLUMNS[0])
            .agg(F.count(F.lit(1)), F.sum(F.expr(hashed)))
            .collect()
        )
        reasons = {str(r[0]): int(r[1]) for r in counted}
        total = sum(reasons.values())
        digest = sum(int(r[2] or 0) for r in counted)
        batch = f"{total}-{digest & (2**64 - 1):016x}"
        held = rows.select(*spec.key).distinct().limit(KEYS_LISTED).collect()
        keys = tuple(sorted((tuple(r) for r in held if any(v is not None for v in r)), key=repr))
        written_to = _write(rows, destination, batch, form)
    finally:
        rows.unpersist()
    return QuarantineReport(total, reasons, keys, batch, written_to)


def _write(rows: DataFrame, destination: QuarantineDestination, batch: str, form: str) -> str:
    """Hand the rows, their batch's name beside them, to the caller's function, or write them
    to the folder's sub-folder of their batch (left as it is when a run before wrote it: the
    same rows); reading the folder gives the batch as a column of that name."""
    if callable(destination):
        destination(rows.selectExpr("*", f"'{batch}' AS {QUARANTINE_COLUMNS[2]}"), batch)
        return "callback"
    if form == "delta":
        return _write_delta(rows, os.fspath(destination), batch)
    folder = Path(os.fspath(destination))
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{QUARANTINE_COLUMNS[2]}={batch}"
    if final.exists():
        return str(folder)
    scratch = folder / f".tabhyper-{uuid.uuid4().hex}"
    try:
        rows.write.mode("errorifexists").parquet("file://" + str(scratch.resolve()))
        for path in [scratch, *scratch.rglob("*")]:
            path.chmod(0o700 if path.is_dir() else 0o600)
        os.rename(scratch, final)
    except FileExistsError:
        pass  # written meanwhile by another run of the same rows
    except OSError as err:
        if not final.exists():
            raise PayloadError(
                f"cannot write the set-aside rows to {str(folder)!r}: {err}"
            ) from err
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return str(folder)


def _write_delta(rows: DataFrame, path: str, batch: str) -> str:
    """Append the rows to the Delta table at ``path`` (made on first use, partitioned by
    batch) with delta-rs, unless the table holds their batch already."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake
    from deltalake.exceptions import TableNotFoundError

    column = QUARANTINE_COLUMNS[2]
    try:
        held = DeltaTable(path).to_pyarrow_table(columns=[column], filters=[(column, "=", batch)])
        if held.num_rows:
            return path
    except TableNotFoundError:
        pass
    marked = rows.selectExpr("*", f"'{batch}' AS {column}")
    table = pa.Table.from_batches(list(arrow_batches(marked)))
    write_deltalake(path, table, mode="append", partition_by=[column])
    return path


def check_delta_writer() -> None:
    """A Delta quarantine writes with delta-rs: refused, before any job, where it is not
    installed."""
    if optional_module("deltalake") is None or optional_module("pyarrow") is None:
        raise ConfigurationError(
            "quarantine_format='delta' writes the set-aside rows with delta-rs: "
            "pip install deltalake (or write them yourself: quarantine=a function)"
        )

"""What the commands read: ``--input`` files or a ``--spark-table`` as a DataFrame, what of
the input is checked before Spark starts (paths, the change set's columns), the change set
the flags describe, and whether Spark is installed at all."""

from __future__ import annotations

import argparse
import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..values.changeset import ChangeSet
from ..values.errors import TabHyperError
from .failures import UsageError

__all__ = ["change_set_of", "check_input", "read_input", "require_pyspark"]


def check_input(args: argparse.Namespace) -> None:
    """What can be checked of ``--input`` without Spark: every local path exists, and when
    every input is a file, the change set's columns are among the first file's (a Parquet
    footer or a CSV header line)."""
    files = _local_files(args.input or [])
    if args.change_set is None or not files:
        return  # folders (partitions add columns) or remote paths: Spark reads them
    columns = _file_columns(files[0], args.format)
    if columns is None:
        return
    from ..builder.cdc import CdcSpec

    try:
        CdcSpec.create(columns, args.change_set)
    except TabHyperError as err:
        raise UsageError(f"--input {str(files[0])!r}: {err}") from None


def _local_files(inputs: list[str]) -> list[Path]:
    """The ``--input`` paths where every one is a local file (none where one is a folder or
    remote); a local path that does not exist is refused."""
    local = [Path(i) for i in inputs if "://" not in i and not i.startswith("dbfs:")]
    missing = [str(p) for p in local if not p.exists()]
    if missing:
        raise UsageError(f"--input: no such file or folder: {', '.join(map(repr, missing))}")
    if len(local) != len(inputs) or not all(p.is_file() for p in local):
        return []
    return local


def _file_columns(path: Path, fmt: str) -> list[str] | None:
    """The column names of one input file, read cheaply (``None`` when they cannot be)."""
    try:
        if fmt == "csv":
            with path.open(encoding="utf-8", newline="") as f:
                return next(csv.reader(f), None)
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    except Exception:  # unreadable here: Spark will say why
        return None


def change_set_of(args: argparse.Namespace) -> ChangeSet | None:
    """The change set the options describe (``None`` without ``--key``)."""
    if not args.key:
        given = [
            o
            for o, v in (
                ("--op-column", args.op_column),
                ("--order-by", args.order_by),
                ("--op-map", args.op_map),
                ("--order-as", args.order_as),
                ("--history", args.history),
                ("--soft-delete", args.soft_delete),
            )
            if v
        ]
        if given:
            raise UsageError(f"{', '.join(given)} describe a change set: give --key too")
        return None
    op_map = _pairs(args.op_map, "--op-map", "VALUE=MEANING")
    order_as = _pairs(args.order_as, "--order-as", "COLUMN=HOW")
    return ChangeSet(
        args.key,
        op_column=args.op_column,
        order_by=args.order_by,
        op_map=op_map or None,
        order_as=order_as or None,
        history=args.history,
        soft_delete=args.soft_delete,
    )


def _pairs(items: Sequence[str] | None, flag: str, shape: str) -> dict[str, str]:
    """``NAME=VALUE`` items of ``flag`` as a mapping."""
    found: dict[str, str] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"{flag} takes {shape} pairs, got {item!r}")
        found[name] = value
    return found


def read_input(spark: Any, args: argparse.Namespace) -> Any:
    """The input as a DataFrame; Spark's refusal (a missing path, a table not in the
    catalog, unreadable files) is a usage error naming the flag."""
    try:
        if args.spark_table:
            return spark.table(args.spark_table)
        if args.format == "csv":
            return spark.read.option("header", True).option("inferSchema", True).csv(args.input)
        return spark.read.parquet(*args.input)
    except Exception as err:
        flag = "--spark-table" if args.spark_table else "--input"
        first = next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise UsageError(f"{flag}: Spark cannot read it: {first.strip()}") from None


def require_pyspark(why: str) -> None:
    # Asked afresh (not the process's cached answer): cheap once imported, and right when
    # an embedding application made it unimportable since.
    missing = False
    try:
        try:
            import pyspark  # only whether it can be imported
        except ModuleNotFoundError as err:
            missing = err.name == "pyspark"
            raise
        import pyspark.sql  # noqa: F401
    except Exception as err:
        import importlib.metadata
        import platform

        try:
            installed = None if missing else importlib.metadata.version("pyspark")
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed is None:
            raise UsageError(
                f"{why} with Spark: install the [spark] extra (pip install -e '.[spark]' in the "
                "package's checkout) and have Java 17+"
            ) from None
        # Installed but broken: an old pyspark on a newer Python (3.4 on Python 3.13).
        raise UsageError(
            f"{why} with Spark, and pyspark {installed} is installed but cannot be imported "
            f"on Python {platform.python_version()} ({type(err).__name__}: "
            f"{str(err).splitlines()[0] if str(err) else ''}): install a pyspark that runs "
            "on this Python (pip install -U -e '.[spark]' in the package's checkout)"
        ) from None

"""The single Spark SQL → Hyper type table.

| Spark                         | Hyper                  | notes                                  |
|-------------------------------|------------------------|----------------------------------------|
| boolean                       | BOOLEAN                |                                        |
| byte, short                   | SMALLINT               | Hyper has no 1-byte integer            |
| int                           | INTEGER                |                                        |
| long                          | BIGINT                 |                                        |
| float                         | DOUBLE PRECISION       | REAL from database version 4 on        |
| double                        | DOUBLE PRECISION       |                                        |
| decimal(p, s)                 | NUMERIC(p, s)          | p ≤ 18 before version 3, p ≤ 38 from 3 |
| string, char(n), varchar(n)   | TEXT                   |                                        |
| binary                        | BYTES                  |                                        |
| date                          | DATE                   |                                        |
| timestamp                     | TIMESTAMP (UTC)        | the instant's UTC wall-clock time      |
| timestamp_ntz                 | TIMESTAMP              | as written, no zone applied            |
| array, map, struct            | TEXT (JSON)            | only with ``complex_as_json=True``     |

Spark ``timestamp`` values are instants; they are stored as UTC wall-clock ``TIMESTAMP`` so
that the Spark session time zone never shifts them (Tableau shows the UTC time).

Dates and timestamps travel through the staging Parquet as integers (days, microseconds since
1970-01-01) and ``timestamp_ntz`` as its text, so no Spark session setting (calendar rebase,
Parquet timestamp type) matters, and the SDK never changes the caller's session. Intervals
are refused: Hyper has an INTERVAL type but Tableau cannot use it. ``void`` (a column of
untyped NULLs) and ``variant`` are refused too; cast them to a concrete type first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..local.hyper import DEFAULT_DATABASE_VERSION, SUPPORTED_DATABASE_VERSIONS
from ..values.changeset import RESERVED_PREFIX
from ..values.errors import PayloadError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructField

__all__ = [
    "DEFAULT_DATABASE_VERSION",
    "HYPER_TRANSFORMS",
    "SPARK_TRANSFORMS",
    "SUPPORTED_DATABASE_VERSIONS",
    "ColumnPlan",
    "max_decimal_precision",
    "plan_column",
    "plan_columns",
]


def max_decimal_precision(database_version: int) -> int:
    """The widest NUMERIC a database version stores (128-bit numerics arrive in version 3)."""
    return 38 if database_version >= 3 else 18


#: Spark SQL of each way a value is staged (``{v}``: the column).
SPARK_TRANSFORMS: dict[str, str] = {
    "as_is": "{v}",
    "json": "to_json({v})",
    "micros": "unix_micros({v})",
    "days": "unix_date({v})",
    "text": "CAST({v} AS STRING)",
}
#: Hyper SQL of each way a staged value becomes the column's (``{v}``: the staged column,
#: ``{type}``: the column's Hyper type).
HYPER_TRANSFORMS: dict[str, str] = {
    "cast": "CAST({v} AS {type})",
    "micros": (
        "(TIMESTAMP '1970-01-01 00:00:00' + CAST({v} AS BIGINT) * INTERVAL '0.000001 second')"
    ),
    "days": "(DATE '1970-01-01' + CAST({v} AS INTEGER))",
}


@dataclass(frozen=True)
class ColumnPlan:
    """How one Spark column travels: what Spark writes, and what Hyper makes of it."""

    name: str
    spark_type: str
    hyper_type: str
    nullable: bool
    #: Spark expression applied before the staging write (a key of :data:`SPARK_TRANSFORMS`):
    #: "as_is", "json", "micros" (an instant as microseconds since the epoch), "days" (days
    #: since the epoch) or "text".
    spark_transform: str = "as_is"
    #: How the staged Parquet value becomes the Hyper value (a key of
    #: :data:`HYPER_TRANSFORMS`): "cast", "micros" or "days".
    hyper_transform: str = "cast"

    def spark_sql(self, quoted: str) -> str:
        """The staged value of the column ``quoted`` (a quoted name), as Spark SQL text."""
        return SPARK_TRANSFORMS[self.spark_transform].format(v=quoted)

    def hyper_expression(self, quoted_staged_name: str) -> str:
        """The Hyper value of the staged column ``quoted_staged_name``, as Hyper SQL text."""
        made = HYPER_TRANSFORMS[self.hyper_transform]
        return made.format(v=quoted_staged_name, type=self.hyper_type)

    @property
    def sql_definition_type(self) -> str:
        return self.hyper_type + ("" if self.nullable else " NOT NULL")


_SIMPLE: dict[str, str] = {
    "BooleanType": "BOOLEAN",
    "ByteType": "SMALLINT",
    "ShortType": "SMALLINT",
    "IntegerType": "INTEGER",
    "LongType": "BIGINT",
    "DoubleType": "DOUBLE PRECISION",
    "StringType": "TEXT",
    "CharType": "TEXT",
    "VarcharType": "TEXT",
    "BinaryType": "BYTES",
}

#: Spark types carried as another value: their Hyper type, and how each side transforms.
_CARRIED: dict[str, tuple[str, dict[str, str]]] = {
    "TimestampType": ("TIMESTAMP", {"spark_transform": "micros", "hyper_transform": "micros"}),
    "DateType": ("DATE", {"spark_transform": "days", "hyper_transform": "days"}),
    "TimestampNTZType": ("TIMESTAMP", {"spark_transform": "text"}),
}
_COMPLEX = ("ArrayType", "MapType", "StructType")
_INTERVALS = ("DayTimeIntervalType", "YearMonthIntervalType", "CalendarIntervalType")
#: Why a column of a Spark type is refused (``{simple}``: its type), by the type.
_REFUSED: dict[str, str] = {
    **dict.fromkeys(
        _COMPLEX,
        "is {simple}: Tableau has no nested types. Flatten it, or pass complex_as_json=True "
        "to send it as JSON text",
    ),
    **dict.fromkeys(
        _INTERVALS,
        "is {simple}: Tableau cannot use interval columns; convert it to a number (e.g. "
        "seconds) first",
    ),
    "NullType": "has no type (void): cast it to a concrete type first",
}


def _type_name(data_type: DataType) -> str:
    return type(data_type).__name__


def plan_column(
    field: StructField,
    *,
    table: str,
    database_version: int,
    complex_as_json: bool = False,
) -> ColumnPlan:
    """The plan for one Spark field, or a :class:`PayloadError` naming table and column."""
    data_type: Any = field.dataType
    kind = _type_name(data_type)
    simple = data_type.simpleString()
    where = f"column {field.name!r} of table {table!r}"

    def plan(hyper_type: str, **kw: str) -> ColumnPlan:
        return ColumnPlan(field.name, simple, hyper_type, bool(field.nullable), **kw)

    if kind in _SIMPLE:
        return plan(_SIMPLE[kind])
    if kind in _CARRIED:
        hyper_type, transforms = _CARRIED[kind]
        return plan(hyper_type, **transforms)
    if kind == "FloatType":
        return plan("REAL" if database_version >= 4 else "DOUBLE PRECISION")
    if kind == "DecimalType":
        limit = max_decimal_precision(database_version)
        if data_type.precision > limit:
            raise PayloadError(
                f"{where} is {simple}, wider than the {limit} digits Hyper database version "
                f"{database_version} stores: pass database_version=3 (if your Tableau release "
                "reads it) or cast the column to a narrower decimal or to double"
            )
        return plan(f"NUMERIC({data_type.precision},{data_type.scale})")
    if kind in _COMPLEX and complex_as_json:
        return plan("TEXT", spark_transform="json")
    why = _REFUSED.get(kind, "has type {simple}, which cannot be carried to Hyper")
    raise PayloadError(f"{where} {why.format(simple=simple)}")


def plan_columns(
    df: DataFrame,
    table: str,
    columns: Sequence[str],
    database_version: int,
    complex_as_json: bool,
) -> list[ColumnPlan]:
    """The plans of ``columns`` of ``df`` (table ``table``), after its column names are
    checked: none twice, none in the builder's reserved prefix, at least one column."""
    by_name = {f.name: f for f in df.schema.fields}
    seen: set[str] = set()
    for f in df.schema.fields:
        if f.name.lower().startswith(RESERVED_PREFIX):
            raise PayloadError(
                f"table {table!r} has a column named {f.name!r}: names starting with "
                f"{RESERVED_PREFIX!r} are reserved for the payload builder's own columns; "
                "rename it"
            )
        if f.name in seen:
            raise PayloadError(f"table {table!r} has two columns named {f.name!r}")
        seen.add(f.name)
    if not columns:
        raise PayloadError(f"table {table!r} has no columns")
    return [
        plan_column(
            by_name[c],
            table=table,
            database_version=database_version,
            complex_as_json=complex_as_json,
        )
        for c in columns
    ]

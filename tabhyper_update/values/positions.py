"""Positions of changes in their source, ordered as the source means them: a text
``order_by`` column is refused unless ``order_as`` says how it orders (whole numbers, text,
a binlog file name, hexadecimal LSN parts, a list of numbers)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from .errors import ArgumentTypeError, PayloadError
from .spark_sql import number_from_text, sql_name

__all__ = [
    "ORDER_AS",
    "OrderAs",
    "check_order_as",
    "json_positions",
    "order_sql",
    "position_type",
]

OrderAs = Literal["number", "text", "binlog-file", "hex-lsn", "number-list"]
#: How ``order_as`` reads a text position (Spark SQL of the value ``{v}``'s text).
ORDER_AS: dict[str, str] = {
    "number": "whole numbers written as text, compared as numbers",
    "text": "compared as text",
    "binlog-file": "a MySQL/MariaDB binlog file name, ordered by its sequence number",
    "hex-lsn": "colon-separated hexadecimal parts (SQL Server, Db2), compared part by part",
    "number-list": "a JSON array of whole numbers (PostgreSQL's source.sequence)",
}


def check_order_as(
    order_as: Mapping[str, str] | None, orders: tuple[str, ...] | None
) -> dict[str, OrderAs] | None:
    """``order_as`` checked: each names an ``order_by`` column and says ``number`` or ``text``."""
    if order_as is None:
        return None
    if not isinstance(order_as, Mapping):
        raise ArgumentTypeError(
            f"ChangeSet order_as= takes a mapping of order_by column → 'number' or 'text', "
            f"got {order_as!r}"
        )
    result: dict[str, OrderAs] = {}
    for column, how in order_as.items():
        if orders is None or column not in orders:
            raise PayloadError(
                f"ChangeSet order_as names {column!r}, which is not an order_by column "
                f"(order_by: {list(orders) if orders is not None else 'not given'})"
            )
        if how not in ORDER_AS:
            kinds = "; ".join(f"{k!r}: {v}" for k, v in ORDER_AS.items())
            raise PayloadError(f"ChangeSet order_as[{column!r}] is {how!r}; expected {kinds}")
        result[column] = how  # type: ignore[assignment]
    return result


_TEXT_TYPES = ("string", "varchar", "char")


def _position_sql(quoted: str, how: OrderAs) -> str:
    """Spark SQL ranking a position written as text by its meaning (NULL: unreadable)."""
    text = f"CAST({quoted} AS STRING)"
    if how == "number":
        return number_from_text(quoted)
    if how == "binlog-file":
        # mysql-bin.000123: the sequence after the last dot (rolls over to 7 digits and more).
        sequence = f"regexp_extract({text}, '[.]([0-9]{{1,38}})$', 1)"
        found = f"{text} RLIKE '[.][0-9]{{1,38}}$'"
        return f"CASE WHEN {found} THEN CAST({sequence} AS DECIMAL(38, 0)) END"
    if how == "hex-lsn":
        hex_part = "[0-9a-fA-F]{1,16}"
        return (
            f"CASE WHEN {text} RLIKE '^{hex_part}(:{hex_part})*$' THEN "
            f"transform(split({text}, ':'), part -> CAST(conv(part, 16, 10) AS DECIMAL(38, 0))) "
            "END"
        )
    if how == "number-list":
        return f"transform(from_json({text}, 'array<string>'), part -> {number_from_text('part')})"
    return quoted


def order_sql(
    column: str,
    spark_type: str | None,
    order_as: OrderAs | None,
    fail: Callable[[str], PayloadError],
) -> str:
    """How ``column`` is ranked: as itself, or as the position its text means."""
    quoted = sql_name(column)
    if spark_type is not None and (spark_type == "binary" or spark_type.startswith("map")):
        raise fail(f"order_by column {column!r} is {spark_type}, which has no order")
    if order_as is not None:
        return _position_sql(quoted, order_as)
    if spark_type is None or not spark_type.startswith(_TEXT_TYPES):
        return quoted
    raise fail(
        f"order_by column {column!r} is text ({spark_type}): as text '999' sorts after "
        f"'1000', so the SDK will not guess. Say how it orders: order_as={{{column!r}: "
        f"'number'}} for whole numbers written as text, {{{column!r}: 'text'}} when its text "
        "order is its meaning (e.g. ISO timestamps of one width), or another of "
        f"{', '.join(map(repr, ORDER_AS))}; or cast the column (command line: --order-as "
        f"{column}=number)"
    )


def position_type(spark_type: str | None, order_as: OrderAs | None) -> str | None:
    """Spark's type of the position :func:`order_sql` makes of a column of ``spark_type``
    (``None``: not known)."""
    if order_as in ("number", "binlog-file"):
        return "decimal(38,0)"
    if order_as in ("hex-lsn", "number-list"):
        return "array<decimal(38,0)>"
    return spark_type


def _json_value(value: Any) -> Any:
    """A position value as JSON holds it: dates and times in ISO 8601, decimals as text."""
    for method in ("to_datetime", "to_date"):  # Hyper's own date and time values
        if hasattr(value, method):
            value = getattr(value, method)()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # a Decimal, an interval


def json_positions(found: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per change set, where it ends (``order_by`` column → value), as JSON values: what
    an update records and ``tabhyper-update status`` shows."""
    return {t: {c: _json_value(v) for c, v in cols.items()} for t, cols in found.items()}

"""How a reconciliation cuts the key's range into buckets, level by level: a Tableau formula
the VizQL Data Service computes and the same in Spark, so that both sides group alike.

- One integer key column: :class:`IntegerBuckets`, ``FLOOR((key - low) / width)`` with
  widths that are powers of the fan-out, so each level nests in the one above.
- Any other key (text, dates, several columns): :class:`RangeBuckets`, at each level about
  ``fan_out`` ranges of equal rows, bounded by the source's keys at evenly spaced ranks and
  compared as tuples in key order. A bucket never stays whole from one level to the next,
  so one drifted row in ``N`` is reached in about ``log(N / leaf_rows, fan_out)`` levels
  whatever the key.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ..values.errors import InvalidArgumentError
from .compare import canonical
from .dataservice import FieldInfo

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["INTEGER_UNITS", "RANGE_KEY_TYPES", "IntegerBuckets", "RangeBuckets"]

#: The key column types a range can be bounded by.
RANGE_KEY_TYPES = ("INTEGER", "STRING", "DATE", "REAL")
#: A one-column key of these types is cut as an integer (dates and timestamps by their days
#: and seconds since 1970).
INTEGER_UNITS: dict[str, str | None] = {"INTEGER": None, "DATE": "day", "DATETIME": "second"}


def _ref(caption: str) -> str:
    return "[" + caption.replace("]", "]]") + "]"


class IntegerBuckets:
    """One integer key column cut by ``FLOOR((key - low) / width)``; a date or timestamp
    key as its whole days or seconds since 1970 (``unit``), so that it is cut at the
    integer key's pace (a last-level bucket of one second is compared row by row whatever
    it holds)."""

    def __init__(
        self, key: str, caption: str, low: Any, high: Any, fan_out: int, unit: str | None = None
    ) -> None:
        self.key, self.fan_out, self.unit = key, fan_out, unit
        field = _ref(caption)
        self.ref = field if unit is None else f"DATEDIFF('{unit}', #1970-01-01#, {field})"
        self.low = self._number(low)
        span = self._number(high) - self.low + 1
        self.levels = max(1, math.ceil(math.log(max(span, 2), fan_out)))

    def _number(self, value: Any) -> int:
        """A canonical key value (an integer, a date, a timestamp in microseconds) as the
        integer the formula cuts."""
        if self.unit == "day":
            return (value - date(1970, 1, 1)).days if isinstance(value, date) else int(value)
        if self.unit == "second":
            return math.floor(int(value) / 1_000_000)
        return int(value)

    def plan(self, level: int, region: DataFrame, rows: int, ranges: int = 1) -> None:
        """Nothing to plan: integer buckets follow from the key's range (each bucket above
        is cut ``fan_out`` ways)."""

    def width(self, level: int) -> int:
        return int(self.fan_out ** max(self.levels - level, 0))

    def last(self, level: int) -> bool:
        return level >= self.levels

    def formula(self, level: int) -> str:
        return f"FLOOR(({self.ref} - {self.low}) / {self.width(level)})"

    def of(self, key: tuple[Any, ...], level: int) -> Any:
        """The bucket of a (canonical) key at ``level``, as the formula computes it."""
        return math.floor((self._number(key[0]) - self.low) / self.width(level))

    def spark(self, level: int) -> Column:
        from pyspark.sql import functions as F

        col = F.col(f"`{self.key}`")
        if self.unit == "day":
            col = F.unix_date(col)
        elif self.unit == "second":
            col = F.unix_seconds(col)
        return F.floor((col - F.lit(self.low)) / F.lit(self.width(level))).cast("long")


#: The most bounds one level of range buckets has (each a comparison in the query's formula).
MAX_BOUNDS = 1024


class RangeBuckets:
    """Any key cut into ranges of about equal rows: the bucket of a key is how many of the
    level's bounds it is at or above, as tuples in key order."""

    def __init__(self, key: Sequence[str], fields: Mapping[str, FieldInfo], fan_out: int) -> None:
        self.key = list(key)
        self.kinds = [fields[k].data_type for k in self.key]
        for name, kind in zip(self.key, self.kinds, strict=True):
            if kind not in RANGE_KEY_TYPES:
                raise InvalidArgumentError(
                    f"reconcile cuts a composite key's range by its columns, which must be "
                    f"integers, numbers, text or dates; {name!r} is {kind}",
                    argument="key",
                )
        self.refs = [_ref(fields[k].caption) for k in self.key]
        self.fan_out = fan_out
        #: Each level's bounds (canonical key tuples, ascending).
        self.bounds: dict[int, list[tuple[Any, ...]]] = {}

    def plan(self, level: int, region: DataFrame, rows: int, ranges: int = 1) -> None:
        """Choose the level's bounds from the source's keys in ``region`` (the rows of the
        ``ranges`` buckets that differed at the level above, about ``rows`` of them as the
        aggregates counted): the keys at evenly spaced ranks, about ``fan_out`` per range
        above (so that drift spread over many ranges narrows as fast as drift in one), at
        most :data:`MAX_BOUNDS` in all."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        cols = [F.col(f"`{k}`") for k in self.key]
        whole = cols[0].isNotNull()
        for c in cols[1:]:
            whole = whole & c.isNotNull()
        keyed = region.select(*cols).where(whole)
        cuts = min(MAX_BOUNDS, self.fan_out * max(1, ranges))
        step = max(1, math.ceil(rows / cuts))
        ranked = keyed.withColumn("__rank", F.row_number().over(Window.orderBy(*cols)))
        picked = ranked.where((F.col("__rank") % step == 1) & (F.col("__rank") > 1))
        found = [
            tuple(canonical(row[i], kind) for i, kind in enumerate(self.kinds))
            for row in picked.select(*cols).collect()
        ]
        self.bounds[level] = sorted(set(found))

    def last(self, level: int) -> bool:
        return not self.bounds.get(level)

    def _literal(self, value: Any, kind: str) -> str:
        if kind == "INTEGER":
            return str(int(value))
        if kind == "DATE":
            assert isinstance(value, date)
            return f"#{value.isoformat()}#"
        if kind == "REAL":
            return format(value, "f") if isinstance(value, Decimal) else repr(float(value))
        return "'" + str(value).replace("'", "''") + "'"

    def _at_or_above(self, bound: tuple[Any, ...]) -> str:
        """Tableau: the key at or above ``bound``, as tuples in key order."""
        out = f"{self.refs[-1]} >= {self._literal(bound[-1], self.kinds[-1])}"
        for i in range(len(self.key) - 2, -1, -1):
            value = self._literal(bound[i], self.kinds[i])
            out = f"({self.refs[i]} > {value} OR ({self.refs[i]} = {value} AND {out}))"
        return out

    def formula(self, level: int) -> str:
        bounds = self.bounds.get(level) or []
        if not bounds:
            return f"INT({self.refs[0]} = {self.refs[0]}) - 1"  # one bucket, NULL for NULL
        return " + ".join(f"INT({self._at_or_above(b)})" for b in bounds)

    def of(self, key: tuple[Any, ...], level: int) -> Any:
        return bisect.bisect_right(self.bounds.get(level) or [], key)

    def spark(self, level: int) -> Column:
        from pyspark.sql import functions as F

        cols = [F.col(f"`{k}`") for k in self.key]
        bounds = self.bounds.get(level) or []
        if not bounds:
            return F.when(cols[0].isNotNull(), F.lit(0))

        def at_or_above(bound: tuple[Any, ...]) -> Column:
            out = cols[-1] >= F.lit(bound[-1])
            for i in range(len(cols) - 2, -1, -1):
                out = (cols[i] > F.lit(bound[i])) | ((cols[i] == F.lit(bound[i])) & out)
            return out.cast("long")

        # Added up as a balanced tree: a chain of a thousand additions overflows the stack
        # of Spark's code generation.
        terms = [at_or_above(b) for b in bounds]
        while len(terms) > 1:
            pairs = [terms[i : i + 2] for i in range(0, len(terms), 2)]
            terms = [p[0] + p[1] if len(p) == 2 else p[0] for p in pairs]
        return terms[0]

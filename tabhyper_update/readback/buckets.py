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

    def prepare(self, source: DataFrame) -> DataFrame:
        """Nothing to add: the key itself is cut."""
        return source

    def plan(
        self,
        level: int,
        rows: int,
        ranges: int = 1,
        above: Sequence[Any] | None = None,
    ) -> None:
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
#: The column of a row's rank in key order, beside the source's own.
RANK = "__tabhyper_rank"


class RangeBuckets:
    """Any key cut into ranges of about equal rows: the bucket of a key is how many of the
    level's bounds it is at or above, as tuples in key order.

    The source's rows are ranked once per reconcile (:meth:`prepare`: each key's dense rank
    in key order, one sort): each level's bounds are the keys at evenly spaced ranks within
    the ranges that differed above, and Spark buckets a row by its rank, a comparison of
    integers, where the service compares the key with the bounds."""

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
        #: Each level's bounds (canonical key tuples, ascending) and their ranks.
        self.bounds: dict[int, list[tuple[Any, ...]]] = {}
        self.ranks: dict[int, list[int]] = {}
        #: Each level's region, as spans of ranks (inclusive).
        self.spans: dict[int, list[tuple[int, int]]] = {}
        self._ranked: DataFrame | None = None
        self._top = 0

    def prepare(self, source: DataFrame) -> DataFrame:
        """``source`` with each row's dense rank in key order (NULL for a NULL key): what the
        reconcile reads from then on. One sort, once (in one partition: on 2 cores a range
        partitioning first measured slower at 1M rows), then spread again so that every later
        pass over the source runs on every core."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        cols = [F.col(f"`{k}`") for k in self.key]
        whole = cols[0].isNotNull()
        for c in cols[1:]:
            whole = whole & c.isNotNull()
        # NULL keys sort first: ranked apart so that they never shift a key's rank.
        order = Window.orderBy(F.when(whole, F.lit(1)).otherwise(F.lit(0)), *cols)
        ranked = source.withColumn(RANK, F.when(whole, F.dense_rank().over(order)).cast("long"))
        cores = source.sparkSession.sparkContext.defaultParallelism
        self._ranked = ranked.repartition(max(2, cores))
        return self._ranked

    def plan(
        self,
        level: int,
        rows: int,
        ranges: int = 1,
        above: Sequence[Any] | None = None,
    ) -> None:
        """Choose the level's bounds: within each range that differed at the level above
        (``above``: its buckets; all the keys at the first level), the keys at evenly
        spaced ranks, about ``fan_out`` per range (so that drift spread over many ranges
        narrows as fast as drift in one), at most :data:`MAX_BOUNDS` in all."""
        from pyspark.sql import functions as F

        assert self._ranked is not None, "prepare() the source first"
        if not self._top:
            # The first level's region is the whole source: no key ranks above its rows.
            self._top = max(1, rows)
        spans = [(1, self._top)]
        if above is not None and level > 1:
            # Each bucket that differed above, as the ranks it holds within the region.
            edges = [1, *self.ranks.get(level - 1, []), self._top + 1]
            inside = self.spans.get(level - 1, spans)
            spans = [
                (max(low, edges[b]), min(high, edges[b + 1] - 1))
                for b in sorted(int(b) for b in above)
                for low, high in inside
                if max(low, edges[b]) <= min(high, edges[b + 1] - 1)
            ]
        self.spans[level] = spans
        per_range = max(2, min(MAX_BOUNDS, self.fan_out * max(1, ranges)) // max(1, len(spans)))
        wanted: list[int] = []
        for low, high in spans:
            step = (high - low + 1) / per_range
            wanted += sorted({low + round(i * step) for i in range(1, per_range)} - {low})
        wanted = [r for r in wanted if r <= self._top]
        if not wanted:
            self.bounds[level], self.ranks[level] = [], []
            return
        found = (
            self._ranked.where(F.col(RANK).isin(wanted))
            .select(RANK, *[F.col(f"`{k}`") for k in self.key])
            .dropDuplicates([RANK])
            .collect()
        )
        by_rank = {
            int(row[0]): tuple(canonical(row[i + 1], kind) for i, kind in enumerate(self.kinds))
            for row in found
        }
        ranks = sorted(by_rank)
        self.ranks[level] = ranks
        self.bounds[level] = [by_rank[r] for r in ranks]

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
        """How many of the level's bounds the key is at or above: a binary search of nested
        ``IF``s (about log2 of the bounds' count comparisons a row), NULL for a NULL key."""
        bounds = self.bounds.get(level) or []
        whole = " * ".join(f"INT({r} = {r})" for r in self.refs)  # 1, or NULL for a NULL key
        if not bounds:
            return f"{whole} - 1"  # one bucket

        def search(low: int, high: int) -> str:
            if low == high:
                return str(low)
            mid = (low + high) // 2
            return (
                f"IF {self._at_or_above(bounds[mid])} THEN {search(mid + 1, high)} "
                f"ELSE {search(low, mid)} END"
            )

        return f"({search(0, len(bounds))}) * {whole}"

    def of(self, key: tuple[Any, ...], level: int) -> Any:
        return bisect.bisect_right(self.bounds.get(level) or [], key)

    def spark(self, level: int) -> Column:
        """How many of the level's bounds a row's key is at or above, by its rank."""
        from pyspark.sql import functions as F

        rank = F.col(RANK)
        ranks = self.ranks.get(level) or []
        if not ranks:
            return F.when(rank.isNotNull(), F.lit(0))
        # Added up as a balanced tree: a chain of a thousand additions overflows the stack
        # of Spark's code generation.
        terms = [(rank >= F.lit(r)).cast("long") for r in ranks]
        while len(terms) > 1:
            pairs = [terms[i : i + 2] for i in range(0, len(terms), 2)]
            terms = [p[0] + p[1] if len(p) == 2 else p[0] for p in pairs]
        return terms[0]

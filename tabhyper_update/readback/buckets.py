"""How a reconciliation cuts the key's range into buckets, level by level: a Tableau formula
the VizQL Data Service computes and the same in Spark, so that both sides group alike.

- One integer key column: :class:`IntegerBuckets`, ``FLOOR((key - low) / width)`` with
  widths that are powers of the fan-out, so each level nests in the one above.
- Any other key (text, decimals, several columns): :class:`RangeBuckets`, at each level
  about ``fan_out`` ranges of about equal rows, bounded by keys evenly spaced among (a
  sample of) the source's keys there, and compared as tuples in key order. A bucket never
  stays whole from one level to the next, so one drifted row in ``N`` is reached in about
  ``log(N / leaf_rows, fan_out)`` levels whatever the key.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ..values.errors import InvalidArgumentError
from ..values.spark_sql import sql_name, sql_text
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


def _tuple_at_or_above(columns: Sequence[str], values: Sequence[str]) -> str:
    """``(columns) >= (values)`` as tuples in order, in the syntax Tableau's calculations and
    Spark SQL share: ``(a > x OR (a = x AND ...))``."""
    out = f"{columns[-1]} >= {values[-1]}"
    for column, value in zip(columns[-2::-1], values[-2::-1], strict=True):
        out = f"({column} > {value} OR ({column} = {value} AND {out}))"
    return out


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

    def plan(
        self,
        level: int,
        rows: int,
        ranges: int = 1,
        above: Sequence[Any] | None = None,
        region: DataFrame | None = None,
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

        # SQL functions (pyspark's own Python wrappers of them arrived in 3.5).
        col = F.col(sql_name(self.key))
        if self.unit == "day":
            col = F.expr(f"unix_date({sql_name(self.key)})")
        elif self.unit == "second":
            col = F.expr(f"unix_seconds({sql_name(self.key)})")
        return F.floor((col - F.lit(self.low)) / F.lit(self.width(level))).cast("long")

    def spark_in(self, level: int, buckets: Sequence[Any]) -> Column:
        """Whether a row's key is in one of ``buckets`` of ``level``."""
        return self.spark(level).isin(list(buckets))


def _evenly_spaced(keys: set[tuple[Any, ...]], per_range: int) -> list[tuple[Any, ...]]:
    """About ``per_range`` - 1 of ``keys`` evenly spaced in their order (none for a range of
    one key: it has nothing to cut)."""
    ordered = sorted(keys)
    count = len(ordered)
    if count <= 1:
        return []
    places = {min(count - 1, max(1, round(i * count / per_range))) for i in range(1, per_range)}
    return [ordered[p] for p in sorted(places)]


def _range_ends(chosen: Sequence[int], bounds: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The bounds where the key ranges of the buckets ``chosen`` (in order, adjacent ones
    joined) start and end: bucket ``b`` spans from bound ``b - 1`` to bound ``b`` (the first
    has no start, the last no end)."""
    ends: list[tuple[Any, ...]] = []
    for i, b in enumerate(chosen):
        if b > 0 and (i == 0 or chosen[i - 1] != b - 1):
            ends.append(bounds[b - 1])  # a range starts
        if b < len(bounds) and (i + 1 == len(chosen) or chosen[i + 1] != b + 1):
            ends.append(bounds[b])  # a range ends
    return ends


def _padded(bounds: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``bounds`` padded to 2^k - 1 with the last bound again (its copies make empty buckets
    on both sides): levels of about as many bounds then share one shape of Spark's search,
    which Spark compiles once (a new shape costs seconds to compile)."""
    if not bounds:
        return bounds
    shape = 2 ** len(bounds).bit_length() - 1
    return bounds + [bounds[-1]] * (shape - len(bounds))


#: The most bounds one level of range buckets has (each a comparison in the query's formula).
MAX_BOUNDS = 1024
#: The ways each ``CASE`` of Spark's bucket search splits the bounds in play.
SPARK_BRANCHES = 8
#: Keys read per bound wanted when a level's bounds are chosen from a sample of its region
#: (a region of at most that many rows per bound is read whole: its bounds are exact).
SAMPLE_PER_BOUND = 32


class RangeBuckets:
    """Any key cut into ranges of about equal rows: the bucket of a key is how many of the
    level's bounds it is at or above, as tuples in key order.

    Each level's bounds are the keys at evenly spaced places among a sample of the region
    being cut (every range that differed above, each cut about ``fan_out`` ways), read in
    one pass over the source without sorting it. Both sides then bucket a row by comparing
    its key with the bounds: the service by a binary search of nested ``IF``s, Spark by a
    search of the same comparisons (:meth:`spark`). ``spark_types``: each source column's
    Spark type (the bounds are written in their column's own type, so that no row's value
    is cast to compare)."""

    def __init__(
        self,
        key: Sequence[str],
        fields: Mapping[str, FieldInfo],
        fan_out: int,
        spark_types: Mapping[str, str],
    ) -> None:
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
        self._spark: dict[int, Column] = {}
        self._types = [spark_types[k] for k in self.key]

    def plan(
        self,
        level: int,
        rows: int,
        ranges: int = 1,
        above: Sequence[Any] | None = None,
        region: DataFrame | None = None,
    ) -> None:
        """Choose the level's bounds: within each range that differed at the level above
        (``above``: its buckets; all the keys at the first level), about ``fan_out`` keys
        evenly spaced among the region's keys (``region``: the source's rows there, ``rows``
        of them), at most :data:`MAX_BOUNDS` in all. A large region is sampled, a small one
        read whole."""
        assert region is not None, "range buckets are chosen from the region's keys"
        regions = max(1, len(above) if above is not None and level > 1 else 1)
        per_range = max(2, min(MAX_BOUNDS, self.fan_out * max(1, ranges)) // regions)
        wanted = min(rows, SAMPLE_PER_BOUND * per_range * regions)
        by_region = self._sampled(level, region, rows, wanted)
        bounds = sorted({b for keys in by_region.values() for b in _evenly_spaced(keys, per_range)})
        self.bounds[level] = _padded(bounds)

    def _sampled(
        self, level: int, region: DataFrame, rows: int, wanted: int
    ) -> dict[Any, set[tuple[Any, ...]]]:
        """About ``wanted`` of the ``rows`` keys of ``region``, by the range they are in. A
        sample far smaller than asked for (a chance that small samples run) is taken again,
        larger, up to the whole region."""
        fraction = 1.0 if rows <= 0 else min(1.0, wanted / rows)
        while True:
            by_region = self._sample(level, region, fraction)
            found = sum(map(len, by_region.values()))
            if fraction >= 1.0 or found * 4 >= wanted:
                return by_region
            fraction = min(1.0, fraction * 4)

    def _sample(
        self, level: int, region: DataFrame, fraction: float
    ) -> dict[Any, set[tuple[Any, ...]]]:
        """The region's keys (or a sample of them), by the bucket of the level above."""
        from pyspark.sql import functions as F

        cols = [F.col(sql_name(k)) for k in self.key]
        whole = cols[0].isNotNull()
        for c in cols[1:]:
            whole = whole & c.isNotNull()
        frame = region.where(whole).select(*cols)
        if fraction < 1.0:
            frame = frame.sample(withReplacement=False, fraction=fraction, seed=level)
        found: dict[Any, set[tuple[Any, ...]]] = {}
        for row in frame.collect():
            key = tuple(canonical(row[i], kind) for i, kind in enumerate(self.kinds))
            found.setdefault(self.of(key, level - 1) if level > 1 else 0, set()).add(key)
        return found

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
        values = [self._literal(v, kind) for v, kind in zip(bound, self.kinds, strict=True)]
        return _tuple_at_or_above(self.refs, values)

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

    def _sql_value(self, value: Any, index: int) -> str:
        """A bound's value for key column ``index``, as a Spark SQL literal of its type."""
        kind = self.kinds[index]
        if kind == "DATE":
            assert isinstance(value, date)
            return f"DATE'{value.isoformat()}'"
        if kind in ("INTEGER", "REAL"):
            if isinstance(value, Decimal):
                text = f"'{value:f}'"
            elif isinstance(value, float):
                text = f"'{value!r}'"
            else:
                text = str(int(value))
            return f"CAST({text} AS {self._types[index]})"
        return sql_text(str(value))

    def _sql_at_or_above(self, bound: tuple[Any, ...], known: int = 0) -> str:
        """Spark SQL: the key at or above ``bound``, as tuples in key order (as
        :meth:`_at_or_above` has it for the service), for a key whose first ``known``
        columns are known to equal the bound's (only the rest are compared)."""
        values = [self._sql_value(bound[i], i) for i in range(known, len(self.key))]
        return _tuple_at_or_above(list(map(sql_name, self.key[known:])), values)

    def _sql_search(self, points: Sequence[tuple[Any, ...]], leaf: Callable[[int], str]) -> str:
        """Spark SQL: ``leaf(n)``, ``n`` how many of ``points`` (ascending) the key is at or
        above, in the order the service's formula compares; NULL for a NULL key. A search of
        :data:`SPARK_BRANCHES` ways per ``CASE`` (a first query over a thousand bounds
        measured 1.3 s faster to plan and compile than a binary search's nested ``CASE``s),
        written as one SQL expression (a thousand points built as Column objects would cost
        a call to the JVM each)."""
        whole = " AND ".join(f"{sql_name(k)} IS NOT NULL" for k in self.key)

        def search(low: int, high: int) -> str:
            # The key is at or above points[low - 1] and below points[high]: where both
            # exist, it starts with the columns they share, which need no comparing.
            if low == high:
                return leaf(low)
            known = 0
            if low > 0 and high < len(points):
                first, last = points[low - 1], points[high]
                while known < len(self.key) - 1 and first[known] == last[known]:
                    known += 1
            count = high - low
            ways = min(SPARK_BRANCHES, count + 1)
            splits = sorted({low + (i * count) // ways for i in range(1, ways)} | {low})
            branches = []
            start = low
            for split in splits:
                below = f"NOT ({self._sql_at_or_above(points[split], known)})"
                branches.append(f"WHEN {below} THEN {search(start, split)}")
                start = split + 1
            return f"CASE {' '.join(branches)} ELSE {search(start, high)} END"

        return f"CASE WHEN {whole} THEN {search(0, len(points))} END"

    def spark(self, level: int) -> Column:
        """How many of the level's bounds a row's key is at or above; NULL for a NULL key."""
        if level not in self._spark:
            from pyspark.sql import functions as F

            self._spark[level] = F.expr(self._sql_search(self.bounds.get(level) or [], str))
        return self._spark[level]

    def spark_in(self, level: int, buckets: Sequence[Any]) -> Column:
        """Whether a row's key is in one of ``buckets`` of ``level``: the buckets as key
        ranges (adjacent ones joined), searched by their ends, which are far fewer than the
        level's bounds when few buckets are chosen (a smaller expression, fewer comparisons
        a row)."""
        from pyspark.sql import functions as F

        bounds = self.bounds.get(level) or []
        chosen = sorted({int(b) for b in buckets if b is not None})
        if not chosen:
            return F.lit(False)
        ends = _range_ends(chosen, bounds)
        below = chosen[0] == 0  # the first range reaches below every bound
        # At or above an odd number of ends (one more when the first range has no start):
        # inside a range.
        return F.expr(self._sql_search(ends, lambda n: "TRUE" if (n + below) % 2 else "FALSE"))

"""Reconciling a whole published data source with its source, without downloading either.

:func:`reconcile` compares the row count and per-column aggregates of both sides (Spark
computes the source's, the VizQL Data Service the data source's), then narrows down: the
key's range is cut into ``fan_out`` buckets (one integer column by ``FLOOR((key - low) /
width)``, any other key into ranges of about equal rows: :mod:`.buckets`), only the buckets
that differ are cut again, and buckets of at most ``leaf_rows`` rows are compared row by
row (unless a few of them hold many rows in all: those are cut once more). The driver holds
aggregates and the rows of differing leaf buckets only.
:func:`tabhyper_update.builder.repair.repair` turns the report into an update.

>>> report = reconcile(spark.table("sales.orders"), "Orders", key="order_id")  # doctest: +SKIP
>>> if not report.ok:                                                           # doctest: +SKIP
...     repair(report, spark.table("sales.orders"))

What aggregates can miss: per bucket they are the row count and, per column, the non-NULL
count, sums (numbers; text by its length; booleans as 0/1; dates in days and timestamps in
whole seconds since 1970) and extremes. A value that changes to another of the same length,
inside the extremes, with the same sum (a text of the same length, a timestamp within its
second, a ``timestamp_ntz``, a real whose change hides in the sum's rounding) is not seen.
The row-by-row comparison of a differing bucket sees everything.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..rest.refs import DataSourceRef
from ..rest.session import RestSession, client_for
from ..values.errors import DataServiceError, InvalidArgumentError, QueryBudgetError
from ..values.names import names_in
from ..values.spark_sql import sql_name
from .buckets import INTEGER_UNITS, IntegerBuckets, RangeBuckets
from .check import judge_key, rows_by_key
from .compare import Tolerance, canonical, same
from .dataservice import DataService, FieldInfo, calculation, set_filter
from .drift import DriftReport, KeyDrift

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


__all__ = ["reconcile", "target_of"]

#: Buckets per level, and the most rows a bucket may hold to be compared row by row.
FAN_OUT = 64
LEAF_ROWS = 2000
#: Row-by-row comparisons per request (leaf buckets are batched up to this many rows).
ROWS_PER_REQUEST = 20000
#: At most this many differing buckets holding more than a request's rows in all are cut
#: once more rather than compared row by row (each then gets at least 8 pieces).
SPARSE_BUCKETS = 128
#: The unit roundoff of a double: two engines summing the same n reals in different orders
#: may differ by up to about 2 * n * EPSILON * (the sum of their magnitudes).
EPSILON = 2.0**-53
#: No tolerance at all: whether two rows differ in any way.
EXACT = Tolerance(relative=0.0, absolute=0.0, seconds=0.0)


@dataclass(frozen=True)
class _Aggregate:
    """One aggregate of one column: the service's formula and Spark's expression."""

    name: str
    data_type: str  # of the aggregate's value
    formula: str  # Tableau
    spark: Column
    #: A sum of reals: its rounding differs between engines, within a bound the column's
    #: extremes give (the names of its MIN and MAX aggregates).
    extremes: tuple[str, str] | None = None


#: Per Tableau type, the sum that stands for a column's values beside its count and
#: extremes: its name's prefix, the service's formula and Spark's SQL (``{f}`` the field,
#: ``{c}`` the column). A DATETIME's only for an instant (a ``timestamp_ntz`` has none).
_SUMS: dict[str, tuple[str, str, str]] = {
    "INTEGER": ("s", "SUM({f})", "sum({c})"),
    "REAL": ("s", "SUM({f})", "sum({c})"),
    "STRING": ("l", "SUM(LEN({f}))", "sum(length({c}))"),
    "DATE": ("e", "SUM(DATEDIFF('day', #1970-01-01#, {f}))", "sum(unix_date({c}))"),
    "DATETIME": ("e", "SUM(DATEDIFF('second', #1970-01-01#, {f}))", "sum(unix_seconds({c}))"),
    "BOOLEAN": ("b", "SUM(INT({f}))", "sum(CAST({c} AS INT))"),
}
#: The Tableau types whose minimum and maximum are compared (a timestamp's in microseconds).
_EXTREMES = ("INTEGER", "REAL", "STRING", "DATE", "DATETIME")


def _aggregates(
    columns: Sequence[str], fields: Mapping[str, FieldInfo], source: DataFrame, key: str
) -> list[_Aggregate]:
    """The row count, then per column: the non-NULL count, its sum (:data:`_SUMS`; a
    decimal's exact sums) and its extremes (:data:`_EXTREMES`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType, TimestampType

    def ref(c: str) -> str:
        return "[" + fields[c].caption.replace("]", "]]") + "]"

    spark_types = {f.name: f.dataType for f in source.schema.fields}
    found = [_Aggregate("rows", "INTEGER", f"COUNT({ref(key)})", F.count(F.col(sql_name(key))))]
    for i, c in enumerate(columns):
        kind, spark_type, field, col = fields[c].data_type, spark_types[c], ref(c), sql_name(c)
        moment = isinstance(spark_type, TimestampType)
        found.append(_Aggregate(f"n{i}", "INTEGER", f"COUNT({field})", F.expr(f"count({col})")))
        prefix, formula, summed = _SUMS.get(kind, ("", "", ""))
        if isinstance(spark_type, DecimalType):
            found += _exact_decimal_sums(i, field, F.col(col), spark_type.scale)
        elif prefix and (moment or kind != "DATETIME"):
            extremes = (f"lo{i}", f"hi{i}") if kind == "REAL" else None
            found.append(
                _Aggregate(
                    f"{prefix}{i}",
                    kind if prefix == "s" else "INTEGER",
                    formula.format(f=field),
                    F.expr(summed.format(c=col)),
                    extremes=extremes,
                )
            )
        if kind in _EXTREMES:
            value = F.expr(f"unix_micros({col})" if moment else col)
            found.append(_Aggregate(f"lo{i}", kind, f"MIN({field})", F.min(value)))
            found.append(_Aggregate(f"hi{i}", kind, f"MAX({field})", F.max(value)))
    return found


#: Moduli of a decimal column's exact sums: a change of its value goes unseen only when it
#: is a multiple of both (in units of its last decimal place).
DECIMAL_MODULI = (1_000_003, 998_244_353)


def _exact_decimal_sums(index: int, field: str, col: Column, scale: int) -> list[_Aggregate]:
    """A decimal column summed exactly: each value as a whole number of its last decimal
    place, its remainder by each modulus summed (integers both engines add exactly), never
    a sum of reals with a rounding allowance."""
    from pyspark.sql import functions as F

    units = 10**scale
    scaled = F.round(col * F.lit(units), 0).cast("long")
    return [
        _Aggregate(
            f"m{index}_{j}",
            "INTEGER",
            f"SUM(INT(ROUND({field} * {units}, 0)) % {modulus})",
            F.sum(scaled % F.lit(modulus)),
        )
        for j, modulus in enumerate(DECIMAL_MODULI)
    ]


class _Reconciler:
    #: How the key's range is cut, level by level: made by :meth:`run` from both sides'
    #: extremes before the walk, the only code that reads it.
    buckets: IntegerBuckets | RangeBuckets

    def __init__(
        self,
        source: DataFrame,
        service: DataService,
        key: Sequence[str],
        columns: Sequence[str],
        fan_out: int,
        leaf_rows: int,
        tolerance: Tolerance | None,
    ) -> None:
        self.source, self.service, self.key = source, service, list(key)
        self.columns = list(columns)
        self.fields = {c: service.field(c) for c in self.columns}
        self.fan_out, self.leaf_rows, self.tolerance = fan_out, leaf_rows, tolerance
        self._server_rows: dict[Any, int] = {}
        self.aggs = _aggregates(self.columns, self.fields, source, self.key[0])
        #: The buckets that differed at each level above the one being read.
        self.path: list[tuple[int, list[Any]]] = []
        #: The source's rows in those buckets, kept level by level (each a small part of the
        #: one above: later levels read it rather than filter the whole source again).
        self.regions: list[DataFrame] = []

    # -- both sides' aggregates ----------------------------------------------------------------
    def _filters(self) -> list[dict[str, Any]]:
        """The service's filters to the buckets that differed at each level above."""
        return [
            set_filter(calculation(f"p{level}", self.buckets.formula(level)), chosen)
            for level, chosen in self.path
        ]

    def _region(self) -> DataFrame:
        """The source's rows in the buckets that differed at each level above."""
        return self.regions[-1] if self.regions else self.source

    def _descend(self, level: int, chosen: list[Any]) -> None:
        """Narrow the region to ``chosen``, the buckets of ``level`` to cut next."""
        region = self._region().where(self.buckets.spark_in(level, chosen)).persist()
        self.path.append((level, chosen))
        self.regions.append(region)

    def _server(self, level: int) -> dict[Any, dict[str, Any]]:
        fields = [calculation(a.name, a.formula) for a in self.aggs]
        if level:
            fields.insert(0, calculation("bucket", self.buckets.formula(level)))
        out: dict[Any, dict[str, Any]] = {}
        # At level 0 no bucket differed yet: no filters.
        for row in self.service.query(fields, self._filters()):
            out[row.get("bucket")] = {
                a.name: canonical(row.get(a.name), a.data_type) for a in self.aggs
            }
        return out

    def _source(self, level: int) -> dict[Any, dict[str, Any]]:
        frame = self._region()
        exprs = [a.spark.alias(a.name) for a in self.aggs]
        if level:
            rows = frame.groupBy(self.buckets.spark(level).alias("bucket")).agg(*exprs).collect()
        else:
            rows = frame.agg(*exprs).collect()
        return {
            (r["bucket"] if level else None): {
                a.name: canonical(r[a.name], a.data_type) for a in self.aggs
            }
            for r in rows
        }

    def _differs(self, mine: dict[str, Any] | None, theirs: dict[str, Any] | None) -> bool:
        if mine is None or theirs is None:
            return True
        return any(
            not same(mine[a.name], theirs[a.name], a.data_type, self._tolerance(a, mine, theirs))
            for a in self.aggs
        )

    def _tolerance(
        self, a: _Aggregate, mine: dict[str, Any], theirs: dict[str, Any]
    ) -> Tolerance | None:
        """How far the two sides' values of ``a`` may differ: the user's tolerance, and for a
        sum of reals, both engines' rounding over the rows summed."""
        if a.extremes is None:
            return self.tolerance
        rows = max(int(mine["rows"] or 0), int(theirs["rows"] or 0))
        finite = [
            abs(float(v))
            for side in (mine, theirs)
            for name in a.extremes
            if (v := side[name]) is not None and math.isfinite(float(v))
        ]
        bound = 2 * rows * EPSILON * rows * max(finite, default=0.0)
        return Tolerance(relative=1e-12, absolute=max(bound, 1e-12))

    # -- the walk ------------------------------------------------------------------------------
    def run(self, report: DriftReport) -> None:
        top_mine, top_theirs = self._source(0).get(None), self._server(0).get(None)
        report.rows = {"source": _rows(top_mine), "datasource": _rows(top_theirs)}
        report.checked = report.total = report.rows["source"]
        if not self._differs(top_mine, top_theirs):
            return
        sides = [side for side in (top_mine, top_theirs) if side]
        lows: list[Any] = [side["lo0"] for side in sides if side["lo0"] is not None]
        highs: list[Any] = [side["hi0"] for side in sides if side["hi0"] is not None]
        if not lows:  # both sides empty of keys: the difference is in NULL keys
            report.unresolved.append("the sides differ only in rows whose key is NULL")
            return
        self.buckets = self._buckets(lows, highs)
        with self._source_kept():
            self._narrow(report)

    @contextlib.contextmanager
    def _source_kept(self) -> Iterator[None]:
        """The source kept in memory while the walk lasts (every level reads it again), and
        the regions the walk kept released after it."""
        kept = not self.source.is_cached
        if kept:
            self.source = self.source.persist()
        try:
            yield
        finally:
            for region in self.regions:
                region.unpersist()
            if kept:
                self.source.unpersist()

    def _buckets(self, lows: list[Any], highs: list[Any]) -> IntegerBuckets | RangeBuckets:
        """How the key's range (from the least of ``lows`` to the greatest of ``highs``) is
        cut: in equal spans of a single whole-number key, else in ranges of the key's values
        as Spark orders them."""
        key_type = self.fields[self.key[0]].data_type
        if len(self.key) > 1 or key_type not in INTEGER_UNITS:
            types = {f.name: f.dataType.simpleString() for f in self.source.schema.fields}
            return RangeBuckets(self.key, self.fields, self.fan_out, types)
        caption = self.fields[self.key[0]].caption
        return IntegerBuckets(
            self.key[0], caption, min(lows), max(highs), self.fan_out, INTEGER_UNITS[key_type]
        )

    def _narrow(self, report: DriftReport) -> None:
        """Cut the differing ranges level by level; compare small ones row by row."""
        level = 0
        #: The source's rows in the region being cut (its aggregates counted them).
        rows = report.rows["source"]
        #: The data source's rows in the region (what its buckets' counts must add up to).
        server_rows = report.rows["datasource"]
        #: How many buckets of the level above differed (the region is their union).
        ranges = 1
        while True:
            level += 1
            above = self.path[-1][1] if self.path else None
            self.buckets.plan(level, rows, ranges, above, self._region())
            mine, theirs = self._source(level), self._server(level)
            _whole(theirs, server_rows, f"the key ranges of level {level}")
            differing = self._differing(report, level, mine, theirs)
            if not differing:
                return
            leaves, deeper = self._leaves_and_deeper(level, differing, mine, theirs)
            #: The server's rows per bucket (its aggregates counted them): what its answer
            #: of those buckets' rows must hold.
            self._server_rows = {b: _rows(theirs.get(b)) for b in differing}
            self._compare_rows(report, level, leaves)
            rows = sum(_rows(mine.get(b)) for b, _ in deeper)
            server_rows = sum(self._server_rows.get(b, 0) for b, _ in deeper)
            ranges = len(deeper)
            if not deeper:
                return
            self._descend(level, [b for b, _ in deeper])

    def _differing(
        self, report: DriftReport, level: int, mine: Mapping[Any, Any], theirs: Mapping[Any, Any]
    ) -> list[Any]:
        """The buckets of ``level`` whose aggregates differ between the sides (none: the
        cutting stops, said in the report). Rows whose key is NULL are said, not cut: no key
        range can name them."""
        differing = sorted(
            (b for b in set(mine) | set(theirs) if self._differs(mine.get(b), theirs.get(b))),
            key=repr,
        )
        if None in differing:
            differing.remove(None)
            report.unresolved.append(
                f"rows whose key {self.key[0]!r} is NULL differ between the sides"
            )
        elif not differing:
            report.unresolved.append(f"the totals differ but no bucket at level {level} does")
        return differing

    def _leaves_and_deeper(
        self, level: int, differing: list[Any], mine: Mapping[Any, Any], theirs: Mapping[Any, Any]
    ) -> tuple[list[tuple[Any, int]], list[tuple[Any, int]]]:
        """The differing buckets compared row by row now (small, or at the last level), and
        those cut one level deeper, each with its rows (the larger side's count)."""
        last = self.buckets.last(level)
        leaves: list[tuple[Any, int]] = []
        deeper: list[tuple[Any, int]] = []
        for b in differing:
            size = max(_rows(mine.get(b)), _rows(theirs.get(b)))
            (leaves if size <= self.leaf_rows or last else deeper).append((b, size))
        sparse = len(leaves) <= SPARSE_BUCKETS and sum(n for _, n in leaves) > ROWS_PER_REQUEST
        if leaves and not last and sparse:
            # Few small ranges holding many rows in all: the drift is sparse, and one more
            # level (a query) leaves far fewer rows to compare than comparing them now.
            return [], deeper + leaves
        return leaves, deeper

    # -- row by row -------------------------------------------------------------------------
    def _compare_rows(self, report: DriftReport, level: int, leaves: list[tuple[Any, int]]) -> None:
        batch: list[Any] = []
        rows = 0
        for bucket, size in leaves:
            if batch and rows + size > ROWS_PER_REQUEST:
                self._compare_batch(report, level, batch)
                batch, rows = [], 0
            batch.append(bucket)
            rows += size
        if batch:
            self._compare_batch(report, level, batch)

    def _compare_batch(self, report: DriftReport, level: int, buckets: list[Any]) -> None:
        bucket = calculation("bucket", self.buckets.formula(level))
        theirs = rows_by_key(
            self.service,
            self.fields,
            self.key,
            self.columns,
            [*self._filters(), set_filter(bucket, buckets)],
        )
        counted = sum(self._server_rows.get(b, 0) for b in buckets)
        received = sum(n for rows in theirs.values() for _, n in rows)
        _cut_short(counted, received, "the rows of these key ranges")
        explained = self._judge_keys(report, level, self._source_rows(level, buckets), theirs)
        # A range whose aggregates differed must show a differing key; else say so.
        unexplained = [b for b in buckets if b not in explained]
        if unexplained:
            report.unresolved.append(
                f"key range(s) {unexplained[:5]} at level {level} differ in their aggregates "
                "but every row matches"
            )

    def _judge_keys(
        self,
        report: DriftReport,
        level: int,
        mine: Mapping[tuple[Any, ...], list[dict[str, Any]]],
        theirs: Mapping[tuple[Any, ...], list[tuple[dict[str, Any], int]]],
    ) -> set[Any]:
        """Each key of either side judged: its drift reported; the buckets (at ``level``)
        whose difference a key explains returned, a difference within the tolerance
        included (it explains its range without being drift)."""
        explained: set[Any] = set()
        for key in sorted(set(mine) | set(theirs), key=repr):
            rows, found = mine.get(key, []), theirs.get(key, [])
            drift = self._judge(key, rows, found, self.tolerance)
            if drift is not None:
                report.drift.append(drift)
            if drift is not None or self._judge(key, rows, found, EXACT):
                explained.add(self.buckets.of(key, level))
        return explained

    def _source_rows(
        self, level: int, buckets: list[Any]
    ) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
        """The source's rows in ``buckets`` (at ``level``) by key, each column's value as the
        service's would compare (a timestamp in microseconds)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import TimestampType

        spark_types = {f.name: f.dataType for f in self.source.schema.fields}
        picked = [
            (
                F.expr(f"unix_micros({sql_name(c)})")
                if isinstance(spark_types[c], TimestampType)
                else F.col(sql_name(c))
            ).alias(f"c{i}")
            for i, c in enumerate(self.columns)
        ]
        region = self._region().where(self.buckets.spark_in(level, buckets))
        mine: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for r in region.select(*picked).collect():
            values = {
                c: canonical(r[f"c{i}"], self.fields[c].data_type)
                for i, c in enumerate(self.columns)
            }
            mine.setdefault(tuple(values[k] for k in self.key), []).append(values)
        return mine

    def _judge(
        self,
        key: tuple[Any, ...],
        mine: list[dict[str, Any]],
        theirs: list[tuple[dict[str, Any], int]],
        tolerance: Tolerance | None,
    ) -> KeyDrift | None:
        if len(mine) > 1:
            raise InvalidArgumentError(
                f"the source holds key {key!r} {len(mine)} times: reconcile needs a key that "
                f"is unique in the source",
                argument="key",
            )
        if not mine:
            return KeyDrift("extra", key, found=tuple(r for r, _ in theirs))
        return judge_key(key, mine[0], theirs, self.fields, tolerance)


def _whole(buckets: Mapping[Any, Mapping[str, Any]], rows: int, what: str) -> None:
    """Refuse bucket aggregates that do not add up to the rows counted above them."""
    _cut_short(rows, sum(map(_rows, buckets.values())), what)


def _rows(aggregates: Mapping[str, Any] | None) -> int:
    """The rows a side's aggregates counted (none where it has none)."""
    return int((aggregates or {}).get("rows") or 0)


def _cut_short(counted: int, received: int, what: str) -> None:
    """The service may cut a large answer short without saying so: an answer holding fewer
    rows than its own counts is refused rather than read as drift."""
    if received < counted:
        raise DataServiceError(
            status=None,
            summary=(
                f"the VizQL Data Service's answer was cut short: {what} hold {counted} rows "
                f"by its own counts, its answer held {received}"
            ),
            hint="compare fewer rows per query (a larger fan_out, a smaller leaf_rows)",
        )


def target_of(
    client: RestSession | None, datasource: DataSourceRef | str, project: str | None, purpose: str
) -> tuple[RestSession, DataSourceRef]:
    chosen = client_for(datasource, client, purpose)
    if isinstance(datasource, DataSourceRef):
        return chosen, datasource
    return chosen, chosen.datasource(datasource, project=project)


def _key_names(key: str | Sequence[str]) -> list[str]:
    """The key's columns, as ``key=`` names one or more."""
    keys = names_in(key)
    if keys is None:
        raise InvalidArgumentError("key must name one or more columns", argument="key")
    return list(keys)


def _compared(
    present: Sequence[str], key: str | Sequence[str], columns: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    """The key's columns, and the columns compared (the key's first): each one the source
    has (``present``)."""
    keys = _key_names(key)
    picked = keys + [c for c in (present if columns is None else columns) if c not in keys]
    missing = [c for c in picked if c not in present]
    if missing:
        raise InvalidArgumentError(
            f"the source has no column {', '.join(map(repr, missing))} "
            f"(it has {', '.join(map(repr, present))})",
            argument="columns" if set(missing) - set(keys) else "key",
        )
    return keys, picked


def reconcile(
    source: DataFrame,
    datasource: DataSourceRef | str,
    *,
    key: str | Sequence[str],
    client: RestSession | None = None,
    project: str | None = None,
    columns: Sequence[str] | None = None,
    fan_out: int = FAN_OUT,
    leaf_rows: int = LEAF_ROWS,
    tolerance: Tolerance | None = None,
    budget: int | None = None,
) -> DriftReport:
    """Compare the published ``datasource`` with ``source`` (a DataFrame holding what it
    should hold, one row per ``key``) and report every key that differs (see the module
    docstring). ``columns`` limits the comparison (the source's columns by default); the
    key's first column must be an integer or text. ``budget``: the most queries to spend;
    when it (or the site's quota) is spent the report says so, with what it found so far
    (``report.stopped``; ``report.ok`` is then false)."""
    if fan_out < 2 or leaf_rows < 1:
        raise InvalidArgumentError("fan_out must be >= 2 and leaf_rows >= 1", argument="fan_out")
    keys, picked = _compared(source.columns, key, columns)
    chosen, ref = target_of(client, datasource, project, "reconcile")
    service = DataService(chosen, ref.id, budget=budget)
    report = DriftReport("reconcile", ref.name or "", ref.id, tuple(keys))
    try:
        _Reconciler(source, service, keys, picked, fan_out, leaf_rows, tolerance).run(report)
    except QueryBudgetError as err:
        report.stopped = str(err)
        report.unchecked = max(0, report.rows.get("source", 0) - report.checked)
    finally:
        report.cost = service.stats.as_dict()
    return report

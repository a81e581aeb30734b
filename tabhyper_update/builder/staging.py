"""Where Spark's staged rows go: a shared folder, or the driver.

``staging="auto"`` (the default): the driver for a small change set, the shared folder
otherwise. Small is Spark's own size estimate of the DataFrame (the one its optimizer uses
to choose a broadcast join) at most :data:`SMALL_BYTES`. Without an estimate (a DataFrame
made from Python rows or an RDD, a JDBC read, Spark Connect) the shared folder: an unknown
size may be large, and a large partition sent whole to the driver can exhaust a default
1 GB driver. A small change set is also ranked without a shuffle (by Hyper on the driver
when its types allow, else by Spark in one partition). Every mode stages the same rows:
the payload and its digests do not depend on it.

One exception: a DataFrame Spark cannot size whose plan only filters and projects rows
an RDD holds (Python rows, ``rdd.toDF()``) is *probed* (a change set only when Hyper can
rank it): at most :func:`probe_rows` + 1 of its staged rows come to the driver (a limit:
Spark stops reading once that many have passed its filters). When fewer come, they are all
of them (a change set's are then ranked by Hyper); when that many come, they are dropped
and the rows are staged in the shared folder as any other (the source is read again). A
plan with a join, an aggregate or a window is not probed: its whole input would be
computed for it. The driver holds the probe's rows in Spark's process once (10,000 rows of
the widths Spark assumes are ~8 MiB; longer strings take more).

A plan a probe cannot take (one that drops duplicates, as a Debezium parse does, or a change
set Spark ranks, which needs all of it) is *counted* instead when it reads only rows RDDs
hold (:func:`counted_rows`): at most a probe's rows of the RDDs are taken, and when they bound
its rows within a probe's, it is staged as a small change set.

``staging="shared"``: the executors write Parquet into ``staging_dir`` and Hyper, on the
driver, reads it there. Fast for large change sets, and the driver never holds rows; on a
cluster the folder must be one path that every executor and the driver see (NFS, a FUSE
mount, a Unity Catalog volume). A Spark write job has a fixed cost (a commit protocol,
temporary folders, on a local disk a forked ``chmod`` per file) that a micro-batch feels.

``staging="driver"``: the rows come to the driver as Arrow record batches, as Spark
computes each partition, and the driver writes them into Parquet files in its own
``staging_dir``, one batch at a time. No shared folder is needed (executors on other
machines, a worker that cannot see the driver's disk, Spark Connect against a remote
server): the driver holds about one partition in Spark's own process and one record batch
in Python, never the change set, at the cost of sending every row through the driver.
Needs pyarrow (the ``[connect]`` extra, or ``pip install pyarrow``).
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ..local.folders import make_private
from ..local.optional import available
from ..local.spark import COMPILE_HUGE_METHODS
from ..local.spark_versions import arrow_batches
from ..values.errors import ConfigurationError
from ..values.redaction import get_logger
from ..values.spark_sql import query_over

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "SMALL_BYTES",
    "STAGING_MODES",
    "Placement",
    "StagingMode",
    "check_staging",
    "compiled_apart",
    "counted_rows",
    "estimated_bytes",
    "has_pyarrow",
    "jit_sized_code",
    "probe_rows",
    "probe_to_driver",
    "selected",
    "staged_files",
    "staging_for",
    "write_on_driver",
]

log = get_logger("tabhyper_update.build")

StagingMode = Literal["shared", "driver", "auto"]
STAGING_MODES: tuple[str, ...] = ("shared", "driver", "auto")
#: Rows per staged file on the driver (Hyper reads the files of a table in parallel).
ROWS_PER_FILE = 1_000_000
#: A DataFrame Spark estimates at most this size is small: staged through the driver under
#: ``staging="auto"``, and a change set is ranked without a shuffle. The estimate of a file
#: read is its compressed size: a change set estimated at 32 MiB (1.15M rows) made a 1 GB
#: driver hang in one partition, 16 MiB did not; this keeps a margin for data that
#: compresses better.
SMALL_BYTES = 8 * 1024 * 1024
#: Spark's "unknown" size is spark.sql.defaultSizeInBytes (Long.MaxValue unless
#: configured), and operators above a source scale it: a projection by its share of the
#: row width. An estimate at or above a pebibyte derives from that, not from a source.
_UNKNOWN_SIZE = 1 << 50
#: The most rows a probe of an unsized DataFrame takes through the driver (fewer for wide
#: rows: :func:`probe_rows`).
PROBE_ROWS = 10_000
#: The only operators a probed plan may hold: each gives its rows as it reads them, so a
#: limit above them stops reading once that many rows have passed.
#: (The plan is the analyzed one: a view's or an alias's name passes its rows on as read.)
_PROBED_NODES = frozenset({"Project", "Filter", "Union", "LogicalRDD", "SubqueryAlias", "View"})
#: Operators that give at most the rows they read, but only once they have read them all (a
#: shuffle): a probe above one would compute its whole input. Its input is counted instead
#: (:func:`counted_rows`).
_REDUCING_NODES = frozenset({"Deduplicate", "Distinct"})
#: What :func:`compiled_apart` coalesces to: more partitions than a DataFrame staged through
#: the driver has, so the coalesce keeps them as they are.
_APART_PARTITIONS = 1 << 16


#: The largest method, in bytes of bytecode, that HotSpot compiles to machine code (its
#: ``HugeMethodLimit``); a larger one stays interpreted, many times slower.
_JIT_METHOD_BYTES = 8000
_CODEGEN_LIMIT = "spark.sql.codegen.hugeMethodLimit"
#: The most columns (nested ones counted) an operator Spark fuses may give, where the JVMs
#: compile methods of any size: Spark's default, 100, leaves out of the fused code every step
#: that carries a parsed event of a table of 50 columns (its before and after images), each
#: then copying its rows (a Debezium build of 300,000 events: 5.99 s against 5.01 s).
_FUSED_FIELDS = 1000
_FIELDS_LIMIT = "spark.sql.codegen.maxFields"
#: Per session: how many builds hold the setting, which setting, and the value to put back.
_limit_lock = threading.Lock()
_limit_holders: dict[int, tuple[int, str, str]] = {}


@contextlib.contextmanager
def jit_sized_code(spark: Any) -> Iterator[None]:
    """Spark's fused code kept to what the JVM compiles, while the build's jobs run.

    Spark fuses a stage's operators into one generated method, which it gives up on only
    beyond 64 KB of bytecode; HotSpot compiles none over 8,000 bytes by default, so a larger
    method (a Debezium decoding of a few encoded columns is 14 KB) runs interpreted, 2-3x
    slower. Spark's own advice for HotSpot is ``spark.sql.codegen.hugeMethodLimit=8000``:
    such a stage then runs operator by operator, each in methods Spark splits small. Where
    the JVMs compile methods of any size instead (as the sessions the SDK starts do:
    :data:`~tabhyper_update.local.spark.COMPILE_HUGE_METHODS`), the fused stage runs
    compiled, and the setting held is ``spark.sql.codegen.maxFields`` at
    :data:`_FUSED_FIELDS`, so that wide rows stay fused too. Set for the session while
    builds run (restored after the last), unless the session's own value already goes as
    far; a session that refuses the setting (a managed one) keeps its own, which only costs
    time."""
    key = id(spark)
    with _limit_lock:
        held = _limit_holders.get(key)
        if held is not None:
            _limit_holders[key] = (held[0] + 1, *held[1:])
        else:
            _limit_holders[key] = (1, *_held_setting(spark))
    try:
        yield
    finally:
        with _limit_lock:
            count, setting, before = _limit_holders.pop(key)
            if count > 1:
                _limit_holders[key] = (count - 1, setting, before)
            elif before:
                with contextlib.suppress(Exception):
                    spark.conf.set(setting, before)


def _held_setting(spark: Any) -> tuple[str, str]:
    """The setting a build holds for ``spark`` and the session's value to put back after
    (empty: nothing was set)."""
    fused = _compiles_huge_methods(spark)
    setting, wanted = (
        (_FIELDS_LIMIT, _FUSED_FIELDS) if fused else (_CODEGEN_LIMIT, _JIT_METHOD_BYTES)
    )
    try:
        before = str(spark.conf.get(setting))
        if (int(before) >= wanted) if fused else (int(before) <= wanted):
            return setting, ""
        spark.conf.set(setting, str(wanted))
    except Exception:  # a session that refuses the setting keeps its own
        return setting, ""
    return setting, before


def _compiles_huge_methods(spark: Any) -> bool:
    """Whether the JVMs that run ``spark``'s tasks compile methods of any size: the
    driver's (a local master) or the executors' Java options say so."""
    try:
        local = str(spark.conf.get("spark.master", "")).startswith("local")
        options = "spark.driver" if local else "spark.executor"
        return COMPILE_HUGE_METHODS in str(spark.conf.get(f"{options}.extraJavaOptions", ""))
    except Exception:  # a session that does not say (Spark Connect): assume not
        return False


class Placement(NamedTuple):
    """Where a DataFrame's rows are staged (``mode``), whether Spark estimates it small,
    and how many rows to probe through the driver first (0: no probe, see the module's
    docstring)."""

    mode: StagingMode
    small: bool
    probe: int = 0


def check_staging(staging: object) -> None:
    """Refuse an unknown mode, and the driver mode without pyarrow, before any work."""
    if staging not in STAGING_MODES:
        raise ConfigurationError(
            f"staging must be one of {', '.join(map(repr, STAGING_MODES))}, got {staging!r}"
        )
    if staging == "driver" and not has_pyarrow():
        raise ConfigurationError(
            "staging='driver' writes the rows with pyarrow: pip install pyarrow (or install "
            "the [connect] extra)"
        )


def has_pyarrow() -> bool:
    return available("pyarrow.parquet")


def estimated_bytes(df: DataFrame) -> int | None:
    """Spark's size estimate of ``df``'s rows, or ``None`` when there is none to read
    (Spark Connect) or Spark could not size the source.

    Read from the analyzed plan, which the DataFrame already holds, with cached data in
    place when anything is cached (a persisted micro-batch is sized by what it holds): the
    optimized plan gives the same estimate (sizes follow the sources, the caches and the
    row widths), but optimizing the source only for it costs a micro-batch time while the
    JVM is still warming up (``benchmarks/README.md``, "Costs behind the build's choices"),
    and the build's own query is optimized again anyway."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return None
    try:
        size = int(str(_sizing_plan(jdf).stats().sizeInBytes()))
    except Exception:  # an estimate is optional: without one the build stages as before
        return None
    return size if 0 <= size < _UNKNOWN_SIZE else None


def _sizing_plan(jdf: Any) -> Any:
    """``jdf``'s analyzed plan, with cached data in place when the session caches anything
    (putting it in place costs a plan walk): what Spark reads, without optimizing it."""
    execution = jdf.queryExecution()
    try:
        caches = not bool(jdf.sparkSession().sharedState().cacheManager().isEmpty())
    except Exception:  # unknown: look for it
        caches = True
    return execution.withCachedData() if caches else execution.analyzed()


def compiled_apart(df: DataFrame) -> DataFrame:
    """``df`` below an operator Spark generates no code for (a coalesce that keeps its
    partitions), so the SDK's projection over it compiles to a class of its own.

    Spark fuses a source's code with the projections above it into one class, compiled
    again whenever its text changes: a micro-batch whose source holds a literal that
    changes every batch (a version or an offset in a filter) recompiled the SDK's tagging
    with it each time, and the JVM compiled that class to machine code again. Apart, the
    tagging's class is the same text every batch: Spark takes it from its cache."""
    return df.coalesce(_APART_PARTITIONS)


def selected(
    df: DataFrame, exprs: Sequence[str], inner: Callable[[str], str] | None = None
) -> DataFrame:
    """``SELECT exprs`` over ``df``, or over ``inner``'s query of ``df``: one Spark call."""

    def query(source: str) -> str:
        relation = source if inner is None else f"({inner(source)}) AS rows"
        return f"SELECT {', '.join(exprs)} FROM {relation}"

    return query_over(df, query)


def staging_for(
    df: DataFrame, staging: StagingMode, *, table: str, change_set: bool, probe: bool = True
) -> Placement:
    """Where ``df``'s rows are staged, whether Spark estimates it small enough to rank in
    one partition (a change set's last-change-wins without a shuffle), and for an unsized
    DataFrame under ``auto`` how many rows to probe through the driver first (none unless
    ``probe``). An unsized DataFrame that is not probed is small when counting its sources
    shows it is (:func:`counted_rows`)."""
    if staging != "auto" and not change_set:
        return Placement(staging, False)
    size = estimated_bytes(df)
    small = size is not None and size <= SMALL_BYTES
    mode: StagingMode = staging
    rows = 0
    counted = None
    if staging == "auto":
        mode = "driver" if small and has_pyarrow() else "shared"
        if size is None and has_pyarrow():
            rows = probe_rows(df) if probe else 0
            counted = None if rows else counted_rows(df)
        if counted is not None:
            mode, small = "driver", True
    placement = Placement(mode, small, rows)
    log.debug("table %r: %s", table, _placement_said(placement, size, counted, change_set))
    return placement


def _placement_said(
    placement: Placement, size: int | None, counted: int | None, change_set: bool
) -> str:
    """What the debug log says of a table's placement and why."""
    estimate = "no size" if size is None else f"{size:,} bytes"
    if counted is not None:
        estimate += f"; its sources' rows make at most {counted:,}"
    where = "through the driver" if placement.mode == "driver" else "in the shared folder"
    if placement.probe:
        where = f"through the driver if at most {placement.probe:,} rows, else in the shared folder"
    ranked = ", ranked in one partition" if placement.small and change_set else ""
    return f"Spark estimates {estimate}; staged {where}{ranked}"


def probe_rows(df: DataFrame) -> int:
    """How many of ``df``'s rows to probe through the driver: 0 unless its plan only
    filters and projects rows an RDD holds (:data:`_PROBED_NODES`); else
    :data:`PROBE_ROWS`, fewer when Spark's default row width says they would exceed
    :data:`SMALL_BYTES`."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return 0
    try:
        pending = [_sizing_plan(jdf)]
        while pending:
            node = pending.pop()
            if node.nodeName() not in _PROBED_NODES:
                return 0
            children = node.children()
            pending.extend(map(children.apply, range(children.size())))
        return _rows_within_small(jdf)
    except Exception:  # a probe is optional: without one the rows are staged shared
        return 0


def _rows_within_small(jdf: Any) -> int:
    """:data:`PROBE_ROWS`, fewer when Spark's default width of ``jdf``'s rows says they
    would exceed :data:`SMALL_BYTES`."""
    return min(PROBE_ROWS, SMALL_BYTES // max(1, int(jdf.schema().defaultSize())))


def counted_rows(df: DataFrame) -> int | None:
    """At most how many rows ``df`` gives, when its plan cannot be probed (a shuffle that
    drops duplicates) or Spark ranks it, and counting its sources shows it small; else
    ``None``.

    Counted when the plan reads only rows RDDs hold, through operators that pass them on
    (:data:`_PROBED_NODES`), drop duplicates (:data:`_REDUCING_NODES`) or explode each row
    into at most a known number of rows (an array of fixed length, or a choice between such
    arrays: how a Debezium change's pre-image is made). The bound is the RDDs' rows, each
    times its explosions, and it must stay within :func:`probe_rows`' rows for such rows'
    width: Spark takes at most that many rows of the RDDs (it stops reading there), so a
    large source costs a few partitions' rows, never its whole input."""
    jdf = getattr(df, "_jdf", None)
    if jdf is None:
        return None
    try:
        sources = _counted_sources(_sizing_plan(jdf))
        if not sources:
            return None
        limit = _rows_within_small(jdf)
        bound = 0
        for rdd, fanout in sources:
            bound += fanout * len(rdd.take((limit - bound) // fanout + 1))
            if bound > limit:
                return None
    except Exception:  # a count is optional: without one the rows are staged shared
        return None
    return bound


def _counted_sources(plan: Any) -> list[tuple[Any, int]] | None:
    """The RDDs ``plan`` reads, each with the most rows one of its rows can become; ``None``
    when the plan holds any other operator or an explosion of unknown size."""
    sources: list[tuple[Any, int]] = []
    pending = [(plan, 1)]
    while pending:
        node, fanout = pending.pop()
        name = node.nodeName()
        if name == "LogicalRDD":
            sources.append((node.rdd(), fanout))
        elif name == "Generate":
            most = _exploded_at_most(node.generator())
            if most is None:
                return None
            fanout *= max(1, most)
        elif name not in _PROBED_NODES and name not in _REDUCING_NODES:
            return None
        children = node.children()
        pending.extend((children.apply(i), fanout) for i in range(children.size()))
    return sources


def _exploded_at_most(generator: Any) -> int | None:
    """The most rows ``explode`` (or ``posexplode``) makes of one row, when its array has a
    known greatest length: ``array(...)``, or a choice (``CASE``, ``IF``) between such."""
    if generator.nodeName() not in ("Explode", "PosExplode"):
        return None
    pending, most = [generator.child()], 0
    while pending:
        expr = pending.pop()
        name = expr.nodeName()
        if name == "CreateArray":
            most = max(most, expr.children().size())
        elif name in ("CaseWhen", "If"):
            children = expr.children()
            for i in range(children.size()):
                child = children.apply(i)
                if child.dataType().typeName() != "boolean":  # the conditions
                    pending.append(child)
        else:
            return None
    return most


def probe_to_driver(rows: DataFrame, target: Path, probe: int, name: str) -> int | None:
    """Stage at most ``probe`` + 1 of ``rows`` (table ``name``'s) through the driver into
    ``target``: how many came when that is at most ``probe`` (then they are all of them),
    else ``None`` and ``target`` is removed again."""
    sent = write_on_driver(rows.limit(probe + 1), target)
    if sent <= probe:
        return sent
    shutil.rmtree(target)
    log.debug(
        "table %r: more than %s rows came to the driver; staged in the shared folder instead",
        name,
        f"{probe:,}",
    )
    return None


def staged_files(directory: Path) -> list[Path]:
    """The Parquet files staged under ``directory`` (by Spark's write or the driver's), in
    name order; none when it does not exist."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*.parquet") if p.is_file())


def write_on_driver(df: DataFrame, target: Path, *, route: str | None = None) -> int:
    """Write ``df`` as Parquet files under ``target`` on the driver, a record batch at a
    time, a new file every :data:`ROWS_PER_FILE` rows; returns how many rows came.
    ``route``: how the rows come (:func:`~tabhyper_update.local.spark_versions.arrow_route`),
    chosen by what the running pyspark offers unless given."""
    import pyarrow.parquet as pq

    make_private(target)
    made: Any = None
    rows, counter, total = 0, 0, 0
    try:
        for batch in arrow_batches(df, route=route):
            if batch.num_rows == 0:
                continue
            if made is None or rows >= ROWS_PER_FILE:
                if made is not None:
                    made.close()
                counter += 1
                # Uncompressed, no dictionaries: the files live for seconds on the driver.
                made = pq.ParquetWriter(
                    target / f"part-{counter:05d}.parquet",
                    batch.schema,
                    compression="none",
                    use_dictionary=False,
                )
                rows = 0
            made.write_batch(batch)
            rows += batch.num_rows
            total += batch.num_rows
    finally:
        if made is not None:
            made.close()
    return total

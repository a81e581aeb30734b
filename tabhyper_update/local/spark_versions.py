"""Which pyspark is running, and what it offers: the one place where Spark releases differ.

The SDK supports pyspark :data:`OLDEST_PYSPARK` and newer, classic and Spark Connect. An
older pyspark is refused the first time the SDK's Spark parts are used
(:func:`require_supported_pyspark`), naming the version found and what to install.

Public APIs come first. Where a faster route needs a private part of pyspark, it is taken
only when the running pyspark has it (looked up by what it offers, never by its version
string), and a public route that every supported release has takes over otherwise:

- Rows to the driver as Arrow batches, classic: ``Dataset.collectAsArrowToPython`` and its
  socket reader (in ``pyspark.util`` from 4.0, ``pyspark.rdd`` before). Public route:
  ``DataFrame.toLocalIterator()``, its rows made into Arrow batches on the driver.
- The same over Spark Connect: the client's ``to_table_as_iterator`` (4.x takes the plan's
  observations too, 3.x the plan alone). Public route: as classic.
- Aggregates observed as a job reads the rows (``DataFrame.observe`` with an
  ``Observation``; over Spark Connect from 4.0). Public route (Spark Connect of pyspark
  3.x): the same aggregates computed by a job of their own once the first has run, which
  reads the rows again.
- A DDL string as a ``StructType``: ``StructType.fromDDL`` (public, 4.0+); before it, the
  schema of an empty DataFrame of that DDL (public; Spark parses it, no job runs).

The public route of the Arrow batches costs more (each row becomes a Python object once):
``python benchmarks/arrow_routes.py`` measures both on 1M rows.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import re
import uuid
import warnings
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NamedTuple

from ..values.errors import ConfigurationError, PayloadError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "OLDEST_CONNECT",
    "OLDEST_PYSPARK",
    "arrow_batches",
    "arrow_route",
    "can_observe",
    "observe",
    "pyspark_version",
    "require_supported_pyspark",
    "struct_from_ddl",
]

#: The oldest pyspark the SDK runs on.
OLDEST_PYSPARK = (3, 4)
#: The oldest pyspark whose Spark Connect client the SDK runs on (3.4's lacks what a
#: streaming sink needs: ``foreachBatch``).
OLDEST_CONNECT = (3, 5)
#: Rows per Arrow batch on the public route.
_ROWS_PER_BATCH = 16_384


def pyspark_version() -> tuple[int, int, str]:
    """The running pyspark's major and minor version, and its full version text."""
    import pyspark

    text = str(getattr(pyspark, "__version__", ""))
    found = re.match(r"(\d+)\.(\d+)", text)
    if found is None:
        return 0, 0, text or "unknown"
    return int(found[1]), int(found[2]), text


def require_supported_pyspark(df: object = None) -> None:
    """Refuse a pyspark older than :data:`OLDEST_PYSPARK` (for a Spark Connect DataFrame
    ``df``, :data:`OLDEST_CONNECT`), naming it and what to install."""
    major, minor, text = pyspark_version()
    oldest, what = OLDEST_PYSPARK, "pyspark"
    if df is not None and _is_connect(df):
        oldest, what = OLDEST_CONNECT, "pyspark's Spark Connect client"
    if (major, minor) < oldest:
        floor = ".".join(map(str, oldest))
        raise ConfigurationError(
            f"pyspark {text} is installed; tabhyper-update needs {what} {floor} or newer "
            f"(pip install 'pyspark>={floor}', or a Spark runtime that ships it)"
        )


def struct_from_ddl(ddl: str, spark: SparkSession) -> StructType:
    """The ``StructType`` a DDL string such as ``"id BIGINT, name STRING"`` names:
    ``StructType.fromDDL`` where pyspark has it (4.0+), else the schema of an empty
    DataFrame of that DDL (Spark parses it; no job runs)."""
    from pyspark.sql.types import StructType

    from_ddl = _from_ddl()
    parsed = from_ddl(ddl) if from_ddl is not None else spark.createDataFrame([], ddl).schema
    if not isinstance(parsed, StructType):
        raise TypeError(f"{ddl!r} is not a list of columns")
    return parsed


def _from_ddl() -> Callable[[str], Any] | None:
    """``StructType.fromDDL`` where the running pyspark has it (4.0+)."""
    from pyspark.sql.types import StructType

    return getattr(StructType, "fromDDL", None)


def _is_connect(df: Any) -> bool:
    return type(df).__module__.startswith("pyspark.sql.connect")


def can_observe(df: DataFrame) -> bool:
    """Whether the running Spark observes aggregates of ``df`` as a job reads it: classic
    Spark, and Spark Connect's client where it has its ``Observation`` (4.0+)."""
    return not _is_connect(df) or bool(importlib.util.find_spec("pyspark.sql.connect.observation"))


def observe(df: DataFrame, **named: Column) -> tuple[DataFrame, Callable[[], dict[str, Any]]]:
    """``df`` with the aggregates ``named`` observed as a job reads its rows, and a function
    that gives their values by name once that job ran. Where the running Spark cannot
    observe (Spark Connect before 4.0), or observed nothing (Spark Connect 4.0 on a write),
    the function computes the aggregates with a job of their own (the rows are read
    again)."""
    exprs = [e.alias(n) for n, e in named.items()]

    def computed() -> dict[str, Any]:
        row = df.agg(*exprs).first()
        return {} if row is None else row.asDict()

    if not can_observe(df):
        return df, computed
    from pyspark.sql import Observation

    observation = Observation(f"tabhyper-{uuid.uuid4().hex}")

    def observed() -> dict[str, Any]:
        # Spark Connect 4.0 returns no observed values for a write (its Observation is
        # left empty): what it did not observe is computed, never read as zero.
        try:
            found = dict(observation.get)
        except Exception:  # an Observation never filled in (its error class varies by release)
            found = {}
        if any(n not in found for n in named):
            return computed()
        return found

    return df.observe(observation, *exprs), observed


class _Classic(NamedTuple):
    """The private parts of classic pyspark that stream Arrow batches as Spark computes
    them (what its own ``toArrow()`` / ``toPandas()`` read, all at once)."""

    load_from_socket: Any
    serializer: type
    read_int: Any
    utf8: Any
    call_site: Any
    unwrap: Any


@functools.cache
def _classic_plumbing() -> _Classic | None:
    """The running pyspark's private Arrow plumbing, or ``None`` when any part is missing."""
    try:
        import pyspark.rdd
        import pyspark.util
        from pyspark import serializers, traceback_utils

        with warnings.catch_warnings():  # its module checks pandas' version; no pandas is used
            warnings.simplefilter("ignore", FutureWarning)
            from pyspark.sql.pandas.serializers import ArrowStreamSerializer
    except Exception:  # an import that fails is as good as absent: the public route
        return None
    load = getattr(pyspark.util, "_load_from_socket", None) or getattr(
        pyspark.rdd, "_load_from_socket", None
    )
    call_site = getattr(traceback_utils, "SCCallSiteSync", None)
    read_int = getattr(serializers, "read_int", None)
    utf8 = getattr(serializers, "UTF8Deserializer", None)
    if load is None or call_site is None or read_int is None or utf8 is None:
        return None
    # pyspark 3.5+: Spark's error as PySpark's own exception class; 3.4: Py4J's error,
    # which the build names as it is.
    captured = importlib.util.find_spec("pyspark.errors.exceptions.captured")
    unwrap: Any = contextlib.nullcontext
    if captured is not None:
        from pyspark.errors.exceptions import captured as module

        unwrap = getattr(module, "unwrap_spark_exception", contextlib.nullcontext)
    return _Classic(load, ArrowStreamSerializer, read_int, utf8, call_site, unwrap)


def _connect_fetch(client: Any) -> Any:
    """``client.to_table_as_iterator`` as a function of the DataFrame's plan object, or
    ``None`` when the client has no such method of a known shape."""
    method = getattr(client, "to_table_as_iterator", None)
    if method is None:
        return None
    try:
        parameters = list(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return None
    if parameters == ["plan"]:  # pyspark 3.4, 3.5
        return lambda plan: method(plan.to_proto(client))
    if parameters == ["plan", "observations"]:  # pyspark 4.x
        return lambda plan: method(plan.to_proto(client), plan.observations)
    return None


def arrow_route(df: DataFrame) -> str:
    """Which route :func:`arrow_batches` takes for ``df``: ``"classic"`` or ``"connect"``
    (pyspark's own Arrow stream), or ``"rows"`` (the public route)."""
    if _is_connect(df):
        client = getattr(getattr(df, "_session", None), "client", None)
        has_plan = hasattr(getattr(df, "_plan", None), "to_proto")
        return "connect" if has_plan and _connect_fetch(client) is not None else "rows"
    has_collect = hasattr(getattr(df, "_jdf", None), "collectAsArrowToPython")
    return "classic" if has_collect and _classic_plumbing() is not None else "rows"


def arrow_batches(df: DataFrame, *, route: str | None = None) -> Iterator[Any]:
    """``df``'s rows as Arrow record batches, in the order Spark finishes them, never all
    of them at once: pyspark's own Arrow stream where the running pyspark offers it (see the
    module's table), else its rows made into batches. ``route`` forces one
    (:func:`arrow_route`'s names), for tests and benchmarks."""
    chosen = route or arrow_route(df)
    if chosen == "classic":
        return _classic_batches(df)
    if chosen == "connect":
        return _connect_batches(df)
    if chosen == "rows":
        return _row_batches(df)
    raise ValueError(f"unknown route {chosen!r}")


def _connect_batches(df: Any) -> Iterator[Any]:
    import pyarrow as pa

    fetch = _connect_fetch(df._session.client)
    for item in fetch(df._plan):
        if isinstance(item, pa.Table):
            yield from item.to_batches()


def _classic_batches(df: Any) -> Iterator[Any]:
    found = _classic_plumbing()
    assert found is not None  # arrow_route chose this route because it is there
    parts = found

    class _AsTheyCome(parts.serializer):  # type: ignore[misc,name-defined]
        """Spark's Arrow collect stream, batch by batch (its own reader keeps them all to
        put them in order first), then its trailer: the order, or the JVM's error."""

        def load_stream(self, stream: Any) -> Iterator[Any]:
            yield from super().load_stream(stream)
            count = parts.read_int(stream)
            if count == -1:
                raise PayloadError(
                    "Spark failed while sending the rows to the driver: "
                    f"{parts.utf8().loads(stream)}"
                )
            for _ in range(count):
                parts.read_int(stream)

    with parts.call_site(df._sc):
        port, secret, server = df._jdf.collectAsArrowToPython()
    try:
        opened = parts.load_from_socket((port, secret), _AsTheyCome())
        if hasattr(opened, "__enter__"):  # 4.x: a context that closes the socket
            with opened as stream:
                yield from stream
        else:  # 3.x: the stream itself (the socket closes with it)
            try:
                yield from opened
            finally:
                opened.close()
    finally:
        with parts.unwrap():
            server.getResult()


def _arrow_type(data_type: Any) -> Any:
    """The Arrow type pyspark's own Arrow stream gives a Spark column of ``data_type``."""
    import pyarrow as pa

    name = type(data_type).__name__
    simple = {
        "BooleanType": pa.bool_(),
        "ByteType": pa.int8(),
        "ShortType": pa.int16(),
        "IntegerType": pa.int32(),
        "LongType": pa.int64(),
        "FloatType": pa.float32(),
        "DoubleType": pa.float64(),
        "StringType": pa.string(),
        "CharType": pa.string(),
        "VarcharType": pa.string(),
        "BinaryType": pa.binary(),
        "DateType": pa.date32(),
        "TimestampType": pa.timestamp("us", tz="UTC"),
        "TimestampNTZType": pa.timestamp("us"),
        "NullType": pa.null(),
    }
    if name in simple:
        return simple[name]
    if name == "DecimalType":
        return pa.decimal128(data_type.precision, data_type.scale)
    raise PayloadError(
        f"a {data_type.simpleString()} column cannot come to the driver by pyspark's rows "
        "(the staged columns are plain values)"
    )


def _utc(value: datetime | None) -> datetime | None:
    # pyspark gives an instant as a naive datetime in this process's local time.
    return None if value is None else value.astimezone(timezone.utc)


def _row_batches(df: Any) -> Iterator[Any]:
    """The public route: ``toLocalIterator()`` (one partition at a time on the driver),
    :data:`_ROWS_PER_BATCH` rows at a time made into an Arrow batch."""
    import pyarrow as pa

    fields = list(df.schema.fields)
    schema = pa.schema(
        [pa.field(f.name, _arrow_type(f.dataType), nullable=f.nullable) for f in fields]
    )
    instants = [type(f.dataType).__name__ == "TimestampType" for f in fields]
    chunk: list[Any] = []

    def batch() -> Any:
        columns = list(zip(*chunk, strict=True)) if chunk else [() for _ in fields]
        arrays = []
        for values, instant, field in zip(columns, instants, schema, strict=True):
            listed = list(map(_utc, values)) if instant else list(values)
            arrays.append(pa.array(listed, type=field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    for row in df.toLocalIterator():
        chunk.append(tuple(row))
        if len(chunk) >= _ROWS_PER_BATCH:
            yield batch()
            chunk = []
    if chunk:
        yield batch()

"""Where Spark's staged rows go: a shared folder, or the driver.

``staging="shared"`` (the default): the executors write Parquet into ``staging_dir`` and
Hyper, on the driver, reads it there. Fast, and the driver never holds rows; on a cluster
the folder must be one path that every executor and the driver see (NFS, a FUSE mount, a
Unity Catalog volume).

``staging="driver"``: the rows come to the driver as Arrow record batches, as Spark
computes each partition, and the driver writes them into Parquet files in its own
``staging_dir``, one batch at a time. No shared folder is needed (executors on other
machines, a worker that cannot see the driver's disk, Spark Connect against a remote
server): the driver holds about one partition in Spark's own process and one record batch
in Python, never the change set, at the cost of sending every row through the driver.
Needs pyarrow (``pip install 'tabhyper-update[connect]'`` or ``pyarrow``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .errors import ConfigurationError, PayloadError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["STAGING_MODES", "StagingMode", "check_staging", "write_on_driver"]

StagingMode = Literal["shared", "driver"]
STAGING_MODES: tuple[str, ...] = ("shared", "driver")
#: Rows per staged file on the driver (Hyper reads the files of a table in parallel).
ROWS_PER_FILE = 1_000_000


def check_staging(staging: object) -> None:
    """Refuse an unknown mode, and the driver mode without pyarrow, before any work."""
    if staging not in STAGING_MODES:
        raise ConfigurationError(
            f"staging must be one of {', '.join(map(repr, STAGING_MODES))}, got {staging!r}"
        )
    if staging == "driver":
        try:
            import pyarrow.parquet  # noqa: F401 - only whether it is there
        except ImportError:
            raise ConfigurationError(
                "staging='driver' writes the rows with pyarrow: pip install pyarrow (or "
                "'tabhyper-update[connect]')"
            ) from None


def write_on_driver(df: DataFrame, target: Path, partition_by: str | None) -> None:
    """Write ``df`` as Parquet under ``target`` on the driver, laid out as Spark's own
    ``write.partitionBy(partition_by).parquet(target)`` would (``col=value`` folders)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    target.mkdir(parents=True, exist_ok=True)
    writers: dict[object, tuple[Any, int]] = {}  # partition value → (writer, rows written)
    counter = 0

    def writer_for(value: object, schema: pa.Schema) -> Any:
        nonlocal counter
        open_writer = writers.get(value)
        if open_writer is not None and open_writer[1] < ROWS_PER_FILE:
            return open_writer[0]
        if open_writer is not None:
            open_writer[0].close()
        folder = target if partition_by is None else target / f"{partition_by}={value}"
        folder.mkdir(exist_ok=True)
        counter += 1
        made = pq.ParquetWriter(
            folder / f"part-{counter:05d}.parquet", schema, compression="snappy"
        )
        writers[value] = (made, 0)
        return made

    try:
        for batch in _arrow_batches(df):
            if batch.num_rows == 0:
                continue
            if partition_by is None:
                groups: list[tuple[object, pa.RecordBatch]] = [(None, batch)]
            else:
                column = batch.column(partition_by)
                rest = batch.drop_columns([partition_by])
                groups = [
                    (value, rest.filter(pc.equal(column, value)))
                    for value in pc.unique(column).to_pylist()
                ]
            for value, rows in groups:
                made = writer_for(value, rows.schema)
                made.write_batch(rows)
                writers[value] = (made, writers[value][1] + rows.num_rows)
    finally:
        for made, _ in writers.values():
            made.close()


def _arrow_batches(df: DataFrame) -> Iterator[Any]:
    """``df``'s rows as Arrow record batches, in the order Spark finishes them (the order
    does not matter to the payload), without holding them all."""
    if type(df).__module__.startswith("pyspark.sql.connect"):
        yield from _connect_batches(df)
    else:
        yield from _classic_batches(df)


def _connect_batches(df: Any) -> Iterator[Any]:
    import pyarrow as pa

    client = df._session.client
    plan = df._plan.to_proto(client)
    for item in client.to_table_as_iterator(plan, df._plan.observations):
        if isinstance(item, pa.Table):
            yield from item.to_batches()


def _classic_batches(df: Any) -> Iterator[Any]:
    # pyspark's own plumbing for toArrow() (untyped): reached through Any.
    from pyspark import serializers, traceback_utils, util
    from pyspark.errors.exceptions import captured

    with warnings.catch_warnings():  # its module checks pandas' version; no pandas is used
        warnings.simplefilter("ignore", FutureWarning)
        from pyspark.sql.pandas.serializers import ArrowStreamSerializer

    spark_io: Any = serializers
    call_site: Any = traceback_utils.SCCallSiteSync
    load: Any = util._load_from_socket
    unwrap: Any = captured.unwrap_spark_exception

    class _AsTheyCome(ArrowStreamSerializer):
        """Spark's Arrow collect stream, batch by batch (its own reader keeps them all to
        put them in order first), then its trailer: the order, or the JVM's error."""

        def load_stream(self, stream: Any) -> Iterator[Any]:
            yield from super().load_stream(stream)
            count = spark_io.read_int(stream)
            if count == -1:
                raise PayloadError(
                    "Spark failed while sending the rows to the driver: "
                    f"{spark_io.UTF8Deserializer().loads(stream)}"
                )
            for _ in range(count):
                spark_io.read_int(stream)

    with call_site(df._sc):
        port, secret, server = df._jdf.collectAsArrowToPython()
    try:
        with load((port, secret), _AsTheyCome()) as stream:
            yield from stream
    finally:
        with unwrap():
            server.getResult()

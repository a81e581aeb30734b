"""Every pyspark the package claims (3.4 to the newest, classic and Connect) builds the same
payload: where a fast route needs a private part of pyspark or a newer API, the running
pyspark decides whether it is taken, and the public route that takes over elsewhere is run
here, on whichever pyspark this suite runs on, against the fast one. An older pyspark is
refused by name before anything is written."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from tabhyper_update import ChangeSet, ConfigurationError, build_payload
from tabhyper_update.local import spark_versions
from tabhyper_update.streaming import Debezium
from tabhyper_update.values import spark_sql
from tabhyper_update.values.errors import build_failure

from .test_driver_staging import assert_same_change_set

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

#: Every type a staged column can have, NULLs and text beyond ASCII included.
EVERY_TYPE = [
    "CAST(id % 2 = 0 AS BOOLEAN) AS b",
    "CAST(id % 100 AS TINYINT) AS i1",
    "CAST(id % 100 * 300 AS SMALLINT) AS i2",
    "CAST(id * 70000 AS INT) AS i4",
    "id * 5000000000 AS i8",
    "CAST(id / 3 AS FLOAT) AS f4",
    "id / 7 AS f8",
    "CAST(id / 3 AS DECIMAL(38, 10)) AS d38",
    "CAST(id * 1.25 AS DECIMAL(9, 2)) AS d9",
    "concat('záß-', id) AS s",
    "CAST(concat('\\u0000x', id) AS BINARY) AS bin",
    "date_add(DATE '1969-12-30', CAST(id AS INT)) AS day",
    "timestamp_micros(1700000000123456 + id) AS ts",
    "CAST(timestamp_micros(1700000000654321 + id) AS TIMESTAMP_NTZ) AS ntz",
]

#: Run on every pyspark CI installs (see pyproject's markers).
pytestmark = pytest.mark.every_spark


def every_type(spark: SparkSession, rows: int = 50) -> DataFrame:
    columns = []
    for column in EVERY_TYPE:
        value, name = column.rsplit(" AS ", 1)
        columns.append(f"IF(id % 7 = 3, NULL, {value}) AS {name}")
    return spark.range(rows).selectExpr("id", "id AS seq", *columns).repartition(3)


def table_of(df: DataFrame, route: str) -> list[dict[str, Any]]:
    import pyarrow as pa

    batches = list(spark_versions.arrow_batches(df, route=route))
    rows = pa.Table.from_batches(batches).to_pylist()
    return sorted(rows, key=lambda row: row["id"])


def test_the_public_route_brings_the_rows_the_fast_route_brings(spark: SparkSession) -> None:
    df = every_type(spark)
    fast = spark_versions.arrow_route(df)
    assert fast == "classic", "the classic fast route is found in every supported pyspark"
    expected = table_of(df, fast)
    got = table_of(df, "rows")
    assert len(got) == 50
    assert got == expected
    shown = got[1]
    assert shown["d38"] == Decimal("0.3333333333")  # exact, no float detour
    assert str(shown["ts"]) == "2023-11-14 22:13:20.123457+00:00"  # the instant, in UTC
    assert shown["ntz"].isoformat() == "2023-11-14T22:13:20.654322"  # as written


def test_a_payload_built_through_the_public_route_is_the_same_payload(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    df = every_type(spark, 2000).withColumn("op", spark_sql_expr("IF(id % 5 = 0, 'D', 'U')"))
    cs = ChangeSet("id", op_column="op", order_by="seq")
    options: dict[str, Any] = {"staging": "driver", "database_version": 3}
    with build_payload(df, cs, staging_dir=tmp_path / "a", **options) as fast:
        monkeypatch.setattr(spark_versions, "arrow_route", lambda frame: "rows")
        with build_payload(df, cs, staging_dir=tmp_path / "b", **options) as public:
            assert_same_change_set(fast, public)
            assert public.last_position == fast.last_position


def spark_sql_expr(text: str) -> Any:
    from pyspark.sql import functions as F

    return F.expr(text)


def test_without_observations_the_counts_and_the_last_position_are_computed(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark Connect before 4.0 has no Observation: the counts and the greatest position are
    computed by a job of their own, and the payload and what it records are the same."""
    df = spark.range(3000).selectExpr(
        "id % 700 AS id",
        "IF(id % 4 = 0, 'D', 'U') AS op",
        "timestamp_micros(1700000000000000 + id * 1000001) AS at",
        "concat('0000000', hex(id), ':00000010:0003') AS lsn",
    )
    cs = ChangeSet("id", op_column="op", order_by=["at", "lsn"], order_as={"lsn": "hex-lsn"})
    with build_payload(df, cs, staging="shared", staging_dir=tmp_path / "a") as observed:
        monkeypatch.setattr(spark_versions, "can_observe", lambda frame: False)
        with build_payload(df, cs, staging="shared", staging_dir=tmp_path / "b") as computed:
            assert_same_change_set(observed, computed)
            assert computed.last_position == observed.last_position
            assert computed.tables["upserts"].row_count == observed.tables["upserts"].row_count
    last = datetime(2023, 11, 14, 22, 13, 20, tzinfo=timezone.utc) + timedelta(
        microseconds=2999 * 1000001
    )
    assert observed.last_position["at"] == last.isoformat()


def test_an_observation_left_empty_is_computed_never_read_as_zero(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark Connect 4.0 fills in no observed values for a write: the counts are computed
    by a job of their own, not taken as zero rows (which failed the build)."""
    from pyspark.sql import Observation

    df = spark.range(500).selectExpr("id", "concat('v', id) AS v")
    with build_payload(df, staging="shared", staging_dir=tmp_path / "a") as observed:
        monkeypatch.setattr(Observation, "get", property(lambda self: {}))
        with build_payload(df, staging="shared", staging_dir=tmp_path / "b") as computed:
            assert computed.tables["Extract"].row_count == 500
            assert computed.digest == observed.digest


def test_without_dataframe_arguments_to_sql_the_source_is_a_view_dropped_after(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyspark 3.x's Connect client's ``sql()`` takes no DataFrame: the build names its
    source by a temporary view of its own, which it drops when the build ends."""
    df = spark.range(500).selectExpr("id % 90 AS id", "IF(id % 3 = 0, 'D', 'U') AS op", "id AS seq")
    cs = ChangeSet("id", op_column="op", order_by="seq")
    with build_payload(df, cs, staging="shared", staging_dir=tmp_path / "a") as direct:
        monkeypatch.setattr(spark_sql, "_takes_dataframes", lambda sql: False)
        with build_payload(df, cs, staging="shared", staging_dir=tmp_path / "b") as viewed:
            assert_same_change_set(direct, viewed)
    left = [t.name for t in spark.catalog.listTables() if t.name.startswith("tabhyper")]
    assert left == []


def test_the_connect_client_is_asked_as_its_release_takes_it() -> None:
    asked: list[tuple[Any, ...]] = []

    class Plan:
        observations: ClassVar[dict[str, int]] = {"o": 1}

        def to_proto(self, client: Any) -> str:
            return "proto"

    class Client35:
        def to_table_as_iterator(self, plan: Any) -> list[Any]:
            asked.append((plan,))
            return []

    class Client4:
        def to_table_as_iterator(self, plan: Any, observations: Any) -> list[Any]:
            asked.append((plan, observations))
            return []

    class ClientOther:
        def to_table_as_iterator(self, plan: Any, *, timeout: float) -> list[Any]:
            return []

    for client in (Client35(), Client4()):
        fetch = spark_versions._connect_fetch(client)
        assert fetch is not None
        fetch(Plan())
    assert asked == [("proto",), ("proto", {"o": 1})]
    assert spark_versions._connect_fetch(ClientOther()) is None  # the public route then


def test_a_ddl_schema_is_read_where_pyspark_has_no_from_ddl(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql.types import DecimalType, LongType, StringType, StructType, TimestampType

    ddl = "id BIGINT, name STRING, amount DECIMAL(12, 2), at TIMESTAMP"
    expected = (
        StructType()
        .add("id", LongType())
        .add("name", StringType())
        .add("amount", DecimalType(12, 2))
        .add("at", TimestampType())
    )
    assert spark_versions.struct_from_ddl(ddl, spark) == expected
    monkeypatch.setattr(spark_versions, "_from_ddl", lambda: None)  # as pyspark 3.x
    assert spark_versions.struct_from_ddl(ddl, spark) == expected


def test_an_older_pyspark_is_refused_by_name_before_anything_is_written(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyspark

    df = spark.range(3).selectExpr("id", "'U' AS op", "id AS seq")
    monkeypatch.setattr(pyspark, "__version__", "3.3.4")
    with pytest.raises(ConfigurationError) as caught:
        build_payload(df, staging_dir=tmp_path)
    assert "pyspark 3.3.4 is installed" in str(caught.value)
    assert "pip install 'pyspark>=3.4'" in str(caught.value)
    assert list(tmp_path.iterdir()) == []
    events = spark.createDataFrame([('{"op": "c", "after": {"id": 1}}',)], "value string")
    with pytest.raises(ConfigurationError, match=r"pyspark 3\.3\.4 is installed"):
        Debezium("id BIGINT", key="id").changes(events)


def test_a_connect_client_older_than_3_5_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark

    class ConnectFrame:
        pass

    ConnectFrame.__module__ = "pyspark.sql.connect.dataframe"
    monkeypatch.setattr(pyspark, "__version__", "3.4.4")
    spark_versions.require_supported_pyspark(object())  # classic 3.4: supported
    with pytest.raises(ConfigurationError, match=r"Spark Connect client 3\.5 or newer"):
        spark_versions.require_supported_pyspark(ConnectFrame())


def test_a_task_failure_spark_3_wraps_names_its_cause(tmp_path: Path) -> None:
    """Spark 3.x reports a failed task of a write as TASK_WRITE_FAILED, the cause below it."""
    err = RuntimeError(
        "An error occurred while calling o30.parquet.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 failed\n"
        "Caused by: org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed while "
        "writing rows to file:/tmp/x.\n"
        "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.taskFailedWhileWritingRowsError\n"
        "Caused by: java.lang.RuntimeException: boom\n"
        "\t... 17 more\n"
    )
    message = str(build_failure(err, {}, tmp_path, tmp_path))
    assert message == "Spark failed while building the payload: boom"


def test_the_supported_range_is_what_the_package_claims() -> None:
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    floors = re.findall(r'"pyspark(?:\[connect\])?>=(\d+)\.(\d+)\.\d+', text)
    assert floors, "pyproject.toml states pyspark's floor"
    spark_floor, connect_floor = (tuple(map(int, f)) for f in floors)
    assert spark_floor == spark_versions.OLDEST_PYSPARK
    assert connect_floor == spark_versions.OLDEST_CONNECT


def test_a_pyspark_that_cannot_be_imported_on_this_python_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pyspark 3.4 fails to import on Python 3.13 (``typing.io`` is gone): the command says
    that the installed pyspark cannot run here, not that pyspark is missing."""
    import importlib.metadata
    import sys

    from tabhyper_update.cli.failures import UsageError
    from tabhyper_update.cli.inputs import require_pyspark

    monkeypatch.setitem(sys.modules, "pyspark.sql", None)  # its import now fails
    with pytest.raises(UsageError) as caught:
        require_pyspark("the demo builds its change set")
    said = str(caught.value)
    assert f"pyspark {importlib.metadata.version('pyspark')} is installed but cannot be" in said
    assert "install a pyspark that runs on this Python" in said


@pytest.mark.parametrize(
    "command",
    [
        ["verify", "Orders", "--key", "id", "--spark-table", "orders"],
        ["build", "--spark-table", "orders", "--out", "out"],
    ],
    ids=["verify", "build"],
)
def test_a_command_that_needs_pyspark_says_so_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """Without a pyspark that imports, a Spark command fails as a usage error, saying what
    it needs Spark for once ("... with Spark", never "with Spark with Spark")."""
    import sys

    from tabhyper_update.cli import main

    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    assert main(command) == 2
    said = capsys.readouterr().err
    assert said.count("with Spark") == 1, said

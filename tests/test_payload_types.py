"""Every supported Spark type survives the trip into .hyper exactly (real Spark, real Hyper)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import PayloadError, build_payload

from ._util import read_columns, read_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

UTC = timezone.utc

SCHEMA = (
    "k int not null, b boolean, i8 byte, i16 short, i32 int, i64 long, f32 float, f64 double, "
    "d18 decimal(18,2), d5 decimal(5,5), s string, bin binary, dt date, ts timestamp, "
    "ntz timestamp_ntz"
)

ROWS: list[tuple[Any, ...]] = [
    (
        1,
        True,
        -128,
        -32768,
        -(2**31),
        -(2**63),
        1.5,
        -1.7976931348623157e308,
        Decimal("-9999999999999999.99"),
        Decimal("-0.00001"),
        "",
        b"",
        date(1, 1, 1),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(1, 1, 1),
    ),
    (
        2,
        False,
        127,
        32767,
        2**31 - 1,
        2**63 - 1,
        3.4028234663852886e38,
        5e-324,
        Decimal("9999999999999999.99"),
        Decimal("0.99999"),
        "héllo wörld ✓ 日本語 🎉",
        bytes(range(256)),
        date(9999, 12, 31),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999),
    ),
    # New York DST: the clocks go forward at 07:00 UTC and back at 06:00 UTC.
    (
        3,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        'it\'s "quoted"; -- \n\t',
        None,
        date(2024, 3, 10),
        datetime(2024, 3, 10, 6, 59, 59, 999999, tzinfo=UTC),
        datetime(2024, 3, 10, 2, 30),
    ),
    (
        4,
        True,
        0,
        0,
        0,
        0,
        -0.0,
        0.1,
        Decimal("0.01"),
        Decimal("0.00000"),
        None,
        b"\x00",
        None,
        datetime(2024, 3, 10, 7, 0, tzinfo=UTC),
        None,
    ),
    (
        5,
        False,
        1,
        1,
        1,
        1,
        2.5,
        2.5,
        Decimal("1.00"),
        Decimal("0.5"),
        "x",
        b"\xff",
        date(1582, 10, 10),
        datetime(2024, 11, 3, 5, 30, tzinfo=UTC),
        datetime(2024, 11, 3, 1, 30),
    ),
    (
        6,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        date(2000, 2, 29),
        datetime(2024, 11, 3, 6, 30, tzinfo=UTC),
        None,
    ),
]


@pytest.fixture
def new_york(spark: SparkSession) -> Iterator[None]:
    """A session time zone far from UTC, with DST: it must not shift any value."""
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    yield
    spark.conf.set("spark.sql.session.timeZone", old or "UTC")


@pytest.mark.usefixtures("new_york")
def test_every_type_round_trips_exactly(spark: SparkSession) -> None:
    df = spark.createDataFrame(ROWS, SCHEMA)
    with build_payload(df, table="all_types") as payload:
        (part,) = payload.parts
        assert part.tables["all_types"].row_count == len(ROWS)
        got = read_rows(part.path, "all_types")
        columns = read_columns(part.path, "all_types")
    expected = []
    for row in ROWS:
        values = list(row)
        # Timestamps are stored as UTC wall-clock time; timestamp_ntz exactly as written.
        if values[13] is not None:
            values[13] = values[13].astimezone(UTC).replace(tzinfo=None)
        expected.append(tuple(values))
    assert got == expected
    assert columns == [
        ("k", "INT", False),
        ("b", "BOOL", True),
        ("i8", "SMALL_INT", True),
        ("i16", "SMALL_INT", True),
        ("i32", "INT", True),
        ("i64", "BIG_INT", True),
        ("f32", "DOUBLE", True),
        ("f64", "DOUBLE", True),
        ("d18", "NUMERIC(18, 2)", True),
        ("d5", "NUMERIC(5, 5)", True),
        ("s", "TEXT", True),
        ("bin", "BYTES", True),
        ("dt", "DATE", True),
        ("ts", "TIMESTAMP", True),
        ("ntz", "TIMESTAMP", True),
    ]


def test_float_is_real_from_database_version_4(spark: SparkSession) -> None:
    df = spark.createDataFrame([(1.5,), (None,)], "f float")
    with build_payload(df, database_version=4) as payload:
        assert read_columns(payload.parts[0].path, "Extract") == [("f", "FLOAT", True)]
        assert read_rows(payload.parts[0].path, "Extract") == [(1.5,), (None,)]


def test_wide_decimals_need_database_version_3(spark: SparkSession) -> None:
    big = Decimal("1234567890123456789012345678.1234567890")
    df = spark.createDataFrame([(big,), (Decimal("-0.0000000001"),)], "amount decimal(38,10)")
    with pytest.raises(
        PayloadError,
        match=r"column 'amount' of table 'Extract' is "
        r"decimal\(38,10\).*database_version=3",
    ):
        build_payload(df)
    with build_payload(df, database_version=3) as payload:
        assert read_rows(payload.parts[0].path, "Extract") == [(Decimal("-0.0000000001"),), (big,)]


def test_awkward_names_survive_exactly(spark: SparkSession) -> None:
    names = ["my col", 'quo"te', "dot.ted", "MiXeD", "ünïcödé", "back`tick", "semi;--"]
    df = spark.createDataFrame([tuple(range(len(names)))], [*names])
    table = 'weird "table".x; DROP'
    with build_payload({table: df}, schema="My Schema") as payload:
        path = payload.parts[0].path
        assert [c[0] for c in read_columns(path, table, schema="My Schema")] == names
        assert read_rows(path, table, schema="My Schema") == [tuple(range(len(names)))]
        assert payload.tables[table].column_names == names


def test_multi_table_payload(spark: SparkSession) -> None:
    a = spark.createDataFrame([(1, "x"), (2, "y")], "id int, name string")
    b = spark.createDataFrame([(10.5,)], "amount double")
    with build_payload({"customers": a, "sales": b}) as payload:
        assert {n: t.row_count for n, t in payload.tables.items()} == {"customers": 2, "sales": 1}
        assert read_rows(payload.parts[0].path, "sales") == [(10.5,)]


@pytest.mark.parametrize(
    ("ddl", "words"),
    [
        ("tags array<string>", "column 'tags' of table 'Extract' is array<string>"),
        ("attrs map<string,int>", "column 'attrs' of table 'Extract' is map<string,int>"),
        ("addr struct<city:string>", "column 'addr' of table 'Extract' is struct<city:string>"),
        ("wait interval day to second", "Tableau cannot use interval columns"),
        # pyspark 3.4's schema strings cannot say a year-month interval: a literal says it.
        ("INTERVAL '1-2' YEAR TO MONTH AS span", "Tableau cannot use interval columns"),
    ],
)
def test_types_tableau_cannot_carry_fail_up_front(
    spark: SparkSession, ddl: str, words: str, tmp_path: Any
) -> None:
    if " AS " in ddl:
        df = spark.range(0).selectExpr("CAST(id AS INT) AS id", ddl)
    else:
        df = spark.createDataFrame([], f"id int, {ddl}")
    with pytest.raises(PayloadError, match=words.replace("(", r"\(").replace(")", r"\)")):
        build_payload(df, staging_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing staged: the check ran before any work


def test_void_column_fails_naming_it(spark: SparkSession) -> None:
    df = spark.range(1).selectExpr("id", "NULL AS nothing")
    with pytest.raises(PayloadError, match=r"column 'nothing' .* no type"):
        build_payload(df)


def test_complex_types_as_json_text(spark: SparkSession) -> None:
    df = spark.createDataFrame(
        [(1, ["a", "b"], {"k": 1}, ("Paris",))],
        "id int, tags array<string>, attrs map<string,int>, addr struct<city:string>",
    )
    with build_payload(df, complex_as_json=True) as payload:
        assert read_rows(payload.parts[0].path, "Extract") == [
            (1, '["a","b"]', '{"k":1}', '{"city":"Paris"}')
        ]


def test_session_time_zone_is_restored_and_conf_untouched(spark: SparkSession) -> None:
    key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(key, None)
    with build_payload(spark.createDataFrame([(1,)], "x int")):
        pass
    assert spark.conf.get(key, None) == before


def test_the_session_settings_are_never_touched_even_by_concurrent_builds(
    spark: SparkSession,
) -> None:
    import threading
    from datetime import date, datetime

    keys = {
        "spark.sql.parquet.datetimeRebaseModeInWrite": "EXCEPTION",
        "spark.sql.parquet.int96RebaseModeInWrite": "EXCEPTION",
        "spark.sql.parquet.outputTimestampType": "INT96",
    }
    before = {k: spark.conf.get(k, None) for k in keys}
    try:
        for k, v in keys.items():
            spark.conf.set(k, v)  # the strictest settings a user may have
        df = spark.createDataFrame(
            [(date(1, 1, 1), datetime(1, 1, 1, 0, 0, 1), "a")], "d date, ts timestamp, s string"
        )
        results: list[object] = []

        def build() -> None:
            try:
                with build_payload(df) as payload:
                    results.append(read_rows(payload.parts[0].path, "Extract"))
            except Exception as err:  # reported below
                results.append(err)

        threads = [threading.Thread(target=build) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert results == [[(date(1, 1, 1), datetime(1, 1, 1, 0, 0, 1), "a")]] * 2
        assert {k: spark.conf.get(k) for k in keys} == keys
    finally:
        for k, old in before.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)

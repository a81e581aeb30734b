"""A small change set staged through the driver is ranked by Hyper (Spark only tags each
change): the payload must be the one Spark's ranking makes, row for row and digest for
digest, and every refusal the same, on histories built to find where two engines differ
(ties, NULL positions that rank last, pre-images, text positions beyond ASCII, decimals,
timestamps, composite keys); types where they could differ stay with Spark."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tabhyper_update import ChangeSet, PayloadError, build_payload
from tabhyper_update.builder import build, staging
from tabhyper_update.builder.cdc import CdcSpec
from tabhyper_update.builder.hyper_ranking import ranks_in_hyper
from tabhyper_update.builder.hyper_types import plan_column
from tabhyper_update.testing.files import read_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytest.importorskip("pyarrow")

SCHEMA = (
    "region string, id int, v string, op string, version bigint, label string, "
    "amount decimal(12,2), at timestamp, lsn string"
)
CHANGES = ChangeSet(
    ["region", "id"],
    op_column="op",
    order_by=["version", "label", "lsn", "at"],
    order_as={"label": "text", "lsn": "number"},
)
OPS = ["I", "U", "D", "update_preimage", "update_postimage", "delete"]


def outcome(
    spark: SparkSession, df: DataFrame, cs: ChangeSet, tmp: Path, ranker: str
) -> tuple[str, Any]:
    """What the build makes of ``df``: its tables, rows and digest, or the refusal."""
    patch = pytest.MonkeyPatch()
    # Python-made rows have no size estimate: say they are small, as a Delta read would.
    patch.setattr(staging, "estimated_bytes", lambda df: 1000)
    if ranker == "spark":
        patch.setattr(build, "ranks_in_hyper", lambda spec, plans: False)
    try:
        with build_payload(df, cs, output_dir=tmp, keep_files=True) as payload:
            rows = {
                name: sorted(
                    (r for part in payload.parts for r in read_table(part.path, name)), key=repr
                )
                for name in payload.tables
            }
            counts = {n: (t.row_count, t.row_digest) for n, t in payload.tables.items()}
            return "built", (payload.digest, counts, rows)
    except PayloadError as err:
        return "refused", str(err)
    finally:
        patch.undo()


def same_both_ways(spark: SparkSession, df: DataFrame, cs: ChangeSet, tmp: Path) -> Any:
    by_hyper = outcome(spark, df, cs, tmp / "hyper", "hyper")
    by_spark = outcome(spark, df, cs, tmp / "spark", "spark")
    assert by_hyper == by_spark
    return by_hyper


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Few keys and few positions, so that keys repeat, positions tie and NULLs meet; half
    of them without the values a build refuses (an unknown op, an unreadable position), so
    that most of those build."""
    refusable = draw(st.booleans())
    moment = [datetime(2024, 1, 1, tzinfo=timezone.utc), datetime(2024, 6, 1, 12, 30)]
    row = st.tuples(
        st.sampled_from(["eu", "EU", "é", "😀", ""]),
        st.integers(1, 3),
        st.sampled_from(["x", "y", None]),
        st.sampled_from([*OPS, "truncate"] if refusable else OPS),
        st.sampled_from([1, 2, 3]),
        st.sampled_from(["a", "B", "b ", "é", None]),
        st.sampled_from([Decimal("1.50"), Decimal("-2.00"), None]),
        st.sampled_from([*moment, None]),
        st.sampled_from(["7", "10", None, "x"] if refusable else ["7", "10", None]),
    )
    return draw(st.lists(row, min_size=1, max_size=40))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=histories())
def test_hyper_ranks_every_history_as_spark_does(
    spark: SparkSession, tmp_path_factory: Any, rows: list[tuple[Any, ...]]
) -> None:
    df = spark.createDataFrame(rows, SCHEMA)
    same_both_ways(spark, df, CHANGES, tmp_path_factory.mktemp("history"))


def test_a_history_of_every_case_lands_the_same_and_hyper_ranked_it(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    t0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
    rows = [
        # later version wins; a NULL later position ranks below a value
        ("eu", 1, "old", "U", 1, "a", Decimal("1.00"), t0, "7"),
        ("eu", 1, "new", "U", 2, None, Decimal("2.00"), None, None),
        ("eu", 1, "newer", "U", 2, "a", Decimal("3.00"), t0, "7"),
        # text positions by their UTF-8 bytes: 'é' after 'z', 'B' before 'a'
        ("EU", 1, "z", "U", 1, "z", None, t0, "7"),
        ("EU", 1, "é", "U", 1, "é", None, t0, "7"),
        ("😀", 2, "B", "U", 1, "B", None, t0, "7"),
        ("😀", 2, "a", "U", 1, "a", None, t0, "7"),
        # numbers written as text: '10' after '9'
        ("", 3, "nine", "U", 1, "a", None, t0, "9"),
        ("", 3, "ten", "D", 1, "a", None, t0, "10"),
        # a key moved by an update: its pre-image deletes the old key
        ("eu", 2, "moved", "update_preimage", 5, "a", None, t0, "7"),
        ("eu", 3, "moved", "update_postimage", 5, "a", None, t0, "7"),
        # pre- and post-image of one key at one position: the update wins
        ("eu", 4, "kept", "update_preimage", 6, "a", None, t0, "7"),
        ("eu", 4, "kept", "update_postimage", 6, "a", None, t0, "7"),
        ("eu", 5, "gone", "truncate", 6, "a", None, t0, "7"),
    ]
    df = spark.createDataFrame(rows, SCHEMA)
    cs = ChangeSet(
        ["region", "id"],
        op_column="op",
        order_by=["version", "label", "lsn", "at"],
        order_as={"label": "text", "lsn": "number"},
        op_map={
            "U": "upsert",
            "D": "delete",
            "update_preimage": "preimage",
            "update_postimage": "upsert",
            "truncate": "ignore",
        },
    )
    with caplog.at_level(logging.DEBUG, logger="tabhyper_update.build"):
        kind, (_, counts, tables) = same_both_ways(spark, df, cs, tmp_path)
    assert kind == "built"
    assert any("Hyper ranks them" in r.getMessage() for r in caplog.records)
    upserts = {r[:3] for r in tables["upserts"]}
    assert upserts == {
        ("eu", 1, "newer"),
        ("EU", 1, "é"),
        ("😀", 2, "a"),
        ("eu", 3, "moved"),
        ("eu", 4, "kept"),
    }
    assert tables["deletes"] == [("", 3), ("eu", 2)]
    assert counts["upserts"][0] == 5


def test_a_change_set_of_ignored_changes_only_is_empty_both_ways(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Spark sends the ignored changes too (one projection, no filter); Hyper leaves them
    # out. A truncate has no key and no position.
    rows = [
        (None, None, None, "truncate", None, None, None, None, None),
        ("eu", 1, "x", "noise", 1, "a", None, None, "7"),
    ]
    cs = ChangeSet(
        ["region", "id"],
        op_column="op",
        order_by=["version", "label", "lsn", "at"],
        order_as={"label": "text", "lsn": "number"},
        op_map={"U": "upsert", "truncate": "ignore", "noise": "ignore"},
    )
    kind, (_, counts, tables) = same_both_ways(
        spark, spark.createDataFrame(rows, SCHEMA), cs, tmp_path
    )
    assert kind == "built"
    assert counts == {}  # nothing to upload
    assert tables == {}


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([("eu", 1, "a", "U", 1), ("eu", 1, "b", "D", 1)], "share the greatest"),
        ([("eu", None, "a", "U", 1), ("eu", 1, "b", "U", 2)], "is NULL"),
        ([("eu", 1, "a", "U", None)], "has no position"),
        ([("eu", 1, "a", "merge", 1)], "unknown value 'merge'"),
        # an error never hides behind a later valid change of its key
        ([("eu", 1, "a", "U", None), ("eu", 1, "b", "U", 9)], "has no position"),
    ],
)
def test_every_refusal_is_the_same_from_hyper(
    spark: SparkSession, tmp_path: Path, rows: list[tuple[Any, ...]], expected: str
) -> None:
    df = spark.createDataFrame(rows, "region string, id int, v string, op string, seq long")
    cs = ChangeSet(["region", "id"], op_column="op", order_by="seq")
    kind, message = same_both_ways(spark, df, cs, tmp_path)
    assert kind == "refused"
    assert expected in message


def test_an_error_is_named_from_a_second_read_and_a_source_that_changed_is_refused(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark tags the changes without the op and position texts; when Hyper ranks error
    rows, the change set is read again with them. A source that gives no error rows the
    second time is refused, not built from the second read."""
    from tabhyper_update.builder import hyper_ranking

    monkeypatch.setattr(staging, "estimated_bytes", lambda df: 1000)
    df = spark.createDataFrame(
        [("eu", 1, "a", "U", 1), ("eu", 2, "b", "U", None), ("eu", 3, "c", "D", 4)],
        "region string, id int, v string, op string, seq long",
    )
    cs = ChangeSet(["region", "id"], op_column="op", order_by="seq")
    # Which reads carried the texts: the columns of each query Spark sent to the driver.
    passes: list[bool] = []
    write = staging.write_on_driver

    def counted(query: DataFrame, target: Path) -> int:
        passes.append("__tabhyper_op" in query.columns)
        return write(query, target)

    monkeypatch.setattr(hyper_ranking, "write_on_driver", counted)
    with pytest.raises(PayloadError, match=r"key \(region='eu', id=2\), op 'U', has no position"):
        build_payload(df, cs, output_dir=tmp_path / "a")
    assert passes == [False, True]  # the texts only in the second read

    def changed(query: DataFrame, target: Path) -> int:
        # The second read no longer holds the change without a position.
        second = "__tabhyper_op" in query.columns
        return write(query.where("`__tabhyper_o0` IS NOT NULL") if second else query, target)

    monkeypatch.setattr(hyper_ranking, "write_on_driver", changed)
    with pytest.raises(PayloadError, match=r"1 change\(s\) could not be applied.*but none"):
        build_payload(df, cs, output_dir=tmp_path / "b")
    assert list((tmp_path / "b").iterdir()) == []  # nothing built from either read


def _spec(types: dict[str, str], **change_set: Any) -> tuple[CdcSpec, list[Any]]:
    from pyspark.sql.types import StructField, _parse_datatype_string

    cs = ChangeSet(**change_set)
    spec = CdcSpec.create(list(types), cs, types=types)
    plans = [
        plan_column(
            StructField(name, _parse_datatype_string(t)),
            table="t",
            database_version=2,
            complex_as_json=True,
        )
        for name, t in types.items()
        if name in spec.data_columns(list(types))
    ]
    return spec, plans


@pytest.mark.parametrize(
    ("types", "change_set", "by_hyper"),
    [
        ({"k": "bigint", "op": "string", "s": "bigint"}, {"order_by": "s"}, True),
        ({"k": "string", "op": "string", "s": "timestamp"}, {"order_by": "s"}, True),
        ({"k": "date", "op": "string", "s": "decimal(38,0)"}, {"order_by": "s"}, True),
        # NaN and -0.0: Spark normalises floating-point keys and positions, Hyper need not
        ({"k": "double", "op": "string", "s": "bigint"}, {"order_by": "s"}, False),
        ({"k": "bigint", "op": "string", "s": "double"}, {"order_by": "s"}, False),
        # positions that are lists of numbers (LSN parts, PostgreSQL's sequence)
        (
            {"k": "bigint", "op": "string", "s": "string"},
            {"order_by": "s", "order_as": {"s": "hex-lsn"}},
            False,
        ),
        ({"k": "array<int>", "op": "string", "s": "bigint"}, {"order_by": "s"}, False),
        ({"k": "bigint", "op": "string", "s": "struct<a:int>"}, {"order_by": "s"}, False),
    ],
)
def test_only_types_both_engines_compare_alike_are_ranked_by_hyper(
    spark: SparkSession, types: dict[str, str], change_set: dict[str, Any], by_hyper: bool
) -> None:
    spec, plans = _spec(types, key="k", op_column="op", **change_set)
    assert ranks_in_hyper(spec, plans) is by_hyper


def test_a_floating_point_key_is_ranked_by_spark_and_still_lands(
    spark: SparkSession, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(staging, "estimated_bytes", lambda df: 1000)
    df = spark.createDataFrame(
        [(0.0, "a", "U", 1), (-0.0, "b", "U", 2), (float("nan"), "c", "U", 1)],
        "k double, v string, op string, seq long",
    )
    with caplog.at_level(logging.DEBUG, logger="tabhyper_update.build"):
        payload = build_payload(df, ChangeSet("k", op_column="op", order_by="seq"))
    assert not any("Hyper ranks them" in r.getMessage() for r in caplog.records)
    with payload:
        # Spark's window reads 0.0 and -0.0 as one key: its later change wins.
        assert payload.tables["upserts"].row_count == 2


def test_hyper_ranks_in_a_staging_folder_with_an_odd_name(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    odd = tmp_path / 'it\'s a "dir" ü %20 #1'
    odd.mkdir()
    df = spark.range(50).selectExpr(
        "id % 7 AS id", "CAST(id AS STRING) AS v", "IF(id = 49, 'D', 'U') AS op", "id AS seq"
    )
    with caplog.at_level(logging.DEBUG, logger="tabhyper_update.build"):
        payload = build_payload(
            df, ChangeSet("id", op_column="op", order_by="seq"), staging_dir=odd
        )
    assert any("Hyper ranks them" in r.getMessage() for r in caplog.records)
    with payload:
        # id 0 last changed at 49 (a delete); the others at their greatest seq below it.
        assert read_table(payload.parts[0].path, "deletes") == [(0,)]
        assert read_table(payload.parts[0].path, "upserts") == [
            (k, str(max(i for i in range(49) if i % 7 == k))) for k in range(1, 7)
        ]
    assert list(odd.iterdir()) == []  # nothing of the build is left behind


def test_changes_the_driver_received_but_hyper_cannot_read_are_an_error(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows that reach the driver must all be ranked: never a smaller change set.
    def misplaced(df: DataFrame, target: Path) -> int:
        return staging.write_on_driver(df, tmp_path / "elsewhere" / target.name)

    monkeypatch.setattr("tabhyper_update.builder.hyper_ranking.write_on_driver", misplaced)
    df = spark.range(30).selectExpr("id % 4 AS id", "'U' AS op", "id AS seq")
    with pytest.raises(
        PayloadError, match=r"Spark sent 30 change\(s\) to the driver but Hyper read 0"
    ):
        build_payload(
            df, ChangeSet("id", op_column="op", order_by="seq"), output_dir=tmp_path / "out"
        )
    assert list((tmp_path / "out").iterdir()) == []  # no half-built payload


def test_changes_hyper_read_but_ranked_none_are_an_error_not_an_empty_change_set(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tabhyper_update.builder.cdc import latest_of

    def loses_every_row(source: str, **kwargs: Any) -> str:
        return f"SELECT * FROM ({latest_of(source, **kwargs)}) AS r WHERE false"

    # A ranking that loses every row, as a broken one would.
    monkeypatch.setattr("tabhyper_update.builder.hyper_ranking.latest_of", loses_every_row)
    df = spark.range(30).selectExpr("id % 4 AS id", "'U' AS op", "id AS seq")
    with pytest.raises(PayloadError, match=r"Hyper read 30 tagged change\(s\) but ranked none"):
        build_payload(
            df, ChangeSet("id", op_column="op", order_by="seq"), output_dir=tmp_path / "out"
        )
    assert list((tmp_path / "out").iterdir()) == []  # no half-built payload

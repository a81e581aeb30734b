"""staging="driver": the rows come to the driver as Arrow batches instead of through a shared
folder, and the payload is the same (tables, row counts, digests, so the same identity).
staging="auto" (the default) takes the driver for a change set Spark estimates small and
ranks it in one partition: again the same payload, and the same refusals."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import (
    ChangeSet,
    ConfigurationError,
    Payload,
    PayloadError,
    build_payload,
)
from tabhyper_update.builder import build, hyper_ranking, staging
from tabhyper_update.testing.files import read_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytest.importorskip("pyarrow")


def changes(spark: SparkSession) -> DataFrame:
    return spark.range(30_000).selectExpr(
        "id % 9000 AS id",
        "CAST(id * 3 AS STRING) AS v",
        "IF(id % 5 = 0, 'D', 'U') AS op",
        "id AS seq",
        "CAST(id AS DECIMAL(18,2)) AS amount",
        "IF(id % 11 = 0, NULL, timestamp_seconds(1700000000 + id)) AS ts",
        "IF(id % 13 = 0, NULL, DATE '2024-01-01') AS day",
    )


def assert_same_change_set(a: Payload, b: Payload) -> None:
    """The same payload: digest, each table's rows and digest, and each part's rows."""
    assert a.digest == b.digest
    assert {n: (t.row_count, t.row_digest) for n, t in a.tables.items()} == {
        n: (t.row_count, t.row_digest) for n, t in b.tables.items()
    }
    assert len(a.parts) == len(b.parts)
    for x, y in zip(a.parts, b.parts, strict=True):
        for table in ("upserts", "deletes"):
            assert sorted(read_table(x.path, table)) == sorted(read_table(y.path, table))


# On every Spark: the split payload (its parts cut by the driver's own count).
@pytest.mark.parametrize("cap", [None, pytest.param(0.2, marks=pytest.mark.every_spark)])
def test_a_change_set_staged_on_the_driver_is_the_same_payload(
    spark: SparkSession, tmp_path: Path, cap: float | None
) -> None:
    cs = ChangeSet("id", op_column="op", order_by="seq")
    df = changes(spark)
    built = {
        mode: build_payload(
            df, cs, staging=mode, max_payload_mb=cap, output_dir=tmp_path / mode, keep_files=True
        )
        for mode in ("shared", "driver")
    }
    shared, driver = built["shared"], built["driver"]
    assert_same_change_set(driver, shared)
    if cap is not None:
        assert len(driver.parts) > 1


def test_plain_and_multi_table_payloads_staged_on_the_driver(
    spark: SparkSession, tmp_path: Path
) -> None:
    orders = spark.range(5_000).selectExpr("id", "CAST(id AS STRING) AS v")
    lines = spark.range(12_000).selectExpr("id % 5000 AS order_id", "id AS line")
    frames = {"Orders": orders, "Lines": lines}
    shared = build_payload(frames, output_dir=tmp_path / "a", keep_files=True)
    driver = build_payload(frames, staging="driver", output_dir=tmp_path / "b", keep_files=True)
    assert driver.digest == shared.digest
    assert {n: t.row_count for n, t in driver.tables.items()} == {"Orders": 5_000, "Lines": 12_000}
    empty = build_payload(orders.where("id < 0"), staging="driver")
    assert empty.is_empty or empty.tables["Extract"].row_count == 0


def test_an_unknown_staging_mode_is_refused_before_any_work(spark: SparkSession) -> None:
    with pytest.raises(ConfigurationError, match="staging must be one of 'shared', 'driver'"):
        build_payload(spark.range(1), staging="executor")  # type: ignore[arg-type]


# -- staging="auto": small change sets through the driver, ranked in one partition ----------


def history(spark: SparkSession) -> DataFrame:
    """Many changes per key: updates, deletes, re-inserts, pre-images at a position a later
    change shares, NULL values, positions out of order across partitions."""
    return (
        spark.range(6_000)
        .selectExpr(
            "id % 700 AS id",
            "IF(id % 17 = 0, NULL, CONCAT('v', CAST(id AS STRING))) AS v",
            "CASE id % 7 WHEN 0 THEN 'delete' WHEN 1 THEN 'update_preimage' WHEN 2 THEN 'insert' "
            "ELSE 'update_postimage' END AS op",
            "IF(id % 7 = 1, id + 1, id) * 1000 + (id * 7919) % 1000 AS seq",
        )
        .repartition(5)
    )


def build_logged(
    df: DataFrame, cs: ChangeSet, caplog: pytest.LogCaptureFixture, **options: object
) -> tuple[Payload, str]:
    with caplog.at_level(logging.DEBUG, logger="tabhyper_update.build"):
        caplog.clear()
        payload = build_payload(df, cs, keep_files=True, **options)  # type: ignore[arg-type]
    said = [r.getMessage() for r in caplog.records if "Spark estimates" in r.getMessage()]
    assert len(said) == 1, said
    return payload, said[0]


@pytest.mark.every_spark
def test_auto_takes_the_driver_for_a_small_change_set_and_the_same_payload_comes_out(
    spark: SparkSession,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cs = ChangeSet("id", op_column="_change_type", order_by="seq")
    df = history(spark).withColumnRenamed("op", "_change_type")
    small, said = build_logged(df, cs, caplog, output_dir=tmp_path / "a")
    assert "staged through the driver, ranked in one partition" in said
    # The same rows as Spark sees a large change set: shuffled ranking, shared folder.
    monkeypatch.setattr(staging, "estimated_bytes", lambda df: 1 << 40)
    large, said = build_logged(df, cs, caplog, output_dir=tmp_path / "b")
    assert said.endswith("staged in the shared folder")  # and ranked after a shuffle
    assert_same_change_set(small, large)
    assert small.tables["upserts"].row_count + small.tables["deletes"].row_count == 700


def test_a_file_source_is_sized_from_its_files_before_anything_runs(
    spark: SparkSession,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The estimate is Spark's, read without running or optimizing the source: the bytes
    # of the Parquet files under it. Over the small limit, the shared folder; under it,
    # the driver; the same payload either way.
    cs = ChangeSet("id", op_column="_change_type", order_by="seq")
    folder = tmp_path / "source"
    history(spark).withColumnRenamed("op", "_change_type").write.parquet(str(folder))
    on_disk = sum(p.stat().st_size for p in folder.glob("*.parquet"))
    df = spark.read.parquet(str(folder))
    monkeypatch.setattr(staging, "SMALL_BYTES", on_disk - 1)
    large, said = build_logged(df, cs, caplog, output_dir=tmp_path / "a")
    assert said == (
        f"table 'upserts': Spark estimates {on_disk:,} bytes; staged in the shared folder"
    ), said
    monkeypatch.setattr(staging, "SMALL_BYTES", on_disk)
    small, said = build_logged(df, cs, caplog, output_dir=tmp_path / "b")
    assert f"Spark estimates {on_disk:,} bytes; staged through the driver" in said
    assert_same_change_set(small, large)
    assert small.tables["upserts"].row_count + small.tables["deletes"].row_count == 700


def test_a_persisted_change_set_is_sized_by_what_it_holds(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Python-made rows have no size, but once persisted and computed Spark knows their
    # bytes: a persisted micro-batch (foreachBatch) is small and ranked by Hyper.
    rows = [(i % 7, f"v{i}", "U", i) for i in range(40)]
    df = spark.createDataFrame(rows, "id long, v string, op string, seq long").persist()
    try:
        assert df.count() == 40
        payload, said = build_logged(
            df, ChangeSet("id", op_column="op", order_by="seq"), caplog, output_dir=tmp_path
        )
        assert "Spark estimates no size" not in said
        assert said.endswith("staged through the driver, ranked in one partition"), said
        with payload:
            assert read_table(payload.parts[0].path, "upserts") == [
                (k, f"v{max(i for i in range(40) if i % 7 == k)}") for k in range(7)
            ]
    finally:
        df.unpersist()


@pytest.mark.parametrize("ranking", ["one partition", "shuffled"])
def test_a_tie_and_a_null_key_are_refused_whichever_way_the_change_set_is_ranked(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, ranking: str
) -> None:
    if ranking == "shuffled":
        monkeypatch.setattr(staging, "estimated_bytes", lambda df: 1 << 40)
    cs = ChangeSet("id", op_column="op", order_by="seq")
    rows = [(i, "x", "U", i) for i in range(50)]
    tie = spark.createDataFrame([*rows, (7, "y", "U", 7)], "id long, v string, op string, seq long")
    with pytest.raises(PayloadError, match="share the greatest"):
        build_payload(tie.repartition(3), cs)
    null_key = spark.createDataFrame(
        [*rows, (None, "y", "U", 99)], "id long, v string, op string, seq long"
    )
    with pytest.raises(PayloadError, match="NULL"):
        build_payload(null_key.repartition(3), cs)


def test_braces_in_names_and_op_values_reach_spark_as_written(spark: SparkSession) -> None:
    # The change set's plan is one SQL text: braces must not be read as placeholders.
    df = spark.createDataFrame(
        [(1, "a", "{up}", 1), (2, "b", "{up}", 1), (2, None, "{gone}", 2)],
        "`{id}` long, `v}` string, `{op` string, seq long",
    )
    cs = ChangeSet(
        "{id}", op_column="{op", order_by="seq", op_map={"{up}": "upsert", "{gone}": "delete"}
    )
    with build_payload(df, cs) as payload:
        assert {n: t.row_count for n, t in payload.tables.items()} == {"upserts": 1, "deletes": 1}
        assert read_table(payload.parts[0].path, "upserts") == [(1, "a")]
        assert read_table(payload.parts[0].path, "deletes") == [(2,)]


def test_error_rows_spark_counted_but_the_sdk_cannot_find_are_an_error(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A NULL key Spark wrote where the driver does not look: never an empty change set.
    real = build._write_staged

    def misplaced(df: DataFrame, target: Path, mode: Any) -> None:
        real(df, tmp_path / "elsewhere" / target.name, mode)

    monkeypatch.setattr(build, "_write_staged", misplaced)
    df = spark.createDataFrame([(None, "a", "U", 1)], "id long, v string, op string, seq long")
    with pytest.raises(PayloadError, match=r"Spark wrote 1 change\(s\) it could not apply"):
        # Spark's ranking (Hyper's has its own test in test_hyper_ranking.py)
        build_payload(df, ChangeSet("id", op_column="op", order_by="seq"), staging="shared")


def test_auto_stages_rows_spark_cannot_size_in_the_shared_folder(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # An unknown size may be large (a JDBC read, an RDD): a partition sent whole to the
    # driver can exhaust it, so auto takes the shared folder, and the change set lands.
    # (A plan that only projects and filters such rows is probed first: see below.)
    rows = [(i % 7, f"v{i}", "U", i) for i in range(40)]
    df = spark.createDataFrame(rows, "id long, v string, op string, seq long").repartition(2)
    payload, said = build_logged(
        df, ChangeSet("id", op_column="op", order_by="seq"), caplog, output_dir=tmp_path
    )
    assert "Spark estimates no size" in said
    assert said.endswith("staged in the shared folder")
    with payload:
        assert read_table(payload.parts[0].path, "upserts") == [
            (k, f"v{max(i for i in range(40) if i % 7 == k)}") for k in range(7)
        ]


@pytest.mark.every_spark
def test_rows_spark_cannot_size_are_probed_and_hyper_ranks_them(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Python-made rows only filtered and projected: at most a probe's rows come to the
    # driver; fewer came, so they are the whole change set and Hyper ranks them.
    cs = ChangeSet("id", op_column="op", order_by="seq")
    df = history(spark).coalesce(1).where("seq >= 0").select("id", "v", "op", "seq")
    rows = df.collect()
    unsized = spark.createDataFrame(rows, df.schema).where("seq >= 0")
    probed, said = build_logged(unsized, cs, caplog, output_dir=tmp_path / "a")
    assert "Spark estimates no size" in said
    assert "through the driver if at most 10,000 rows" in said
    assert any("Hyper ranks them" in r.getMessage() for r in caplog.records)
    shared, _ = build_logged(unsized, cs, caplog, output_dir=tmp_path / "b", staging="shared")
    with probed, shared:
        assert_same_change_set(probed, shared)
        assert probed.tables["upserts"].row_count + probed.tables["deletes"].row_count == 700


@pytest.mark.parametrize(("changes", "probed"), [(12, True), (13, False)])
def test_a_change_set_larger_than_a_probe_is_staged_shared_and_lands_whole(
    spark: SparkSession,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    changes: int,
    probed: bool,
) -> None:
    monkeypatch.setattr(staging, "PROBE_ROWS", 12)
    rows = [(i % 5, f"v{i}", "D" if i == 11 else "U", i) for i in range(changes)]
    df = spark.createDataFrame(rows, "id long, v string, op string, seq long")
    stage = tmp_path / "stage"
    stage.mkdir()
    payload, said = build_logged(
        df,
        ChangeSet("id", op_column="op", order_by="seq"),
        caplog,
        staging_dir=stage,
        output_dir=tmp_path / "out",
    )
    fell_back = [r.getMessage() for r in caplog.records if "more than 12" in r.getMessage()]
    assert "through the driver if at most 12 rows" in said
    if probed:
        assert fell_back == []
    else:
        assert fell_back == [
            "table 'upserts': more than 12 rows came to the driver; staged in the shared "
            "folder instead"
        ]
    with payload:
        # Every key's last change, whichever way it was ranked: key 1's is the delete at 11.
        last = {k: max(i for i in range(changes) if i % 5 == k) for k in range(5)}
        assert read_table(payload.parts[0].path, "deletes") == [(1,)]
        assert sorted(read_table(payload.parts[0].path, "upserts")) == [
            (k, f"v{last[k]}") for k in range(5) if k != 1
        ]
    assert list(stage.iterdir()) == []  # neither the probe's rows nor the staging are left


@pytest.mark.parametrize(("count", "probed"), [(12, True), (13, False)])
def test_a_plain_table_spark_cannot_size_is_probed_too_and_lands_whole(
    spark: SparkSession,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    count: int,
    probed: bool,
) -> None:
    monkeypatch.setattr(staging, "PROBE_ROWS", 12)
    rows = [(i, f"v{i}" if i % 3 else None) for i in range(count)]
    df = spark.createDataFrame(rows, "id long, v string")
    with (
        caplog.at_level(logging.DEBUG, logger="tabhyper_update.build"),
        build_payload(df, output_dir=tmp_path / "a") as payload,
    ):
        assert sorted(read_table(payload.parts[0].path, "Extract")) == rows
        digest = payload.digest
    said = [r.getMessage() for r in caplog.records]
    assert any("through the driver if at most 12 rows" in m for m in said)
    assert any("more than 12 rows came to the driver" in m for m in said) is not probed
    with build_payload(df, output_dir=tmp_path / "b", staging="shared") as shared:
        assert shared.digest == digest


def test_only_plans_that_read_no_more_than_the_probe_are_probed(spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(1, "a", "U", 1)], "id long, v string, op string, seq long")
    assert staging.probe_rows(df) == staging.PROBE_ROWS
    assert staging.probe_rows(df.where("id > 0").select("id", "op", "seq")) == staging.PROBE_ROWS
    assert staging.probe_rows(df.union(df)) == staging.PROBE_ROWS
    # A shuffle below the probe would compute its whole input first.
    assert staging.probe_rows(df.groupBy("id").agg(F.max("seq"))) == 0
    assert staging.probe_rows(df.join(df.select("id"), "id")) == 0
    assert staging.probe_rows(df.repartition(3)) == 0
    assert staging.probe_rows(df.distinct()) == 0
    # Rows Spark sizes are never probed: a sized source is small or it is not.
    assert staging.probe_rows(spark.range(5)) == 0
    # Wide rows: fewer, so that a probe stays near SMALL_BYTES by Spark's default widths
    # (20 bytes a string).
    wide = spark.createDataFrame([tuple("x" * 400)], ", ".join(f"c{i} string" for i in range(400)))
    assert staging.probe_rows(wide) == staging.SMALL_BYTES // (400 * 20)


def test_only_rows_without_a_size_estimate_are_probed(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    df = spark.createDataFrame([(1, "a", "U", 1)], "id long, v string, op string, seq long")
    unsized = staging.staging_for(df, "auto", table="t", change_set=False)
    assert (unsized.mode, unsized.probe) == ("shared", staging.PROBE_ROWS)
    # Fewer columns of such rows: Spark scales its unknown size by the row width, which
    # is still no size (it estimated them at ~5 EiB).
    projected = df.select("id", "v")
    assert staging.estimated_bytes(projected) is None
    narrow = staging.staging_for(projected, "auto", table="t", change_set=False)
    assert (narrow.mode, narrow.probe) == ("shared", staging.PROBE_ROWS)
    # Estimated large: staged shared at once (a probe would read 10,001 rows for nothing).
    monkeypatch.setattr(staging, "estimated_bytes", lambda df: staging.SMALL_BYTES + 1)
    large = staging.staging_for(df, "auto", table="t", change_set=False)
    assert (large.mode, large.probe) == ("shared", 0)


def test_probed_rows_the_driver_received_but_hyper_cannot_read_are_an_error(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write = staging.write_on_driver

    def misplaced(df: DataFrame, target: Path) -> int:
        return write(df, tmp_path / "elsewhere" / target.name)

    # The probe writes through the driver (staging's own writer).
    monkeypatch.setattr(staging, "write_on_driver", misplaced)
    df = spark.createDataFrame([(1, "a"), (2, None)], "id long, v string")
    with pytest.raises(PayloadError, match=r"Spark wrote 2 row\(s\) for table 'Extract' but 0"):
        build_payload(df, output_dir=tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []  # no half-built payload


@pytest.mark.parametrize(("limit", "counted"), [(12, True), (11, False)])
def test_a_change_set_hyper_cannot_rank_is_counted_not_probed(
    spark: SparkSession,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    limit: int,
    counted: bool,
) -> None:
    # Spark's ranking needs the whole change set: a probe's rows could not be ranked. Its
    # source's rows are counted instead (at most the probe's rows are read): within the
    # probe's rows it is small, staged through the driver and ranked in one partition.
    monkeypatch.setattr(staging, "PROBE_ROWS", limit)
    rows = [(0.5 * (i % 4), f"v{i}", "U", i) for i in range(12)]
    df = spark.createDataFrame(rows, "k double, v string, op string, seq long")
    payload, said = build_logged(
        df, ChangeSet("k", op_column="op", order_by="seq"), caplog, output_dir=tmp_path / "a"
    )
    assert "if at most" not in said
    if counted:
        assert said.endswith(
            "Spark estimates no size; its sources' rows make at most 12; staged through the "
            "driver, ranked in one partition"
        )
    else:
        assert said.endswith("Spark estimates no size; staged in the shared folder")
    shared, _ = build_logged(
        df,
        ChangeSet("k", op_column="op", order_by="seq"),
        caplog,
        output_dir=tmp_path / "b",
        staging="shared",
    )
    with payload, shared:
        assert sorted(read_table(payload.parts[0].path, "upserts")) == [
            (0.0, "v8"),
            (0.5, "v9"),
            (1.0, "v10"),
            (1.5, "v11"),
        ]
        assert payload.digest == shared.digest


def test_a_micro_batch_s_tagging_compiles_to_the_same_code_whatever_its_source_holds(
    compiled_code: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spark = compiled_code
    # A source whose literal changes every batch (here a modulus; in a job, a version or an
    # offset in a filter): the code Spark generates for the SDK's tagging stays the same
    # text, so Spark compiles it once per session and takes it from its cache after.
    staged: list[DataFrame] = []
    write = staging.write_on_driver

    def capture(df: DataFrame, target: Path) -> int:
        staged.append(df)
        return write(df, target)

    monkeypatch.setattr(hyper_ranking, "write_on_driver", capture)
    cs = ChangeSet("id", op_column="op", order_by="seq")
    for modulus in (7, 8):
        df = spark.range(50).selectExpr(
            f"id % {modulus} AS id", "CAST(id AS STRING) AS v", "'U' AS op", "id AS seq"
        )
        with build_payload(df, cs, output_dir=tmp_path) as payload:
            assert payload.tables["upserts"].row_count == modulus
    assert len(staged) == 2

    def tagging_code(df: DataFrame) -> list[str]:
        stages = df._jdf.queryExecution().debug().codegenToSeq()
        found = [stages.apply(i) for i in range(stages.size())]
        return [str(s._2()) for s in found if "__tabhyper_rowhash" in str(s._1())]

    first, second = (tagging_code(df) for df in staged)
    assert len(first) == 1
    assert first == second


def _debezium_lines(count: int) -> list[str]:
    """``count`` Debezium events of five keys (creates, updates, a key move, deletes), whose
    ``source`` holds both PostgreSQL's position (``lsn``) and MySQL's (``file``, ``pos``,
    ``row``); the last event delivered twice."""
    lines = []
    for i in range(count):
        key = i % 5
        op = "c" if i < 5 else "d" if i % 7 == 0 else "u"
        after = None if op == "d" else {"id": key + (100 if i == 8 else 0), "v": f"v{i}"}
        before = None if op == "c" else {"id": key, "v": "old"}
        source = {"lsn": 100 + i, "file": "binlog.000007", "pos": 4000 + i, "row": 0}
        lines.append(
            json.dumps({"before": before, "after": after, "op": op, "ts_ms": i, "source": source})
        )
    return [*lines, lines[-1]]


def test_an_unprobed_plan_is_counted_only_when_its_sources_bound_its_rows(
    spark: SparkSession,
) -> None:
    from pyspark.sql import functions as F

    from tabhyper_update.streaming import Debezium

    df = spark.createDataFrame(
        [(1, "a", "U", 1), (2, "b", "U", 2), (2, "b", "U", 2)],
        "id long, v string, op string, seq long",
    )
    assert staging.counted_rows(df) == 3
    # Dropping duplicates gives at most the rows it reads.
    assert staging.counted_rows(df.distinct()) == 3
    assert staging.counted_rows(df.dropDuplicates(["id"]).where("seq > 0")) == 3
    # Each row exploded into a known number: an array's length, the longest of a choice.
    three = F.explode(F.array(F.lit(1), F.lit(2), F.lit(3)))
    assert staging.counted_rows(df.select("*", three)) == 9
    choice = F.when(F.col("id") > 1, F.array(F.lit(1), F.lit(2))).otherwise(F.array(F.lit(0)))
    assert staging.counted_rows(df.select("*", F.explode(choice)).distinct()) == 6
    # Debezium's events: each at most two rows (a key move's pre-image), duplicates dropped.
    events = spark.createDataFrame([(line,) for line in _debezium_lines(9)], "value string")
    changes = Debezium("id BIGINT, v STRING", key="id").changes(events)
    assert staging.counted_rows(changes) == 20
    # No bound: an array a row holds, operators that can give more rows than they read or
    # hide what they read, and sources that are not rows an RDD holds.
    arrays = spark.createDataFrame([([1, 2, 3],)], "a array<int>")
    assert staging.counted_rows(arrays.select(F.explode("a"))) is None
    assert staging.counted_rows(df.join(df.select("id"), "id")) is None
    assert staging.counted_rows(df.groupBy("id").agg(F.max("seq"))) is None
    assert staging.counted_rows(df.repartition(3)) is None
    assert staging.counted_rows(spark.range(5)) is None


def test_counting_a_large_source_reads_a_part_of_it_not_all_of_it(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(staging, "PROBE_ROWS", 100)
    read = spark.sparkContext.accumulator(0)

    def each(i: int) -> tuple[int, str, int]:
        read.add(1)
        return (i % 50, "U", i)

    rdd = spark.sparkContext.parallelize(range(20_000), 8).map(each)
    df = spark.createDataFrame(rdd, "id long, op string, seq long").dropDuplicates()
    assert staging.counted_rows(df) is None  # more than 100 rows
    assert read.value < 20_000  # a few of its rows were read, not all of them
    before = read.value
    assert df.count() == 20_000
    assert read.value - before == 20_000  # (the count of what is read counts every row)


@pytest.mark.every_spark
@pytest.mark.parametrize(
    ("connector", "key_type"), [("postgresql", "BIGINT"), ("mysql", "BIGINT"), ("mysql", "DOUBLE")]
)
def test_debezium_events_spark_cannot_size_are_counted_and_staged_through_the_driver(
    spark: SparkSession,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    connector: str,
    key_type: str,
) -> None:
    # Events as a Kafka micro-batch or Python rows give them: no size. Their parse drops
    # redelivered events (a shuffle), so they are not probed; counted, they are small: the
    # driver stages them and they are ranked in one partition (by Hyper, or by Spark for a
    # key Hyper does not compare as Spark does). The payload is the one the shared folder
    # gives.
    from tabhyper_update.streaming import Debezium

    events = Debezium(f"id {key_type}, v STRING", key="id", connector=connector)
    lines = _debezium_lines(30)
    df = spark.createDataFrame([(line,) for line in lines], "value string")
    counted, said = build_logged(
        events.changes(df), events.change_set, caplog, output_dir=tmp_path / "a"
    )
    assert said.endswith(
        f"Spark estimates no size; its sources' rows make at most {2 * len(lines)}; staged "
        "through the driver, ranked in one partition"
    )
    by_hyper = any("Hyper ranks them" in r.getMessage() for r in caplog.records)
    assert by_hyper is (key_type == "BIGINT")
    shared, said = build_logged(
        events.changes(df), events.change_set, caplog, output_dir=tmp_path / "b", staging="shared"
    )
    assert said.endswith("staged in the shared folder")
    with counted, shared:
        # Keys 0-4 as their last events left them; key 3 moved to 103 by event 8.
        upserts = sorted(read_table(counted.parts[0].path, "upserts"))
        assert upserts == sorted(read_table(shared.parts[0].path, "upserts"))
        assert counted.digest == shared.digest

"""Splitting over the size cap, validation against the payload, and file hygiene."""

from __future__ import annotations

import logging
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import (
    ChangeSet,
    Delete,
    Insert,
    PayloadError,
    Replace,
    Update,
    Upsert,
    build_payload,
    keys_match,
    target,
)
from tabhyper_update.values.errors import InvalidActionBatchError
from tabhyper_update.values.parts import RowDigest

from ._util import read_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

CAP_MB = 0.25


def change_set(spark: SparkSession, n: int) -> DataFrame:
    return spark.range(n).selectExpr(
        "id", "uuid() AS payload", "IF(id % 5 = 0, 'D', 'U') AS op", "1 AS seq"
    )


def test_cdc_payload_over_the_cap_is_split_by_key(spark: SparkSession) -> None:
    n = 30_000
    with build_payload(
        change_set(spark, n), ChangeSet("id", op_column="op", order_by="seq"), max_payload_mb=CAP_MB
    ) as payload:
        assert len(payload.parts) > 1
        upserts: list[int] = []
        deletes: list[int] = []
        for part in payload.parts:
            assert part.size_bytes <= CAP_MB * 1024 * 1024
            assert part.path.stat().st_size == part.size_bytes
            part_tables = {}
            for name in part.tables:
                part_tables[name] = [r[0] for r in read_rows(part.path, name)]
            upserts += part_tables.get("upserts", [])
            deletes += part_tables.get("deletes", [])
            # Each part's derived actions read exactly the tables it holds.
            actions = payload.derived_actions(part, target_table="Orders")
            assert {a.source_table for a in actions.actions} == set(part.tables)
            assert {a.target_table for a in actions.actions} == {"Orders"}
        # The union is the whole change set: no row lost, none repeated.
        assert sorted(upserts) == [i for i in range(n) if i % 5]
        assert sorted(deletes) == [i for i in range(n) if i % 5 == 0]
        assert len({p.sha256 for p in payload.parts}) == len(payload.parts)
        assert payload.tables["upserts"].row_count == len(upserts)


def test_split_parts_digests_and_counts_add_up_to_the_whole_payload(
    spark: SparkSession,
) -> None:
    # Each part's digest and row count come from Hyper's per-bucket statistics of the
    # staged rows: summed over the parts, they are the unsplit payload's, table by table.
    df = spark.range(12_000).selectExpr(
        "id",
        "repeat(CAST(id AS STRING), 4) AS payload",
        "IF(id % 5 = 0, 'D', 'U') AS op",
        "1 AS seq",
    )
    spec = ChangeSet("id", op_column="op", order_by="seq")
    with build_payload(df, spec) as whole, build_payload(df, spec, max_payload_mb=CAP_MB) as split:
        assert len(whole.parts) == 1
        assert len(split.parts) > 1
        for name, rows in (("upserts", 9_600), ("deletes", 2_400)):
            infos = [p.tables[name] for p in split.parts if name in p.tables]
            total = RowDigest.total(RowDigest.parse(i.row_digest) for i in infos)
            assert str(total) == whole.parts[0].tables[name].row_digest
            assert total.rows == sum(i.row_count for i in infos) == rows
            held = [read_rows(p.path, name) for p in split.parts if name in p.tables]
            assert sum(map(len, held)) == rows


def test_plain_payload_over_the_cap_is_split_evenly(spark: SparkSession) -> None:
    n = 30_000
    df = spark.range(n).selectExpr("id", "uuid() AS payload")
    with build_payload(df, max_payload_mb=CAP_MB) as payload:
        assert len(payload.parts) > 1
        ids = sorted(r[0] for p in payload.parts for r in read_rows(p.path, "Extract"))
        assert ids == list(range(n))
        with pytest.raises(InvalidActionBatchError, match="a replace needs the whole table"):
            payload.validate([Replace(target_table="Extract", source_table="Extract")])
        payload.validate([Insert(target_table="Extract", source_table="Extract")])


def test_long_texts_are_planned_under_the_cap_from_the_first_estimate(
    spark: SparkSession, caplog: pytest.LogCaptureFixture
) -> None:
    # Each row holds ~2 KB of text that Hyper cannot compress much: the split plan must count
    # the text's bytes, or the parts come out over the cap and are halved (a warning, and a
    # payload that depends on Hyper's file sizes rather than on the data alone).
    n, cap_mb = 3_000, 1.0
    text = ", ".join(f"sha2(CAST(id * {k + 1} AS STRING), 512)" for k in range(16))
    df = spark.range(n).selectExpr("id", f"concat({text}) AS payload")
    with caplog.at_level(logging.INFO, logger="tabhyper_update.build"):
        payload = build_payload(df, max_payload_mb=cap_mb)
    with payload:
        assert len(payload.parts) > 4
        assert all(p.size_bytes <= cap_mb * 1024 * 1024 for p in payload.parts)
        ids = sorted(r[0] for p in payload.parts for r in read_rows(p.path, "Extract"))
        assert ids == list(range(n))
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_single_unsplittable_unit_over_the_cap_fails_clearly(
    spark: SparkSession, tmp_path: Path
) -> None:
    df = spark.range(2000).selectExpr("1 AS id", "uuid() AS payload", "'U' AS op", "id AS seq")
    with pytest.raises(PayloadError, match="cannot be split under max_payload_mb"):
        build_payload(
            df.selectExpr("id", "payload", "op", "seq"),
            ChangeSet("payload", op_column="op", order_by="seq"),
            max_payload_mb=0.0001,
            output_dir=tmp_path,
        )
    assert list(tmp_path.iterdir()) == []


def test_files_are_private_and_removed(spark: SparkSession, tmp_path: Path) -> None:
    stage = tmp_path / "stage"
    df = spark.createDataFrame([(1, "a")], "id int, v string")
    with build_payload(df, staging_dir=stage) as payload:
        path = payload.parts[0].path
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert not list(path.parent.glob("*.tmp"))
        assert list(stage.iterdir()) == []  # staging removed as soon as the payload is built
    assert not path.exists()
    assert not path.parent.exists()


def test_keep_files_keeps_them(spark: SparkSession, tmp_path: Path) -> None:
    df = spark.createDataFrame([(1, "a")], "id int, v string")
    with build_payload(df, keep_files=True, output_dir=tmp_path) as payload:
        path = payload.parts[0].path
    assert path.exists()


def validate_problems(payload: Any, actions: list[Any]) -> str:
    with pytest.raises(InvalidActionBatchError) as caught:
        payload.validate(actions)
    return str(caught.value)


def test_validate_checks_the_batch_against_the_payload(spark: SparkSession) -> None:
    df = spark.createDataFrame(
        [(1, "a", "U", 1), (2, "b", "D", 1)], "id int, v string, op string, seq int"
    )
    with build_payload(df, ChangeSet("id", op_column="op", order_by="seq")) as payload:
        text = validate_problems(payload, [Insert(target_table="T", source_table="nope")])
        assert "$.actions[0].source-table: the payload has no table 'nope'" in text
        assert "'upserts'" in text
        text = validate_problems(
            payload, [Update(target_table="T", source_table="upserts", condition=keys_match("key"))]
        )
        assert "source column(s) 'key' are not in payload table 'upserts'" in text
        text = validate_problems(
            payload, [Delete(target_table="T", source_table="upserts", condition=keys_match("id"))]
        )
        assert "may hold only the columns its condition names; 'upserts' also has 'v'" in text
        text = validate_problems(
            payload, [Insert(target_table="T", source_table="upserts", source_schema="public")]
        )
        assert "in schema 'Extract', not 'public'" in text
        # A delete by constant reads nothing from the payload.
        payload.validate([Delete(target_table="T", condition=target("v") == "x")])


def test_validate_refuses_empty_sources(spark: SparkSession) -> None:
    full = spark.createDataFrame([(1,)], "id int")
    empty = spark.createDataFrame([], "id int")
    with build_payload({"full": full, "empty": empty}) as payload:
        assert payload.tables["empty"].row_count == 0
        text = validate_problems(
            payload, [Upsert(target_table="T", source_table="empty", condition=keys_match("id"))]
        )
        assert "payload table 'empty' holds no rows: nothing to upsert" in text


def test_all_empty_plain_payload_is_a_no_op(spark: SparkSession) -> None:
    payload = build_payload(spark.createDataFrame([], "id int"))
    assert payload.is_empty


def test_non_dataframe_input_is_refused() -> None:
    with pytest.raises(PayloadError, match="expected a Spark DataFrame, got list"):
        build_payload([1, 2, 3])  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match="max_payload_mb must be positive"):
        build_payload({}, max_payload_mb=0)


def test_files_nobody_cleaned_up_go_with_the_payload(spark: SparkSession) -> None:
    import gc

    payload = build_payload(spark.createDataFrame([(1,)], "id int"))
    directory = payload.parts[0].path.parent
    assert directory.exists()
    del payload
    gc.collect()
    assert not directory.exists()

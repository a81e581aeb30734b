"""staging="driver": the rows come to the driver as Arrow batches instead of through a shared
folder, and the payload is the same (tables, row counts, digests, so the same identity)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tabhyper_update import ChangeSet, ConfigurationError, build_payload
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


@pytest.mark.parametrize("cap", [None, 0.2])
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
    assert driver.digest == shared.digest
    assert {n: (t.row_count, t.row_digest) for n, t in driver.tables.items()} == {
        n: (t.row_count, t.row_digest) for n, t in shared.tables.items()
    }
    assert len(driver.parts) == len(shared.parts)
    for a, b in zip(driver.parts, shared.parts, strict=True):
        for table in ("upserts", "deletes"):
            assert sorted(read_table(a.path, table)) == sorted(read_table(b.path, table))
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

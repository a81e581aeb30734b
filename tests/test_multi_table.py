"""Multi-table change sets: a star schema's changes (each table with its own key) applied in one
update, tables without changes left out rather than refused; and the same through the sink."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import (
    ChangeSet,
    Payload,
    PayloadError,
    PersonalAccessToken,
    TableauClient,
    build_payload,
)
from tabhyper_update.streaming import TableauSink
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table
from tabhyper_update.values.errors import ArgumentTypeError, InvalidArgumentError

from ._streaming import PAT, run_query, write_batch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

FACTS = "sale_id BIGINT, customer_id BIGINT, amount INT, op STRING, seq BIGINT"
DIMS = "customer_id BIGINT, name STRING, op STRING, seq BIGINT"
SETS = {
    "Sales": ChangeSet("sale_id", op_column="op", order_by="seq"),
    "Customers": ChangeSet("customer_id", op_column="op", order_by="seq"),
}


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[tuple[FakeTableauServer, TableauClient, str]]:
    start = make_hyper(
        tmp_path / "start.hyper",
        {
            "Sales": (
                "sale_id BIGINT NOT NULL, customer_id BIGINT, amount INTEGER",
                ["(1, 10, 100)", "(2, 20, 200)"],
            ),
            "Customers": ("customer_id BIGINT NOT NULL, name TEXT", ["(10, 'Ann')", "(20, 'Bo')"]),
        },
    )
    with FakeTableauServer(pats=dict([PAT]), directory=tmp_path / "server") as server:
        luid = server.add_datasource("Shop", start)
        with TableauClient(server.url, "", PersonalAccessToken(*PAT)) as client:
            yield server, client, luid


def frames(spark: SparkSession, sales: list[Any], customers: list[Any]) -> dict[str, DataFrame]:
    return {
        "Sales": spark.createDataFrame(sales, FACTS),
        "Customers": spark.createDataFrame(customers, DIMS),
    }


def test_a_star_schema_applies_in_one_update(
    spark: SparkSession, shop: tuple[FakeTableauServer, TableauClient, str]
) -> None:
    server, client, luid = shop
    changes = frames(
        spark,
        [(2, 20, 250, "U", 1), (3, 30, 300, "I", 2), (1, None, None, "D", 3)],
        [(30, "Cy", "I", 1), (20, "Bo2", "U", 2), (10, None, "D", 3)],
    )
    with build_payload(changes, SETS) as payload:
        assert sorted(payload.tables) == [
            "Customers_deletes",
            "Customers_upserts",
            "Sales_deletes",
            "Sales_upserts",
        ]
        batch = payload.derived_actions()
        assert [(a.action, a.target_table, a.source_table) for a in batch.actions] == [
            ("delete", "Sales", "Sales_deletes"),
            ("upsert", "Sales", "Sales_upserts"),
            ("delete", "Customers", "Customers_deletes"),
            ("upsert", "Customers", "Customers_upserts"),
        ]
        result = client.update_datasource("Shop", payload)
    assert len(result.parts) == 1
    path = server.datasource_path(luid)
    assert read_table(path, "Sales") == [(2, 20, 250), (3, 30, 300)]
    assert read_table(path, "Customers") == [(20, "Bo2"), (30, "Cy")]
    assert server.backend.jobs_run[luid] == 1


def test_a_table_without_changes_is_left_out_not_refused(
    spark: SparkSession, shop: tuple[FakeTableauServer, TableauClient, str]
) -> None:
    server, client, luid = shop
    changes = frames(spark, [(3, 10, 30, "I", 1)], [])
    with build_payload(changes, SETS) as payload:
        assert sorted(payload.tables) == ["Sales_upserts"]
        client.update_datasource("Shop", payload)
    path = server.datasource_path(luid)
    assert read_table(path, "Sales") == [(1, 10, 100), (2, 20, 200), (3, 10, 30)]
    assert read_table(path, "Customers") == [(10, "Ann"), (20, "Bo")]


def test_the_mapping_must_match_the_tables(spark: SparkSession, tmp_path: Path) -> None:
    changes = frames(spark, [(3, 10, 30, "I", 1)], [])
    with pytest.raises(PayloadError, match="no ChangeSet for table\\(s\\) 'Customers'"):
        build_payload(changes, {"Sales": SETS["Sales"]}, staging_dir=tmp_path)
    with pytest.raises(PayloadError, match="no DataFrame for change set\\(s\\) 'Returns'"):
        build_payload(changes, {**SETS, "Returns": SETS["Sales"]}, staging_dir=tmp_path)
    with pytest.raises(PayloadError, match="one ChangeSet reads one DataFrame"):
        build_payload(changes, SETS["Sales"], staging_dir=tmp_path)
    clash = {
        "Sales": ChangeSet("sale_id", op_column="op", order_by="seq", upsert_table="u"),
        "Customers": ChangeSet("customer_id", op_column="op", order_by="seq", upsert_table="u"),
    }
    with pytest.raises(PayloadError, match="both write payload table 'u'"):
        build_payload(changes, clash, staging_dir=tmp_path)
    with pytest.raises(ArgumentTypeError, match="change set 'Sales': expected a ChangeSet"):
        build_payload(changes, {"Sales": "sale_id", "Customers": SETS["Customers"]})  # type: ignore[dict-item]
    assert list(tmp_path.iterdir()) == []


def test_an_error_in_one_table_names_it(spark: SparkSession, tmp_path: Path) -> None:
    changes = frames(spark, [(3, 10, 30, "I", 1)], [(None, "x", "I", 1)])
    with pytest.raises(PayloadError, match="table 'Customers': key column 'customer_id' is NULL"):
        build_payload(changes, SETS, staging_dir=tmp_path)
    bad = {**SETS, "Customers": ChangeSet("nope", op_column="op", order_by="seq")}
    with pytest.raises(PayloadError, match="table 'Customers': key column 'nope'"):
        build_payload(changes, bad, staging_dir=tmp_path)


def test_a_target_table_is_refused_and_the_manifest_round_trips(
    spark: SparkSession, tmp_path: Path
) -> None:
    changes = frames(spark, [(3, 10, 30, "I", 1)], [(30, "Cy", "I", 1)])
    payload = build_payload(changes, SETS, output_dir=tmp_path / "out", keep_files=True)
    with pytest.raises(InvalidArgumentError, match="multi-table change set"):
        payload.derived_actions(target_table="Sales")
    payload.save_manifest()
    loaded = Payload.load(payload.parts[0].path.parent)
    assert loaded.change_sets == payload.change_sets
    assert loaded.digest == payload.digest
    assert loaded.derived_actions() == payload.derived_actions()


def test_a_multi_table_stream_through_the_sink(
    spark: SparkSession, tmp_path: Path, shop: tuple[FakeTableauServer, TableauClient, str]
) -> None:
    server, client, luid = shop
    # One feed for both tables, told apart by a ``table`` column.
    schema = (
        "table STRING, sale_id BIGINT, customer_id BIGINT, amount INT, name STRING, "
        "op STRING, seq BIGINT"
    )

    def line(**values: Any) -> str:
        import json

        return json.dumps(values)

    write_batch(
        tmp_path / "in",
        0,
        [
            line(table="Sales", sale_id=3, customer_id=30, amount=300, op="I", seq=1),
            line(table="Customers", customer_id=30, name="Cy", op="I", seq=2),
        ],
    )
    write_batch(tmp_path / "in", 1, [line(table="Sales", sale_id=1, op="D", seq=3)])

    def split(batch: DataFrame) -> dict[str, DataFrame]:
        return {
            "Sales": batch.filter("table = 'Sales'").select(
                "sale_id", "customer_id", "amount", "op", "seq"
            ),
            "Customers": batch.filter("table = 'Customers'").select(
                "customer_id", "name", "op", "seq"
            ),
        }

    sink = TableauSink("Shop", SETS, client=client, prepare=split, state_dir=tmp_path / "state")
    run_query(spark, tmp_path / "in", tmp_path / "checkpoint", sink, schema=schema)
    path = server.datasource_path(luid)
    assert read_table(path, "Sales") == [(2, 20, 200), (3, 30, 300)]
    assert read_table(path, "Customers") == [(10, "Ann"), (20, "Bo"), (30, "Cy")]
    assert server.backend.jobs_run[luid] == 2

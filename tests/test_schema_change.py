"""A source whose schema changed under a running pipeline: ``on_schema_change`` fails (one
error naming every column, nothing sent), leaves out the columns the data source lacks, or
republishes from a snapshot and goes on."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tabhyper_update import (
    ChangeSet,
    Republish,
    TableauClient,
    TableauSink,
    build_payload,
)
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import read_table
from tabhyper_update.update.state import StateStore
from tabhyper_update.values.errors import InvalidArgumentError, SchemaDriftError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

BY_ID = ChangeSet("id", op_column="op", order_by="seq")
#: The source gained a column ``tier`` the data source (id, name, qty) lacks.
WIDER = "id long, name string, qty int, tier string, op string, seq long"
CHANGES = [(4, "d", 40, "gold", "U", 1), (1, None, None, None, "D", 1), (2, "B", 21, "tin", "U", 1)]


def rows(server: FakeTableauServer) -> list[tuple[object, ...]]:
    (luid,) = server.backend.sources
    return read_table(server.datasource_path(luid), "Extract")


def wider(spark: SparkSession) -> DataFrame:
    return spark.createDataFrame(CHANGES, WIDER)


def test_fail_names_every_column_and_sends_nothing(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    with pytest.raises(SchemaDriftError, match="lacks 'tier'"):
        client.update_datasource(
            "Orders", build_payload(wider(spark), BY_ID), state_dir=tmp_path, progress=False
        )
    assert server.counts["update"] == 0
    assert rows(server) == [(1, "a", 10), (2, "b", 20), (3, "c", 30)]


def test_ignore_leaves_out_the_columns_the_data_source_lacks_and_says_which(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        result = client.update_datasource(
            "Orders",
            build_payload(wider(spark), BY_ID),
            state_dir=tmp_path,
            progress=False,
            on_schema_change="ignore",
            verify=True,
        )
    assert result.done
    assert result.readback is not None
    assert result.readback.ok
    assert "lacks column(s) of the payload, left out of this update" in caplog.text
    assert "'tier'" in caplog.text
    assert rows(server) == [(2, "B", 21), (3, "c", 30), (4, "d", 40)]
    # The same update again is the same update (its parts are rewritten the same way).
    again = client.update_datasource(
        "Orders",
        build_payload(wider(spark), BY_ID),
        state_dir=tmp_path,
        progress=False,
        on_schema_change="ignore",
    )
    assert again.deduplicated


def test_ignore_after_upload_sends_the_part_without_the_columns_left_out(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The README's chain: upload() uploads part 1 (with 'tier') before apply() knows the
    # policy; that upload must not be the one sent.
    bound = build_payload(wider(spark), BY_ID).upload(
        "Orders", client=client, state_dir=tmp_path, progress=False
    )
    assert server.counts["append"] >= 1
    with caplog.at_level(logging.WARNING):
        result = bound.apply(on_schema_change="ignore")
    assert result.done
    assert "holds the columns on_schema_change left out: it is not sent" in caplog.text
    assert rows(server) == [(2, "B", 21), (3, "c", 30), (4, "d", 40)]
    # The update's record says so too (what `tabhyper-update status` reads).
    (record,) = StateStore(tmp_path).records()
    assert any("it is not sent" in note for note in record.notes)


def test_ignore_does_not_hide_a_type_that_changed(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    changed = spark.createDataFrame(
        [(4, "d", "forty", "U", 1)], "id long, name string, qty string, op string, seq long"
    )
    with pytest.raises(SchemaDriftError, match="qty"):
        client.update_datasource(
            "Orders",
            build_payload(changed, BY_ID),
            state_dir=tmp_path,
            progress=False,
            on_schema_change="ignore",
        )
    assert server.counts["update"] == 0


def test_republish_replaces_the_data_source_from_the_snapshot_and_goes_on(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    # The source table now, with the new column: what the snapshot reads.
    table = [(2, "B", 21, "tin"), (3, "c", 30, None), (4, "d", 40, "gold")]
    snapshot = spark.createDataFrame(table, "id long, name string, qty int, tier string")
    (luid,) = server.backend.sources
    result = client.update_datasource(
        "Orders",
        build_payload(wider(spark), BY_ID),
        state_dir=tmp_path,
        progress=False,
        on_schema_change=Republish(lambda: snapshot),
    )
    assert result.republished
    assert not result.empty
    assert "republished from the snapshot" in str(result)
    assert result.metrics()["republished"] is True
    assert server.counts["update"] == 0  # the snapshot holds this update's changes
    assert list(server.backend.sources) == [luid]  # the same data source, replaced whole
    assert rows(server) == table
    # The feed goes on against the new schema.
    later = spark.createDataFrame([(5, "e", 50, "new", "U", 2)], WIDER)
    client.update_datasource(
        "Orders", build_payload(later, BY_ID), state_dir=tmp_path, progress=False
    )
    assert rows(server)[-1] == (5, "e", 50, "new")


def test_the_sink_takes_the_policy_and_refuses_an_unknown_one(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    with pytest.raises(InvalidArgumentError, match="on_schema_change"):
        TableauSink("Orders", BY_ID, client=client, on_schema_change="append_new_columns")
    sink = TableauSink(
        "Orders",
        BY_ID,
        client=client,
        state_dir=tmp_path,
        sink_id="orders-feed",
        on_schema_change="ignore",
    )
    sink(wider(spark), 0)
    assert rows(server) == [(2, "B", 21), (3, "c", 30), (4, "d", 40)]

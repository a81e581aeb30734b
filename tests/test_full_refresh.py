"""A stream that starts over from batch 0, as a declarative pipeline's full refresh runs it
(Spark's ``pyspark.pipelines``, Databricks' ``foreach_batch_sink``: the flow's checkpoint is
cleared, so a new query reads the whole source again from its first batch). Told apart from
a restart (the same query, from its checkpoint) and from a second query (not at batch 0): by
default refused before anything is sent, naming it; with ``on_full_refresh="replace"`` the
refreshed stream's first batch is published over the data source (rows the refreshed source
no longer has are gone), and its later batches update it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import ChangeSet, ConfigurationError
from tabhyper_update.errors import InvalidArgumentError
from tabhyper_update.streaming import TableauSink
from tabhyper_update.testing.files import make_hyper, read_table

from ._streaming import TABLE_DDL, run_query, start_rows, write_batch
from ._util import client_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tabhyper_update.testing import FakeTableauServer


@pytest.fixture
def target_file(tmp_path: Path) -> Path:
    return make_hyper(tmp_path / "start.hyper", {"Extract": (TABLE_DDL, start_rows())})


def table(server: FakeTableauServer) -> list[tuple[Any, ...]]:
    server.wait_idle()
    (luid,) = [ds.id for ds in server.backend.sources.values() if ds.name == "Orders"]
    return sorted(read_table(server.datasource_path(luid), "Extract"))


def sink(server: FakeTableauServer, tmp_path: Path, **options: Any) -> TableauSink:
    return TableauSink(
        "Orders",
        ChangeSet("id", op_column="op", order_by="seq"),
        client=client_for(server),
        target_table="Extract",
        state_dir=tmp_path / "state",
        sink_id="orders",
        **options,
    )


def test_a_stream_started_over_is_refused_or_replaces_the_tables(
    spark: SparkSession, server: FakeTableauServer, tmp_path: Path
) -> None:
    first = tmp_path / "first"
    write_batch(first, 0, [(1, "a1", 11, "U", 1), (2, None, None, "D", 2)])
    run_query(spark, first, tmp_path / "cp-first", sink(server, tmp_path))
    assert table(server) == [(1, "a1", 11), (3, "c", 30)]
    # The same query again from its checkpoint (a restart) with a new batch: applied.
    write_batch(first, 1, [(4, "d", 40, "U", 3)])
    run_query(spark, first, tmp_path / "cp-first", sink(server, tmp_path))
    assert table(server) == [(1, "a1", 11), (3, "c", 30), (4, "d", 40)]

    # A full refresh: a new checkpoint, the source read again from the start, which no
    # longer holds keys 3 and 4.
    refreshed = tmp_path / "refreshed"
    write_batch(refreshed, 0, [(1, "r1", 1, "U", 10), (5, "r5", 5, "U", 11)])
    with pytest.raises(Exception) as caught:  # the query's error wraps the SDK's
        run_query(spark, refreshed, tmp_path / "cp-refresh", sink(server, tmp_path))
    assert "starts over at batch 0" in str(caught.value)
    assert "on_full_refresh='replace'" in str(caught.value)
    assert table(server) == [(1, "a1", 11), (3, "c", 30), (4, "d", 40)]  # nothing sent

    replacing = sink(server, tmp_path, on_full_refresh="replace")
    run_query(spark, refreshed, tmp_path / "cp-refresh-2", replacing)
    assert table(server) == [(1, "r1", 1), (5, "r5", 5)]
    # Its later batches update the data source as usual, restarts included.
    write_batch(refreshed, 1, [(6, "r6", 6, "U", 12), (1, None, None, "D", 13)])
    run_query(spark, refreshed, tmp_path / "cp-refresh-2", replacing)
    assert table(server) == [(5, "r5", 5), (6, "r6", 6)]
    run_query(spark, refreshed, tmp_path / "cp-refresh-2", sink(server, tmp_path))
    assert table(server) == [(5, "r5", 5), (6, "r6", 6)]


def test_a_second_query_not_at_batch_zero_is_refused_as_before(
    spark: SparkSession, server: FakeTableauServer, tmp_path: Path
) -> None:
    """Not a refresh: a query that does not start at batch 0 (its checkpoint moved) claims a
    sink id another query owns; replace is not taken for it."""
    from tabhyper_update.streaming.claims import claim_sink

    folder = tmp_path / "state" / "sinks"
    claim_sink(folder, "orders", "query-a", reset=False, batch_id=0)
    called: list[int] = []
    with pytest.raises(ConfigurationError, match="belongs to streaming query query-a"):
        claim_sink(
            folder, "orders", "query-b", reset=False, batch_id=7, refresh=lambda: called.append(1)
        )
    assert called == []


def test_replace_needs_a_change_set(server: FakeTableauServer, tmp_path: Path) -> None:
    from tabhyper_update import Insert

    with pytest.raises(InvalidArgumentError, match="on_full_refresh='replace'"):
        TableauSink(
            "Orders",
            actions=[Insert(target_table="Extract", source_table="Extract")],
            client=client_for(server),
            state_dir=tmp_path / "state",
            on_full_refresh="replace",
        )
    with pytest.raises(InvalidArgumentError, match="on_full_refresh"):
        sink(server, tmp_path, on_full_refresh="truncate")

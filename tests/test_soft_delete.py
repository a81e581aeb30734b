"""Soft deletes (``ChangeSet(soft_delete=...)``): a delete flags the row and dates it instead
of removing it, a later insert of the key clears the flag; with and without history mode,
over deliveries with a crash in each, checked against a model of the source."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import ChangeSet, build_payload
from tabhyper_update.errors import ConfigurationError
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table
from tabhyper_update.types import SoftDelete

from ._util import PAT, RERUN_CRASHES, client_for, update_after_a_crash

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CHANGES = "id long, name string, op string, seq long"
Change = tuple[int, str | None, str, int]

#: Deliveries: a row deleted, inserted again and deleted again; a key inserted and deleted
#: within one delivery; a delete of a key the data source never held.
BATCHES: list[list[Change]] = [
    [(1, "a", "I", 1), (2, "b", "I", 2), (3, "c", "I", 3), (4, "d", "I", 4), (4, None, "D", 5)],
    [(1, None, "D", 6), (2, "b2", "U", 7), (9, None, "D", 8)],
    [(1, "a2", "I", 9), (3, None, "D", 10), (2, None, "D", 11), (2, "b3", "I", 12)],
    [(1, None, "D", 13), (3, "c2", "I", 14)],
]


def soft_model(batches: list[list[Change]]) -> list[tuple[Any, ...]]:
    """(id, name, deleted, deleted at) per key: each delivery's last change per key wins; a
    delete flags the row the data source holds (a key it never held stays absent)."""
    held: dict[int, tuple[Any, ...]] = {}
    for batch in batches:
        last = {c[0]: c for c in sorted(batch, key=lambda c: c[3])}
        for key, name, op, seq in last.values():
            if op != "D":
                held[key] = (key, name, False, None)
            elif key in held:
                held[key] = (*held[key][:2], True, seq)
    return sorted(held.values())


def history_model(changes: list[Change]) -> list[tuple[Any, ...]]:
    """Every version: (id, name, valid from, valid to, current, deleted, deleted at)."""
    versions: list[list[Any]] = []
    current: dict[int, list[Any]] = {}
    for key, name, op, seq in sorted(changes, key=lambda c: c[3]):
        if key in current:
            ended = current.pop(key)
            ended[3:7] = [seq, False, op == "D", seq if op == "D" else None]
        if op != "D":
            current[key] = [key, name, seq, None, True, False, None]
            versions.append(current[key])
    return sorted(tuple(v) for v in versions)


def deliver(
    spark: SparkSession, tmp_path: Path, spec: ChangeSet, ddl: str, semantics: str = "hyper"
) -> tuple[FakeTableauServer, str, list[list[tuple[Any, ...]]]]:
    """Each delivery sent by a job killed once, then run again; the rows after each."""
    state = tmp_path / "state"
    after: list[list[tuple[Any, ...]]] = []
    start = make_hyper(tmp_path / "start.hyper", {"Extract": (ddl, [])})
    with FakeTableauServer(pats=dict([PAT]), semantics=semantics) as server:
        luid = server.add_datasource("Orders", start)
        server.remember_probe(state)
        for batch, crash in zip(BATCHES, RERUN_CRASHES, strict=True):
            with build_payload(spark.createDataFrame(batch, CHANGES), spec) as payload:
                update_after_a_crash(server, payload, state, crash)
            after.append(sorted(read_table(server.datasource_path(luid), "Extract")))
        # The last delivery run again by a server that forgot it: nothing changes.
        server.forget_jobs()
        with (
            build_payload(spark.createDataFrame(BATCHES[-1], CHANGES), spec) as payload,
            client_for(server) as client,
        ):
            client.update_datasource("Orders", payload, state_dir=tmp_path / "other")
        after.append(sorted(read_table(server.datasource_path(luid), "Extract")))
    return server, luid, after


@pytest.mark.parametrize("semantics", ["hyper", "strict"])
def test_deletes_flag_rows_over_four_deliveries_with_a_crash_in_each(
    spark: SparkSession, tmp_path: Path, semantics: str
) -> None:
    spec = ChangeSet("id", op_column="op", order_by="seq", soft_delete=True)
    ddl = "id BIGINT NOT NULL, name TEXT, _deleted BOOLEAN, _deleted_at BIGINT"
    _, _, after = deliver(spark, tmp_path, spec, ddl, semantics)
    for i, rows in enumerate(after[:-1]):
        assert rows == soft_model(BATCHES[: i + 1])
    assert after[-1] == after[-2]
    # Key 1: deleted, inserted again, deleted again, its last values kept.
    assert after[-1][0] == (1, "a2", True, 13)
    # Key 4 was inserted and deleted within one delivery: the data source never held it.
    assert all(row[0] != 4 for row in after[-1])


@pytest.mark.parametrize("semantics", ["hyper", "strict"])
def test_with_history_a_delete_flags_the_version_it_ends(
    spark: SparkSession, tmp_path: Path, semantics: str
) -> None:
    spec = ChangeSet("id", op_column="op", order_by="seq", history=True, soft_delete=True)
    ddl = (
        "id BIGINT NOT NULL, name TEXT, _valid_from BIGINT, _valid_to BIGINT, "
        "_is_current BOOLEAN, _deleted BOOLEAN, _deleted_at BIGINT"
    )
    _, _, after = deliver(spark, tmp_path, spec, ddl, semantics)
    seen: list[Change] = []
    for batch, rows in zip(BATCHES, after, strict=False):
        seen += batch
        assert rows == history_model(seen)
    assert after[-1] == after[-2]
    # Key 4, inserted and deleted within one delivery, is kept as the version it was.
    assert (4, "d", 4, 5, False, True, 5) in after[-1]


def test_soft_deletes_with_the_user_s_names_and_dates(spark: SparkSession, tmp_path: Path) -> None:
    spec = ChangeSet(
        "id",
        op_column="op",
        order_by="seq",
        soft_delete=SoftDelete(deleted="gone", deleted_at="gone_at", at="at"),
    )
    ddl = "id BIGINT NOT NULL, name TEXT, at DATE, gone BOOLEAN, gone_at DATE"
    start = make_hyper(tmp_path / "start.hyper", {"Extract": (ddl, [])})
    feeds = [
        [(1, "a", "I", 1, "2026-01-01"), (2, "b", "I", 2, "2026-01-02")],
        [(1, None, "D", 3, "2026-02-03")],
    ]
    with FakeTableauServer(pats=dict([PAT])) as server:
        luid = server.add_datasource("Orders", start)
        server.remember_probe(tmp_path / "state")
        with client_for(server) as client:
            for feed in feeds:
                df = spark.createDataFrame(
                    feed, "id long, name string, op string, seq long, at string"
                ).selectExpr("id", "name", "op", "seq", "CAST(at AS DATE) AS at")
                with build_payload(df, spec) as payload:
                    client.update_datasource("Orders", payload, state_dir=tmp_path / "state")
        got = sorted(read_table(server.datasource_path(luid), "Extract"))
    assert [(r[0], r[1], str(r[2]), r[3], str(r[4])) for r in got] == [
        (1, "a", "2026-01-01", True, "2026-02-03"),
        (2, "b", "2026-01-02", False, "None"),
    ]


def test_soft_deletes_are_sent_only_where_a_probe_showed_left_out_columns_kept(
    spark: SparkSession, tmp_path: Path
) -> None:
    start = make_hyper(
        tmp_path / "start.hyper",
        {"Extract": ("id BIGINT NOT NULL, name TEXT, _deleted BOOLEAN, _deleted_at BIGINT", [])},
    )
    spec = ChangeSet("id", op_column="op", order_by="seq", soft_delete=True)
    with FakeTableauServer(pats=dict([PAT]), partial_update="null") as server:
        server.add_datasource("Orders", start)
        server.remember_probe(tmp_path / "state")
        with (
            build_payload(spark.createDataFrame(BATCHES[0], CHANGES), spec) as payload,
            client_for(server) as client,
            pytest.raises(ConfigurationError, match="found partial_update 'null'"),
        ):
            client.update_datasource("Orders", payload, state_dir=tmp_path / "state")
        assert server.counts["initiate"] == 0


def test_a_guarded_soft_delete_refuses_an_older_delivery(
    spark: SparkSession, tmp_path: Path
) -> None:
    from tabhyper_update.errors import OutOfOrderError

    ddl: dict[str, tuple[str, list[str]]] = {
        "Extract": ("id BIGINT NOT NULL, name TEXT, _deleted BOOLEAN, _deleted_at BIGINT", []),
        "Extract_positions": ("id BIGINT NOT NULL, seq BIGINT, guarded BOOLEAN NOT NULL", []),
    }
    start = make_hyper(tmp_path / "start.hyper", ddl)
    spec = ChangeSet("id", op_column="op", order_by="seq", soft_delete=True, guard=True)
    state = tmp_path / "state"
    with FakeTableauServer(pats=dict([PAT])) as server, client_for(server) as client:
        luid = server.add_datasource("Orders", start)
        server.remember_probe(state)
        for batch in (BATCHES[0], BATCHES[1]):
            with build_payload(spark.createDataFrame(batch, CHANGES), spec) as payload:
                client.update_datasource("Orders", payload, state_dir=state)
        server.forget_jobs()  # the first delivery sent again is run again, not deduplicated
        with (
            build_payload(spark.createDataFrame(BATCHES[0], CHANGES), spec) as payload,
            pytest.raises(OutOfOrderError),
        ):
            client.update_datasource("Orders", payload, state_dir=tmp_path / "other")
        got = sorted(read_table(server.datasource_path(luid), "Extract"))
    assert got == soft_model(BATCHES[:2])


def test_a_quarantine_beside_soft_deletes_keeps_the_key_as_it_was(
    spark: SparkSession, tmp_path: Path
) -> None:
    start = make_hyper(
        tmp_path / "start.hyper",
        {
            "Extract": (
                "id BIGINT NOT NULL, name TEXT NOT NULL, _deleted BOOLEAN, _deleted_at BIGINT",
                ["(1, 'a', false, NULL)", "(2, 'b', false, NULL)"],
            )
        },
    )
    spec = ChangeSet("id", op_column="op", order_by="seq", soft_delete=True)
    feed = [(1, None, "U", 5), (2, None, "D", 6), (3, "c", "I", 7)]
    state = tmp_path / "state"
    with FakeTableauServer(pats=dict([PAT])) as server, client_for(server) as client:
        luid = server.add_datasource("Orders", start)
        server.remember_probe(state)
        with build_payload(
            spark.createDataFrame(feed, CHANGES),
            spec,
            on_bad_rows="quarantine",
            quarantine=tmp_path / "q",
            target_columns="id BIGINT NOT NULL, name TEXT NOT NULL",
        ) as payload:
            assert payload.quarantined is not None
            assert payload.quarantined.keys == ((1,),)
            client.update_datasource("Orders", payload, state_dir=state)
        got = sorted(read_table(server.datasource_path(luid), "Extract"))
    # Key 1's NULL name is set aside (it keeps its row); a delete carries its key alone, so
    # key 2 is flagged; key 3 is new.
    assert got == [(1, "a", False, None), (2, "b", True, 6), (3, "c", False, None)]

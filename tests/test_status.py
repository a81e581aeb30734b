"""``tabhyper-update status``: what the state folder knows, read without a request."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from tabhyper_update import (
    ApiError,
    ChangeSet,
    Insert,
    TableauClient,
    TableauSink,
    build_payload,
)
from tabhyper_update.cli import main
from tabhyper_update.testing import FakeTableauServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BY_ID = ChangeSet("id", op_column="op", order_by="seq")
DDL = "id long, name string, qty int, op string, seq long"


def update_one(
    spark: SparkSession, client: TableauClient, state: Path, **options: Any
) -> tuple[Any, str]:
    """Upsert key 4 into ``Orders`` with records in ``state``: the result and its job's id."""
    result = client.update_datasource(
        "Orders",
        build_payload(spark.createDataFrame([(4, "d", 40, "U", 1)], DDL), BY_ID),
        state_dir=state,
        progress=False,
        **options,
    )
    (job,) = [p.job.id for p in result.parts if p.job is not None]
    return result, job


def test_status_shows_the_last_update_what_is_unfinished_and_each_sink(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = tmp_path / "state"
    ddl = DDL
    _, job = update_one(spark, client, state)
    # An update whose request fails every time: its record stays, unfinished.
    server.inject("update", status=503, times=100)
    with pytest.raises(ApiError):
        client.update_datasource(
            "Orders",
            build_payload(spark.createDataFrame([(5, "e", 50, "U", 2)], ddl), BY_ID),
            state_dir=state,
            progress=False,
        )
    server.clear_faults()
    sink = TableauSink("Orders", BY_ID, client=client, state_dir=state, sink_id="orders-feed")
    sink(spark.createDataFrame([(6, "f", 60, "U", 3)], ddl), 0)
    counts_before = sum(server.counts.values())

    assert main(["status", "--state-dir", str(state), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert sum(server.counts.values()) == counts_before  # no request
    (orders,) = found["datasources"]
    assert orders["datasource_id"] == client.datasource("Orders").id
    assert orders["datasource"] == "Orders"
    assert orders["last_applied"]["jobs"]  # the sink's batch, applied last
    # Where the sink's batch ends: the change set's last order_by value.
    assert orders["last_applied"]["position"] == {"seq": 3}
    assert found["problems"] == []
    assert job not in orders["last_applied"]["jobs"]
    (unfinished,) = orders["unfinished"]
    assert unfinished["applied"] == 0
    assert unfinished["statuses"] == ["sending"]
    (feed,) = found["sinks"]
    assert feed["sink_id"] == "orders-feed"
    assert feed["last_batch"] == 0
    assert feed["counts"]["applied"] == 1

    assert main(["status", "--state-dir", str(state)]) == 0
    text = capsys.readouterr().out
    assert "last applied" in text
    assert "unfinished" in text
    assert "a re-run resumes it" in text
    assert "sink orders-feed: batch 0 applied" in text
    assert "data source 'Orders' (" in text
    assert 'position {"seq": 3}' in text

    # What it cannot read is named with the reason, and the exit code asks for a look;
    # nothing is changed.
    records = state / "records"
    first = sorted(records.glob("[0-9a-f]*.json"))[0]
    (records / ("f" * 64 + ".json")).symlink_to(first)
    (records / ("e" * 64 + ".json")).write_text(first.read_text()[:40])
    (state / "sinks" / "orders-feed.json").write_text('{"sink_id": "orders-fe')
    listing = sorted(p.name for p in records.iterdir())
    assert main(["status", "--state-dir", str(state), "--json"]) == 1
    problems = {
        Path(p["path"]).name: p["reason"] for p in json.loads(capsys.readouterr().out)["problems"]
    }
    assert "a symbolic link" in problems["f" * 64 + ".json"]
    assert "truncated" in problems["e" * 64 + ".json"]
    assert "truncated" in problems["orders-feed.json"]
    assert sorted(p.name for p in records.iterdir()) == listing
    # A records folder that is a link: refused, named, not silently empty.
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "records").symlink_to(records)
    assert main(["status", "--state-dir", str(linked)]) == 1
    out = capsys.readouterr().out
    assert f"could not read {linked / 'records'}: a symbolic link" in out
    assert "nothing in it was read" in out

    assert main(["status", "--state-dir", str(tmp_path / "empty")]) == 0
    assert "nothing recorded" in capsys.readouterr().out


@pytest.mark.parametrize("staging", ["auto", "shared"])  # ranked by Hyper, by Spark
def test_the_recorded_position_is_the_given_one_else_the_change_sets_last_else_the_batch(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    staging: Literal["auto", "shared"],
) -> None:
    state = tmp_path / "state"
    ddl = "id long, name string, qty int, op string, at timestamp"
    changes = ChangeSet("id", op_column="op", order_by="at")
    rows = [
        (4, "d", 40, "U", datetime(2026, 5, 1, 12, 0, 0)),
        (4, "e", 41, "U", datetime(2026, 5, 1, 12, 0, 9)),
        (7, None, None, "D", datetime(2026, 5, 1, 12, 0, 5)),
    ]
    payload = build_payload(spark.createDataFrame(rows, ddl), changes, staging=staging)
    assert payload.last_position == {"at": "2026-05-01T12:00:09+00:00"}

    def last_position() -> object:
        assert main(["status", "--state-dir", str(state), "--json"]) == 0
        (orders,) = json.loads(capsys.readouterr().out)["datasources"]
        return orders["last_applied"]["position"]

    client.update_datasource("Orders", payload, state_dir=state, progress=False)
    assert last_position() == {"at": "2026-05-01T12:00:09+00:00"}
    # The caller's own position wins.
    later = [(5, "f", 50, "U", datetime(2026, 5, 2))]
    client.update_datasource(
        "Orders",
        build_payload(spark.createDataFrame(later, ddl), changes, staging=staging),
        state_dir=state,
        progress=False,
        position={"offset": 1234},
    )
    assert last_position() == {"offset": 1234}
    # Kept by a saved payload (a build and an apply apart).
    saved = build_payload(spark.createDataFrame(rows[:1], ddl), changes, staging=staging)
    loaded = type(saved).load(saved.save_manifest(tmp_path / "payload"))
    assert loaded.last_position == {"at": "2026-05-01T12:00:00+00:00"}
    # A sink's batch without a change set: the batch.
    sink = TableauSink(
        "Orders",
        client=client,
        actions=[Insert(target_table="Extract", source_table="Extract")],
        state_dir=state,
        sink_id="plain-feed",
    )
    sink(spark.createDataFrame([(9, "i", 90)], "id long, name string, qty int"), 7)
    assert last_position() == {"sink_id": "plain-feed", "batch_id": 7}


def test_a_job_waited_for_from_the_command_line_is_no_longer_unfinished(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``apply --no-wait``, then ``job wait ID``: ``status`` shows the update applied, as a
    scheduler polling it expects, without running apply again."""
    from ._util import use_environment

    state = tmp_path / "state"
    use_environment(monkeypatch, server, tmp_path / "xdg", "Orders")
    _, job = update_one(spark, client, state, wait=False)
    assert main(["status", "--state-dir", str(state), "--json"]) == 0
    (before,) = json.loads(capsys.readouterr().out)["datasources"]
    assert len(before["unfinished"]) == 1
    assert main(["job", "wait", job, "--state-dir", str(state)]) == 0
    assert "succeeded" in capsys.readouterr().out
    assert main(["status", "--state-dir", str(state), "--json"]) == 0
    (after,) = json.loads(capsys.readouterr().out)["datasources"]
    assert after["unfinished"] == []
    assert job in json.dumps(after["last_applied"])

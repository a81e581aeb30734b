"""Two producers, one data source: an update that reaches the server after a later one never
leaves its older values (``ChangeSet(guard=True)``), and without the guard that is what
happens."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import ChangeSet, PayloadError, build_payload
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper
from tabhyper_update.values.errors import OutOfOrderError

from ._util import PAT, client_for, read_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tabhyper_update import TableauClient

CHANGES = "id long, v string, op string, seq long"
START = ["(1, 'start')", "(2, 'two')"]


@pytest.fixture(params=["hyper", "strict"])
def fake(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[FakeTableauServer]:
    yield from _served(tmp_path, request.param, job_delay=0.6)


@pytest.fixture(params=["hyper", "strict"])
def prompt(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[FakeTableauServer]:
    """The same data source on a server that runs each job at once."""
    yield from _served(tmp_path, request.param, job_delay=0.0)


def _served(tmp_path: Path, semantics: str, *, job_delay: float) -> Iterator[FakeTableauServer]:
    start = make_hyper(
        tmp_path / "start.hyper",
        {
            "Extract": ("id BIGINT NOT NULL, v TEXT", START),
            # Where each update records its keys' positions, deleted keys included.
            "Extract_positions": (
                "id BIGINT NOT NULL, seq BIGINT, guarded BOOLEAN NOT NULL",
                ["(1, 1, TRUE)", "(2, 1, TRUE)"],
            ),
        },
    )
    # A busy server (``job_delay``): each job waits in the queue, so a second producer's
    # update arrives while the first's is still queued. Under both semantics: the guard
    # rests on NOT NULL, which Hyper enforces, not on a stricter server.
    with FakeTableauServer(pats=dict([PAT]), job_delay=job_delay, semantics=semantics) as server:
        server.add_datasource("Orders", start)
        server.remember_probe(tmp_path / "probed")  # the guard is sent only where probed
        yield server


def rows(server: FakeTableauServer, table: str = "Extract") -> list[tuple[Any, ...]]:
    server.wait_idle()
    luid = next(d.id for d in server.backend.sources.values() if d.name == "Orders")
    return sorted(read_rows(server.datasource_path(luid), table))


def change(spark: SparkSession, *changes: tuple[int, str | None, str, int], guard: bool) -> Any:
    return build_payload(
        spark.createDataFrame(list(changes), CHANGES),
        ChangeSet("id", op_column="op", order_by="seq", guard=guard),
    )


def later_then_earlier(
    spark: SparkSession,
    client: TableauClient,
    tmp_path: Path,
    later: tuple[int, str | None, str, int],
    earlier: tuple[int, str | None, str, int],
    *,
    guard: bool,
) -> None:
    """The later position submitted first; the earlier one while it is queued."""
    first = client.update_datasource(
        "Orders",
        change(spark, later, guard=guard),
        wait=False,
        state_dir=tmp_path / "a",
        progress=False,
    )
    client.update_datasource(
        "Orders", change(spark, earlier, guard=guard), state_dir=tmp_path / "b", progress=False
    )
    first.wait()


def test_without_the_guard_the_older_update_wins_silently(
    spark: SparkSession, fake: FakeTableauServer, tmp_path: Path
) -> None:
    with client_for(fake) as client:
        later_then_earlier(
            spark, client, tmp_path, (1, "new", "U", 10), (1, "old", "U", 5), guard=False
        )
    assert rows(fake)[0][:2] == (1, "old")  # what the guard is for


def test_with_the_guard_the_older_update_is_refused_and_applies_nothing(
    spark: SparkSession, fake: FakeTableauServer, tmp_path: Path
) -> None:
    with client_for(fake) as client, pytest.raises(OutOfOrderError) as caught:
        later_then_earlier(
            spark, client, tmp_path, (1, "new", "U", 10), (1, "old", "U", 5), guard=True
        )
    assert rows(fake) == [(1, "new"), (2, "two")]
    assert rows(fake, "Extract_positions") == [(1, 10, True), (2, 1, True)]
    assert caught.value.guard_table == "upserts_guard"
    assert "applied nothing rather than leave an older value" in str(caught.value)


def test_a_key_a_later_update_deleted_is_not_inserted_again_by_an_older_one(
    spark: SparkSession, fake: FakeTableauServer, tmp_path: Path
) -> None:
    with client_for(fake) as client, pytest.raises(OutOfOrderError):
        later_then_earlier(
            spark, client, tmp_path, (1, None, "D", 10), (1, "old", "U", 5), guard=True
        )
    assert rows(fake) == [(2, "two")]  # no row holds key 1; its position still does
    assert rows(fake, "Extract_positions") == [(1, 10, True), (2, 1, True)]


def test_an_older_delete_is_refused_too(
    spark: SparkSession, fake: FakeTableauServer, tmp_path: Path
) -> None:
    with client_for(fake) as client, pytest.raises(OutOfOrderError):
        later_then_earlier(
            spark, client, tmp_path, (1, "new", "U", 10), (1, None, "D", 5), guard=True
        )
    assert rows(fake)[0] == (1, "new")


def test_updates_in_order_apply_with_the_guard(
    spark: SparkSession, fake: FakeTableauServer, tmp_path: Path
) -> None:
    with client_for(fake) as client:
        later_then_earlier(
            spark, client, tmp_path, (1, "mid", "U", 5), (2, None, "D", 7), guard=True
        )
        client.update_datasource(
            "Orders",
            change(spark, (1, "new", "U", 10), (3, "three", "U", 10), guard=True),
            state_dir=tmp_path / "c",
            progress=False,
        )
    assert rows(fake) == [(1, "new"), (3, "three")]
    assert rows(fake, "Extract_positions") == [(1, 10, True), (2, 7, True), (3, 10, True)]


def test_the_guard_needs_one_numeric_position_the_data_source_holds(
    spark: SparkSession, fake: FakeTableauServer, tmp_path: Path
) -> None:
    df = spark.createDataFrame([(1, "x", "U", 1, "a")], f"{CHANGES}, tag string")
    with pytest.raises(PayloadError, match="compares one position column"):
        build_payload(df, ChangeSet("id", op_column="op", order_by=["seq", "tag"], guard=True))
    with pytest.raises(PayloadError, match="to be a number, a date or a timestamp"):
        build_payload(df, ChangeSet("id", op_column="op", order_by="tag", guard=True))
    lacking = make_hyper(tmp_path / "lacking.hyper", {"Extract": ("id BIGINT, v TEXT", [])})
    fake.add_datasource("Lacking", lacking)
    # The data source's file (downloaded where the probe found its types exact) names its
    # tables: the positions' table is the one it lacks.
    with (
        client_for(fake) as client,
        pytest.raises(PayloadError, match="no table 'Extract_positions'"),
    ):
        client.update_datasource(
            "Lacking", change(spark, (1, "x", "U", 1), guard=True), progress=False
        )


def test_three_producers_in_random_order_end_with_each_keys_latest_position(
    spark: SparkSession, prompt: FakeTableauServer, tmp_path: Path
) -> None:
    """Nine change sets of three producers reach the server in a random order; a refused
    one is rebuilt from the data source's positions on (its stale keys dropped) and sent
    again. The data source ends as "each key's latest position wins, deleted keys absent",
    and its positions never go backwards."""
    rng = random.Random(50)
    keys = list(range(1, 13))
    changes: list[tuple[int, str | None, str, int]] = []
    for seq in range(2, 38):  # later than the start's positions (1)
        key = rng.choice(keys)
        deleted = rng.random() < 0.25
        changes.append((key, None if deleted else f"v{seq}", "D" if deleted else "U", seq))
    batches: list[list[tuple[int, str | None, str, int]]] = [[] for _ in range(9)]
    for i, c in enumerate(changes):
        batches[i % 9].append(c)
    rng.shuffle(batches)
    refused = 0
    seen: dict[int, int] = {1: 1, 2: 1}
    with client_for(prompt) as client:
        for n, batch in enumerate(batches):
            pending = batch
            for attempt in range(3):
                try:
                    client.update_datasource(
                        "Orders",
                        change(spark, *pending, guard=True),
                        state_dir=tmp_path / f"s{n}-{attempt}",
                        progress=False,
                    )
                    break
                except OutOfOrderError:
                    refused += 1
                    held = {k: p for k, p, _ in rows(prompt, "Extract_positions")}
                    pending = [c for c in pending if c[3] > held.get(c[0], 0)]
                    if not pending:
                        break
            positions = {k: p for k, p, _ in rows(prompt, "Extract_positions")}
            assert all(positions[k] >= p for k, p in seen.items()), "a position went back"
            seen = positions
    latest: dict[int, tuple[int, str | None, str, int]] = {}
    for c in changes:
        if c[0] not in latest or c[3] > latest[c[0]][3]:
            latest[c[0]] = c
    model: dict[int, tuple[int, str | None]] = {1: (1, "start"), 2: (2, "two")}
    for key, (_, v, op, _) in latest.items():
        if op == "D":
            model.pop(key, None)
        else:
            model[key] = (key, v)
    assert refused > 0, "no batch met the guard: the order did not test it"
    assert rows(prompt) == sorted(model.values())
    # Each key's latest position, deleted keys' included: where the guard reads it.
    positions = {1: 1, 2: 1, **{k: c[3] for k, c in latest.items()}}
    assert rows(prompt, "Extract_positions") == [(k, p, True) for k, p in sorted(positions.items())]


@pytest.mark.parametrize("keep", [(), ("seq",)])
def test_the_guard_changes_nothing_of_what_lands_in_the_data_table(
    spark: SparkSession, tmp_path: Path, keep: tuple[str, ...]
) -> None:
    """The guard's bookkeeping lives in the positions table: the user's rows land the same
    with it on or off, a position column the data source holds included (sent when
    ``keep_columns`` names it, left as it was when it does not)."""
    landed = {}
    for guard in (False, True):
        start = make_hyper(
            tmp_path / f"start-{guard}.hyper",
            {
                "Extract": ("id BIGINT NOT NULL, v TEXT, seq BIGINT", ["(1, 'old', 1)"]),
                "Extract_positions": (
                    "id BIGINT NOT NULL, seq BIGINT, guarded BOOLEAN NOT NULL",
                    ["(1, 1, TRUE)"],
                ),
            },
        )
        with FakeTableauServer(pats=dict([PAT])) as server:
            server.add_datasource("Orders", start)
            server.remember_probe(tmp_path / f"probed-{guard}")
            changes = ChangeSet(
                "id", op_column="op", order_by="seq", guard=guard, keep_columns=keep
            )
            frame = spark.createDataFrame([(1, "new", "U", 10), (2, "two", "I", 4)], CHANGES)
            with client_for(server) as client:
                client.update_datasource(
                    "Orders",
                    build_payload(frame, changes),
                    state_dir=tmp_path / f"state-{guard}",
                    progress=False,
                )
            landed[guard] = rows(server)
    assert landed[True] == landed[False]
    expected_seq = (10, 4) if keep else (1, None)
    assert landed[True] == [(1, "new", expected_seq[0]), (2, "two", expected_seq[1])]

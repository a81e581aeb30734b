"""The divergence oracle: seeded random histories of a keyed table (inserts, value updates with
NULLs, key moves one by one and ``SET id = id + 1`` over ranges, deletes, re-inserts, several
changes per key per step), recorded by the source the way real sources record them (a Delta
change data feed written by delta-rs; Debezium events in each connector's position format),
delivered every way the SDK takes changes (batch slices, payloads split into parts, a
streaming query with restarts, replays and a checkpoint reset, a source whose shape changes
mid-stream, two queries sharing a sink id, two producers whose slices arrive out of order),
decimal amounts drifted behind the SDK's back (found by ``reconcile``, undone by ``repair``),
and compared with a model of the source after
every step, against the fake server over HTTP.

``TABHYPER_ORACLE_SEED`` picks the seed (default 20); the ``slow`` runs take more histories.
Each run prints how many histories and steps it ran and how many divergences it found, and
appends that line to ``TABHYPER_ORACLE_REPORT`` when set.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tabhyper_update import (
    ChangeSet,
    Payload,
    PersonalAccessToken,
    TableauClient,
    build_payload,
    reconcile,
    repair,
)
from tabhyper_update.local.hyper import connect
from tabhyper_update.streaming import Debezium, TableauSink
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table
from tabhyper_update.values.errors import OutOfOrderError, SchemaDriftError

from ._histories import (
    COLUMNS,
    ROW_SCHEMA,
    Connector,
    DeltaSource,
    Model,
    debezium_lines,
    history,
    models,
    table,
)
from ._streaming import PAT, uncommit_last

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SEED = int(os.environ.get("TABHYPER_ORACLE_SEED", "20"))
CONNECTORS = ("postgresql", "mysql", "sqlserver", "oracle", "mongodb")
#: A cap a little over a Hyper file's own size (64 KiB): a wide first step splits into parts.
SPLIT_MB = 0.1


@dataclass
class Tally:
    """What a run did: histories, steps compared, divergences (each described)."""

    histories: int = 0
    steps: int = 0
    divergences: list[str] = field(default_factory=list)
    #: Slices that reached the server after a later one, and those the guard refused.
    late: int = 0
    refused: int = 0

    def report(self, what: str) -> str:
        line = (
            f"divergence oracle ({what}, seed {SEED}): {self.histories} histories, "
            f"{self.steps} steps compared, {len(self.divergences)} divergences; "
            f"{self.late} slices late, {self.refused} refused by the guard and sent again"
        )
        if os.environ.get("TABHYPER_ORACLE_REPORT"):
            with open(os.environ["TABHYPER_ORACLE_REPORT"], "a") as out:
                out.write(line + "\n")
        return line


@dataclass
class Target:
    server: FakeTableauServer
    client: TableauClient
    luid: str
    state: Path

    def table(self) -> list[tuple[int, str | None, int | None]]:
        self.server.wait_idle()
        rows = read_table(self.server.datasource_path(self.luid), "Extract")
        return [(int(k), a, None if b is None else int(b)) for k, a, b in rows]


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Target]:
    start = make_hyper(tmp_path / "empty.hyper", {"Extract": (COLUMNS, [])})
    with FakeTableauServer(pats=dict([PAT]), directory=tmp_path / "server") as server:
        luid = server.add_datasource("Orders", start)
        with TableauClient(server.url, "", PersonalAccessToken(*PAT)) as client:
            yield Target(server, client, luid, tmp_path / "state")


def compare(
    tally: Tally, where: str, got: list[tuple[int, str | None, int | None]], model: Model
) -> None:
    tally.steps += 1
    want = table(model)
    if got != want:
        missing = sorted(set(want) - set(got))[:5]
        extra = sorted(set(got) - set(want))[:5]
        tally.divergences.append(f"{where}: missing {missing}, extra {extra}")


def reset(target: Target, start: Path) -> None:
    """An empty target for the next history."""
    target.server.wait_idle()
    shutil.copyfile(start, target.server.datasource_path(target.luid))


# -- the deliveries -------------------------------------------------------------------------------


def run_delta(
    spark: SparkSession,
    target: Target,
    root: Path,
    rng: random.Random,
    tally: Tally,
    *,
    steps: int,
    split: bool,
) -> None:
    """A Delta table's change feed, one slice per step, each slice one update (in parts)."""
    source = DeltaSource(root / "delta")
    model_before: Model = {}
    shape = {"start_rows": 200, "key_space": 400, "width": 300} if split else {}
    for i, (step, model) in enumerate(models(history(rng, steps=steps, **shape))):
        for commit in step:
            source.commit(commit, model_before)
            commit.apply(model_before)
        changes = source.changes(spark)
        payload = build_payload(changes, ChangeSet("id"), max_payload_mb=SPLIT_MB if split else 100)
        if split and i == 0:
            assert len(payload.parts) > 1, "the first slice was meant to split"
        send(target, payload)
        compare(tally, f"delta step {i}", target.table(), model)
    tally.histories += 1


def send(target: Target, payload: Payload) -> None:
    """One slice's payload through the public chain (an empty slice sends nothing)."""
    if not payload.is_empty:
        payload.upload(
            target.luid, client=target.client, progress=False, state_dir=target.state
        ).apply(target_table="Extract")


def run_debezium(
    spark: SparkSession,
    target: Target,
    rng: random.Random,
    tally: Tally,
    *,
    connector: str,
    steps: int,
) -> None:
    """Debezium events of one connector, one batch slice per step (shuffled, redelivered)."""
    events = Debezium(ROW_SCHEMA, key="id", connector=connector)
    position = Connector(connector, rng)
    applied: Model = {}
    for i, (step, model) in enumerate(models(history(rng, steps=steps))):
        lines = debezium_lines(step, applied, position, rng)
        applied = dict(model)
        df = spark.createDataFrame([(line,) for line in lines], "value string")
        payload = build_payload(events.changes(df), events.change_set)
        send(target, payload)
        compare(tally, f"{connector} step {i}", target.table(), model)
    tally.histories += 1


def run_stream(
    spark: SparkSession, target: Target, root: Path, rng: random.Random, tally: Tally, *, steps: int
) -> None:
    """Debezium files through a ``TableauSink`` query: a run per step, a replay of the last
    batch now and then, and halfway a checkpoint reset under the same sink id with the state
    folder gone (a new machine reading a new topic from its start)."""
    events = Debezium(ROW_SCHEMA, key="id", connector="mysql")
    position = Connector("mysql", rng)
    source, checkpoint = root / "events", root / "checkpoint"
    applied: Model = {}
    reset_at = steps // 2 + 1
    for i, (step, model) in enumerate(models(history(rng, steps=steps))):
        if i == reset_at:
            shutil.rmtree(target.state, ignore_errors=True)
            source, checkpoint = root / "events-2", root / "checkpoint-2"
        lines = debezium_lines(step, applied, position, rng)
        applied = dict(model)
        source.mkdir(parents=True, exist_ok=True)
        (source / f"{i:04d}.json").write_text("".join(f"{line or 'null'}\n" for line in lines))
        sink = TableauSink(
            target.luid,
            events,
            client=target.client,
            target_table="Extract",
            sink_id=f"oracle-{root.name}",  # one pipeline per history
            state_dir=target.state,
        )
        _run(spark, source, checkpoint, sink)
        compare(tally, f"stream step {i}", target.table(), model)
        if i > 0 and rng.random() < 0.5:
            uncommit_last(checkpoint)  # a crash between the sink and the commit: a replay
            _run(spark, source, checkpoint, sink)
            compare(tally, f"stream step {i} replayed", target.table(), model)
    tally.histories += 1


def run_schema_changes(
    spark: SparkSession, target: Target, root: Path, rng: random.Random, tally: Tally, *, steps: int
) -> None:
    """A Delta feed whose source changes shape mid-stream: one step gains a column, another
    widens ``b`` to a decimal. Each such slice is refused before its first part (the data
    source is left as the step before), then sent again in the data source's shape."""
    source = DeltaSource(root / "delta")
    before: Model = {}
    shown: Model = {}
    added, widened = 1, 2
    for i, (step, model) in enumerate(models(history(rng, steps=steps))):
        for commit in step:
            source.commit(commit, before)
            commit.apply(before)
        changes = source.changes(spark)
        odd = None
        if i == added:
            odd = changes.withColumn("tier", changes["a"])
        elif i == widened:
            odd = changes.withColumn("b", changes["b"].cast("decimal(18,2)"))
        if odd is not None:
            try:
                send(target, build_payload(odd, ChangeSet("id")))
                tally.divergences.append(f"schema step {i}: a payload of another shape was sent")
            except SchemaDriftError:
                pass
            compare(tally, f"schema step {i} refused", target.table(), shown)
        send(target, build_payload(changes, ChangeSet("id")))
        compare(tally, f"schema step {i}", target.table(), model)
        shown = dict(model)
    tally.histories += 1


def run_shared_sink(
    spark: SparkSession, target: Target, root: Path, rng: random.Random, tally: Tally, *, steps: int
) -> None:
    """Two streaming queries with one sink id: the second is refused before its first batch
    (the data source stays as the first left it); declared as the first's replacement
    (``reset=True``), its batches apply, the first of them equal to the first query's last."""
    events = Debezium(ROW_SCHEMA, key="id", connector="postgresql")
    position = Connector("postgresql", rng)
    applied: Model = {}
    shown: Model = {}
    switch = steps // 2
    for i, (step, model) in enumerate(models(history(rng, steps=steps))):
        lines = debezium_lines(step, applied, position, rng)
        applied = dict(model)
        second = i >= switch
        source = root / ("events-2" if second else "events")
        source.mkdir(parents=True, exist_ok=True)
        (source / f"{i:04d}.json").write_text("".join(f"{line or 'null'}\n" for line in lines))
        checkpoint = root / ("checkpoint-2" if second else "checkpoint")

        def sink(reset: bool) -> TableauSink:
            return TableauSink(
                target.luid,
                events,
                client=target.client,
                target_table="Extract",
                sink_id=f"shared-{root.name}",  # one pipeline per history
                state_dir=target.state,
                reset=reset,
            )

        if i == switch:
            try:
                _run(spark, source, checkpoint, sink(reset=False))
                tally.divergences.append(f"shared sink step {i}: a second query ran the sink id")
            except Exception as err:  # Spark's wrapper of the sink's error
                if "belongs to streaming query" not in str(err):
                    raise
            compare(tally, f"shared sink step {i} refused", target.table(), shown)
            shutil.rmtree(checkpoint, ignore_errors=True)
        _run(spark, source, checkpoint, sink(reset=second))
        compare(tally, f"shared sink step {i}", target.table(), model)
        shown = dict(model)
    tally.histories += 1


def run_two_producers(
    spark: SparkSession, target: Target, root: Path, rng: random.Random, tally: Tally, *, steps: int
) -> None:
    """Two producers take turns with the slices of one Delta feed into a data source that
    keeps each row's commit version, their change sets guarded (``guard=True``). Now and
    then a producer is slow and its slice reaches the server after the next one: it is
    refused when a key it changes holds a later version, and that producer rebuilds its
    change set from its first version to the latest and sends it again."""
    root.mkdir(parents=True, exist_ok=True)
    start = make_hyper(
        root / "guarded.hyper",
        {
            "Extract": (f"{COLUMNS}, _commit_version BIGINT", []),
            "Extract_positions": (
                "id BIGINT NOT NULL, _commit_version BIGINT, guarded BOOLEAN NOT NULL",
                [],
            ),
        },
    )
    luid = target.server.add_datasource(f"Guarded {root.name}", start)
    target.server.remember_probe(target.state)  # the guard is sent only where probed
    source = DeltaSource(root / "delta")
    guarded = ChangeSet("id", guard=True)

    def send_guarded(changes: DataFrame) -> None:
        payload = build_payload(changes, guarded)
        if not payload.is_empty:
            payload.upload(
                luid, client=target.client, progress=False, state_dir=target.state
            ).apply(target_table="Extract")

    def shown() -> list[tuple[int, str | None, int | None]]:
        target.server.wait_idle()
        found = read_table(target.server.datasource_path(luid), "Extract")
        return sorted((int(k), a, None if b is None else int(b)) for k, a, b, _ in found)

    before: Model = {}
    late: tuple[int, DataFrame] | None = None
    for i, (step, model) in enumerate(models(history(rng, steps=steps))):
        first = source.read_up_to + 1
        for commit in step:
            source.commit(commit, before)
            commit.apply(before)
        changes = source.changes(spark)
        if late is None and 0 < i < steps - 1 and rng.random() < 0.6:
            late = (first, changes)  # this producer is slow: the next slice goes first
            continue
        send_guarded(changes)
        if late is not None:
            since, slow = late
            late = None
            tally.late += 1
            try:
                send_guarded(slow)
            except OutOfOrderError:
                tally.refused += 1
                send_guarded(source.changes_from(spark, since))
        compare(tally, f"two producers step {i}", shown(), model)
    tally.histories += 1


def run_planted_decimals(
    spark: SparkSession, target: Target, root: Path, rng: random.Random, tally: Tally, *, steps: int
) -> None:
    """A feed of amounts (``DECIMAL(18,2)``, up to 2e8) applied through the chain; after each
    step one amount is moved by a unit of its last place behind the SDK's back (SQL on the
    fake's file). ``reconcile`` must name exactly that key, and ``repair`` undo it."""
    root.mkdir(parents=True, exist_ok=True)
    start = make_hyper(
        root / "amounts.hyper", {"Extract": ("id BIGINT NOT NULL, amount NUMERIC(18,2)", [])}
    )
    luid = target.server.add_datasource(f"Amounts {root.name}", start)
    amounts: dict[int, Decimal] = {}
    schema = "id long, amount decimal(18,2), op string, seq long"
    for i in range(steps):
        changes: list[tuple[int, Decimal | None, str, int]] = []
        for _ in range(rng.randint(50, 200)):
            k = rng.randrange(2_000)
            if k in amounts and rng.random() < 0.2:
                changes.append((k, None, "D", i))
                amounts.pop(k)
            else:
                value = Decimal(rng.randrange(20_000_000_000)) / 100
                changes.append((k, value, "U", i))
                amounts[k] = value
        last = {c[0]: c for c in changes}  # one change per key and step
        payload = build_payload(
            spark.createDataFrame(list(last.values()), schema),
            ChangeSet("id", op_column="op", order_by="seq"),
        )
        payload.upload(luid, client=target.client, progress=False, state_dir=target.state).apply(
            target_table="Extract"
        )
        source = spark.createDataFrame(sorted(amounts.items()), "id long, amount decimal(18,2)")
        planted = rng.choice(sorted(amounts))
        target.server.wait_idle()
        with connect(target.server.datasource_path(luid)) as conn:
            conn.execute_command(
                f'UPDATE "Extract"."Extract" SET amount = amount + 0.01 WHERE id = {planted}'
            )
        report = reconcile(source, luid, key="id", client=target.client)
        found = {(d.kind, d.key) for d in report.drift}
        tally.steps += 1
        if found != {("changed", (planted,))} or report.unresolved:
            tally.divergences.append(f"decimals step {i}: planted {planted}, found {found}")
        repair(report, source, client=target.client, state_dir=target.state)
        again = reconcile(source, luid, key="id", client=target.client)
        tally.steps += 1
        if not again.ok:
            tally.divergences.append(f"decimals step {i}: after the repair {again}")
    tally.histories += 1


def _run(spark: SparkSession, source: Path, checkpoint: Path, sink: TableauSink) -> None:
    query = (
        spark.readStream.option("maxFilesPerTrigger", 1)
        .text(str(source))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    if not query.awaitTermination(180):
        query.stop()
        raise TimeoutError("the streaming query did not finish")
    if query.exception() is not None:
        raise AssertionError(f"the query failed: {query.exception()}")


def oracle(
    spark: SparkSession,
    target: Target,
    root: Path,
    *,
    delta: int,
    debezium: int,
    streams: int,
    steps: int,
    reshaped: int = 0,
    shared: int = 0,
    producers: int = 0,
    decimals: int = 0,
) -> Tally:
    rng = random.Random(SEED)
    tally = Tally()
    start = root / "start.hyper"
    shutil.copyfile(target.server.datasource_path(target.luid), start)
    for h in range(delta):
        reset(target, start)
        run_delta(spark, target, root / f"delta-{h}", rng, tally, steps=steps, split=h % 2 == 1)
    for h in range(debezium):
        reset(target, start)
        run_debezium(
            spark, target, rng, tally, connector=CONNECTORS[h % len(CONNECTORS)], steps=steps
        )
    for h in range(streams):
        reset(target, start)
        run_stream(spark, target, root / f"stream-{h}", rng, tally, steps=steps)
    for h in range(reshaped):
        reset(target, start)
        run_schema_changes(spark, target, root / f"schema-{h}", rng, tally, steps=steps)
    for h in range(shared):
        reset(target, start)
        run_shared_sink(spark, target, root / f"shared-{h}", rng, tally, steps=steps)
    for h in range(producers):
        run_two_producers(spark, target, root / f"producers-{h}", rng, tally, steps=steps)
    for h in range(decimals):
        run_planted_decimals(spark, target, root / f"decimals-{h}", rng, tally, steps=steps)
    return tally


def test_the_published_table_equals_the_source_after_every_step(
    spark: SparkSession, target: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tally = oracle(
        spark,
        target,
        tmp_path,
        delta=2,
        debezium=len(CONNECTORS),
        streams=1,
        steps=4,
        reshaped=1,
        shared=1,
        producers=2,
        decimals=1,
    )
    with capsys.disabled():
        print("\n" + tally.report("default"))
    assert tally.histories == 2 + len(CONNECTORS) + 1 + 5
    assert tally.refused > 0, "no late slice met the guard: the history did not test it"
    assert tally.divergences == []


@pytest.mark.slow
def test_the_published_table_equals_the_source_after_every_step_at_length(
    spark: SparkSession, target: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tally = oracle(
        spark,
        target,
        tmp_path,
        delta=8,
        debezium=3 * len(CONNECTORS),
        streams=3,
        steps=8,
        reshaped=2,
        shared=2,
        producers=4,
        decimals=2,
    )
    with capsys.disabled():
        print("\n" + tally.report("slow"))
    assert tally.divergences == []


# -- the oracle can fail: each fix, undone, is caught ---------------------------------------------


def test_the_oracle_catches_pre_images_dropped(
    spark: SparkSession, target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tabhyper_update.values import changeset as cdc

    monkeypatch.setitem(cdc.DEFAULT_OP_MAP, "update_preimage", "ignore")
    tally = oracle(spark, target, tmp_path, delta=1, debezium=0, streams=0, steps=4)
    assert tally.divergences, "with pre-images dropped, moved keys leave their old rows"


# The long run's: the default run shows the oracle failing by the test above, and the
# positions' order by test_every_change_lands (a later position whose text sorts first).
@pytest.mark.slow
def test_the_oracle_catches_positions_compared_as_text(
    spark: SparkSession, target: Target, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tabhyper_update.streaming import debezium

    monkeypatch.setitem(debezium.POSITION_ORDER, "file", "text")
    monkeypatch.setitem(debezium.POSITION_ORDER, "scn", "text")
    rng = random.Random(SEED)
    tally = Tally()
    for connector in ("mysql", "oracle"):
        run_debezium(spark, target, rng, tally, connector=connector, steps=6)
    assert tally.divergences, "with positions compared as text, older changes win"

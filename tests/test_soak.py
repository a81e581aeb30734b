"""A streaming CDC job as long as users run one (``slow``): a feed of micro-batches for two
data sources, through 503s, 429s, answers lost after the server applied an update, lost upload
answers, crashes after applied batches with restarts from the checkpoint, and a column added
upstream mid-stream met by ``Republish``. Every data source ends equal to its model, and the
figures the SDK reports (``metrics()`` summed, the OpenTelemetry counters) equal what the fake
server received. ``TABHYPER_SOAK_BATCHES`` sets the number of batches (400 by default)."""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import ChangeSet, Republish, TableauSink
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table

from ._streaming import run_query
from ._util import PAT, client_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.slow

BATCHES = int(os.environ.get("TABHYPER_SOAK_BATCHES", "400"))
SEED = 20261127
FEED = "b BIGINT, t STRING, id BIGINT, name STRING, qty INT, tier STRING, op STRING, seq BIGINT"
BY_ID = ChangeSet("id", op_column="op", order_by="seq")
#: The batch from which the upstream orders table has the column ``tier``.
WIDENED = BATCHES // 2
#: The whole run stops by itself after this long.
DEADLINE_SECONDS = 40 * 60

Row = tuple[Any, ...]


class Crash(RuntimeError):
    """The job dies: raised from the batch function after a sink applied its batch."""


@dataclass
class Feed:
    """The source's history: per batch, its changes; and the model of each table after it."""

    batches: list[list[dict[str, Any]]] = field(default_factory=list)
    orders: list[dict[int, Row]] = field(default_factory=list)
    stock: list[dict[int, Row]] = field(default_factory=list)

    @classmethod
    def made(cls, rng: random.Random, count: int) -> Feed:
        feed = cls()
        orders: dict[int, Row] = {i: (f"o{i}", i, None) for i in range(1, 51)}
        stock: dict[int, Row] = {i: (i * 10,) for i in range(1, 21)}
        seq = 0
        for b in range(count):
            changes: list[dict[str, Any]] = []
            for _ in range(rng.randint(4, 24)):
                seq += 1
                table = "stock" if rng.random() < 0.3 else "orders"
                key = rng.randint(1, 60 if table == "stock" else 400)
                op = "D" if rng.random() < 0.2 else "U"
                change = {"b": b, "t": table, "id": key, "op": op, "seq": seq}
                if op == "U":
                    change["qty"] = rng.randint(-1000, 1000)
                    if table == "orders":
                        change["name"] = rng.choice([f"n{seq}", "", "ünï'\"", None])
                        change["tier"] = rng.choice(["gold", "tin"]) if b >= WIDENED else None
                changes.append(change)
            for c in changes:  # the last change per key wins
                model = stock if c["t"] == "stock" else orders
                if c["op"] == "D":
                    model.pop(c["id"], None)
                elif c["t"] == "stock":
                    model[c["id"]] = (c["qty"],)
                else:
                    model[c["id"]] = (c["name"], c["qty"], c.get("tier"))
            feed.batches.append(changes)
            feed.orders.append(dict(orders))
            feed.stock.append(dict(stock))
        return feed

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True)
        for b, changes in enumerate(self.batches):
            tmp = folder.parent / f".batch-{b:04d}.tmp"
            tmp.write_text("\n".join(json.dumps(c) for c in changes) + "\n", encoding="utf-8")
            stamp = 1_700_000_000 + b * 10
            os.utime(tmp, (stamp, stamp))
            os.replace(tmp, folder / f"batch-{b:04d}.json")


@dataclass
class Job:
    """The batch function of the CDC job: one feed, two sinks, and the crashes it suffers."""

    spark: SparkSession
    feed: Feed
    crash_after: set[int]
    crash_between: set[int]
    results: list[dict[str, Any]]
    crashes: Counter[str] = field(default_factory=Counter)
    current: int = -1
    orders: TableauSink = field(init=False)
    stock: TableauSink = field(init=False)

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        (index,) = {r.b for r in frame.select("b").distinct().collect()}
        assert index == batch_id  # one file per batch
        self.current = batch_id
        columns = ["id", "name", "qty", "op", "seq"]
        if batch_id >= WIDENED:  # the upstream table has the new column from here on
            columns.insert(3, "tier")
        self._sink(self.orders, frame.where("t = 'orders'").select(*columns), batch_id)
        if batch_id in self.crash_between:
            self.crash_between.discard(batch_id)
            self.crashes["between the sinks"] += 1
            raise Crash(f"killed after the first sink of batch {batch_id}")
        self._sink(
            self.stock, frame.where("t = 'stock'").select("id", "qty", "op", "seq"), batch_id
        )
        if batch_id in self.crash_after:
            self.crash_after.discard(batch_id)
            self.crashes["after the batch"] += 1
            raise Crash(f"killed after batch {batch_id}")

    def _sink(self, sink: TableauSink, frame: DataFrame, batch_id: int) -> None:
        sink(frame, batch_id)
        if sink.last_result is not None:
            self.results.append(sink.last_result.metrics())

    def snapshot(self) -> DataFrame:
        """The upstream orders table now (what ``Republish`` reads): the model after the
        batch being applied, the new column included."""
        state = self.feed.orders[self.current]
        rows = [(k, *v) for k, v in sorted(state.items())]
        return self.spark.createDataFrame(rows, "id long, name string, qty int, tier string")


def _faults(server: FakeTableauServer, rng: random.Random) -> list[Any]:
    """Faults spread over the run, by route: bounded in number, each firing once."""
    updates = 2 * BATCHES  # about one update per sink and batch

    def at(route: str, count: int, spread: int, **kwargs: Any) -> list[Any]:
        return [
            server.inject(route, nth=n, **kwargs)
            for n in sorted(rng.sample(range(2, max(spread, count + 2)), count))
        ]

    share = max(1, BATCHES // 40)
    return [
        *at("update", share, updates, status=503),
        *at("update", share, updates, status=429, code="429000", retry_after=0.05),
        *at("update", share, updates, drop="after"),  # applied, the answer lost
        *at("append", max(1, BATCHES // 80), updates, drop="after"),  # the upload's answer lost
        *at("job", share, 3 * updates, status=503),
    ]


@pytest.fixture
def metrics_reader() -> Any:
    sdk = pytest.importorskip("opentelemetry.sdk.metrics")
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = sdk.MeterProvider(metric_readers=[reader])
    metrics.set_meter_provider(provider)
    if metrics.get_meter_provider() is not provider:
        pytest.skip("another test of this process set the meter provider: run the soak alone")
    return reader


def _counter(reader: Any, name: str) -> dict[str, float]:
    """The counter ``name`` summed per data source."""
    totals: Counter[str] = Counter()
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        ds = str(point.attributes.get("tabhyper_update.datasource", ""))
                        totals[ds] += point.value
    return dict(totals)


def test_a_long_stream_through_faults_and_crashes_ends_equal_to_its_model(
    spark: SparkSession, tmp_path: Path, metrics_reader: Any
) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    feed = Feed.made(rng, BATCHES)
    feed.write(tmp_path / "in")
    with FakeTableauServer(pats=dict([PAT]), directory=tmp_path / "server") as server:
        start_orders = [f"({k}, 'o{k}', {k})" for k in range(1, 51)]
        server.add_datasource(
            "Orders",
            make_hyper(
                tmp_path / "orders.hyper",
                {"Extract": ("id BIGINT NOT NULL, name TEXT, qty INTEGER", start_orders)},
            ),
        )
        start_stock = [f"({k}, {k * 10})" for k in range(1, 21)]
        server.add_datasource(
            "Stock",
            make_hyper(
                tmp_path / "stock.hyper",
                {"Extract": ("id BIGINT NOT NULL, qty INTEGER", start_stock)},
            ),
        )
        faults = _faults(server, rng)
        results: list[dict[str, Any]] = []
        crash_after = set(rng.sample(range(1, BATCHES - 1), max(1, BATCHES // 40)))
        crash_between = set(rng.sample(range(1, BATCHES - 1), max(1, BATCHES // 80)))
        crash_after.discard(WIDENED)
        planned = len(crash_after) + len(crash_between)
        restarts = 0
        state = tmp_path / "state"
        while True:
            # Each start is a fresh process's view: a new client and new sinks, the same
            # state folder and checkpoint.
            with client_for(server) as client:
                job = Job(spark, feed, crash_after, crash_between, results)
                job.orders = TableauSink(
                    "Orders",
                    BY_ID,
                    client=client,
                    sink_id="orders-feed",
                    state_dir=state,
                    on_schema_change=Republish(job.snapshot),
                )
                job.stock = TableauSink(
                    "Stock",
                    BY_ID,
                    client=client,
                    sink_id="stock-feed",
                    state_dir=tmp_path / "state",
                )
                try:
                    remaining = DEADLINE_SECONDS - (time.monotonic() - started)
                    run_query(
                        spark,
                        tmp_path / "in",
                        tmp_path / "checkpoint",
                        job,  # type: ignore[arg-type]
                        schema=FEED,
                        timeout=max(1, int(remaining)),
                    )
                    break
                except Exception as err:  # the query ends with Spark's wrapper of the crash
                    if "killed after" not in str(err):
                        raise
                    restarts += 1

        def table(name: str) -> list[Row]:
            (luid,) = [d.id for d in server.backend.sources.values() if d.name == name]
            return read_table(server.datasource_path(luid), "Extract")

        orders = [(k, *v) for k, v in sorted(feed.orders[-1].items())]
        stock = [(k, *v) for k, v in sorted(feed.stock[-1].items())]
        assert table("Orders") == orders
        assert table("Stock") == stock
        assert restarts == planned  # every crash happened and was met by a restart

        # The figures: summed over every result, equal to what the fake received.
        by_source: dict[str, Counter[str]] = {"Orders": Counter(), "Stock": Counter()}
        for figures in results:
            totals = by_source[figures["datasource"]]
            totals["bytes"] += figures["bytes"]
            totals["rows"] += sum(figures["rows"].values())
            totals["republished"] += figures["republished"]
            if not figures["deduplicated"]:  # a batch its record or the server knew: not new
                totals["applied"] += figures["applied_parts"]
        with server.backend.lock:
            sizes = {u.path: u.size for u in server.backend.uploads.sessions.values() if u.consumed}
            received: dict[str, Counter[str]] = {"Orders": Counter(), "Stock": Counter()}
            for j in server.backend.jobs.values():
                if j.kind == "UpdateUploadedFile" and j.upload is not None and j.finish_code == 0:
                    received[j.datasource.name]["bytes"] += sizes[j.upload]
                    received[j.datasource.name]["jobs"] += 1
        assert by_source["Orders"]["republished"] == 1  # the new column, met once
        assert by_source["Stock"]["republished"] == 0
        for name in ("Orders", "Stock"):
            assert by_source[name]["bytes"] == received[name]["bytes"], name
            assert by_source[name]["applied"] == received[name]["jobs"], name
        uploaded = _counter(metrics_reader, "tabhyper_update.uploaded")
        rows = _counter(metrics_reader, "tabhyper_update.rows")
        assert uploaded == {n: by_source[n]["bytes"] for n in by_source}
        assert rows == {n: by_source[n]["rows"] for n in by_source}
        fired = Counter(f"{f.route} {f.status or f.drop}" for f in faults for _ in range(f.fired))
        report = {
            "batches": BATCHES,
            "seconds": round(time.monotonic() - started, 1),
            "restarts": restarts,
            "crashes": planned,
            "faults fired": dict(fired),
            "keys compared": len(orders) + len(stock),
            "updates applied": {n: received[n]["jobs"] for n in received},
            "bytes": {n: received[n]["bytes"] for n in received},
            "rows": {n: by_source[n]["rows"] for n in by_source},
        }
        print("soak:", json.dumps(report))
        assert sum(fired.values()) >= len(faults) // 2  # the faults were met, not skipped

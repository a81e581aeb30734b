"""Every Python block of the README and the docs runs as written, against the fake server.

The quickstarts (the README's and the docs') run against what ``tabhyper-update serve-local``
serves (its sample data source). The guide's blocks run in the order of the docs' navigation:
a block may use names a real job would already hold (``spark``, ``last_version``,
``new_rows``, ``cutoff``, ``my_cdc_job``); the context below provides them. Delta's change
feed is stood in by a DataFrame of the same shape, since Delta is not installed here. The
``TABLEAU_*`` variables point at a fake server whose data source the blocks update, and the
published table is checked afterwards. A block that needs Tableau or a cluster starts with
``# compile-only:`` and says why: it is compiled, not run.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import ChangeSet, TableauClient, build_payload
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table

from ._util import use_environment

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
QUICKSTART = DOCS / "getting-started" / "quickstart.md"
COMPILE_ONLY = "# compile-only:"
SNAPSHOT = "order_id long, amount double"
FEED = (
    "order_id long, amount double, _change_type string, _commit_version long, "
    "_commit_timestamp timestamp"
)


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def pages() -> list[Path]:
    """The docs' pages in the order of their navigation (``mkdocs.yml``)."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    return [DOCS / name for name in re.findall(r"^\s*- (?:[^:\n]+: )?(\S+\.md)\s*$", text, re.M)]


def runnable(path: Path) -> list[tuple[str, str]]:
    """``path``'s blocks that run, each with its name for tracebacks."""
    return [
        (f"{path.relative_to(ROOT)} python block {n}", block)
        for n, block in enumerate(python_blocks(path.read_text(encoding="utf-8")), 1)
        if not block.startswith(COMPILE_ONLY)
    ]


def test_every_page_is_in_the_navigation_and_every_block_compiles() -> None:
    listed = pages()
    assert sorted(listed) == sorted(DOCS.rglob("*.md")), "a page outside mkdocs.yml's nav"
    blocks = [b for path in [README, *listed] for b in python_blocks(path.read_text())]
    assert len(blocks) >= 12, "the docs lost their examples"
    for number, block in enumerate(blocks, 1):
        compile(block, f"block {number}", "exec")  # a SyntaxError names the block


def test_the_quickstarts_run_against_what_serve_local_serves(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tabhyper_update.cli.local_server import SAMPLE

    blocks = runnable(README)[:1] + runnable(QUICKSTART)
    assert len(blocks) == 2, "the README's and the docs' quickstart"
    for name, block in blocks:
        with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
            luid = server.add_datasource("Orders", make_hyper(tmp_path / "s.hyper", SAMPLE))
            use_environment(monkeypatch, server, tmp_path / name.replace(" ", "-"), "Orders")
            for _ in range(2):  # the second run applies nothing
                context: dict[str, Any] = {}
                exec(compile(block, name, "exec"), context)
            assert context["result"].deduplicated, name
            assert server.backend.jobs_run[luid] == 1, name
            rows = read_table(server.datasource_path(luid), "Extract")
            assert rows == [(1, "apples", 12), (2, "pears", 20), (4, "figs", 40)], name


class _DeltaReader:
    """``spark.read.format("delta").option(...).table(name)`` over an in-memory feed."""

    def __init__(self, feeds: dict[str, DataFrame], earlier: dict[str, DataFrame]) -> None:
        self.feeds = feeds
        self.earlier = earlier
        self.options: dict[str, str] = {}

    def format(self, name: str) -> _DeltaReader:
        assert name == "delta"
        return self

    def option(self, key: str, value: Any) -> _DeltaReader:
        self.options[key] = str(value)
        return self

    def table(self, name: str) -> DataFrame:
        if "versionAsOf" in self.options:  # a snapshot: the table before the feed's versions
            return self.earlier[f"{name}@{self.options['versionAsOf']}"]
        assert self.options.get("readChangeFeed") == "true"
        start = int(self.options.get("startingVersion", "0"))
        return self.feeds[name].where(f"_commit_version >= {start}")


class _StreamReader:
    """``spark.readStream`` for Delta's change feed and Kafka, over JSON files of the same
    shape (neither Delta nor the Kafka connector is installed here)."""

    def __init__(self, spark: SparkSession, folders: dict[str, Path]) -> None:
        self.spark = spark
        self.folders = folders
        self.options: dict[str, str] = {}
        self.kind = "delta"

    def format(self, name: str) -> _StreamReader:
        self.kind = name
        return self

    def option(self, key: str, value: Any) -> _StreamReader:
        self.options[key] = str(value)
        return self

    def table(self, name: str) -> DataFrame:
        assert self.kind == "delta"
        assert self.options.get("readChangeFeed") == "true"
        return self.spark.readStream.schema(FEED).json(str(self.folders[name]))

    def load(self) -> DataFrame:
        assert self.kind == "kafka"
        return self.spark.readStream.text(str(self.folders[self.options["subscribe"]]))


class _SparkWithDelta:
    def __init__(
        self,
        spark: SparkSession,
        feeds: dict[str, DataFrame],
        tables: dict[str, DataFrame],
        streams: dict[str, Path],
        earlier: dict[str, DataFrame] | None = None,
    ) -> None:
        self._spark = spark
        self._feeds = feeds
        self._earlier = earlier or {}
        self._tables = tables
        self._streams = streams

    @property
    def read(self) -> _DeltaReader:
        return _DeltaReader(self._feeds, self._earlier)

    @property
    def readStream(self) -> _StreamReader:
        return _StreamReader(self._spark, self._streams)

    def table(self, name: str) -> DataFrame:
        return self._tables[name]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spark, name)


def test_the_guides_blocks_run_as_written(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = [b for path in pages() if path != QUICKSTART for b in runnable(path)]
    assert len(blocks) >= 8, "the guide lost its examples"
    when = datetime(2026, 1, 5, 12, 0)
    feed = spark.createDataFrame(
        [
            (1, 10.0, "insert", 2, when),  # before last_version: not read
            (2, 20.0, "update_preimage", 3, when),
            (2, 25.0, "update_postimage", 3, when),
            (3, 30.0, "delete", 4, when),
            (4, 40.0, "insert", 4, when),
        ],
        FEED,
    )
    start = make_hyper(
        tmp_path / "orders.hyper",
        {"Extract": ("order_id BIGINT, amount DOUBLE PRECISION", ["(2, 20)", "(3, 30)"])},
    )

    def my_cdc_job(client: TableauClient) -> None:
        change = spark.createDataFrame([(1, "A", "U", 7)], "id long, v string, op string, seq long")
        client.update_datasource(
            "Orders", build_payload(change, ChangeSet("id", op_column="op", order_by="seq"))
        )

    streams = {"sales.orders": tmp_path / "cdf", "shop.public.orders": tmp_path / "dbz"}
    for folder in streams.values():
        folder.mkdir()
    (streams["sales.orders"] / "0.json").write_text(
        '{"order_id": 6, "amount": 60.0, "_change_type": "insert", "_commit_version": 5, '
        '"_commit_timestamp": "2026-01-05T12:00:00Z"}\n'
    )
    (streams["shop.public.orders"] / "0.json").write_text(
        "\n".join(
            [
                '{"schema": {}, "payload": {"op": "c", "after": {"order_id": 7, "amount": 70.0},'
                ' "source": {"lsn": 1}, "ts_ms": 1}}',
                '{"op": "d", "before": {"order_id": 5}, "source": {"lsn": 2}, "ts_ms": 2}',
                "null",
            ]
        )
        + "\n"
    )
    shop = make_hyper(
        tmp_path / "shop.hyper",
        {
            "Sales": ("sale_id BIGINT, customer_id BIGINT, amount INTEGER", ["(1, 10, 100)"]),
            "Customers": ("customer_id BIGINT, name TEXT", ["(10, 'Ann')"]),
        },
    )
    context: dict[str, Any] = {
        "spark": _SparkWithDelta(
            spark,
            {"sales.orders": feed},
            {
                "sales.orders": spark.createDataFrame(
                    [(2, 25.0), (4, 40.0)], "order_id long, amount double"
                )
            },
            streams,
            # The table at version 2, before the feed's versions 3 and 4.
            {
                "sales.orders@2": spark.createDataFrame(
                    [(1, 10.0), (2, 20.0), (3, 30.0)], "order_id long, amount double"
                )
            },
        ),
        "sales_changes": spark.createDataFrame(
            [(1, None, None, "D", 1), (2, 10, 200, "I", 2)],
            "sale_id long, customer_id long, amount int, op string, seq long",
        ),
        "customer_changes": spark.createDataFrame(
            [(10, "Ann B.", "U", 1)], "customer_id long, name string, op string, seq long"
        ),
        "last_version": 3,
        "new_rows": spark.createDataFrame([(5, 50.0)], "order_id long, amount double"),
        "cutoff": datetime(2026, 1, 1),
        "my_cdc_job": my_cdc_job,
    }
    monkeypatch.chdir(tmp_path)
    with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
        luid = server.add_datasource("Orders", start)
        shop_id = server.add_datasource("Shop", shop)
        use_environment(monkeypatch, server, tmp_path / "state", "Orders")
        try:
            for name, block in blocks:
                # Spark's JVM resolves paths from its own working directory: checkpoints go
                # under this test's folder.
                block = block.replace(
                    'checkpoint_root = "/checkpoints"', f"checkpoint_root = {str(tmp_path)!r}"
                )
                if "reconcile(" in block:
                    # One PAT holds one session: the streaming examples' queries, which sign
                    # in with the same PAT, end before the reading-back example runs.
                    for query in spark.streams.active:
                        query.processAllAvailable()
                        query.stop()
                code = compile(block, name, "exec")
                exec(code, context)
            for query in spark.streams.active:  # the Debezium query runs until stopped
                query.processAllAvailable()
        finally:
            for query in spark.streams.active:
                query.stop()
        # The quickstart applied the feed from last_version on, once (its check read it back
        # clean); the plain example appended its row; the change-feed stream added order 6,
        # the Debezium stream added order 7 and deleted order 5. Reconciled with table
        # sales.orders, orders 6 and 7 (and nothing else) were extra; the repair removed them.
        assert context["result"].readback.ok
        report = context["report"]
        assert report.counts() == {"missing": 0, "extra": 2, "changed": 0, "duplicated": 0}
        assert sorted(report.keys()) == [(6,), (7,)]
        assert [d.found[0]["amount"] for d in report.drift] == [60.0, 70.0]
        assert read_table(server.datasource_path(luid), "Extract") == [(2, 25.0), (4, 40.0)]
        # The multi-table change set applied to both tables in one update.
        shop_path = server.datasource_path(shop_id)
        assert read_table(shop_path, "Sales") == [(2, 10, 200)]
        assert read_table(shop_path, "Customers") == [(10, "Ann B.")]
        # The bootstrap published the snapshot as a new data source.
        (live,) = [d for d in server.backend.sources.values() if d.name == "Orders Live"]
        assert read_table(live.path, "Extract") == [(2, 25.0), (4, 40.0)]
        # History: the snapshot at version 2 as current versions, then the feed's versions 3
        # and 4 (an update of order 2, a delete of order 3, an insert of order 4). Soft
        # deletes: the same feed, order 3 flagged.
        found = {d.name: d.path for d in server.backend.sources.values()}
        assert sorted(read_table(found["Orders History"], "Extract")) == [
            (1, 10.0, 2, None, True),
            (2, 20.0, 2, 3, False),
            (2, 25.0, 3, None, True),
            (3, 30.0, 2, 4, False),
            (4, 40.0, 4, None, True),
        ]
        assert sorted(read_table(found["Orders Kept"], "Extract")) == [
            (1, 10.0, False, None),
            (2, 25.0, False, None),
            (3, 30.0, True, 4),
            (4, 40.0, False, None),
        ]


def test_the_delta_rs_route_of_the_delta_guide_runs_against_a_delta_rs_table(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Delta guide's second route, as written: delta-rs reads a real change feed (no
    Delta connector in this Spark) and its changes land once."""
    deltalake = pytest.importorskip("deltalake")
    import pyarrow as pa

    guide = DOCS / "how-to" / "delta-change-feed.md"
    (block,) = [b for b in python_blocks(guide.read_text()) if "load_cdf(" in b]
    orders = tmp_path / "orders"

    def commit(rows: list[tuple[int, float]], mode: str = "append") -> None:
        table = pa.table(
            {
                "order_id": pa.array([r[0] for r in rows], pa.int64()),
                "amount": pa.array([r[1] for r in rows], pa.float64()),
            }
        )
        deltalake.write_deltalake(
            str(orders), table, mode=mode, configuration={"delta.enableChangeDataFeed": "true"}
        )

    commit([(1, 10.0), (2, 20.0), (3, 30.0)])  # version 0: already in the data source
    table = deltalake.DeltaTable(str(orders))
    table.update(predicate="order_id = 2", updates={"amount": "25.0"})  # version 1
    table.delete("order_id = 3")  # version 2
    commit([(4, 40.0)])  # version 3
    start = make_hyper(
        tmp_path / "orders.hyper",
        {
            "Extract": (
                "order_id BIGINT, amount DOUBLE PRECISION",
                ["(1, 10)", "(2, 20)", "(3, 30)"],
            )
        },
    )
    with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
        luid = server.add_datasource("Orders", start)
        use_environment(monkeypatch, server, tmp_path / "state", "Orders")
        context: dict[str, Any] = {
            "spark": spark,
            "orders_path": str(orders),
            "last_version": 1,
            "ChangeSet": ChangeSet,
            "build_payload": build_payload,
        }
        for _ in range(2):  # the same versions again apply nothing
            exec(compile(block, f"{guide.name}: the delta-rs block", "exec"), context)
        assert context["result"].deduplicated
        assert server.backend.jobs_run[luid] == 1
        assert read_table(server.datasource_path(luid), "Extract") == [
            (1, 10.0),
            (2, 25.0),
            (4, 40.0),
        ]

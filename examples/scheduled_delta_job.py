"""A scheduled job: a Delta table's change data feed applied to a data source, then a nightly
reconcile that exits non-zero on drift.

The Delta table lives in a folder (delta-rs writes it here; on a cluster it is a table in
your lakehouse). Each run reads the feed since the last version it applied, applies it as one
change set (the version is the update's position: a re-run of the same versions applies
nothing twice), and the nightly step compares the whole data source with the table without
downloading either. In a scheduler, ``sys.exit(run_nightly(...))``: 0 when the data source
matches, 6 on drift.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import Target, local_spark, show, target

from tabhyper_update import ChangeSet, build_payload, reconcile

ROW = "order_id BIGINT, status STRING, amount DOUBLE"
START: dict[str, tuple[str, list[str]]] = {
    "Extract": ("order_id BIGINT NOT NULL, status TEXT, amount DOUBLE PRECISION", [])
}
#: Delta's change feed: its op column and its commit version, the order of the changes.
FEED = ChangeSet("order_id", op_column="_change_type", order_by="_commit_version")


def _arrow(rows: list[tuple[int, str, float]]) -> Any:
    import arro3.core as ac

    return ac.Table.from_pydict(
        {
            "order_id": ac.Array([r[0] for r in rows], ac.DataType.int64()),
            "status": ac.Array([r[1] for r in rows], ac.DataType.string()),
            "amount": ac.Array([r[2] for r in rows], ac.DataType.float64()),
        }
    )


def source_commits(table: Path) -> None:
    """What the upstream system does to the Delta table: a few commits."""
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(
        str(table),
        _arrow([(1, "new", 10.0), (2, "new", 20.0)]),
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    write_deltalake(str(table), _arrow([(3, "new", 30.0)]), mode="append")
    dt = DeltaTable(str(table))
    dt.update(predicate="order_id = 1", updates={"status": "'shipped'"})
    dt.delete("order_id = 2")


def run_update(spark: Any, where: Target, table: Path, progress: Path) -> dict[str, Any]:
    """One scheduled run: the feed since the last version applied, as one update."""
    import arro3.core as ac
    from deltalake import DeltaTable

    done = json.loads(progress.read_text()) if progress.exists() else {"version": -1}
    dt = DeltaTable(str(table))
    latest = dt.version()
    if latest <= done["version"]:
        return {"versions": None}
    feed = ac.Table.from_arrow(dt.load_cdf(starting_version=done["version"] + 1))
    names = ["order_id", "status", "amount", "_change_type", "_commit_version"]
    rows = list(zip(*[feed[n].to_pylist() for n in names], strict=True))
    changes = spark.createDataFrame(rows, f"{ROW}, _change_type STRING, _commit_version BIGINT")
    result = where.client.update_datasource(
        where.datasource,
        build_payload(changes, FEED),
        target_table="Extract",
        state_dir=where.state_dir,
        progress=False,
        position=latest,
    )
    progress.write_text(json.dumps({"version": latest}))
    figures = result.metrics()
    print(f"applied versions {done['version'] + 1}-{latest}: {figures['rows']}")
    return figures


def run_nightly(spark: Any, where: Target, table: Path) -> int:
    """The nightly check: 0 when the data source matches the table, 6 on drift."""
    import arro3.core as ac
    from deltalake import DeltaTable

    current = ac.Table.from_arrow(DeltaTable(str(table)).to_pyarrow_dataset().to_table())
    names = ["order_id", "status", "amount"]
    rows = list(zip(*[current[n].to_pylist() for n in names], strict=True))
    source = spark.createDataFrame(rows, ROW)
    report = reconcile(source, where.datasource, key="order_id", client=where.client)
    print(report)
    return 0 if report.ok else 6


def main(edit_behind: str | None = None) -> dict[str, Any]:
    """Two scheduled runs and a nightly check; ``edit_behind``: SQL run on the fake server's
    copy of the data source before the check (someone changing it behind the job's back)."""
    with (
        local_spark() as spark,
        target("Orders", START) as where,
        tempfile.TemporaryDirectory(prefix="delta-job-") as folder,
    ):
        work = Path(folder)
        table, progress = work / "orders", work / "progress.json"
        source_commits(table)
        first = run_update(spark, where, table, progress)
        again = run_update(spark, where, table, progress)  # nothing new: nothing sent
        if edit_behind is not None and where.sql is not None:
            where.sql(edit_behind)
        nightly = run_nightly(spark, where, table)
        print(show(where.read("Extract") if where.read else None))
        return {"first": first, "again": again, "nightly": nightly}


if __name__ == "__main__":
    sys.exit(main()["nightly"])

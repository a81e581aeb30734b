"""``python -m tests._connect URL WORK STEP...``: steps run over a local Spark Connect
server (``SparkSession.builder.remote("local[2]")``), one JSON line printed per step.

Steps: ``roundtrip`` (build a change set, upload, apply; ``roundtrip-driver`` with
``staging="driver"``: the rows come to this client as Arrow; ``roundtrip-public`` the same
through the public routes pyspark 3.x's client leaves), ``no-sink-id`` (a sink without
``sink_id`` is refused before its query starts), ``sink`` (run the query over what
``WORK/in`` holds), ``replay`` (the last commit removed, then ``sink``), ``multi`` (Debezium
events of two tables in ``WORK/events`` into data source ``Shop``), ``plain`` (rows in
``WORK/plain`` appended to data source ``Events`` by an ``Insert``), ``multi-changes``
(change sets of two tables in ``WORK/changes``, split by ``prepare=``, into ``Shop``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

#: The variable naming a Spark Connect server for these steps (``sc://127.0.0.1:15002``).
CONNECT_URL = "TABHYPER_TEST_CONNECT"


def public_round_trip(spark: Any, changes: Any, client: Any) -> dict[str, Any]:
    """Key 9 built with ``staging="driver"`` and applied through the public routes only;
    how often each was taken."""
    from tabhyper_update import build_payload
    from tabhyper_update.local import spark_versions

    taken = {"rows": 0, "computed": 0}
    saved = spark_versions.arrow_route, spark_versions.can_observe

    def rows_only(frame: Any) -> str:
        taken["rows"] += 1
        return "rows"

    def never(frame: Any) -> bool:
        taken["computed"] += 1
        return False

    setattr(spark_versions, "arrow_route", rows_only)  # noqa: B010 (a module patched)
    setattr(spark_versions, "can_observe", never)  # noqa: B010
    try:
        df = spark.createDataFrame(
            [(9, "g", 70, "I", 1)], "id long, name string, qty int, op string, seq long"
        )
        payload = build_payload(df, changes, staging="driver")
        result = payload.upload("Orders", client=client).apply(target_table="Extract")
    finally:
        setattr(spark_versions, "arrow_route", saved[0])  # noqa: B010
        setattr(spark_versions, "can_observe", saved[1])  # noqa: B010
    return {"jobs": len(result.jobs), **taken}


def main(argv: list[str]) -> int:
    from pyspark.sql import SparkSession

    from tabhyper_update import (
        ChangeSet,
        Insert,
        PersonalAccessToken,
        TabHyperError,
        TableauClient,
        build_payload,
    )
    from tabhyper_update.streaming import Debezium, TableauSink

    from ._streaming import PAT, SCHEMA, uncommit_last

    url, work_dir, *steps = argv
    work = Path(work_dir)
    # A server of the caller's (TABHYPER_TEST_CONNECT: sc://host:port), else pyspark's own
    # local one (shipped with pyspark 4).
    given = os.environ.get(CONNECT_URL)
    builder = SparkSession.builder.remote(given or "local[2]")
    if not given:
        # The local server runs as the suite's own session does (conftest.py): its quick
        # compiler only, its few-row queries evaluated without generated code.
        builder = (
            builder.config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
            .config("spark.sql.codegen.wholeStage", "false")
            .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
        )
    spark = builder.getOrCreate()
    client = TableauClient(url, "", PersonalAccessToken(*PAT))
    changes = ChangeSet("id", op_column="op", order_by="seq")

    def sink(sink_id: str | None) -> TableauSink:
        return TableauSink(
            "Orders",
            changes,
            client=client,
            target_table="Extract",
            state_dir=work / "state",
            sink_id=sink_id,
        )

    def writer() -> Any:
        return (
            spark.readStream.schema(SCHEMA)
            .json(str(work / "in"))
            .selectExpr("id", "name", "qty", "op", "seq")
            .writeStream.option("checkpointLocation", str(work / "checkpoint"))
            .trigger(availableNow=True)
        )

    def stream(reader: Any, folder: str) -> Any:
        """``reader``'s stream once through ``WORK/folder``, checkpointed beside it."""
        return (
            reader(str(work / folder))
            .writeStream.option("checkpointLocation", str(work / f"{folder}-checkpoint"))
            .trigger(availableNow=True)
        )

    def run(running: TableauSink, writer: Any) -> Any:
        """Start the sink's query, wait for it; what the batches recorded."""
        query = running.start(writer)
        running.await_termination(query, timeout=240)
        return running.progress()

    for step in steps:
        said: dict[str, Any] = {"step": step, "connect": type(spark).__module__}
        try:
            if step in ("roundtrip", "roundtrip-driver"):
                key = 7 if step == "roundtrip" else 8
                df = spark.createDataFrame(
                    [(key, "g", 70, "I", 1)], "id long, name string, qty int, op string, seq long"
                )
                payload = build_payload(
                    df, changes, staging="shared" if step == "roundtrip" else "driver"
                )
                result = payload.upload("Orders", client=client).apply(target_table="Extract")
                said["jobs"] = len(result.jobs)
            elif step == "roundtrip-public":
                # As pyspark 3.x's Connect client meets a server: no Observation and no Arrow
                # stream the SDK can ask for, so the public routes (rows to the driver made
                # into batches, the aggregates computed by a job of their own).
                said.update(public_round_trip(spark, changes, client))
            elif step == "no-sink-id":
                sink(None).start(writer())
            elif step == "plain":
                # A plain stream: each batch's rows appended by the caller's own action.
                appender = TableauSink(
                    "Events",
                    actions=[Insert(source_table="Extract", target_table="Extract")],
                    client=client,
                    sink_id="events",
                    state_dir=work / "state",
                )
                reader = spark.readStream.schema("id BIGINT, what STRING").json
                said["progress"] = run(appender, stream(reader, "plain"))
            elif step == "multi-changes":
                # Change sets of two tables in one stream, split by the caller's prepare=.
                def split(batch: Any) -> dict[str, Any]:
                    rows = batch.selectExpr("id", "a", "b", "op", "seq")
                    return {
                        "Sales": rows.where("tbl = 'Sales'"),
                        "Customers": rows.where("tbl = 'Customers'"),
                    }

                by_table = ChangeSet("id", op_column="op", order_by="seq")
                shop = TableauSink(
                    "Shop",
                    {"Sales": by_table, "Customers": by_table},
                    client=client,
                    prepare=split,
                    sink_id="shop-changes",
                    state_dir=work / "state",
                )
                ddl = "tbl STRING, id BIGINT, a STRING, b BIGINT, op STRING, seq BIGINT"
                said["progress"] = run(shop, stream(spark.readStream.schema(ddl).json, "changes"))
            elif step == "multi":
                # Debezium events of two tables, each routed by its source.table.
                described = Debezium("id BIGINT, a STRING, b BIGINT", key="id")
                shop = TableauSink(
                    "Shop",
                    {"Sales": described, "Customers": described},
                    client=client,
                    sink_id="shop",
                    state_dir=work / "state",
                )
                said["progress"] = run(shop, stream(spark.readStream.text, "events"))
            else:
                if step == "replay":
                    said["uncommitted"] = uncommit_last(work / "checkpoint")
                running = sink("orders-sink")
                said["progress"] = run(running, writer())
                said["counts_here"] = running.counts
        except Exception as err:
            said["error"] = type(err).__name__
            said["message"] = str(err).splitlines()[0]
            said["ours"] = isinstance(err, TabHyperError)
            said["job_id"] = getattr(err, "job_id", None)
        print(json.dumps(said), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main(sys.argv[1:]))

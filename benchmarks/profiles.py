"""Benchmark: every server profile of the fake against the scenarios a CDC job meets, with the
REST calls and VizQL Data Service queries each costs.

    python benchmarks/profiles.py [--rows 20000] [--keys 1000]

One local Spark session; per profile (``ideal``, ``server-2021.4``, ``server-2025.1``,
``cloud``) a fresh fake server holding a data source of ``--rows`` rows, then in turn:

- ``update``: a change set of ``--keys`` keys (upserts and deletes) applied and checked
  (``apply(verify=True)`` where the profile has the service);
- ``cap``: a change set of every row, one part over the profile's update cap (the cap
  lowered to 0.25 MB so that it stays quick): split after the server's 413, applied whole;
- ``busy``: an update sent while someone else's refresh of the data source runs for 1 s;
- ``shared PAT``: two clients with one PAT updating two data sources at once;
- ``reconcile``: the data source against its source with one drifted row.

Each line says whether the data source then holds what it should, and what it cost.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from tabhyper_update import (
    ChangeSet,
    PersonalAccessToken,
    TableauClient,
    build_payload,
    reconcile,
)
from tabhyper_update.local.hyper import connect
from tabhyper_update.testing import FakeTableauServer, local_spark
from tabhyper_update.testing.files import make_hyper
from tabhyper_update.testing.profiles import PROFILES
from tabhyper_update.values.errors import DataServiceError
from tabhyper_update.values.policies import PollPolicy, RetryPolicy

PAT = ("bench", "bench-secret")
TABLE = '"Extract"."Extract"'
COLUMNS = "id BIGINT NOT NULL, name TEXT, qty BIGINT"
SERVICE_ROUTES = ("read_metadata", "query_datasource", "service_health")


def _client(server: FakeTableauServer) -> TableauClient:
    return TableauClient(
        server.url,
        "",
        PersonalAccessToken(*PAT),
        retry=RetryPolicy(initial_wait=0.05, max_total_seconds=60),
        poll=PollPolicy(initial=0.02, maximum=0.2, timeout=120),
    )


def _start(path: Path, rows: int) -> Path:
    make_hyper(path, {"Extract": (COLUMNS, [])})
    with connect(path) as conn:
        conn.execute_command(
            f"INSERT INTO {TABLE} SELECT i, 'n' || i, i * 3 "
            f"FROM generate_series(0, {rows - 1}) s(i)"
        )
    return path


def _changes(spark: Any, first: int, keys: int, seq: int) -> Any:
    return spark.range(first, first + keys).selectExpr(
        "id",
        f"concat('v{seq}-', id) AS name",
        "id * 7 AS qty",
        "CASE WHEN id % 10 = 0 THEN 'D' ELSE 'U' END AS op",
        f"CAST({seq} AS BIGINT) AS seq",
    )


def _holds(server: FakeTableauServer, luid: str, spark: Any, source: Any) -> bool:
    with connect(server.datasource_path(luid)) as conn:
        got = sorted(tuple(r) for r in conn.execute_list_query(f"SELECT * FROM {TABLE}"))
    want = sorted(tuple(r) for r in source.collect())
    return got == want


class Costs:
    """REST calls and service requests a scenario made (the fake's own counts)."""

    def __init__(self, server: FakeTableauServer) -> None:
        self.server = server
        self.before = dict(server.counts)
        self.started = time.perf_counter()

    def done(self) -> dict[str, Any]:
        diff = {k: v - self.before.get(k, 0) for k, v in self.server.counts.items()}
        service = sum(diff.get(r, 0) for r in SERVICE_ROUTES)
        return {
            "rest": sum(diff.values()) - service,
            "service": service,
            "queries": diff.get("query_datasource", 0),
            "seconds": round(time.perf_counter() - self.started, 2),
        }


def run_profile(name: str, spark: Any, rows: int, keys: int, folder: Path) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    cs = ChangeSet("id", op_column="op", order_by="seq")
    server = FakeTableauServer(profile=name, pats={PAT[0]: PAT[1]}).start()
    try:
        start = _start(folder / f"{name}.hyper", rows)
        luid = server.add_datasource("Orders", start)
        other = server.add_datasource("Returns", start)
        source = spark.range(rows).selectExpr("id", "concat('n', id) AS name", "id * 3 AS qty")
        has_service = server.profile.data_service is not None

        def apply_changes(first: int, count: int, seq: int, client: TableauClient) -> Any:
            nonlocal source
            frame = _changes(spark, first, count, seq)
            result = client.update_datasource(
                "Orders",
                build_payload(frame, cs),
                state_dir=folder / f"state-{name}",
                progress=False,
                verify=has_service,
            )
            kept = source.join(frame.select("id"), "id", "left_anti")
            source = kept.unionByName(frame.where("op = 'U'").select("id", "name", "qty")).persist()
            return result

        # update (and check)
        costs = Costs(server)
        with _client(server) as client:
            result = apply_changes(0, keys, 1, client)
        row = {"scenario": "update", **costs.done(), "parts": len(result.parts)}
        row["ok"] = _holds(server, luid, spark, source) and (
            not has_service or bool(result.readback and result.readback.ok)
        )
        results.append(row)

        # cap: one part over the cap
        server.max_upload_mb = 0.25
        costs = Costs(server)
        with _client(server) as client:
            result = apply_changes(0, rows, 2, client)
        row = {"scenario": "cap (0.25 MB)", **costs.done(), "parts": len(result.parts)}
        row["ok"] = _holds(server, luid, spark, source)
        results.append(row)
        server.max_upload_mb = server.profile.max_upload_mb

        # busy: a refresh runs for 1 s
        server.start_refresh(luid, 1.0)
        costs = Costs(server)
        with _client(server) as client:
            result = apply_changes(keys, 10, 3, client)
        row = {"scenario": "busy (refresh 1 s)", **costs.done(), "parts": len(result.parts)}
        row["ok"] = _holds(server, luid, spark, source)
        results.append(row)

        # shared PAT: two clients, two data sources, at once
        costs = Costs(server)
        errors: list[BaseException] = []

        def other_job() -> None:
            try:
                with _client(server) as client:
                    for i in range(3):
                        client.update_datasource(
                            "Returns",
                            build_payload(_changes(spark, i * 10, 10, i + 1), cs),
                            state_dir=folder / f"state-{name}-other",
                            progress=False,
                        )
            except BaseException as err:  # reported in the row
                errors.append(err)

        thread = threading.Thread(target=other_job)
        thread.start()
        with _client(server) as client:
            for i in range(3):
                apply_changes(keys + 100 + i * 10, 10, 4 + i, client)
        thread.join(120)
        row = {"scenario": "shared PAT", **costs.done(), "parts": 6}
        row["ok"] = not errors and _holds(server, luid, spark, source)
        row["ok"] = row["ok"] and server.jobs_run[other] == 3
        results.append(row)

        # reconcile, one drifted row
        with connect(server.datasource_path(luid)) as conn:
            conn.execute_command(f"UPDATE {TABLE} SET qty = qty + 1 WHERE id = {rows - 7}")
        costs = Costs(server)
        with _client(server) as client:
            try:
                report = reconcile(source, "Orders", key="id", client=client)
                ok = report.keys() == [(rows - 7,)]
            except DataServiceError:
                ok = not has_service  # the expected answer of a server without the service
        results.append({"scenario": "reconcile (1 drifted)", **costs.done(), "ok": ok})
    finally:
        server.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=1_000)
    args = parser.parse_args()
    with local_spark() as spark:
        _run(spark, args.rows, args.keys)


def _run(spark: Any, rows: int, keys: int) -> None:
    print(f"{rows} rows in the data source, {keys} keys per update")
    print(
        f"{'profile':15} {'scenario':22} {'ok':>3} {'REST':>5} {'VDS':>4} {'queries':>7} "
        f"{'parts':>5} {'s':>6}"
    )
    with TemporaryDirectory() as tmp:
        for name in PROFILES:
            for row in run_profile(name, spark, rows, keys, Path(tmp)):
                print(
                    f"{name:15} {row['scenario']:22} {'yes' if row['ok'] else 'NO':>3} "
                    f"{row['rest']:5} {row['service']:4} {row['queries']:7} "
                    f"{row.get('parts', ''):>5} {row['seconds']:6.2f}"
                )


if __name__ == "__main__":
    main()

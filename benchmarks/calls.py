"""Benchmark: REST calls per warm update, and how late the end of its job is noticed.

    python benchmarks/calls.py [--job-seconds 1 5 15] [--updates 4]

One local Spark session and one fake server on 127.0.0.1 whose jobs take ``--job-seconds``
(each a data source of its own). Per job time, one client sends ``--updates`` one-part
change sets of 100 rows in turn; the first is cold (it looks the data source up and learns
nothing yet), the others are warm. For each warm update: the REST calls the server saw
(sign-in aside), and the seconds between the job's end on the server and the update's return
to the caller, against the job's own time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from tabhyper_update import ChangeSet, PersonalAccessToken, TableauClient, build_payload
from tabhyper_update.testing import FakeTableauServer, local_spark
from tabhyper_update.testing.files import make_hyper

PAT = ("bench", "bench-secret")
SERVICE_ROUTES = ("read_metadata", "query_datasource", "service_health")


def _changes(spark: Any, seq: int) -> Any:
    return spark.range(seq * 100, seq * 100 + 100).selectExpr(
        "id", "concat('v', id) AS name", "'U' AS op", f"CAST({seq} AS BIGINT) AS seq"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--job-seconds", type=float, nargs="+", default=[1.0, 5.0, 15.0])
    parser.add_argument("--updates", type=int, default=4)
    args = parser.parse_args()
    cs = ChangeSet("id", op_column="op", order_by="seq")
    with local_spark() as spark, TemporaryDirectory() as tmp:
        start = make_hyper(
            Path(tmp) / "s.hyper", {"Extract": ("id BIGINT NOT NULL, name TEXT", [])}
        )
        with FakeTableauServer(pats={PAT[0]: PAT[1]}) as server:
            client = TableauClient(server.url, "", PersonalAccessToken(*PAT))
            client.sign_in()
            for seconds in args.job_seconds:
                name = f"Jobs{seconds:g}s"
                luid = server.add_datasource(name, start)
                server.job_delay = seconds
                calls: list[int] = []
                late: list[float] = []
                for n in range(args.updates):
                    payload = build_payload(_changes(spark, n), cs)
                    before = dict(server.counts)
                    client.update_datasource(
                        name, payload, state_dir=Path(tmp) / "state", progress=False
                    )
                    returned = time.time()
                    diff = {k: v - before.get(k, 0) for k, v in server.counts.items()}
                    made = sum(v for k, v in diff.items() if k not in (*SERVICE_ROUTES, "signin"))
                    ended = max(
                        j.finished_at
                        for j in server.backend.jobs.values()
                        if j.datasource.id == luid and j.finished_at is not None
                    )
                    if n:  # warm
                        calls.append(made)
                        late.append(returned - ended)
                    else:
                        print(
                            f"job {seconds:g} s, cold: {made} calls, {returned - ended:.2f} s late"
                        )
                print(
                    f"job {seconds:g} s, warm: calls {calls} (most {max(calls)}); noticed "
                    f"{', '.join(f'{x:.2f}' for x in late)} s late, median "
                    f"{statistics.median(late):.2f} s = {statistics.median(late) / seconds:.1%} "
                    "of the job"
                )
            client.close()


if __name__ == "__main__":
    main()

"""Benchmark: a CDC micro-batch through the SDK against a minimal hand-built pipeline.

    python benchmarks/micro_batch.py                  # 1,000 changes, batches 3-7 and 18-22
    python benchmarks/micro_batch.py --changes 10000
    python benchmarks/micro_batch.py --staging shared # the SDK staging in a shared folder
    python benchmarks/micro_batch.py --pause 0.3      # quiet before each path, as in a stream
    python benchmarks/micro_batch.py --shared-source  # both paths read one DataFrame

One Spark session (``local[2]``) and one fake server on 127.0.0.1 holding two copies of the
same 100,000-row data source. Each micro-batch (1,000 changes of a later slice of the feed:
updates, inserts, deletes, several changes per key) goes to one copy through the SDK's one
line, ``build_payload(df, ChangeSet(...)).upload(ds).apply()``, and to the other through the
baseline, the least a hand-rolled job does for the same result:

* last change per key without a shuffle: the raw changes come to the driver with
  ``toArrow()`` and Hyper ranks them while it copies them (``COPY ... arrowstream``) into an
  ``upserts`` and a ``deletes`` table;
* one raw initiate, one raw append and the raw PATCH with the same two actions (delete by
  key, upsert by key), then a poll every 2 ms until the job is done.

Each path reads its own DataFrame of the batch's changes, the same rows from code that
differs in one operand's sign (``base + id`` against ``id - (-base)``), so each compiles its
own source, as a job alone would: Spark's code cache is keyed by the generated code's text,
and a shared DataFrame's source was compiled by whichever path ran first and taken from the
cache by the other. With five batches a window and the order switching every batch, that
charged the compile to the SDK in three fresh batches of five and to the baseline in three
hot batches of five (``--shared-source`` measures that way). The two paths alternate (which
goes first switches every batch). Figures: the median of
batches 3-7 of the session ("fresh") and of batches 18-22 ("hot", the JVM compiled), the
ratio SDK / baseline of each, the steps of both and the CPU seconds each path used (the
Spark JVM, Hyper, and this process, which runs the fake server too). At the end both
copies must hold the same rows, or the run fails: the baseline is only a baseline if it
does the same work.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from cpu_clock import CpuClock, jvm_pid  # noqa: E402  (beside this file)

TARGET_ROWS = 100_000
FRESH = range(3, 8)
HOT = range(18, 23)
COLUMNS = "order_id BIGINT NOT NULL, status TEXT, amount DOUBLE PRECISION, day DATE"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=1000, help="changes per micro-batch")
    parser.add_argument("--staging", choices=["auto", "shared", "driver"], default="auto")
    parser.add_argument(
        "--pause",
        type=float,
        default=0.0,
        help="seconds of quiet before each path (a stream's trigger interval): the JVM's "
        "background compiling for one path then does not run into the other's time",
    )
    parser.add_argument(
        "--shared-source",
        action="store_true",
        help="both paths read one DataFrame per batch: the first compiles its source's code "
        "and the second takes it from Spark's cache",
    )
    args = parser.parse_args()

    import shutil

    from tabhyper_update.testing import local_spark

    work = Path(tempfile.mkdtemp(prefix="tabhyper-micro-"))
    try:
        with local_spark() as spark:
            run(spark, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def start_file(path: Path) -> Path:
    from tabhyper_update.local.hyper import connect

    with connect(path, create=True) as conn:
        conn.execute_command('CREATE SCHEMA "Extract"')
        conn.execute_command(f'CREATE TABLE "Extract"."Extract" ({COLUMNS})')
        conn.execute_command(
            'INSERT INTO "Extract"."Extract" SELECT i, \'seed\', CAST(i AS DOUBLE PRECISION), '
            f"DATE '2024-01-01' FROM generate_series(0, {TARGET_ROWS - 1}) AS g(i)"
        )
    return path


def batch(spark: Any, index: int, changes: int, *, twin: bool = False) -> Any:
    """A later slice of the feed each time: new positions, several changes per key.

    ``twin``: the same rows from code of another text (``seq`` as ``id - (-base)``, which the
    optimizer keeps as written; it turns ``base + id`` into ``id + base``), so Spark compiles
    it apart from the other's."""
    base = index * changes * 10
    seq = f"id - ({-base})" if twin else f"{base} + id"
    return spark.range(changes).selectExpr(
        f"(id * 7919 + {index}) % {TARGET_ROWS} AS order_id",
        "CONCAT('status-', CAST((id + 3 * order_id) % 5 AS STRING)) AS status",
        f"CAST(id * 1.5 + {index} AS DOUBLE) AS amount",
        "DATE_ADD(DATE'2024-01-01', CAST(id % 365 AS INT)) AS day",
        "CASE id % 10 WHEN 0 THEN 'D' WHEN 1 THEN 'I' ELSE 'U' END AS op",
        f"{seq} AS seq",
    )


class Baseline:
    """The hand-rolled pipeline: toArrow → Hyper → raw initiate, append, PATCH, 2 ms polls."""

    def __init__(self, client: Any, luid: str, work: Path) -> None:
        import requests

        self.http = requests.Session()
        # Signed in once by the SDK's client; everything after is raw requests.
        self.http.headers.update(
            {"X-Tableau-Auth": client._ensure_signed_in(), "Accept": "application/json"}
        )
        self.base = f"{client.server}/{client._site_path('')}"
        self.luid = luid
        self.work = work
        #: The last call's steps in seconds: Spark (``toArrow``), Hyper, send (upload to done).
        self.steps: dict[str, float] = {}

    def __call__(self, df: Any) -> None:
        import pyarrow as pa

        from tabhyper_update.local.hyper import connect

        arrow_file = self.work / "changes.arrows"
        started = time.perf_counter()
        table = df.toArrow()
        arrowed = time.perf_counter()
        with (
            pa.OSFile(str(arrow_file), "wb") as sink,
            pa.ipc.new_stream(sink, table.schema) as writer,
        ):
            writer.write_table(table)
        payload = self.work / "baseline.hyper"
        with connect(payload, create=True) as conn:
            conn.execute_command('CREATE SCHEMA "Extract"')
            conn.execute_command(
                "CREATE TEMPORARY TABLE changes (order_id BIGINT, status TEXT, "
                "amount DOUBLE PRECISION, day DATE, op TEXT, seq BIGINT)"
            )
            conn.execute_command(f"COPY changes FROM '{arrow_file}' WITH (FORMAT arrowstream)")
            latest = (
                "(SELECT *, ROW_NUMBER() OVER (PARTITION BY order_id ORDER BY seq DESC) AS n "
                "FROM changes) AS c WHERE n = 1"
            )
            conn.execute_command(
                'CREATE TABLE "Extract"."upserts" AS SELECT order_id, status, amount, day '
                f"FROM {latest} AND op <> 'D'"
            )
            conn.execute_command(
                f'CREATE TABLE "Extract"."deletes" AS SELECT order_id FROM {latest} AND op = \'D\''
            )
        written = time.perf_counter()
        self.send(payload)
        self.steps = {
            "spark": arrowed - started,
            "hyper": written - arrowed,
            "send": time.perf_counter() - written,
        }

    def send(self, payload: Path) -> None:
        from tabhyper_update.rest.uploads import multipart_framing

        answer = self.http.post(self.base + "fileUploads")
        answer.raise_for_status()
        session = answer.json()["fileUpload"]["uploadSessionId"]
        boundary = uuid.uuid4().hex
        head, tail = multipart_framing(boundary)
        answer = self.http.put(
            f"{self.base}fileUploads/{session}",
            data=head + payload.read_bytes() + tail,
            headers={"Content-Type": f"multipart/mixed; boundary={boundary}"},
        )
        answer.raise_for_status()
        key = {"op": "eq", "target-col": "order_id", "source-col": "order_id"}
        tables = {"target-schema": "Extract", "target-table": "Extract", "source-schema": "Extract"}
        actions = [
            {"action": "delete", **tables, "source-table": "deletes", "condition": key},
            {"action": "upsert", **tables, "source-table": "upserts", "condition": key},
        ]
        answer = self.http.patch(
            f"{self.base}datasources/{self.luid}/data",
            params={"uploadSessionId": session},
            json={"actions": actions},
            headers={"RequestID": str(uuid.uuid4())},
        )
        answer.raise_for_status()
        job = answer.json()["job"]["id"]
        while True:
            state = self.http.get(f"{self.base}jobs/{job}").json()["job"]
            if state.get("finishCode") is not None:
                if str(state["finishCode"]) not in ("0", "3"):
                    raise RuntimeError(f"baseline job failed: {state}")
                return
            time.sleep(0.002)


def run(spark: Any, args: argparse.Namespace, work: Path) -> None:
    from tabhyper_update import ChangeSet, PersonalAccessToken, TableauClient, build_payload
    from tabhyper_update.testing import FakeTableauServer
    from tabhyper_update.testing.files import read_table

    changes = ChangeSet("order_id", op_column="op", order_by="seq")
    with FakeTableauServer(pats={"bench": "bench-secret"}, directory=work / "server") as server:
        sdk_luid = server.add_datasource("Orders", start_file(work / "a.hyper"))
        twin_luid = server.add_datasource("OrdersTwin", start_file(work / "b.hyper"))
        with TableauClient(server.url, "", PersonalAccessToken("bench", "bench-secret")) as client:
            client.sign_in()
            baseline = Baseline(client, twin_luid, work)
            ds = client.datasource("Orders")
            sdk_times: dict[int, float] = {}
            base_times: dict[int, float] = {}
            base_steps: dict[int, dict[str, float]] = {}
            steps: dict[int, dict[str, float]] = {}
            clock = CpuClock(jvm_pid(spark))
            cpu: dict[str, dict[int, dict[str, float]]] = {"SDK": {}, "baseline": {}}
            # Classes Spark's code generator compiled (Janino), per path and batch.
            codegen = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics
            compiled = codegen.METRIC_COMPILATION_TIME()
            classes: dict[str, dict[int, int]] = {"SDK": {}, "baseline": {}}

            def sdk(df: Any, i: int) -> None:
                started = time.perf_counter()
                payload = build_payload(df, changes, staging=args.staging)
                built = time.perf_counter()
                result = payload.upload(ds).apply()
                sdk_times[i] = time.perf_counter() - started
                assert not result.deduplicated
                seconds = result.parts[0].seconds
                steps[i] = {"build": built - started, **seconds}

            def hand(df: Any, i: int) -> None:
                started = time.perf_counter()
                baseline(df)
                base_times[i] = time.perf_counter() - started
                base_steps[i] = baseline.steps

            for i in range(1, max(HOT) + 1):
                df = batch(spark, i, args.changes)
                twin = df if args.shared_source else batch(spark, i, args.changes, twin=True)
                for path in (sdk, hand) if i % 2 else (hand, sdk):
                    time.sleep(args.pause)
                    who = "SDK" if path is sdk else "baseline"
                    before, count = clock.now(), int(compiled.getCount())
                    path(df if path is sdk else twin, i)
                    after = clock.now()
                    classes[who][i] = int(compiled.getCount()) - count
                    if before is not None and after is not None:
                        cpu[who][i] = {k: after[k] - before[k] for k in after}
            server.wait_idle()
            ours = read_table(server.datasource_path(sdk_luid), "Extract")
            theirs = read_table(server.datasource_path(twin_luid), "Extract")
            if ours != theirs:
                raise SystemExit("the SDK's and the baseline's data sources differ")

    print(
        f"micro-batch of {args.changes:,} changes into a {TARGET_ROWS:,}-row data source "
        f"(staging={args.staging!r}, pause {args.pause:g} s, "
        f"{'one source for both' if args.shared_source else 'a source each'}); "
        "both copies equal after "
        f"{max(HOT)} batches "
        f"({len(ours):,} rows)"
    )
    for label, which in (("fresh (batches 3-7)", FRESH), ("hot (batches 18-22)", HOT)):
        ours_s = statistics.median(sdk_times[i] for i in which)
        base_s = statistics.median(base_times[i] for i in which)
        print(f"  {label}")
        print(f"    {'SDK, median':<40} {ours_s:7.3f} s")
        print(f"    {'baseline, median':<40} {base_s:7.3f} s")
        print(f"    => SDK / baseline: {ours_s / base_s:.2f}x  (goal <= 1.5x)")
        for step in ("build", "upload", "submit", "wait"):
            value = statistics.median(steps[i].get(step, 0.0) for i in which)
            print(f"      {'SDK ' + step + ', median':<38} {value:7.3f} s")
        for step in ("spark", "hyper", "send"):
            value = statistics.median(base_steps[i][step] for i in which)
            print(f"      {'baseline ' + step + ', median':<38} {value:7.3f} s")
        for who, counts in classes.items():
            title = f"{who} classes compiled, per batch"
            print(f"      {title:<38} {' '.join(str(counts[i]) for i in which)}")
        for who, by_batch in cpu.items():
            if not by_batch:
                continue
            each = {k: statistics.median(by_batch[i][k] for i in which) for k in by_batch[which[0]]}
            parts = ", ".join(f"{k} {v:.2f}" for k, v in each.items())
            title = f"{who} CPU seconds, median"
            print(f"      {title:<38} {sum(each.values()):7.3f}   ({parts})")


if __name__ == "__main__":
    main()

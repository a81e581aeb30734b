"""Benchmark: what decoding Debezium's encodings costs a build.

    python benchmarks/debezium_decoding.py                 # 1M events, 3 rounds
    python benchmarks/debezium_decoding.py --events 200000 --rounds 5
    python benchmarks/debezium_decoding.py --schemas off    # one form of the events only
    python benchmarks/debezium_decoding.py --spark-defaults  # a JVM as Spark starts it

The same 1,000,000 change events (one create each, a key, a name, and three columns) in two
forms, each with the JSON converter's schemas off and on: *encoded* as a PostgreSQL connector
with default settings writes a ``NUMERIC(10, 2)``, a ``DATE`` and a ``TIMESTAMP(6)``
(``Decimal`` as base64 bytes, ``Date`` as days, ``MicroTimestamp`` as microseconds), declared
``DECIMAL(10, 2)``, ``DATE`` and ``TIMESTAMP``; and *plain*: the same columns as a JSON number,
a text and a number, declared ``DOUBLE``, ``STRING`` and ``BIGINT`` (nothing to decode). The
events are written once as Parquet files of a ``value`` column (as a Kafka source gives
them), then each form's ``build_payload(Debezium(...).changes(events), ...)`` is timed in the
same Spark session (``local[2]``), alternating, after a warm-up of each; the median of each
and the ratio encoded / plain are printed, and the decoded values are checked against the
plain ones. Beside the wall time, each build's CPU seconds (the JVM, ``hyperd`` and this
process: steadier than wall time on a busy machine) and their ratio. The session's JVM
compiles methods of any size, as the sessions the SDK starts do; ``--spark-defaults`` starts
it as Spark does (a build then runs the decoding's stage operator by operator).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from cpu_clock import CpuClock, jvm_pid  # beside this file

#: Spark SQL of the three columns, per form (``id`` is the event's number).
ENCODED = {
    # The unscaled value (id * 7 % 10^9, two decimal places) as its minimal two's-complement
    # bytes (positive: a leading zero byte where the top bit is set), in base64.
    "amount": ("base64(unhex(CASE WHEN substr(h, 1, 1) >= '8' THEN concat('00', h) ELSE h END))"),
    "day": "CAST(id % 20000 AS INT)",
    "created": "1600000000000000 + id * 1000003",
}
PLAIN = {
    "amount": "CAST((id * 7 % 1000000000) / 100.0 AS DOUBLE)",
    "day": "CAST(date_add(DATE '1970-01-01', CAST(id % 20000 AS INT)) AS STRING)",
    "created": "1600000000000000 + id * 1000003",
}
ROWS = {
    "encoded": "id BIGINT, name STRING, amount DECIMAL(10, 2), day DATE, created TIMESTAMP",
    "plain": "id BIGINT, name STRING, amount DOUBLE, day STRING, created BIGINT",
}
#: The field schemas a schema wrapper carries, per form.
SCHEMAS: dict[str, list[tuple[str, str | None, str]]] = {
    "encoded": [
        ("bytes", "org.apache.kafka.connect.data.Decimal", "amount"),
        ("int32", "io.debezium.time.Date", "day"),
        ("int64", "io.debezium.time.MicroTimestamp", "created"),
    ],
    "plain": [("double", None, "amount"), ("string", None, "day"), ("int64", None, "created")],
}


def events(spark: Any, form: str, count: int, wrapped: bool) -> Any:
    """``count`` events of ``form`` as a DataFrame of one ``value`` column of JSON text."""
    columns = ENCODED if form == "encoded" else PLAIN
    after = (
        "named_struct('id', id, 'name', concat('item-', id), "
        + ", ".join(f"'{name}', {sql}" for name, sql in columns.items())
        + ")"
    )
    envelope = (
        f"named_struct('before', CAST(NULL AS STRING), 'after', {after}, 'op', 'c', "
        "'ts_ms', 1714554000000 + id, 'source', named_struct('lsn', 24000000 + id, "
        "'table', 'orders'))"
    )
    df = spark.range(count).selectExpr(
        "id", "conv(CAST(id * 7 % 1000000000 AS STRING), 10, 16) AS h0"
    )
    df = df.selectExpr("id", "CASE WHEN length(h0) % 2 = 1 THEN concat('0', h0) ELSE h0 END AS h")
    if not wrapped:
        return df.selectExpr(f"to_json({envelope}) AS value")
    # One struct type for every field (Spark's arrays hold one type): a field without a
    # semantic name or parameters holds NULLs there, which to_json leaves out.
    fields = ", ".join(
        f"named_struct('type', '{kind}', 'optional', true, 'field', '{field}', "
        + (f"'name', '{name}', " if name else "'name', CAST(NULL AS STRING), ")
        + (
            "'parameters', map('scale', '2'))"
            if field == "amount" and name
            else "'parameters', CAST(NULL AS MAP<STRING, STRING>))"
        )
        for kind, name, field in SCHEMAS[form]
    )
    # The envelope's schema: before and after each with the columns' field schemas.
    schema = (
        "named_struct('type', 'struct', 'fields', array("
        f"named_struct('type', 'struct', 'field', 'before', 'fields', array({fields})), "
        f"named_struct('type', 'struct', 'field', 'after', 'fields', array({fields}))))"
    )
    return df.selectExpr(
        f"to_json(named_struct('schema', {schema}, 'payload', {envelope})) AS value"
    )


def build(
    spark: Any, folder: Path, form: str, work: Path, clock: CpuClock
) -> tuple[float, float, list[Any]]:
    """The build's wall seconds, its CPU seconds and a sample of its rows."""
    from tabhyper_update import build_payload
    from tabhyper_update.streaming import Debezium
    from tabhyper_update.testing.files import read_table

    settings: dict[str, Any] = {"units": {"created": "micros"}} if form == "encoded" else {}
    debezium = Debezium(ROWS[form], key="id", **settings)
    source = spark.read.parquet(str(folder))
    cpu_before = clock.now() or {}
    started = time.perf_counter()
    with build_payload(
        debezium.changes(source), debezium.change_set, staging_dir=work, progress=False
    ) as payload:
        took = time.perf_counter() - started
        cpu_after = clock.now() or {}
        sample = sorted(read_table(payload.parts[0].path, "upserts", order_by="1"))[:3]
    cpu = sum(cpu_after.values()) - sum(cpu_before.values())
    return took, cpu, sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--schemas", choices=["off", "on", "both"], default="both")
    parser.add_argument(
        "--spark-defaults",
        action="store_true",
        help="a JVM without the SDK's -XX:-DontCompileHugeMethods (a session of the user's own)",
    )
    args = parser.parse_args()

    from tabhyper_update.local.spark import own_spark

    work = Path(tempfile.mkdtemp(prefix="debezium-decoding-"))
    try:
        conf = {"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"}
        if args.spark_defaults:
            conf["spark.driver.extraJavaOptions"] = ""
        with own_spark("debezium-decoding", conf=conf) as spark:
            clock = CpuClock(jvm_pid(spark))
            wrappings = {"off": (False,), "on": (True,), "both": (False, True)}[args.schemas]
            for wrapped in wrappings:
                folders = {}
                for form in ("encoded", "plain"):
                    folders[form] = work / f"{form}-{wrapped}"
                    events(spark, form, args.events, wrapped).write.parquet(str(folders[form]))
                    build(spark, folders[form], form, work, clock)  # warm-up
                seconds: dict[str, list[float]] = {"encoded": [], "plain": []}
                cpu: dict[str, list[float]] = {"encoded": [], "plain": []}
                samples: dict[str, list[Any]] = {}
                for _ in range(args.rounds):
                    for form in ("encoded", "plain"):
                        took, used, samples[form] = build(spark, folders[form], form, work, clock)
                        seconds[form].append(took)
                        cpu[form].append(used)
                median = {f: statistics.median(s) for f, s in seconds.items()}
                cpu_median = {f: statistics.median(s) for f, s in cpu.items()}
                label = "schemas on" if wrapped else "schemas off"
                print(f"{args.events:,} events, {label}:", flush=True)
                for form, times in seconds.items():
                    shown = " / ".join(f"{t:.2f}" for t in times)
                    print(
                        f"  {form:>8}: median {median[form]:.2f} s ({shown}), "
                        f"CPU {cpu_median[form]:.2f} s"
                    )
                print(f"  encoded / plain: {median['encoded'] / median['plain']:.2f}x")
                if cpu_median["plain"]:
                    ratio = cpu_median["encoded"] / cpu_median["plain"]
                    print(f"  encoded / plain, CPU seconds: {ratio:.2f}x")
                for enc, plain in zip(samples["encoded"], samples["plain"], strict=True):
                    same_amount = abs(float(enc[2]) - plain[2]) < 0.005
                    same_day = str(enc[3]) == plain[3]
                    moment = enc[4].to_datetime() if hasattr(enc[4], "to_datetime") else enc[4]
                    epoch = datetime(1970, 1, 1)
                    same_time = (moment - epoch) // timedelta(microseconds=1) == plain[4]
                    if enc[0] != plain[0] or not (same_amount and same_day and same_time):
                        raise SystemExit(f"decoded {enc} differs from plain {plain}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

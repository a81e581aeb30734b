"""Benchmark: what decoding Debezium's encodings costs a build.

    python benchmarks/debezium_decoding.py                 # 1M events, 5 rounds
    python benchmarks/debezium_decoding.py --events 200000 --rounds 5
    python benchmarks/debezium_decoding.py --schemas off    # one form of the events only
    python benchmarks/debezium_decoding.py --spark-defaults  # a JVM as Spark starts it
    python benchmarks/debezium_decoding.py --text-columns 12  # a wide table's text too
    python benchmarks/debezium_decoding.py --schemas on --same-size  # decoding apart from size
    python benchmarks/debezium_decoding.py --schemas on --jvms 5 --rounds 3  # over 5 JVMs

The same 1,000,000 change events (one create each, a key, a name, and three columns, laid out
as the PostgreSQL connector writes them: its whole ``source`` block, the event's times, and
with schemas on the envelope's whole schema, both images, the source's and the
transaction's fields) in two forms, each with the JSON converter's schemas off and on:
*encoded* as a PostgreSQL connector
with default settings writes a ``NUMERIC(10, 2)``, a ``DATE`` and a ``TIMESTAMP(6)``
(``Decimal`` as base64 bytes, ``Date`` as days, ``MicroTimestamp`` as microseconds), declared
``DECIMAL(10, 2)``, ``DATE`` and ``TIMESTAMP``; and *plain*: the same columns as a JSON number,
a text and a number, declared ``DOUBLE``, ``STRING`` and ``BIGINT`` (nothing to decode). The
events are written once as Parquet files of a ``value`` column (as a Kafka source gives
them), then each form's ``build_payload(Debezium(...).changes(events), ...)`` is timed in the
same Spark session (``local[2]``), alternating, after two warm-ups of each; the median of
each and the ratio of the medians encoded / plain are printed, and the decoded values are
checked against the plain ones. Beside them, the median of each round's own ratio (its
encoded build over the plain build run right after it: a machine that slows down for a
while slows both), with the lowest and highest, which say how far one round can be trusted.
Beside the wall time, each build's CPU seconds (the JVM, ``hyperd`` and this process:
steadier than wall time on a busy machine) and their ratios. The session's JVM
compiles methods of any size, as the sessions the SDK starts do; ``--spark-defaults`` starts
it as Spark does (a build then runs the decoding's stage operator by operator).
``--text-columns N`` adds N text columns to both forms (the same short texts, declared
``STRING``), as most tables have: what a decoded column costs a wide table's build.

With schemas on, the encoded events are longer than the plain ones (their schema names each
encoding: a semantic type, a decimal's scale and precision), and reading an event costs by
its length. ``--same-size`` gives the plain events' schema a ``doc`` that makes it exactly
as long as the encoded one: the ratio is then the decoding's alone.

One JVM's ratio is not another's: the same build in a fresh JVM has taken from 1.12 to 1.40
times its plain events' time (each JVM compiles the code its own way). ``--jvms N`` runs the
whole measurement in N fresh JVMs, one after the other (each a run of this script), and
prints each JVM's ratio of medians and the median of those ratios.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
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
#: The columns' field schemas a schema wrapper carries, per form: Connect type, semantic
#: type, parameters.
SCHEMAS: dict[str, list[tuple[str, str, str | None, dict[str, str] | None]]] = {
    "encoded": [
        ("id", "int64", None, None),
        ("name", "string", None, None),
        (
            "amount",
            "bytes",
            "org.apache.kafka.connect.data.Decimal",
            {"scale": "2", "connect.decimal.precision": "10"},
        ),
        ("day", "int32", "io.debezium.time.Date", None),
        ("created", "int64", "io.debezium.time.MicroTimestamp", None),
    ],
    "plain": [
        ("id", "int64", None, None),
        ("name", "string", None, None),
        ("amount", "double", None, None),
        ("day", "string", None, None),
        ("created", "int64", None, None),
    ],
}
#: The PostgreSQL connector's ``source`` block: its fields' Connect types, and the Spark SQL
#: of each value (``id`` is the event's number).
SOURCE = [
    ("version", "string", "'2.7.0.Final'"),
    ("connector", "string", "'postgresql'"),
    ("name", "string", "'pg'"),
    ("ts_ms", "int64", "1714554000000 + id"),
    ("snapshot", "string", "'false'"),
    ("db", "string", "'shop'"),
    ("sequence", "string", "concat('[\"', 24000000 + id, '\",\"', 24000100 + id, '\"]')"),
    ("ts_us", "int64", "(1714554000000 + id) * 1000"),
    ("ts_ns", "int64", "(1714554000000 + id) * 1000000"),
    ("schema", "string", "'public'"),
    ("table", "string", "'orders'"),
    ("txId", "int64", "500 + id"),
    ("lsn", "int64", "24000100 + id"),
    ("xmin", "int64", "CAST(NULL AS BIGINT)"),
]


def add_text_columns(count: int) -> None:
    """``count`` more text columns in both forms: the same text, declared ``STRING``."""
    for k in range(count):
        name = f"note{k}"
        for form, columns in (("encoded", ENCODED), ("plain", PLAIN)):
            columns[name] = f"concat('note ', id % {k + 7})"
            SCHEMAS[form].append((name, "string", None, None))
            ROWS[form] += f", {name} STRING"


def schema_text(form: str) -> str:
    """The schema wrapper's ``schema`` as the PostgreSQL connector's JSON converter writes
    it: both images with every column, the ``source`` block, ``op``, the event times and
    ``transaction`` (compact, in the converter's key order)."""

    def column(name: str, kind: str, semantic: str | None, parameters: Any) -> dict[str, Any]:
        found: dict[str, Any] = {"type": kind, "optional": name != "id"}
        if semantic:
            found["name"] = semantic
            found["version"] = 1
        if parameters:
            found["parameters"] = parameters
        found["field"] = name
        return found

    image = {
        "type": "struct",
        "fields": [column(*c) for c in SCHEMAS[form]],
        "optional": True,
        "name": "pg.public.orders.Value",
    }
    source = {
        "type": "struct",
        "fields": [
            column(n, k, None, None) | {"optional": n in ("sequence", "txId", "lsn", "xmin")}
            for n, k, _ in SOURCE
        ],
        "optional": False,
        "name": "io.debezium.connector.postgresql.Source",
        "field": "source",
    }
    block = {
        "type": "struct",
        "fields": [
            {"type": "string", "optional": False, "field": "id"},
            {"type": "int64", "optional": False, "field": "total_order"},
            {"type": "int64", "optional": False, "field": "data_collection_order"},
        ],
        "optional": True,
        "name": "event.block",
        "version": 1,
        "field": "transaction",
    }
    envelope = {
        "type": "struct",
        "fields": [
            {**image, "field": "before"},
            {**image, "field": "after"},
            source,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {"type": "int64", "optional": True, "field": "ts_us"},
            {"type": "int64", "optional": True, "field": "ts_ns"},
            block,
        ],
        "optional": False,
        "name": "pg.public.orders.Envelope",
        "version": 2,
    }
    return json.dumps(envelope, separators=(",", ":"))


def padded(text: str, length: int) -> str:
    """The schema ``text`` with a ``doc`` (Kafka Connect's description of a schema) that
    makes it ``length`` characters long."""
    room = length - len(text) - len(',"doc":""')
    if room < 0:
        raise SystemExit(f"the plain schema ({len(text)}) is longer than the encoded one")
    grown = json.loads(text) | {"doc": "d" * room}
    made = json.dumps(grown, separators=(",", ":"))
    assert len(made) == length, (len(made), length)
    return made


def events(spark: Any, form: str, count: int, wrapped: bool, same_size: bool = False) -> Any:
    """``count`` events of ``form`` as a DataFrame of one ``value`` column of JSON text,
    laid out as the PostgreSQL connector and the JSON converter write them (``same_size``:
    the plain events' schema padded to the encoded one's length)."""
    columns = ENCODED if form == "encoded" else PLAIN
    after = (
        "named_struct('id', id, 'name', concat('item-', id), "
        + ", ".join(f"'{name}', {sql}" for name, sql in columns.items())
        + ")"
    )
    source = ", ".join(f"'{name}', {sql}" for name, _, sql in SOURCE)
    envelope = (
        f"named_struct('before', CAST(NULL AS STRING), 'after', {after}, "
        f"'source', named_struct({source}), 'op', 'c', 'ts_ms', 1714554000500 + id, "
        "'ts_us', (1714554000500 + id) * 1000, 'ts_ns', (1714554000500 + id) * 1000000, "
        "'transaction', CAST(NULL AS STRING))"
    )
    df = spark.range(count).selectExpr(
        "id", "conv(CAST(id * 7 % 1000000000 AS STRING), 10, 16) AS h0"
    )
    df = df.selectExpr("id", "CASE WHEN length(h0) % 2 = 1 THEN concat('0', h0) ELSE h0 END AS h")
    # Nulls written, as the converter writes them ("before":null).
    payload = f"to_json({envelope}, map('ignoreNullFields', 'false'))"
    if not wrapped:
        return df.selectExpr(f"{payload} AS value")
    from tabhyper_update.values.spark_sql import sql_text

    text = schema_text(form)
    if same_size and form == "plain":
        text = padded(text, len(schema_text("encoded")))
    prefix = '{"schema":' + text + ',"payload":'
    return df.selectExpr(f"concat({sql_text(prefix)}, {payload}, '}}') AS value")


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


def paired(what: str, taken: dict[str, list[float]]) -> str:
    """The median, lowest and highest of each round's ratio encoded / plain."""
    ratios = [e / p for e, p in zip(taken["encoded"], taken["plain"], strict=True) if p]
    if not ratios:
        return f"{what}: no round to pair"
    return (
        f"encoded / plain, {what}, round by round: median {statistics.median(ratios):.2f}x "
        f"({min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)} rounds)"
    )


def check_samples(samples: dict[str, list[Any]]) -> None:
    """The decoded rows equal the plain ones (an amount to the cent, a day, a moment)."""
    for enc, plain in zip(samples["encoded"], samples["plain"], strict=True):
        same_amount = abs(float(enc[2]) - plain[2]) < 0.005
        same_day = str(enc[3]) == plain[3]
        moment = enc[4].to_datetime() if hasattr(enc[4], "to_datetime") else enc[4]
        epoch = datetime(1970, 1, 1)
        same_time = (moment - epoch) // timedelta(microseconds=1) == plain[4]
        same_text = enc[5:] == plain[5:]
        if enc[0] != plain[0] or not (same_amount and same_day and same_time and same_text):
            raise SystemExit(f"decoded {enc} differs from plain {plain}")


def report(label: str, seconds: dict[str, list[float]], cpu: dict[str, list[float]]) -> None:
    """Each form's times, the ratio of their medians and the rounds' own ratios."""
    median = {f: statistics.median(s) for f, s in seconds.items()}
    cpu_median = {f: statistics.median(s) for f, s in cpu.items()}
    print(f"{label}:", flush=True)
    for form, times in seconds.items():
        shown = " / ".join(f"{t:.2f}" for t in times)
        print(f"  {form:>8}: median {median[form]:.2f} s ({shown}), CPU {cpu_median[form]:.2f} s")
    print(f"  encoded / plain: {median['encoded'] / median['plain']:.2f}x")
    print(f"  {paired('wall seconds', seconds)}")
    if cpu_median["plain"]:
        print(f"  encoded / plain, CPU seconds: {cpu_median['encoded'] / cpu_median['plain']:.2f}x")
        print(f"  {paired('CPU seconds', cpu)}", flush=True)


def one_jvm(args: argparse.Namespace) -> dict[str, Any]:
    """Every asked form measured in one Spark session (one JVM): per form of the events
    (schemas off / on), each build's wall and CPU seconds."""
    from tabhyper_update.local.spark import own_spark

    measured: dict[str, Any] = {}
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
                    made = events(spark, form, args.events, wrapped, args.same_size)
                    made.write.parquet(str(folders[form]))
                for _ in range(2):  # warm-ups: the first builds compile most of the code
                    for form in ("encoded", "plain"):
                        build(spark, folders[form], form, work, clock)
                seconds: dict[str, list[float]] = {"encoded": [], "plain": []}
                cpu: dict[str, list[float]] = {"encoded": [], "plain": []}
                samples: dict[str, list[Any]] = {}
                for _ in range(args.rounds):
                    for form in ("encoded", "plain"):
                        took, used, samples[form] = build(spark, folders[form], form, work, clock)
                        seconds[form].append(took)
                        cpu[form].append(used)
                check_samples(samples)
                label = f"{args.events:,} events, schemas {'on' if wrapped else 'off'}"
                report(label, seconds, cpu)
                measured[label] = {"seconds": seconds, "cpu": cpu}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return measured


def several_jvms(args: argparse.Namespace, argv: list[str]) -> None:
    """The same measurement in ``args.jvms`` fresh JVMs one after the other (each a run of
    this script of its own): each JVM's ratio, and their median."""
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="debezium-decoding-jvms-") as folder:
        for n in range(args.jvms):
            out = Path(folder) / f"jvm{n}.json"
            print(f"JVM {n + 1} of {args.jvms}", flush=True)
            command = [sys.executable, __file__, *argv, "--jvms", "1", "--json", str(out)]
            subprocess.run(command, check=True)
            runs.append(json.loads(out.read_text()))
    for label in runs[0]:
        print(f"{label}, over {len(runs)} JVMs:")
        for what in ("seconds", "cpu"):
            ratios = []
            for run in runs:
                medians = {f: statistics.median(t) for f, t in run[label][what].items()}
                ratios.append(medians["encoded"] / medians["plain"])
            shown = ", ".join(f"{r:.2f}x" for r in ratios)
            name = "wall seconds" if what == "seconds" else "CPU seconds"
            print(f"  encoded / plain, {name}: median {statistics.median(ratios):.2f}x ({shown})")


def without_jvms(argv: list[str]) -> list[str]:
    """The arguments ``argv`` without ``--jvms N`` (or ``--jvms=N``)."""
    kept: list[str] = []
    skip = False
    for a in argv:
        if not skip and not a.startswith("--jvms"):
            kept.append(a)
        skip = a == "--jvms"
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--schemas", choices=["off", "on", "both"], default="both")
    parser.add_argument(
        "--spark-defaults",
        action="store_true",
        help="a JVM without the SDK's -XX:-DontCompileHugeMethods (a session of the user's own)",
    )
    parser.add_argument("--text-columns", type=int, default=0, metavar="N")
    parser.add_argument("--same-size", action="store_true", help="plain schemas as long")
    parser.add_argument("--jvms", type=int, default=1, help="fresh JVMs to measure in, in turn")
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    argv = sys.argv[1:]
    args = parser.parse_args(argv)
    if args.jvms > 1:
        several_jvms(args, without_jvms(argv))
        return
    add_text_columns(args.text_columns)
    measured = one_jvm(args)
    if args.json:
        args.json.write_text(json.dumps(measured))


if __name__ == "__main__":
    main()

"""Benchmark: what reading back costs, in requests, bytes and time, against the fake server.

    python benchmarks/readback.py [--rows 1000000]

One local Spark session and one fake server on 127.0.0.1 holding a data source of ``--rows``
rows (id, name, qty, amount, at). Measured in one run:

- checking an update of 1,000 and of 100,000 upserted keys (``apply(verify=True)``), beside
  the update itself (its build, upload and job) as the baseline;
- reconciling the whole data source with its source DataFrame when 0, 1 and 100 rows have
  drifted (missing, extra, changed, NULLed, duplicated, planted by SQL on the fake's file),
  beside one Spark pass computing the same aggregates over the source as the baseline, and
  the bytes read against the data source file's size; drift found against drift planted;
- 0, 1 and 100 drifted rows reconciled by each kind of key: integer, text with a shared
  prefix, date, and a composite key whose first column has two values.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from tabhyper_update import ChangeSet, PersonalAccessToken, TableauClient, build_payload, reconcile
from tabhyper_update.errors import TabHyperError
from tabhyper_update.local.hyper import connect
from tabhyper_update.testing import FakeTableauServer, local_spark
from tabhyper_update.testing.files import make_hyper

TABLE = '"Extract"."Extract"'
COLUMNS = "id BIGINT NOT NULL, name TEXT, qty INTEGER, amount DOUBLE PRECISION, at TIMESTAMP"


def _source(spark: Any, rows: int) -> Any:
    return spark.range(rows).selectExpr(
        "id",
        "concat('n', id % 997) AS name",
        "CAST(id % 50 AS INT) AS qty",
        "CAST(id * 0.25 AS DOUBLE) AS amount",
        "timestamp_seconds(1704067200 + id) AS at",
    )


def _target(path: Any, rows: int) -> Any:
    make_hyper(path, {"Extract": (COLUMNS, [])})
    with connect(path) as conn:
        conn.execute_command(
            f"INSERT INTO {TABLE} SELECT i, 'n' || (i % 997), CAST(i % 50 AS INTEGER), "
            "i * 0.25, TIMESTAMP '2024-01-01 00:00:00' + i * INTERVAL '1 second' "
            f"FROM generate_series(0, {rows - 1}) AS s(i)"
        )
    return path


def _plant(
    path: Any, rows: int, count: int, rng: random.Random, taken: set[int]
) -> set[tuple[str, int]]:
    """``count`` more drifted rows (keys not ``taken``), the kinds in turn; returns the
    (kind, key) planted."""
    planted: set[tuple[str, int]] = set()
    keys = [k for k in rng.sample(range(rows), count + len(taken)) if k not in taken][:count]
    with connect(path) as conn:
        for i, key in enumerate(keys):
            kind = ("missing", "changed", "nulled", "duplicated", "extra")[i % 5]
            if kind == "missing":
                conn.execute_command(f"DELETE FROM {TABLE} WHERE id = {key}")
            elif kind == "changed":
                conn.execute_command(f"UPDATE {TABLE} SET qty = qty + 1 WHERE id = {key}")
            elif kind == "nulled":
                conn.execute_command(f"UPDATE {TABLE} SET name = NULL WHERE id = {key}")
            elif kind == "duplicated":
                conn.execute_command(f"INSERT INTO {TABLE} SELECT * FROM {TABLE} WHERE id = {key}")
            else:
                conn.execute_command(
                    f"INSERT INTO {TABLE} SELECT id + {rows}, name, qty, amount, at "
                    f"FROM {TABLE} WHERE id = {key}"
                )
                key += rows
            planted.add(("changed" if kind == "nulled" else kind, key))
    return planted


def _check_updates(spark: Any, client: TableauClient, rows: int, sizes: list[int]) -> None:
    rng = random.Random(11)
    for size in sizes:
        keys = rng.sample(range(rows), size)
        changes = spark.createDataFrame(
            [(k, f"u{k}", k % 7, k * 0.5, "U", 1) for k in keys],
            "id long, name string, qty int, amount double, op string, seq long",
        ).selectExpr(
            "id", "name", "qty", "amount", "timestamp_seconds(1704067200 + id) AS at", "op", "seq"
        )
        started = time.perf_counter()
        bound = build_payload(changes, ChangeSet("id", op_column="op", order_by="seq")).upload(
            "Orders", client=client
        )
        result = bound.apply(request_id=f"bench-{size}-{time.time_ns()}", verify=True)
        whole = time.perf_counter() - started
        report = result.readback
        assert report is not None
        started = time.perf_counter()
        again = result.verify()
        check = time.perf_counter() - started
        cost = again.cost
        print(
            f"check {size:>7,} keys: {cost['queries']} queries "
            f"({cost['queries']}% of a one-Creator site's hourly quota of 100), "
            f"{cost['requests']} requests, "
            f"{cost['bytes_sent'] / 1e6:.2f} MB sent, {cost['bytes_received'] / 1e6:.2f} MB "
            f"received, {check:.2f} s (service {cost['seconds']:.2f} s); the update with its "
            f"check {whole:.2f} s, so the check is {check / max(whole - check, 1e-9):.2f}x the "
            f"update alone; drift {'none' if again.ok else again.counts()}"
        )


def _reconciles(
    spark: Any, client: TableauClient, server: FakeTableauServer, luid: str, rows: int
) -> None:
    from pyspark.sql import functions as F

    source = _source(spark, rows).cache()
    source.count()
    path = server.datasource_path(luid)
    size = path.stat().st_size
    rng = random.Random(5)
    planted: set[tuple[str, int]] = set()
    for drift in (0, 1, 100):
        if drift > len(planted):
            planted |= _plant(path, rows, drift - len(planted), rng, {k for _, k in planted})
        started = time.perf_counter()
        source.agg(*[F.count(c) for c in source.columns], F.sum("qty"), F.sum("amount")).collect()
        floor = time.perf_counter() - started
        started = time.perf_counter()
        report = reconcile(source, "Orders", key="id", client=client)
        took = time.perf_counter() - started
        found = {(d.kind, d.key[0]) for d in report.drift}
        cost = report.cost
        print(
            f"reconcile {rows:,} rows, {len(planted):>3} drifted: {cost['queries']} queries, "
            f"{cost['requests']} requests, "
            f"{(cost['bytes_sent'] + cost['bytes_received']) / 1e3:.1f} kB both ways "
            f"({(cost['bytes_sent'] + cost['bytes_received']) / size:.5f}x the data source "
            f"file, {size / 1e6:.1f} MB), {took:.2f} s = {took / floor:.1f}x one Spark "
            f"aggregate pass ({floor:.2f} s); found {len(found & planted)} of {len(planted)} "
            f"planted, {len(found - planted)} not planted"
        )
    source.unpersist()


#: Days from 1900 a date key can take (Python's dates end in 9999): a date key is unique up to
#: this many rows.
DAYS = 2_900_000
#: The keys reconciled: integer, text with a shared prefix, date, timestamp, decimal, and
#: composites whose first column has two values.
KEYS: list[Any] = ["id", "code", "day", "at", "amount", ["region", "id"], ["region", "code"]]


def _by_key_type(
    spark: Any, client: TableauClient, server: FakeTableauServer, rows: int, keys: list[Any]
) -> None:
    """0, 1 and 100 drifted rows, reconciled by each of :data:`KEYS` (a key type the SDK
    cannot cut is reported as such)."""
    import tempfile
    from pathlib import Path

    path = make_hyper(
        Path(tempfile.mkdtemp(prefix="readback-keys-")) / "keyed.hyper",
        {
            "Extract": (
                "region TEXT NOT NULL, id BIGINT NOT NULL, code TEXT NOT NULL, "
                "day DATE NOT NULL, at TIMESTAMP NOT NULL, amount NUMERIC(18,2) NOT NULL, "
                "v BIGINT",
                [],
            )
        },
    )
    with connect(path) as conn:
        conn.execute_command(
            f"INSERT INTO {TABLE} SELECT CASE WHEN i % 2 = 0 THEN 'eu' ELSE 'us' END, i, "
            f"'key-' || i, DATE '1900-01-01' + (i % {DAYS}), "
            "TIMESTAMP '2020-01-01 00:00:00' + i * INTERVAL '1.5 seconds', "
            f"CAST(i * 1.25 AS NUMERIC(18,2)), i * 3 FROM generate_series(0, {rows - 1}) s(i)"
        )
    server.add_datasource("Keyed", path)
    source = (
        spark.range(rows)
        .selectExpr(
            "CASE WHEN id % 2 = 0 THEN 'eu' ELSE 'us' END AS region",
            "id",
            "concat('key-', id) AS code",
            f"date_add(DATE '1900-01-01', CAST(id % {DAYS} AS INT)) AS day",
            "timestamp_micros(1577836800000000 + id * 1500000) AS at",
            "CAST(id * 1.25 AS DECIMAL(18,2)) AS amount",
            "id * 3 AS v",
        )
        .cache()
    )
    source.count()
    rng = random.Random(3)
    drifted: list[int] = []
    for count in (0, 1, 100):
        more = [k for k in rng.sample(range(rows), count) if k not in drifted][
            : count - len(drifted)
        ]
        with connect(
            server.datasource_path(server.backend.find_datasources({"name": "Keyed"})[0].id)
        ) as conn:
            for k in more:
                conn.execute_command(f"UPDATE {TABLE} SET v = v + 1 WHERE id = {k}")
        drifted += more
        for key in keys:
            started = time.perf_counter()
            try:
                report = reconcile(source, "Keyed", key=key, client=client)
            except TabHyperError as err:
                print(f"{len(drifted):>3} drifted rows in {rows:,}, key {key}: refused ({err})")
                continue
            took = time.perf_counter() - started
            cost = report.cost
            print(
                f"{len(drifted):>3} drifted rows in {rows:,}, key {key}: {cost['queries']} "
                f"queries, {cost['requests']} requests, "
                f"{(cost['bytes_sent'] + cost['bytes_received']) / 1e3:.1f} kB both ways, "
                f"{took:.2f} s; found {len(report.drift)} of {len(drifted)}"
            )
    source.unpersist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--check-sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument(
        "--only-keys", action="store_true", help="only the reconciles by kind of key"
    )
    parser.add_argument("--key-rows", type=int, help="rows of the by-key data source [--rows]")
    parser.add_argument(
        "--keys", nargs="+", help="only these keys (e.g. id code, or region,id for a composite)"
    )
    args = parser.parse_args()
    with local_spark() as spark, FakeTableauServer(pats={"bench": "secret"}) as server:
        import tempfile
        from pathlib import Path

        folder = Path(tempfile.mkdtemp(prefix="readback-bench-"))
        luid = server.add_datasource("Orders", _target(folder / "orders.hyper", args.rows))
        with TableauClient(server.url, "", PersonalAccessToken("bench", "secret")) as client:
            if not args.only_keys:
                _check_updates(spark, client, args.rows, args.check_sizes)
                # The updates changed rows: the data source starts again from the source's rows.
                _target(server.datasource_path(luid), args.rows)
                _reconciles(spark, client, server, luid, args.rows)
            keys = [k.split(",") if "," in k else k for k in args.keys] if args.keys else KEYS
            _by_key_type(spark, client, server, args.key_rows or args.rows, keys)


if __name__ == "__main__":
    main()

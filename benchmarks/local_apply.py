"""Benchmark: the local engine against the same change written by hand as Hyper SQL.

    python benchmarks/local_apply.py                     # 10M-row target
    python benchmarks/local_apply.py --rows 1000000

Upserts 1M rows (half of them existing keys) and deletes 100k rows by key into a 10M-row
target, once with ``tabhyper_update.local.engine.apply`` and once with hand-written SQL, each on its
own copy of the same target, in the same run. Reports both times (median of --repeat) and
the ratio; the engine's extra work is its checks (tables, column types, duplicate keys).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tabhyper_update import Delete, Upsert, keys_match  # noqa: E402
from tabhyper_update.local.engine import apply  # noqa: E402
from tabhyper_update.local.hyper import connect  # noqa: E402
from tabhyper_update.values.actions import ActionBatch  # noqa: E402


def make_files(work: Path, rows: int, upserts: int, deletes: int) -> tuple[Path, Path]:
    target = work / "target.hyper"
    with connect(target, create=True) as conn:
        conn.execute_command('CREATE SCHEMA "Extract"')
        conn.execute_command(
            'CREATE TABLE "Extract"."Extract" AS SELECT CAST(i AS BIGINT) AS id, '
            "'row-' || CAST(i AS TEXT) AS name, CAST(i % 1000 AS DOUBLE PRECISION) AS amount "
            f"FROM generate_series(1, {rows}) AS s(i)"
        )
    payload = work / "payload.hyper"
    half = upserts // 2
    with connect(payload, create=True) as conn:
        conn.execute_command('CREATE SCHEMA "Extract"')
        # Half the upserts hit existing keys (spread over the table), half are new keys.
        conn.execute_command(
            'CREATE TABLE "Extract".upserts AS SELECT CAST(i * '
            f"{rows // half}"
            " AS BIGINT) AS id, 'changed' AS name, CAST(-1 AS DOUBLE PRECISION) AS amount "
            f"FROM generate_series(1, {half}) AS s(i) UNION ALL SELECT CAST({rows} + i AS "
            "BIGINT), 'new', CAST(1 AS DOUBLE PRECISION) "
            f"FROM generate_series(1, {upserts - half}) AS s(i)"
        )
        conn.execute_command(
            'CREATE TABLE "Extract".deletes AS SELECT CAST(i * '
            f"{rows // deletes} - 1 AS BIGINT) AS id FROM generate_series(1, {deletes}) AS s(i)"
        )
    return target, payload


HAND_SQL = [
    'DELETE FROM t."Extract"."Extract" AS x WHERE EXISTS '
    '(SELECT 1 FROM p."Extract".deletes AS d WHERE x.id = d.id)',
    'UPDATE t."Extract"."Extract" AS x SET id = u.id, name = u.name, amount = u.amount '
    'FROM p."Extract".upserts AS u WHERE x.id = u.id',
    'INSERT INTO t."Extract"."Extract" (id, name, amount) SELECT u.id, u.name, u.amount '
    'FROM p."Extract".upserts AS u WHERE NOT EXISTS '
    '(SELECT 1 FROM t."Extract"."Extract" AS x WHERE x.id = u.id)',
]


def by_hand(target: Path, payload: Path) -> None:
    with connect() as conn:
        conn.execute_command(f'ATTACH DATABASE "{target}" AS t')
        conn.execute_command(f'ATTACH DATABASE "{payload}" AS p')
        conn.execute_command("BEGIN TRANSACTION")
        for sql in HAND_SQL:
            conn.execute_command(sql)
        conn.execute_command("COMMIT")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--upserts", type=int, default=1_000_000)
    parser.add_argument("--deletes", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tabhyper-bench-"))
    try:
        target, payload = make_files(work, args.rows, args.upserts, args.deletes)
        key = keys_match("id")
        batch = ActionBatch(
            actions=[
                Delete(target_table="Extract", source_table="deletes", condition=key),
                Upsert(target_table="Extract", source_table="upserts", condition=key),
            ]
        )
        print(f"target {args.rows:,} rows; upsert {args.upserts:,}; delete {args.deletes:,}")
        engine_times: list[float] = []
        hand_times: list[float] = []
        for run in range(args.repeat):
            # Alternate the order so that neither side always runs on a warmer cache.
            for label in ("engine", "hand") if run % 2 == 0 else ("hand", "engine"):
                copy = work / f"{label}.hyper"
                shutil.copyfile(target, copy)
                start = time.perf_counter()
                if label == "engine":
                    apply(batch, target=copy, payload=payload)
                    engine_times.append(time.perf_counter() - start)
                else:
                    by_hand(copy, payload)
                    hand_times.append(time.perf_counter() - start)
        with connect() as conn:
            conn.execute_command(f'ATTACH DATABASE "{work / "engine.hyper"}" AS e')
            conn.execute_command(f'ATTACH DATABASE "{work / "hand.hyper"}" AS h')
            diff = conn.execute_scalar_query(
                'SELECT COUNT(*) FROM ((SELECT * FROM e."Extract"."Extract" EXCEPT ALL '
                'SELECT * FROM h."Extract"."Extract") UNION ALL (SELECT * FROM '
                'h."Extract"."Extract" EXCEPT ALL SELECT * FROM e."Extract"."Extract")) d'
            )
        engine, hand = statistics.median(engine_times), statistics.median(hand_times)
        print(
            f"  local.apply        {engine:7.2f} s  (runs: "
            f"{', '.join(f'{t:.2f}' for t in engine_times)})"
        )
        print(
            f"  hand-written SQL   {hand:7.2f} s  (runs: "
            f"{', '.join(f'{t:.2f}' for t in hand_times)})"
        )
        print(
            f"  => engine / hand: {engine / hand:.2f}x  (target <= 1.2x); "
            f"results differ in {diff} rows"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

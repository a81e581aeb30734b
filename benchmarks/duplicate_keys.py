"""Benchmark: the duplicate-key check a user's update or upsert by key gets before anything
is sent (one query on the payload file, no Spark).

    python benchmarks/duplicate_keys.py [--rows 1000000]

Measures, on a payload table of ``--rows`` rows with unique keys (the check's worst case: it
reads every key) and with a few duplicated ones: the check's seconds, against the seconds
of building the same file with Hyper (the floor of writing it once).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tabhyper_update import Payload, Upsert, keys_match
from tabhyper_update.errors import InvalidActionBatchError
from tabhyper_update.testing import make_hyper, run_sql


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    batch = [Upsert(target_table="Extract", source_table="Extract", condition=keys_match("id"))]
    with tempfile.TemporaryDirectory() as work:
        for dups in (0, 5):
            path = Path(work) / f"p{dups}.hyper"
            started = time.perf_counter()
            make_hyper(path, {"Extract": ("id BIGINT, v TEXT, amount DOUBLE PRECISION", [])})
            run_sql(
                path,
                f'INSERT INTO "Extract"."Extract" SELECT i % ({args.rows} - {dups}), '
                f"'v' || i, i * 0.5 FROM generate_series(0, {args.rows - 1}) AS g(i)",
            )
            build = time.perf_counter() - started
            payload = Payload.from_hyper(path)
            seconds = []
            for _ in range(args.runs):
                started = time.perf_counter()
                try:
                    payload.validate(batch)
                    outcome = "accepted"
                except InvalidActionBatchError:
                    outcome = "refused"
                seconds.append(time.perf_counter() - started)
            median = statistics.median(seconds)
            print(
                f"{args.rows:,} rows, {dups} duplicated keys: check {median:.3f} s ({outcome}), "
                f"writing the file {build:.3f} s: {median / build:.2f}x"
            )


if __name__ == "__main__":
    main()

"""Benchmark: the bytes Hyper stores per value of a ``BIGINT`` column, by the values' shape.

    python benchmarks/hyper_encoding.py [--rows 2000000]

What a payload's key and position columns cost depends on their values, not on their
type: this writes one column of ``--rows`` values of each shape into a file of its own
and prints the file's bytes per row. It is what the ordering guard's bytes rest on
(``benchmarks/guard_bytes.py``): a column of few distinct values (a batch's commit
versions) costs next to nothing, a column of distinct values its span's width, in any
order.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from tableauhyperapi import Connection, CreateMode, HyperProcess, Telemetry

#: Each shape's values as Hyper SQL over ``k`` = 0, 1, ..., rows - 1, and their order.
SHAPES = {
    "sequential": ("k", "k"),
    "sequential, shuffled": ("k", "random()"),
    "a large base plus three times k": ("1700000000000 + k * 3", "k"),
    "span under 65,536, shuffled": ("k % 60000", "random()"),
    "1,000 distinct, shuffled": ("k % 1000", "random()"),
    "runs of 100 equal values": ("k / 100", "k"),
    "one value": ("42", "k"),
    "random 64-bit": ("CAST((random() - 0.5) * 9.2e18 AS BIGINT)", "k"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = parser.parse_args()
    found: dict[str, object] = {"rows": args.rows}
    with (
        HyperProcess(Telemetry.DO_NOT_SEND_USAGE_DATA_TO_TABLEAU) as hyper,
        tempfile.TemporaryDirectory() as folder,
    ):
        empty = Path(folder) / "empty.hyper"
        with Connection(hyper.endpoint, str(empty), CreateMode.CREATE_AND_REPLACE) as conn:
            conn.execute_command("CREATE TABLE t (v BIGINT)")
        base = empty.stat().st_size
        for i, (shape, (value, order)) in enumerate(SHAPES.items()):
            path = Path(folder) / f"shape{i}.hyper"
            with Connection(hyper.endpoint, str(path), CreateMode.CREATE_AND_REPLACE) as conn:
                conn.execute_command("CREATE TABLE t (v BIGINT)")
                conn.execute_command(
                    f"INSERT INTO t SELECT {value} FROM (SELECT generate_series AS k "
                    f"FROM generate_series(0, {args.rows - 1})) AS s ORDER BY {order}"
                )
            found[shape] = round((path.stat().st_size - base) / args.rows, 2)
    print(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()

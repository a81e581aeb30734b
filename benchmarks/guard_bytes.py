"""Benchmark: the bytes the ordering guard adds to a change set's payload.

    python benchmarks/guard_bytes.py [--changes 200000] [--commits N]

Builds one change set (``BIGINT`` key, a text value, a ``BIGINT`` position; every key once,
a tenth of them deleted; each change its own position, or with ``--commits N`` the
positions of N commits, as a Delta change feed's ``_commit_version`` gives a batch) with
and without ``ChangeSet(guard=True)``, one part each (``max_payload_mb=None``), ``--runs``
times (Hyper's file sizes vary by a few blocks from build to build), and prints each
payload's tables, its bytes per run and the guard's bytes per change (medians).
"""

from __future__ import annotations

import argparse
import json
import statistics

from tabhyper_update import ChangeSet, build_payload
from tabhyper_update.testing import local_spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--commits",
        type=int,
        default=0,
        help="positions of this many commits (0: each change its own position)",
    )
    args = parser.parse_args()
    with local_spark() as spark:
        frame = spark.range(args.changes).selectExpr(
            "id",
            "concat('value-', id) AS v",
            "CASE WHEN id % 10 = 0 THEN 'D' ELSE 'U' END AS op",
            "1700000000000 + id * 3 AS seq"
            if args.commits <= 0
            else f"1000 + id * {args.commits} DIV {args.changes} AS seq",
        )
        found: dict[str, object] = {"changes": args.changes, "commits": args.commits or None}
        sizes: dict[bool, list[int]] = {False: [], True: []}
        for _ in range(args.runs):
            for guard in (False, True):
                changes = ChangeSet("id", op_column="op", order_by="seq", guard=guard)
                with build_payload(frame, changes, max_payload_mb=None, progress=False) as built:
                    (part,) = built.parts
                    sizes[guard].append(part.size_bytes)
                    found["guarded_tables" if guard else "unguarded_tables"] = {
                        name: [c.name for c in t.columns] for name, t in part.tables.items()
                    }
        found["unguarded_bytes"] = sizes[False]
        found["guarded_bytes"] = sizes[True]
        unguarded, guarded = (statistics.median(sizes[g]) for g in (False, True))
        found["guard_bytes_per_change"] = round((guarded - unguarded) / args.changes, 1)
        found["guard_share_of_unguarded"] = round((guarded - unguarded) / unguarded, 3)
    print(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()

"""Benchmark: a change set of several parts, each part's upload overlapping the server's job
on the part before, against the same parts one after another.

    python benchmarks/parts_in_flight.py [--rows 400000] [--parts 8] [--seconds-per-mb 0.5]

One local Spark session and one fake server on 127.0.0.1 whose uploads and jobs take time
in proportion to their size (``upload_seconds_per_mb``, ``job_seconds_per_mb``: a network's
pace and a server's work, modelled). The same change set is applied to two twin data sources,
alternating, with parts in flight and without; each run is timed end to end (from the first
upload to the last job seen finished) and set beside the larger of its parts' uploads and
jobs added up (what the parts cannot take less than) and beside their sum (one at a time).
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
from tabhyper_update.update.uploading import PartUploader
from tabhyper_update.values.policies import PollPolicy

PAT = ("bench", "bench-secret")
MB = 1024 * 1024


def _changes(spark: Any, rows: int, seq: int) -> Any:
    return spark.range(rows).selectExpr(
        "id",
        f"sha2(concat(CAST(id AS STRING), '{seq}'), 256) AS name",
        "id * 7 AS qty",
        "'U' AS op",
        f"CAST({seq} AS BIGINT) AS seq",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--seconds-per-mb", type=float, default=0.5)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with local_spark() as spark, TemporaryDirectory() as tmp:
        cs = ChangeSet("id", op_column="op", order_by="seq")
        probe = build_payload(_changes(spark, args.rows, 0), cs, max_payload_mb=None)
        cap = probe.size_bytes / MB / args.parts
        probe.cleanup()
        for _ in range(6):  # a cap that splits the change set in --parts parts
            probe = build_payload(_changes(spark, args.rows, 0), cs, max_payload_mb=cap)
            found = len(probe.parts)
            probe.cleanup()
            if found == args.parts:
                break
            cap *= found / args.parts if found > args.parts else 0.97
        start = make_hyper(
            Path(tmp) / "start.hyper",
            {"Extract": ("id BIGINT NOT NULL, name TEXT, qty BIGINT", [])},
        )
        pace = args.seconds_per_mb
        with FakeTableauServer(
            pats={PAT[0]: PAT[1]}, upload_seconds_per_mb=pace, job_seconds_per_mb=pace
        ) as server:
            for name in ("InFlight", "OneByOne"):
                server.add_datasource(name, start)
            client = TableauClient(
                server.url, "", PersonalAccessToken(*PAT), poll=PollPolicy(maximum=0.05)
            )
            timings: dict[str, list[tuple[float, float, float]]] = {"InFlight": [], "OneByOne": []}
            for run in range(args.runs):
                for name in ("OneByOne", "InFlight") if run % 2 else ("InFlight", "OneByOne"):
                    payload = build_payload(
                        _changes(spark, args.rows, run + 1), cs, max_payload_mb=cap
                    )
                    sizes = [p.size_bytes / MB for p in payload.parts]
                    PartUploader.parts_in_flight = name == "InFlight"
                    seen = set(server.backend.jobs)
                    started = time.perf_counter()
                    result = client.update_datasource(
                        name,
                        payload,
                        state_dir=Path(tmp) / f"state-{name}",
                        progress=False,
                    )
                    took = time.perf_counter() - started
                    assert result.done
                    assert len(result.parts) == len(sizes)
                    uploads = sum(p.seconds.get("upload", 0.0) for p in result.parts)
                    jobs = sum(
                        (j.finished_at or 0.0) - (j.began_at or 0.0)
                        for k, j in server.backend.jobs.items()
                        if k not in seen
                    )
                    timings[name].append((took, uploads, jobs))
            PartUploader.parts_in_flight = True
            client.close()
        print(
            f"{len(sizes)} parts, {sum(sizes):.1f} MB; uploads and jobs modelled at {pace:g} "
            "s/MB each (jobs also apply their rows with Hyper); per run: end to end, then the "
            "parts' uploads and jobs added up, each as measured"
        )
        for name, runs in timings.items():
            ratios = [took / max(up, jobs) for took, up, jobs in runs]
            sums = [took / (up + jobs) for took, up, jobs in runs]
            shown = "; ".join(f"{t:.2f} s (uploads {u:.2f}, jobs {j:.2f})" for t, u, j in runs)
            print(
                f"{name:9} {shown}; median {statistics.median(ratios):.2f}x the larger, "
                f"{statistics.median(sums):.2f}x the sum"
            )


if __name__ == "__main__":
    main()

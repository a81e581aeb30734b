"""Benchmark: what planning one batch of Debezium events costs the driver.

    python benchmarks/debezium_planning.py                  # 2,000 events a batch, 8 batches
    python benchmarks/debezium_planning.py --events 200 --batches 12

The events of ``debezium_decoding.py`` (the JSON converter's schemas on), encoded and plain,
as small batches: each batch's ``Debezium(...).changes(events)`` and its ``build_payload``
timed, alternating the forms, and the calls the driver makes into Spark's JVM counted (each
a Py4J round trip; a stream plans every batch again, so each one is a cost of every
batch). Prints each form's median seconds over the batches after the first two (the first
ones compile most of the code) and the calls of its last batch.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from debezium_decoding import ROWS, events  # beside this file


class CallCounter:
    """Counts the calls Py4J sends to the JVM while it is on: every call leaves through its
    client's ``send_command`` (Spark's pinned-thread client inherits it)."""

    def __init__(self) -> None:
        self.calls = 0
        self.on = False
        self._original: Callable[..., Any] | None = None

    def install(self) -> None:
        client = _client_class()
        self._original = client.__dict__["send_command"]
        client.send_command = self._counting(self._original)

    def uninstall(self) -> None:
        if self._original is not None:
            _client_class().send_command = self._original

    def _counting(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def send_command(client: Any, *args: Any, **kwargs: Any) -> Any:
            if self.on:
                self.calls += 1
            return original(client, *args, **kwargs)

        return send_command


def _client_class() -> Any:
    from py4j.java_gateway import GatewayClient  # type: ignore[import-untyped]

    return GatewayClient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000)
    parser.add_argument("--batches", type=int, default=8)
    args = parser.parse_args()

    from tabhyper_update import build_payload
    from tabhyper_update.local.spark import own_spark
    from tabhyper_update.streaming import Debezium

    work = Path(tempfile.mkdtemp(prefix="debezium-planning-"))
    counter = CallCounter()
    try:
        conf = {"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"}
        with own_spark("debezium-planning", conf=conf) as spark:
            for form in ("encoded", "plain"):
                events(spark, form, args.events, True).write.parquet(str(work / form))
            counter.install()
            taken: dict[str, list[tuple[float, float]]] = {"encoded": [], "plain": []}
            calls: dict[str, int] = {}
            for _ in range(args.batches):
                for form in ("encoded", "plain"):
                    settings: dict[str, Any] = (
                        {"units": {"created": "micros"}} if form == "encoded" else {}
                    )
                    debezium = Debezium(ROWS[form], key="id", **settings)
                    source = spark.read.parquet(str(work / form))
                    counter.calls, counter.on = 0, True
                    started = time.perf_counter()
                    changes = debezium.changes(source)
                    planned = time.perf_counter()
                    with build_payload(
                        changes, debezium.change_set, staging_dir=work, progress=False
                    ):
                        built = time.perf_counter()
                    counter.on = False
                    taken[form].append((planned - started, built - planned))
                    calls[form] = counter.calls
            counter.uninstall()
        print(f"{args.events:,} events a batch, {args.batches} batches, schemas on:")
        for form, times in taken.items():
            kept = times[2:] or times
            changes_s = statistics.median(t[0] for t in kept)
            build_s = statistics.median(t[1] for t in kept)
            print(
                f"  {form:>8}: changes() {changes_s:.2f} s, build {build_s:.2f} s "
                f"(medians), {calls[form]:,} calls into the JVM"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

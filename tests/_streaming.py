"""What the streaming tests share: a change feed written as JSON files, the expected state, and
one query run. Also run as a script (``python -m tests._streaming``) by the crash tests: a
query in its own process, which the test kills."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from tabhyper_update.streaming import TableauSink

#: A change: (id, name, qty, op, seq).
Change = tuple[int, "str | None", "int | None", str, int]
SCHEMA = "id BIGINT, name STRING, qty INT, op STRING, seq BIGINT"
TABLE_DDL = "id BIGINT NOT NULL, name TEXT, qty INTEGER"
START: dict[int, tuple[str, int]] = {1: ("a", 10), 2: ("b", 20), 3: ("c", 30)}
PAT = ("stream", "stream-secret")


def start_rows() -> list[str]:
    return [f"({i}, '{n}', {q})" for i, (n, q) in START.items()]


def write_batch(folder: Path, index: int, changes: Iterable[Change] | Iterable[str]) -> Path:
    """One file of the feed, written whole (then renamed in), dated ``index`` seconds after
    a fixed time so that the file source takes the files in order."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for c in changes:
        if isinstance(c, str):
            lines.append(c)
        else:
            lines.append(
                json.dumps({"id": c[0], "name": c[1], "qty": c[2], "op": c[3], "seq": c[4]})
            )
    final = folder / f"batch-{index:04d}.json"
    tmp = folder.parent / f".{final.name}.tmp"
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    stamp = 1_700_000_000 + index * 10
    os.utime(tmp, (stamp, stamp))
    os.replace(tmp, final)
    return final


def expected_state(
    batches: Sequence[Sequence[Change]], start: Mapping[int, tuple[str, int]] = START
) -> list[tuple[int, str | None, int | None]]:
    """The table after applying each batch in turn, its last change per key winning."""
    state: dict[int, tuple[str | None, int | None]] = dict(start)
    for batch in batches:
        last: dict[int, Change] = {}
        for change in batch:
            if change[0] not in last or change[4] > last[change[0]][4]:
                last[change[0]] = change
        for key, (_, name, qty, op, _) in last.items():
            if op == "D":
                state.pop(key, None)
            else:
                state[key] = (name, qty)
    return sorted((k, n, q) for k, (n, q) in state.items())


def run_query(
    spark: SparkSession,
    source: Path,
    checkpoint: Path,
    sink: TableauSink,
    *,
    schema: str = SCHEMA,
    text: bool = False,
    timeout: int = 180,
) -> StreamingQuery:
    """Run the query over what ``source`` holds (one file per batch) and wait for its end."""
    reader = spark.readStream.option("maxFilesPerTrigger", 1)
    frames = reader.text(str(source)) if text else reader.schema(schema).json(str(source))
    query = (
        frames.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = query.awaitTermination(int(timeout))
    except BaseException:
        query.stop()
        raise
    if not finished:
        query.stop()
        raise TimeoutError(f"the streaming query did not finish within {timeout} s")
    return query


def _child(argv: Sequence[str]) -> int:
    """``python -m tests._streaming URL SOURCE CHECKPOINT STATE``: one query, to be killed."""
    from tabhyper_update import ChangeSet, PersonalAccessToken, TableauClient
    from tabhyper_update.streaming import TableauSink
    from tabhyper_update.testing import local_spark

    url, source, checkpoint, state = argv
    with (
        local_spark() as spark,
        TableauClient(url, "", PersonalAccessToken(*PAT)) as client,
    ):
        sink = TableauSink(
            "Orders",
            ChangeSet("id", op_column="op", order_by="seq"),
            client=client,
            state_dir=state,
        )
        print("started", flush=True)
        run_query(spark, Path(source), Path(checkpoint), sink)
    print("finished", flush=True)
    return 0


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what} after {timeout} s")
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))


def uncommit_last(checkpoint: Path) -> int:
    """Remove the last commit entry: what a crash between the sink and the commit leaves."""
    commits = sorted(
        (p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    last = commits[-1]
    last.unlink()
    crc = last.parent / f".{last.name}.crc"
    if crc.exists():
        crc.unlink()
    return int(last.name)

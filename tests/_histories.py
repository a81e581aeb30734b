"""Random histories of a keyed table, the model of the source, and the source's own records of
them: a real Delta table with its change data feed (delta-rs), and Debezium change events in
each connector's position format.

A history is a list of steps (what one delivery carries); a step is a list of commits (one
source transaction each); a commit changes rows by inserts, value updates (NULLs included),
key moves (one row to a new key, or ``SET id = id + 1`` over a range) and deletes. Keys are
re-inserted after deletes, and one step may change one key several times.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Row = tuple[str | None, int | None]
Model = dict[int, Row]
COLUMNS = "id BIGINT NOT NULL, a TEXT, b BIGINT"
ROW_SCHEMA = "id BIGINT, a STRING, b BIGINT"


@dataclass
class Commit:
    """One source transaction: ``kind`` and what it touches."""

    kind: str  # insert | update | move | shift | delete
    rows: dict[int, Row] = field(default_factory=dict)  # insert, update
    moves: dict[int, int] = field(default_factory=dict)  # move: old key -> new key
    keys: list[int] = field(default_factory=list)  # delete
    span: tuple[int, int] = (0, 0)  # shift: keys lo..hi move to key + 1

    def apply(self, model: Model) -> list[tuple[str, int | None, int | None, Row | None]]:
        """Apply to ``model``; the row changes, as (op, old key, new key, new values)."""
        changes: list[tuple[str, int | None, int | None, Row | None]] = []
        if self.kind == "insert":
            for k, row in self.rows.items():
                model[k] = row
                changes.append(("c", None, k, row))
        elif self.kind == "update":
            for k, row in self.rows.items():
                model[k] = row
                changes.append(("u", k, k, row))
        elif self.kind == "delete":
            for k in self.keys:
                del model[k]
                changes.append(("d", k, None, None))
        else:
            # A shift moves the highest key first, as a database with an immediate unique key
            # must: no two rows ever hold one key, so per-row positions order the changes.
            moves = (
                self.moves
                if self.kind == "move"
                else {
                    k: k + 1
                    for k in sorted(model, reverse=True)
                    if self.span[0] <= k <= self.span[1]
                }
            )
            moved = {new: model[old] for old, new in moves.items()}
            for old in moves:
                del model[old]
            model.update(moved)
            changes += [("u", old, new, moved[new]) for old, new in moves.items()]
        return changes


def _value(rng: random.Random, width: int = 0) -> Row:
    # Wide text is random: Hyper compresses repeated characters to nothing.
    text = rng.choice("xyz") + "".join(rng.choices(string.ascii_letters, k=width))
    a = None if rng.random() < 0.2 else text + str(rng.randrange(100))
    b = None if rng.random() < 0.2 else rng.randrange(-1000, 1000)
    return (a, b)


def history(
    rng: random.Random,
    *,
    steps: int,
    start_rows: int = 30,
    key_space: int = 120,
    width: int = 0,
) -> list[list[Commit]]:
    """A random history: a first step inserting ``start_rows`` rows (their text ``width``
    characters and more), then ``steps`` steps."""
    model: Model = {}
    keys = rng.sample(range(key_space), start_rows)
    first = Commit("insert", rows={k: _value(rng, width) for k in keys})
    first.apply(model)
    out = [[first]]
    for _ in range(steps):
        step: list[Commit] = []
        for _ in range(rng.randint(1, 4)):
            commit = _commit(rng, model, key_space)
            if commit is not None:
                commit.apply(model)
                step.append(commit)
        out.append(step)
    return out


def _commit(rng: random.Random, model: Model, key_space: int) -> Commit | None:
    present = sorted(model)
    free = [k for k in range(key_space) if k not in model]
    kind = rng.choice(["insert", "update", "update", "move", "shift", "delete"])
    if kind == "insert" and free:
        return Commit("insert", rows={k: _value(rng) for k in rng.sample(free, min(len(free), 4))})
    if kind == "update" and present:
        return Commit(
            "update", rows={k: _value(rng) for k in rng.sample(present, min(6, len(present)))}
        )
    if kind == "move" and present and free:
        olds = rng.sample(present, min(3, len(present)))
        news = rng.sample(free, len(olds))
        return Commit("move", moves=dict(zip(olds, news, strict=True)))
    if kind == "shift" and present:
        lo = rng.choice(present)
        hi = lo + rng.randint(0, 6)
        while hi + 1 in model:
            hi += 1
        return Commit("shift", span=(lo, hi))
    if kind == "delete" and present:
        return Commit("delete", keys=rng.sample(present, min(3, len(present))))
    return None


def models(steps: list[list[Commit]]) -> Iterator[tuple[list[Commit], Model]]:
    """Each step with the model of the source after it."""
    model: Model = {}
    for step in steps:
        for commit in step:
            commit.apply(model)
        yield step, dict(model)


def table(model: Model) -> list[tuple[int, str | None, int | None]]:
    return sorted((k, a, b) for k, (a, b) in model.items())


# -- Delta: the table itself, changed by delta-rs, read back as its change data feed --------------


class DeltaSource:
    """A Delta table with the change data feed on, changed commit by commit as the history
    says; :meth:`changes` reads the feed of the versions not read yet."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.read_up_to = -1
        self.created = False

    def _arrow(self, rows: dict[int, Row]) -> Any:
        import arro3.core as ac

        keys = sorted(rows)
        return ac.Table.from_pydict(
            {
                "id": ac.Array(keys, ac.DataType.int64()),
                "a": ac.Array([rows[k][0] for k in keys], ac.DataType.string()),
                "b": ac.Array([rows[k][1] for k in keys], ac.DataType.int64()),
            }
        )

    def commit(self, commit: Commit, model_before: Model) -> None:
        from deltalake import DeltaTable, write_deltalake

        if not self.created:
            assert commit.kind == "insert"
            write_deltalake(
                str(self.path),
                self._arrow(commit.rows),
                configuration={"delta.enableChangeDataFeed": "true"},
            )
            self.created = True
            return
        dt = DeltaTable(str(self.path))
        if commit.kind == "insert":
            write_deltalake(str(self.path), self._arrow(commit.rows), mode="append")
        elif commit.kind == "update":
            (
                dt.merge(
                    self._arrow(commit.rows), "t.id = s.id", source_alias="s", target_alias="t"
                )
                .when_matched_update_all()
                .execute()
            )
        elif commit.kind == "delete":
            dt.delete(f"id IN ({', '.join(map(str, commit.keys))})")
        elif commit.kind == "move":
            cases = " ".join(f"WHEN id = {o} THEN {n}" for o, n in commit.moves.items())
            dt.update(
                predicate=f"id IN ({', '.join(map(str, commit.moves))})",
                updates={"id": f"CASE {cases} END"},
            )
        else:
            lo, hi = commit.span
            if any(lo <= k <= hi for k in model_before):
                dt.update(predicate=f"id >= {lo} AND id <= {hi}", updates={"id": "id + 1"})

    def changes(self, spark: SparkSession) -> DataFrame:
        """The feed since the last call, as Spark reads a Delta change feed."""
        return self.changes_from(spark, self.read_up_to + 1)

    def changes_from(self, spark: SparkSession, start: int) -> DataFrame:
        """The feed from version ``start`` to the latest (read so far from then on)."""
        import arro3.core as ac
        from deltalake import DeltaTable

        dt = DeltaTable(str(self.path))
        latest = dt.version()
        reader = dt.load_cdf(starting_version=start, ending_version=latest)
        feed = ac.Table.from_arrow(reader)
        self.read_up_to = latest
        names = ["id", "a", "b", "_change_type", "_commit_version"]
        columns = [feed[n].to_pylist() for n in names]
        rows = list(zip(*columns, strict=True))
        return spark.createDataFrame(
            rows, f"{ROW_SCHEMA}, _change_type STRING, _commit_version BIGINT"
        )


# -- Debezium: change events in each connector's position format ----------------------------------


class Connector:
    """Positions of one connector kind, advancing as commits and rows are emitted."""

    def __init__(self, kind: str, rng: random.Random) -> None:
        self.kind = kind
        self.rng = rng
        self.n = 0
        # Start near the points where text order and meaning part: 999 -> 1000 for an SCN,
        # mysql-bin.999999 -> mysql-bin.1000000 for a binlog file.
        self.file = 999_998
        self.pos = 4
        self.scn = 990
        self.lsn = 0x2D_0000_0C58

    def begin(self) -> None:
        self.n += 1
        if self.kind in ("mysql", "mariadb") and self.rng.random() < 0.5:
            self.file += 1
            self.pos = 4
        self.pos += self.rng.randint(1, 500)
        self.scn += self.rng.randint(1, 7)
        self.lsn += self.rng.randint(1, 0x2000)

    def source(self, row_index: int) -> dict[str, Any]:
        if self.kind == "postgresql":
            return {"lsn": self.lsn * 100 + row_index, "txId": self.n}
        if self.kind in ("mysql", "mariadb"):
            return {"file": f"mysql-bin.{self.file:06d}", "pos": self.pos, "row": row_index}
        if self.kind == "sqlserver":
            commit = f"{self.lsn >> 32:08x}:{self.lsn & 0xFFFFFFFF:08x}:0001"
            change = f"{self.lsn >> 32:08x}:{self.lsn & 0xFFFFFFFF:08x}:{row_index + 2:04x}"
            return {"commit_lsn": commit, "change_lsn": change, "event_serial_no": 1}
        if self.kind == "oracle":
            # Changes of one transaction share an SCN in this stream only when they touch other
            # keys; one key's changes get their own.
            return {"scn": str(self.scn * 1000 + row_index)}
        if self.kind == "mongodb":
            return {"ts_ms": 1_700_000_000_000 + self.n * 1000, "ord": row_index + 1}
        raise ValueError(self.kind)


def _full(k: int, v: Row) -> dict[str, Any]:
    return {"id": k, "a": v[0], "b": v[1]}


def debezium_lines(
    step: list[Commit], model: Model, connector: Connector, rng: random.Random
) -> list[str | None]:
    """The Debezium events of ``step`` (applied to a copy of ``model``): key moves as an update
    with both images or as a delete and a create, updates with or without their before image,
    tombstones after deletes, some events delivered twice, shuffled across keys."""
    events: list[tuple[int, str | None]] = []
    working = dict(model)
    for commit in step:
        before = dict(working)
        connector.begin()
        for row_index, (op, old, new, values) in enumerate(commit.apply(working)):
            source = {**connector.source(row_index), "table": "orders"}
            envelopes: list[dict[str, Any]] = []
            if op == "c":
                assert new is not None
                assert values is not None
                envelopes.append({"op": "c", "before": None, "after": _full(new, values)})
            elif op == "d":
                assert old is not None
                key_only = {"id": old, "a": None, "b": None}
                envelopes.append({"op": "d", "before": key_only, "after": None})
            else:
                assert old is not None
                assert new is not None
                assert values is not None
                if old != new and rng.random() < 0.5:
                    # The connector's own way for a key change: delete the old, create the new.
                    envelopes.append({"op": "d", "before": _full(old, before[old]), "after": None})
                    envelopes.append({"op": "c", "before": None, "after": _full(new, values)})
                else:
                    has_before = old != new or rng.random() < 0.5
                    envelopes.append(
                        {
                            "op": "u",
                            "before": _full(old, before[old]) if has_before else None,
                            "after": _full(new, values),
                        }
                    )
            for envelope in envelopes:
                envelope.update({"source": source, "ts_ms": 1_700_000_000_000 + connector.n})
                line = json.dumps(envelope)
                key = new if new is not None else old
                assert key is not None
                events.append((key, line))
                if rng.random() < 0.15:
                    events.append((key, line))  # delivered twice (a connector restart)
                if envelope["op"] == "d":
                    events.append((key, None))  # the tombstone
    rng.shuffle(events)
    return [line for _, line in events]

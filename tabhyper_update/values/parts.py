"""The parts of a payload, as values: each part's ``.hyper`` file, its tables and columns,
the order-independent digest of their rows; and :class:`PayloadLike`, what the workflows
(update, publish) need of a payload.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from .actions import ActionBatch, BatchLike
from .errors import InvalidArgumentError

__all__ = [
    "BUCKETS",
    "ColumnInfo",
    "NoPayload",
    "PayloadLike",
    "PayloadPart",
    "RowDigest",
    "TableInfo",
    "file_sha256",
    "sql_type_text",
]

#: Split granularity: rows are spread over this many buckets (by a hash of the key for a
#: change set, of the whole row otherwise); a part is a range of buckets.
BUCKETS = 1024
_MB = 1024 * 1024


@dataclass(frozen=True)
class RowDigest:
    """An order-independent digest of a multiset of rows: the row count and the sums of
    each row's 64-bit hash modulo two primes. Digests of disjoint row sets add up."""

    MODULI: ClassVar[tuple[int, int]] = (2147483647, 2147483629)

    rows: int = 0
    sums: tuple[int, ...] = (0, 0)

    def __add__(self, other: RowDigest) -> RowDigest:
        return RowDigest(
            self.rows + other.rows, tuple(a + b for a, b in zip(self.sums, other.sums, strict=True))
        )

    @classmethod
    def total(cls, digests: Iterable[RowDigest]) -> RowDigest:
        """The digest of the union of disjoint row sets: their digests added up (summed as
        plain integers: a change set's statistics add up to a thousand bucket digests)."""
        rows, sums = 0, [0] * len(cls.MODULI)
        for digest in digests:
            rows += digest.rows
            for i, value in enumerate(digest.sums):
                sums[i] += value
        return cls(rows, tuple(sums))

    def __str__(self) -> str:
        return ":".join(map(str, (self.rows, *self.sums)))

    @classmethod
    def parse(cls, text: str) -> RowDigest:
        if not text:
            return cls()
        rows, *sums = (int(v) for v in text.split(":"))
        return cls(rows, tuple(sums))


@dataclass(frozen=True)
class ColumnInfo:
    """A payload column: its exact name, Hyper type and nullability."""

    name: str
    hyper_type: str
    nullable: bool


@dataclass(frozen=True)
class TableInfo:
    """A payload table: schema, name, columns and row count."""

    schema: str
    name: str
    columns: tuple[ColumnInfo, ...]
    row_count: int
    #: Order-independent digest of the table's rows (same rows, same digest).
    row_digest: str = ""

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


@dataclass(frozen=True)
class PayloadPart:
    """One ``.hyper`` file: uploaded and applied as one atomic update."""

    path: Path
    size_bytes: int
    tables: Mapping[str, TableInfo]
    #: The range of split buckets (inclusive) whose rows this part holds.
    buckets: tuple[int, int] = (0, BUCKETS - 1)

    @property
    def row_count(self) -> int:
        return sum(t.row_count for t in self.tables.values())

    @cached_property
    def sha256(self) -> str:
        """The file's SHA-256 (computed on first use: nothing in the round trip needs it)."""
        return file_sha256(self.path)

    @property
    def content_digest(self) -> str:
        """A digest of what the part holds (bucket range, tables, columns, rows and, for a
        change set, the positions of its changes), stable across rebuilds."""
        identity = [
            list(self.buckets),
            [
                [
                    t.schema,
                    t.name,
                    [[c.name, c.hyper_type, c.nullable] for c in t.columns],
                    t.row_count,
                    t.row_digest,
                ]
                for t in sorted(self.tables.values(), key=lambda t: t.name)
            ],
        ]
        text = json.dumps(identity, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()


@runtime_checkable
class PayloadLike(Protocol):
    """What updating and publishing need of a payload
    (:class:`~tabhyper_update.payload.model.Payload` is the one the SDK builds): its parts
    and tables, whether it is a change set, its identity, the check of an action batch
    against it, its derived actions, its files."""

    parts: list[PayloadPart]
    keep_files: bool

    @property
    def tables(self) -> dict[str, TableInfo]: ...

    @property
    def is_cdc(self) -> bool: ...

    @property
    def is_empty(self) -> bool: ...

    @property
    def digest(self) -> str: ...

    def validate(self, batch: BatchLike) -> ActionBatch: ...

    def derived_actions(
        self,
        part: PayloadPart | None = None,
        *,
        target_table: str = ...,
        target_schema: str = ...,
    ) -> ActionBatch: ...

    def cleanup(self) -> None: ...


class NoPayload:
    """The payload of an update that reads no table (a delete by constant): no parts."""

    def __init__(self) -> None:
        self.parts: list[PayloadPart] = []
        self.keep_files = True

    is_cdc = False
    is_empty = True
    digest = ""

    @property
    def tables(self) -> dict[str, TableInfo]:
        return {}

    def validate(self, batch: BatchLike) -> ActionBatch:
        return ActionBatch.coerce(batch)

    def derived_actions(
        self,
        part: PayloadPart | None = None,
        *,
        target_table: str = "",
        target_schema: str = "",
    ) -> ActionBatch:
        raise InvalidArgumentError("no payload: pass actions=")

    def cleanup(self) -> None:
        return None


_SQL_TYPE_TEXT = {
    "BIG_INT": "BIGINT",
    "SMALL_INT": "SMALLINT",
    "INT": "INTEGER",
    "DOUBLE": "DOUBLE PRECISION",
    "BOOL": "BOOLEAN",
    "TIMESTAMP_TZ": "TIMESTAMP WITH TIME ZONE",
}


def sql_type_text(sql_type: Any) -> str:
    """Hyper's SQL spelling of a Hyper API type (``BIG_INT`` → ``BIGINT``)."""
    text = str(sql_type).replace(", ", ",")
    return _SQL_TYPE_TEXT.get(text, text)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, read a megabyte at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(_MB), b""):
            digest.update(block)
    return digest.hexdigest()

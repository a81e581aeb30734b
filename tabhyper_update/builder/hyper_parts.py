"""The Hyper side of a build: statistics of the staged Parquet, the errors a change set's
staged rows hold, the split plan, and the part files Hyper writes from it (see
:mod:`tabhyper_update.builder.build` for the whole).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..local.hyper import connect, quote_literal, quote_name, table_ref
from ..values.changeset import GUARD_COLUMN
from ..values.errors import PayloadError
from ..values.parts import BUCKETS, ColumnInfo, PayloadPart, RowDigest, TableInfo
from ..values.quarantine import QuarantineReport
from ..values.redaction import get_logger
from ..values.spark_sql import sql_name
from .cdc import (
    FIRST_COLUMN,
    KIND_COLUMN,
    KIND_DELETE,
    KIND_ERRORS,
    KIND_UPSERT,
    LAST_COLUMN,
    OP_TEXT_COLUMN,
    ORDER_TEXT_COLUMN,
    CdcSpec,
)
from .hyper_types import ColumnPlan

if TYPE_CHECKING:
    from tableauhyperapi import Connection

__all__ = [
    "BUCKET_COLUMN",
    "NO_CAP",
    "ROWHASH_COLUMN",
    "ROW_HASH_BUCKET",
    "STAGED_BUCKET",
    "Staged",
    "change_identity_sql",
    "guard_staged",
    "identity_sql",
    "kind_is",
    "plan_parts",
    "raise_on_change_set_errors",
    "read_bucket_stats",
    "row_hash_sql",
    "size_sql",
    "write_parts",
]

log = get_logger("tabhyper_update.build")

#: The split bucket of each staged change (of its key's hash): a change set's rows only. A
#: table's rows are bucketed by their row hash, which Hyper reads anyway
#: (:data:`ROW_HASH_BUCKET`).
BUCKET_COLUMN = "__tabhyper_bucket"
#: A per-row hash staged beside the data. Its sums are the payload's content digest (Hyper
#: files of the same rows differ byte for byte from one build to the next). It covers every
#: value with its NULL flag (so NULLs in different columns never collide), and for a change
#: set also the op and the ordering values: the position of the change in its source.
ROWHASH_COLUMN = "__tabhyper_rowhash"
#: Hyper SQL: a staged table row's split bucket, of its row hash (Spark's ``pmod``).
ROW_HASH_BUCKET = (
    f"CAST((({quote_name(ROWHASH_COLUMN)} % {BUCKETS}) + {BUCKETS}) % {BUCKETS} AS SMALLINT)"
)
#: Hyper SQL: a staged change's split bucket, as Spark staged it.
STAGED_BUCKET = quote_name(BUCKET_COLUMN)
_MB = 1024 * 1024
#: Parts are planned a little under the cap, for the estimate's sake.
_SPLIT_HEADROOM = 0.9
#: Up to this many planned parts, the payload is first written whole, in case it fits in
#: one file after all (on the benchmarks' rows Hyper's files take about a third of the
#: estimate: 581 MB for 20M changes planned in 18 parts under 90 MB); beyond, the whole
#: file cannot fit and writing it is one more pass over every staged row.
_WHOLE_FIRST_UP_TO = 4
#: A Hyper file's own size before any row (measured: 64 KiB with up to five empty tables).
_FILE_OVERHEAD = 64 * 1024

#: Bytes a value takes at most in a Hyper file, by type (text and bytes: their length + 8).
_FIXED_WIDTH = {
    "BOOLEAN": 1,
    "SMALLINT": 2,
    "INTEGER": 4,
    "REAL": 4,
    "DATE": 4,
    "BIGINT": 8,
    "DOUBLE PRECISION": 8,
    "TIMESTAMP": 8,
}
_VARIABLE_OVERHEAD = 8


def size_sql(plans: Sequence[ColumnPlan], staged_names: Sequence[str]) -> str:
    """An upper estimate of the bytes one staged row takes in a Hyper file (Hyper SQL over
    the staged columns ``staged_names`` of ``plans``), summed by Hyper's statistics.

    Hyper computes it from the staged values rather than Spark staging it: a staged column
    costs Spark's Parquet write more than the estimate costs Hyper's statistics (the
    figures are in ``benchmarks/README.md``, "Costs behind the build's choices")."""
    fixed = 0
    variable: list[str] = []
    for plan, name in zip(plans, staged_names, strict=True):
        width = _FIXED_WIDTH.get(plan.hyper_type)
        if width is None and plan.hyper_type.startswith("NUMERIC"):
            width = 16
        if width is not None:
            fixed += width + 1
        else:
            fixed += _VARIABLE_OVERHEAD
            variable.append(f"COALESCE(CAST(octet_length({quote_name(name)}) AS BIGINT), 0)")
    return " + ".join([f"CAST({fixed} AS BIGINT)", *variable])


def row_hash_sql(values: Sequence[str], extra: Sequence[str] = ()) -> str:
    """A 64-bit hash of the values, their NULL flags and ``extra`` (Spark SQL text).

    Spark's ``xxhash64`` chains each argument's hash into the next (so column boundaries
    count) but skips NULLs: the NULL flags make ``(5, 'x', NULL)`` and ``(5, NULL, 'x')``
    differ.
    """
    flags = [f"isnull({v})" for v in values]
    return f"xxhash64({', '.join([*values, *extra, *flags])})"


def identity_sql(
    values: Sequence[str], position: Sequence[str] = (), keys: Sequence[str] = ()
) -> list[str]:
    """A staged row's identity (Spark SQL, each ``expr AS name``): its row hash over its
    ``values`` (its staged values) and ``position``, and, given the key columns ``keys`` (a
    change set's), its bucket of their hash. Without keys Hyper buckets the row by its row
    hash (:data:`ROW_HASH_BUCKET`), and Hyper estimates every row's size (:func:`size_sql`)."""
    identity = [f"{row_hash_sql(values, position)} AS {sql_name(ROWHASH_COLUMN)}"]
    if keys:
        identity.append(
            f"CAST(pmod(xxhash64({', '.join(keys)}), {BUCKETS}) AS SMALLINT)"
            f" AS {sql_name(BUCKET_COLUMN)}"
        )
    return identity


def change_identity_sql(spec: CdcSpec, values: Sequence[str], kind: str) -> list[str]:
    """A change's :func:`identity_sql`: its position is ``kind`` (the SQL of its kind), its
    op and its ``order_by`` values; its bucket is its key's."""
    orders = list(map(sql_name, spec.order_by))
    position = [
        kind,
        spec.texts().op,
        *orders,
        *(f"isnull({o})" for o in orders),
    ]
    return identity_sql(values, position, list(map(sql_name, spec.key)))


@dataclass
class Staged:
    """A payload table whose rows sit in staged Parquet files."""

    name: str
    plans: list[ColumnPlan]
    staged_names: list[str]
    files: list[Path]
    #: How many rows Spark says it wrote for this table.
    written: int
    #: bucket → (rows, estimated bytes, row digest), filled in from the staged files.
    buckets: dict[int, tuple[int, int, RowDigest]] | None = None
    #: Hyper SQL choosing this table's rows among the files' (a change set's upserts and
    #: deletes share their files); empty: every row.
    where: str = ""
    #: Hyper SQL: a staged row's split bucket.
    bucket_of: str = ROW_HASH_BUCKET
    #: Hyper SQL: a staged row's size estimate (:func:`size_sql`); empty: of this table's
    #: own columns. A change set's deletes share their upserts' rows and estimate.
    size_of: str = ""
    #: How many times each row is written.
    copies: int = 1
    #: Constant BOOLEAN columns after the staged ones: (name, SQL value) (a guarded change
    #: set's ``guarded`` column: NULL in the guard's table, TRUE in the positions').
    constants: tuple[tuple[str, str], ...] = ()
    #: A change set's upserts: the greatest position among its changes (its ``order_by``
    #: values as ranked), where the change set ends in its source.
    position: tuple[Any, ...] | None = None
    #: A change set's upserts: the latest commit time among its changes (epoch seconds),
    #: where the change feed says it (Delta's ``_commit_timestamp``).
    committed_at: float | None = None
    #: A change set's upserts: what the build set aside (``on_bad_rows="quarantine"``).
    quarantined: QuarantineReport | None = None

    def __post_init__(self) -> None:
        if not self.size_of:
            self.size_of = size_sql(self.plans, self.staged_names)

    def rows_where(self, *more: str) -> str:
        """`` WHERE …`` of this table's rows that also meet ``more`` (or nothing)."""
        terms = [f"({t})" for t in (self.where, *more) if t]
        return f" WHERE {' AND '.join(terms)}" if terms else ""

    def columns(self) -> tuple[ColumnInfo, ...]:
        """The payload table's columns: the staged ones, then the constant ones."""
        return tuple(ColumnInfo(p.name, p.hyper_type, p.nullable) for p in self.plans) + tuple(
            ColumnInfo(name, "BOOLEAN", True) for name, _ in self.constants
        )

    def definition_sql(self) -> str:
        """Hyper SQL of the payload table's column definitions (``CREATE TABLE t (…)``)."""
        return ", ".join(
            [f"{quote_name(p.name)} {p.sql_definition_type}" for p in self.plans]
            + [f"{quote_name(name)} BOOLEAN" for name, _ in self.constants]
        )

    def select_sql(self) -> str:
        """Hyper SQL of a payload row's values from a staged row's (``SELECT …``)."""
        return ", ".join(
            [
                p.hyper_expression(quote_name(s))
                for p, s in zip(self.plans, self.staged_names, strict=True)
            ]
            + [f"CAST({value} AS BOOLEAN)" for _, value in self.constants]
        )


def external(files: Sequence[Path]) -> str:
    return (
        f"external(ARRAY[{', '.join(quote_literal(str(f)) for f in files)}], FORMAT => 'parquet')"
    )


BucketStats = dict[int, tuple[int, int, RowDigest]]


def _buckets_of(text: str, width: int) -> BucketStats:
    """One group's bucket statistics from the text Hyper sums them as: ``width`` numbers a
    bucket (its number, rows, size estimate, then the digest's residues)."""
    values = list(map(int, text.split()))
    if len(values) % width:
        raise PayloadError(
            f"Hyper's bucket statistics came as {len(values)} number(s), not buckets of "
            f"{width} each: the staged files could not be summed"
        )
    stats: BucketStats = {}
    for i in range(0, len(values), width):
        number, count, nbytes, *residues = values[i : i + width]
        if not 0 <= number < BUCKETS:
            raise PayloadError(
                f"Hyper's bucket statistics name bucket {number}, outside 0-{BUCKETS - 1}"
            )
        stats[number] = (count, nbytes, RowDigest(count, tuple(residues)))
    return stats


def bucket_stats(
    conn: Connection,
    source: str,
    where: str = "",
    by: str | None = None,
    *,
    bucket: str,
    size: str,
) -> dict[str | None, BucketStats]:
    """Per-bucket row counts, size estimates and digests of ``source``'s rows (``where``:
    which; ``bucket`` and ``size``: Hyper SQL of a row's bucket and size estimate), grouped
    by the column ``by`` too when given (``None``: the one group).

    Each group's buckets come as one text (a bucket's five numbers after another's): reading
    up to a thousand rows value by value through the Hyper API costs a micro-batch more
    (``benchmarks/README.md``, "Costs behind the build's choices")."""
    h, b, z = quote_name(ROWHASH_COLUMN), quote_name("b"), quote_name("z")
    numbers = [b, "COUNT(*)", f"SUM({z})", *(f"SUM({h} % {m})" for m in RowDigest.MODULI)]
    line = " || ' ' || ".join(f"CAST({n} AS TEXT)" for n in numbers)
    group = f"{quote_name(by)}, " if by else ""
    rows = f"SELECT {group}{h}, {bucket} AS {b}, {size} AS {z} FROM {source}{where}"
    per_bucket = f"SELECT {group}{line} AS s FROM ({rows}) AS r GROUP BY {group}{b}"
    query = f"SELECT {group}string_agg(s, ' ') FROM ({per_bucket}) AS g"
    if by:
        query += f" GROUP BY {quote_name(by)}"
    found: dict[str | None, BucketStats] = {}
    for row in conn.execute_list_query(query):
        name, text = (str(row[0]), row[1]) if by else (None, row[0])
        found.setdefault(name, {}).update(_buckets_of(text or "", len(numbers)))
    return {name: stats for name, stats in found.items() if stats}


def kind_counts(stats: Mapping[str, BucketStats]) -> dict[str, int]:
    """A change set's rows by kind (``errors``: of every error kind) from its ranked rows'
    statistics by kind."""
    rows = {kind: sum(c for c, _, _ in found.values()) for kind, found in stats.items()}
    errors = sum(n for kind, n in rows.items() if kind.startswith("E_"))
    return {
        KIND_UPSERT: rows.get(KIND_UPSERT, 0),
        KIND_DELETE: rows.get(KIND_DELETE, 0),
        "errors": errors,
    }


def read_bucket_stats(staged: Sequence[Staged], stage: Path) -> None:
    """Per-bucket row counts, size estimates and digests of the tables whose statistics
    are not known yet; checks Spark's count."""
    unknown = [t for t in staged if t.buckets is None]
    if not unknown:
        return  # a change set Hyper ranked: its statistics came with the ranking
    with connect() as conn:
        for t in unknown:
            found = (
                bucket_stats(
                    conn,
                    external(t.files),
                    t.rows_where(),
                    bucket=t.bucket_of,
                    size=t.size_of,
                )
                if t.files
                else {}
            )
            t.buckets = found.get(None, {})
            rows = sum(c for c, _, _ in t.buckets.values())
            if rows != t.written:
                raise PayloadError(
                    f"Spark wrote {t.written} row(s) for table {t.name!r} but {rows} were "
                    f"found in the staging directory {str(stage)!r} ({len(t.files)} Parquet "
                    "file(s)): on a cluster, staging_dir must be a shared path that the "
                    "executors write and the driver reads at the same place, or pass "
                    "staging='driver' to send the rows through the driver instead (no shared "
                    "path needed)"
                )


NO_CAP = 1 << 62


def plan_parts(staged: Sequence[Staged], cap_bytes: int) -> list[tuple[int, int]]:
    """Consecutive bucket ranges whose estimated size stays under the cap.

    A function of the data alone (the per-bucket statistics), so a rebuilt change set gets
    the same plan.
    """
    per_bucket = [0] * BUCKETS
    for t in staged:
        assert t.buckets is not None
        for bucket, (_, nbytes, _) in t.buckets.items():
            per_bucket[bucket] += nbytes * t.copies
    budget = max(1, int(cap_bytes * _SPLIT_HEADROOM) - _FILE_OVERHEAD)
    ranges: list[tuple[int, int]] = []
    lo, used = 0, 0
    for bucket, nbytes in enumerate(per_bucket):
        if used and used + nbytes > budget:
            ranges.append((lo, bucket - 1))
            lo, used = bucket, 0
        used += nbytes
    ranges.append((lo, BUCKETS - 1))
    return ranges


def _range_stats(t: Staged, lo: int, hi: int) -> tuple[int, RowDigest]:
    assert t.buckets is not None
    found = [f for bucket, f in t.buckets.items() if lo <= bucket <= hi]
    rows = sum(rows for rows, _, _ in found)
    digest = RowDigest.total(d for _, _, d in found)
    return rows * t.copies, RowDigest.total([digest] * t.copies)


def _write_part(
    path: Path,
    staged: Sequence[Staged],
    *,
    schema: str,
    buckets: tuple[int, int],
    database_version: int,
    drop_empty: bool,
) -> dict[str, TableInfo]:
    """Write one ``.hyper`` file from staged Parquet; returns its tables."""
    lo, hi = buckets
    tables: dict[str, TableInfo] = {}
    with connect(path, create=True, database_version=database_version) as conn:
        conn.execute_command(f"CREATE SCHEMA {quote_name(schema)}")
        for t in staged:
            expected, digest = _range_stats(t, lo, hi)
            if expected == 0 and drop_empty:
                continue
            ref = table_ref(schema, t.name)
            conn.execute_command(f"CREATE TABLE {ref} ({t.definition_sql()})")
            rows = 0
            if expected:
                where = t.rows_where(
                    "" if (lo, hi) == (0, BUCKETS - 1) else f"{t.bucket_of} BETWEEN {lo} AND {hi}"
                )
                insert = f"INSERT INTO {ref} SELECT {t.select_sql()} FROM {external(t.files)}"
                rows = sum(int(conn.execute_command(insert + where) or 0) for _ in range(t.copies))
            if rows != expected:
                raise PayloadError(
                    f"table {t.name!r}: Hyper wrote {rows} row(s) for buckets {lo}-{hi} where "
                    f"the staged statistics say {expected}"
                )
            tables[t.name] = TableInfo(
                schema, t.name, t.columns(), rows, str(digest) if rows else ""
            )
    return tables


def _write_tmp_part(
    directory: Path,
    staged: Sequence[Staged],
    buckets: tuple[int, int],
    *,
    schema: str,
    database_version: int,
    drop_empty: bool,
) -> tuple[Path, dict[str, TableInfo]]:
    """One part of the given buckets' rows, written under a temporary name (owner only)."""
    tmp = directory / f".part-{uuid.uuid4().hex}.hyper.tmp"
    try:
        tables = _write_part(
            tmp,
            staged,
            schema=schema,
            buckets=buckets,
            database_version=database_version,
            drop_empty=drop_empty,
        )
        tmp.chmod(0o600)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return tmp, tables


def write_parts(
    staged: Sequence[Staged],
    plan: Sequence[tuple[int, int]],
    directory: Path,
    *,
    schema: str,
    database_version: int,
    cap_bytes: int,
    drop_empty: bool,
) -> list[PayloadPart]:
    """Write the planned parts; a part the estimate got wrong is halved (and logged)."""

    def write(buckets: tuple[int, int]) -> tuple[Path, dict[str, TableInfo]]:
        return _write_tmp_part(
            directory,
            staged,
            buckets,
            schema=schema,
            database_version=database_version,
            drop_empty=drop_empty,
        )

    def rows_in(lo: int, hi: int) -> int:
        return sum(_range_stats(t, lo, hi)[0] for t in staged)

    pending = [r for r in plan if rows_in(*r)]
    whole = None
    if 1 < len(pending) <= _WHOLE_FIRST_UP_TO:
        # The estimate is an upper bound, and Hyper compresses well: a payload estimated
        # over the cap often fits in one file. Only a file really over the cap is split.
        whole = _whole_if_it_fits(write, cap_bytes)
        if whole is None:
            log.info(
                "payload over %.1f MB: split into %d parts by the size estimate",
                cap_bytes / _MB,
                len(pending),
            )
    done = [whole] if whole is not None else _written_within_cap(write, rows_in, pending, cap_bytes)
    return _named_parts(done, directory)


_Written = tuple[tuple[int, int], Path, dict[str, TableInfo]]


def _whole_if_it_fits(
    write: Callable[[tuple[int, int]], tuple[Path, dict[str, TableInfo]]], cap_bytes: int
) -> _Written | None:
    """Every bucket written as one file, kept where it is within ``cap_bytes`` (``None``
    where it is not: the file removed)."""
    whole = (0, BUCKETS - 1)
    path, tables = write(whole)
    if path.stat().st_size <= cap_bytes:
        return whole, path, tables
    path.unlink()
    return None


def _written_within_cap(
    write: Callable[[tuple[int, int]], tuple[Path, dict[str, TableInfo]]],
    rows_in: Callable[[int, int], int],
    pending: list[tuple[int, int]],
    cap_bytes: int,
) -> list[_Written]:
    """The bucket ranges ``pending`` written, each file over ``cap_bytes`` halved again
    (its halves holding rows written in its place); every file written removed again on a
    failure."""
    done: list[_Written] = []
    try:
        while pending:
            lo, hi = pending.pop(0)
            path, tables = write((lo, hi))
            size = path.stat().st_size
            if size <= cap_bytes:
                done.append(((lo, hi), path, tables))
                continue
            path.unlink()
            pending[:0] = [r for r in _halves(lo, hi, size, cap_bytes) if rows_in(*r)]
    except BaseException:
        for _, path, _ in done:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        raise
    return done


def _halves(lo: int, hi: int, size: int, cap_bytes: int) -> tuple[tuple[int, int], ...]:
    """The two halves of a part of buckets ``lo``-``hi`` written over the cap (``size``
    bytes) although its estimate was under it; refused when it is one bucket already."""
    if lo == hi:
        raise PayloadError(
            f"the payload cannot be split under max_payload_mb={cap_bytes / _MB:g}: one "
            f"split unit alone takes {size / _MB:.1f} MB (a single key, or one of "
            f"{BUCKETS} buckets of rows); raise max_payload_mb together with the "
            "server's api.server.update_uploaded_file.max_size_in_mb"
        )
    mid = (lo + hi) // 2
    log.warning(
        "payload part for buckets %d-%d is %.1f MB, over the %.1f MB cap although "
        "its estimate was under it: halving it (this split depends on Hyper's file "
        "size, not on the data alone)",
        lo,
        hi,
        size / _MB,
        cap_bytes / _MB,
    )
    return (lo, mid), (mid + 1, hi)


def _named_parts(
    done: list[tuple[tuple[int, int], Path, dict[str, TableInfo]]], directory: Path
) -> list[PayloadPart]:
    """The written parts in bucket order, each moved to its final name (``payload.hyper``,
    or ``payload-part-NNN-of-MMM.hyper``)."""
    done.sort(key=lambda d: d[0])
    total = len(done)
    parts: list[PayloadPart] = []
    for index, (buckets, tmp, tables) in enumerate(done, start=1):
        final = directory / (
            "payload.hyper" if total == 1 else f"payload-part-{index:03d}-of-{total:03d}.hyper"
        )
        os.replace(tmp, final)
        parts.append(PayloadPart(final, final.stat().st_size, tables, buckets))
    return parts


def kind_is(kind: str) -> str:
    """Hyper SQL: the staged rows of one kind."""
    return f"{quote_name(KIND_COLUMN)} = {quote_literal(kind)}"


def raise_on_change_set_errors(
    spec: CdcSpec,
    plans: Sequence[ColumnPlan],
    staged_names: Sequence[str],
    files: list[Path],
    counted: int,
) -> None:
    """Raise for the first kind of error (in :data:`KIND_ERRORS` order) among the staged
    rows, naming one of its rows and how many there are; ``counted`` is how many error rows
    Spark wrote, so finding none of them is an error too."""
    if files:
        by_name = dict(zip((p.name for p in plans), staged_names, strict=True))
        key_cols = ", ".join(quote_name(by_name[k]) for k in spec.key)
        source = external(files)
        with connect() as conn:
            counts = dict(
                conn.execute_list_query(
                    f"SELECT {quote_name(KIND_COLUMN)}, COUNT(*) FROM {source} "
                    f"WHERE substr({quote_name(KIND_COLUMN)}, 1, 2) = 'E_' GROUP BY 1"
                )
            )
            for kind in KIND_ERRORS:
                count = int(counts.get(kind) or 0)
                if count == 0:
                    continue
                # The first in a fixed order, so that a re-run names the same row.
                named = f"{key_cols}, {quote_name(OP_TEXT_COLUMN)}, {quote_name(ORDER_TEXT_COLUMN)}"
                row = conn.execute_list_query(
                    f"SELECT {named} FROM {source} WHERE {kind_is(kind)} ORDER BY {named} LIMIT 1"
                )[0]
                n = len(spec.key)
                raise PayloadError(spec.describe_error(kind, row[:n], row[n], row[n + 1], count))
    raise PayloadError(
        f"Spark wrote {counted} change(s) it could not apply (a NULL key or position, an "
        f"unknown op, a tie) but none were found in the {len(files)} staged Parquet file(s): "
        "on a cluster, staging_dir must be a shared path that the executors write and the "
        "driver reads at the same place, or pass staging='driver'"
    )


def _merged(stats: Mapping[str, BucketStats], kinds: Sequence[str]) -> BucketStats:
    """The bucket statistics of the rows of ``kinds`` together."""
    merged: BucketStats = {}
    for kind in kinds:
        for bucket, (rows, nbytes, digest) in stats.get(kind, {}).items():
            had_rows, had_bytes, had_digest = merged.get(bucket, (0, 0, RowDigest()))
            merged[bucket] = (had_rows + rows, had_bytes + nbytes, had_digest + digest)
    return merged


def guard_staged(
    spec: CdcSpec,
    plans: list[ColumnPlan],
    staged_names: list[str],
    files: list[Path],
    counts: dict[str, int],
    stats: Mapping[str, BucketStats] | None,
    key_idx: list[int],
) -> list[Staged]:
    """The positions of a guarded change set (``ChangeSet(guard=True)``): each upserted or
    deleted key with its position, in the guard's table (``guarded`` NULL: set on a key
    that holds a later position, it fails the batch) and in the positions the update
    records in the data source's positions table (``guarded`` TRUE)."""
    if spec.guard_table is None or spec.positions_table is None:
        return []
    at = next(i for i, p in enumerate(plans) if p.name == spec.order_by[0])
    picked = [*key_idx, at]
    merged = None if stats is None else _merged(stats, (KIND_UPSERT, KIND_DELETE))
    where = f"({kind_is(KIND_UPSERT)}) OR ({kind_is(KIND_DELETE)})"
    written = counts[KIND_UPSERT] + counts[KIND_DELETE]
    if spec.history is not None:
        # Every change is staged: a key's last holds its position.
        where, written = quote_name(LAST_COLUMN), counts[FIRST_COLUMN]
    return [
        Staged(
            name,
            [plans[i] for i in picked],
            [staged_names[i] for i in picked],
            files,
            written,
            buckets=merged,
            where=where,
            bucket_of=STAGED_BUCKET,
            constants=((GUARD_COLUMN, value),),
        )
        for name, value in ((spec.guard_table, "NULL"), (spec.positions_table, "TRUE"))
    ]

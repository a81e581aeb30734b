"""Spark change sets → ``.hyper`` payload files, fast and with flat driver memory.

How a payload is built (chosen by measurement, see ``benchmarks/payload_build.py``):

1. Spark's executors compute the change set (for CDC: the last change per key, in one
   shuffle) and write it as Parquet to a private staging directory. The driver collects
   nothing.
2. Hyper reads that Parquet in bulk (``INSERT … SELECT … FROM external(…)``), converting
   types on the way, into a ``.hyper`` file written under a temporary name and renamed when
   complete. Files are ``0600`` in a ``0700`` directory.
3. A file over ``max_payload_mb`` is rebuilt as several parts from the same staged Parquet
   (no Spark recomputation), split by a hash of the key for change sets so that each part
   is its own atomic update, evenly otherwise.

The staging directory must be readable by the driver at the same path the executors wrote
it: the local disk in Spark local mode, a shared filesystem (NFS, a FUSE mount of object
storage such as ``/dbfs``) on a cluster. It is removed in every case, failures included.

>>> with build_payload(df, key=["id"], op_column="op", order_by="seq") as payload:  # doctest: +SKIP
...     payload.parts[0].tables["upserts"].row_count
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import shutil
import tempfile
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._hyper import connect, quote_literal, quote_name, table_ref
from .actions import DEFAULT_SCHEMA, ActionBatch, Delete, Insert, Replace, Upsert
from .cdc import (
    KIND_COLUMN,
    KIND_DELETE,
    KIND_ERRORS,
    KIND_UPSERT,
    OP_TEXT_COLUMN,
    ORDER_TEXT_COLUMN,
    CdcSpec,
    derived_actions,
)
from .conditions import condition_columns
from .errors import InvalidActionBatchError, PayloadError, Problem
from .hyper_types import DEFAULT_DATABASE_VERSION, ColumnPlan, plan_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .client import DataSourceRef, TableauClient
    from .roundtrip import UploadedPayload

__all__ = [
    "DEFAULT_MAX_PAYLOAD_MB",
    "ColumnInfo",
    "Payload",
    "PayloadPart",
    "TableInfo",
    "build_payload",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_PAYLOAD_MB = 100
#: Split granularity: rows are spread over this many buckets; a part is a bucket range.
BUCKETS = 1024
BUCKET_COLUMN = "__tabhyper_bucket"
#: A per-row hash staged beside the data: the payload's content digest sums it, so that a
#: rebuilt payload of the same change set has the same identity (Hyper files themselves
#: differ byte for byte from one build to the next).
ROWHASH_COLUMN = "__tabhyper_rowhash"
_DIGEST_MODULI = (2147483647, 2147483629)
#: Parts are aimed a little under the cap so that one rebuild is usually enough.
_SPLIT_HEADROOM = 0.9
_MB = 1024 * 1024
#: Staging Parquet options. Dictionary encoding is off: measured on 2M rows it doubled
#: Spark's write time and slowed Hyper's read, for files that live a few seconds.
_PARQUET_OPTIONS = {"compression": "snappy", "parquet.enable.dictionary": "false"}
_SPARK_CONF = {
    # Proleptic Gregorian dates and timestamps, as Hyper stores them, for every year 1-9999.
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


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
    #: The actions derived from a change set for this part (``None`` for plain payloads).
    actions: ActionBatch | None = None

    @property
    def row_count(self) -> int:
        return sum(t.row_count for t in self.tables.values())

    @cached_property
    def sha256(self) -> str:
        """The file's SHA-256 (computed on first use: nothing in the round trip needs it)."""
        return _sha256(self.path)

    @property
    def content_digest(self) -> str:
        """A digest of what the part holds (schema, tables, columns, rows), stable across
        rebuilds of the same change set: the identity behind the default RequestID."""
        identity = [
            [
                t.schema,
                t.name,
                [[c.name, c.hyper_type, c.nullable] for c in t.columns],
                t.row_count,
                t.row_digest,
            ]
            for t in sorted(self.tables.values(), key=lambda t: t.name)
        ]
        text = json.dumps(identity, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Payload:
    """The result of :func:`build_payload`: zero or more parts, and their derived actions.

    An empty change set gives a payload with no parts (``is_empty``): a clear no-op.
    Use it as a context manager (or call :meth:`cleanup`) to remove its files.
    """

    parts: list[PayloadPart]
    schema: str = DEFAULT_SCHEMA
    keep_files: bool = False
    key: tuple[str, ...] | None = None
    _owned_dir: Path | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Files nobody cleaned up go when the payload is garbage-collected or at exit.
        self._finalizer: weakref.finalize[Any, Any] | None = None
        if self._owned_dir is not None and not self.keep_files:
            self._finalizer = weakref.finalize(self, shutil.rmtree, str(self._owned_dir), True)

    # -- shape ---------------------------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        return not self.parts

    @property
    def is_cdc(self) -> bool:
        return self.key is not None

    @property
    def size_bytes(self) -> int:
        return sum(p.size_bytes for p in self.parts)

    @property
    def tables(self) -> dict[str, TableInfo]:
        """Every table across the parts, row counts summed."""
        merged: dict[str, TableInfo] = {}
        for part in self.parts:
            for name, info in part.tables.items():
                seen = merged.get(name)
                merged[name] = (
                    info
                    if seen is None
                    else TableInfo(seen.schema, name, seen.columns, seen.row_count + info.row_count)
                )
        return merged

    @property
    def actions(self) -> ActionBatch | None:
        """The derived actions of a single-part change set (see each part otherwise)."""
        if len(self.parts) == 1:
            return self.parts[0].actions
        return None

    # -- checks ----------------------------------------------------------------------------
    def validate(self, batch: Any) -> ActionBatch:
        """Check ``batch`` against this payload's tables before anything is sent.

        Every source table must exist (in this payload's schema), every source column a
        condition names must exist, a delete's source table may hold only the columns its
        condition names, and insert / upsert / replace sources must hold rows. A replace
        cannot be applied to a payload split into several parts.
        """
        checked = ActionBatch.coerce(batch)
        self._check(checked)
        return checked

    def _check(self, batch: ActionBatch) -> None:
        problems: list[Problem] = []
        tables = self.tables
        known = ", ".join(repr(t) for t in tables) or "none"
        for i, action in enumerate(batch.actions):
            where = f"$.actions[{i}]"
            if action.source_table is None:
                continue
            if action.source_schema != self.schema:
                problems.append(
                    Problem(
                        f"{where}.source-schema",
                        f"the payload's tables are in schema {self.schema!r}, "
                        f"not {action.source_schema!r}",
                    )
                )
                continue
            info = tables.get(action.source_table)
            if info is None:
                problems.append(
                    Problem(
                        f"{where}.source-table",
                        f"the payload has no table {action.source_table!r} (its tables: {known})",
                    )
                )
                continue
            if action.condition is not None and action.condition is not True:
                _, sources = condition_columns(action.condition)
                missing = sorted(sources - set(info.column_names))
                if missing:
                    problems.append(
                        Problem(
                            f"{where}.condition",
                            f"source column(s) {', '.join(map(repr, missing))} are not in payload "
                            f"table {info.name!r} (its columns: "
                            f"{', '.join(map(repr, info.column_names))})",
                        )
                    )
                if isinstance(action, Delete):
                    extra = [c for c in info.column_names if c not in sources]
                    if extra:
                        problems.append(
                            Problem(
                                f"{where}.source-table",
                                f"a delete's source table may hold only the columns its condition "
                                f"names; {info.name!r} also has {', '.join(map(repr, extra))}",
                            )
                        )
            if isinstance(action, (Insert, Upsert, Replace)) and info.row_count == 0:
                problems.append(
                    Problem(
                        f"{where}.source-table",
                        f"payload table {info.name!r} holds no rows: nothing to {action.action}",
                    )
                )
            if isinstance(action, Replace) and len(self.parts) > 1:
                problems.append(
                    Problem(
                        where,
                        f"the payload was split into {len(self.parts)} parts to stay under "
                        "max_payload_mb, and a replace needs the whole table in one update: "
                        "raise max_payload_mb together with the server's "
                        "api.server.update_uploaded_file.max_size_in_mb",
                    )
                )
        if problems:
            raise InvalidActionBatchError(problems)

    # -- manifest (for the command line) ------------------------------------------------------
    MANIFEST = "manifest.json"

    def save_manifest(self, directory: str | os.PathLike[str] | None = None) -> Path:
        """Write ``manifest.json`` beside the parts (or in ``directory``): what
        :meth:`load` needs to apply the payload later, e.g. from ``tabhyper-update apply``."""
        if not self.parts:
            raise PayloadError("an empty payload has no files to describe")
        where = Path(directory) if directory is not None else self.parts[0].path.parent
        where.mkdir(parents=True, exist_ok=True)
        doc = {
            "schema": self.schema,
            "key": list(self.key) if self.key is not None else None,
            "parts": [
                {
                    "file": os.path.relpath(p.path, where),
                    "size_bytes": p.size_bytes,
                    "sha256": p.sha256,
                    "tables": [
                        {
                            "schema": t.schema,
                            "name": t.name,
                            "row_count": t.row_count,
                            "row_digest": t.row_digest,
                            "columns": [[c.name, c.hyper_type, c.nullable] for c in t.columns],
                        }
                        for t in p.tables.values()
                    ],
                    "actions": p.actions.to_dict() if p.actions is not None else None,
                }
                for p in self.parts
            ],
        }
        path = where / self.MANIFEST
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
        tmp.chmod(0o600)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, keep_files: bool = True) -> Payload:
        """A payload from a directory (or manifest file) written by :meth:`save_manifest`."""
        manifest = Path(path)
        if manifest.is_dir():
            manifest = manifest / cls.MANIFEST
        try:
            doc = json.loads(manifest.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PayloadError(f"no payload manifest at {str(manifest)!r}") from None
        except ValueError as err:
            raise PayloadError(f"{str(manifest)!r} is not a payload manifest: {err}") from None
        parts = []
        for item in doc["parts"]:
            file = manifest.parent / item["file"]
            if not file.is_file():
                raise PayloadError(f"payload part {str(file)!r} is missing")
            if file.stat().st_size != item["size_bytes"]:
                raise PayloadError(f"payload part {str(file)!r} changed size since it was built")
            tables = {
                t["name"]: TableInfo(
                    t["schema"],
                    t["name"],
                    tuple(ColumnInfo(*c) for c in t["columns"]),
                    t["row_count"],
                    t.get("row_digest", ""),
                )
                for t in item["tables"]
            }
            actions = ActionBatch.from_dict(item["actions"]) if item.get("actions") else None
            part = PayloadPart(file, item["size_bytes"], tables, actions)
            if part.sha256 != item["sha256"]:
                raise PayloadError(f"payload part {str(file)!r} changed since it was built")
            parts.append(part)
        key = tuple(doc["key"]) if doc.get("key") else None
        return cls(parts, schema=doc["schema"], keep_files=keep_files, key=key)

    # -- the round trip ----------------------------------------------------------------------
    def upload(
        self,
        target: DataSourceRef | str | None = None,
        *,
        client: TableauClient | None = None,
        progress: bool | None = None,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> UploadedPayload:
        """Bind this payload to its target data source and upload it (first part at once).

        ``target`` is a :class:`DataSourceRef` or a name; by default ``TABLEAU_DATASOURCE``.
        ``client`` defaults to :meth:`TableauClient.from_env`. Progress bars show on a
        terminal unless ``progress=False``. Then ``.apply(actions).wait()``.
        """
        from .roundtrip import upload_payload

        return upload_payload(self, target, client=client, progress=progress, state_dir=state_dir)

    # -- files -----------------------------------------------------------------------------
    def cleanup(self) -> None:
        """Remove the payload files (unless built with ``keep_files=True``)."""
        if self.keep_files:
            return
        for part in self.parts:
            with contextlib.suppress(FileNotFoundError):
                part.path.unlink()
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> Payload:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


# ---------------------------------------------------------------------------------------------
# building


@dataclass
class _Staged:
    """A payload table whose rows sit in staged Parquet files."""

    name: str
    plans: list[ColumnPlan]
    staged_names: list[str]
    files: list[Path]


def _private_dir(parent: str | os.PathLike[str] | None, prefix: str) -> Path:
    if parent is not None:
        Path(parent).mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    path.chmod(0o700)
    return path


def _parquet_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*.parquet") if p.is_file())


@contextlib.contextmanager
def _spark_conf(spark: Any) -> Iterator[None]:
    saved = {k: spark.conf.get(k, None) for k in _SPARK_CONF}
    for k, v in _SPARK_CONF.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(_MB), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_names(name: str, what: str) -> None:
    if not isinstance(name, str) or not name:
        raise PayloadError(f"{what} must be a non-empty string, got {name!r}")


def _plans(
    df: DataFrame,
    table: str,
    columns: Sequence[str],
    *,
    database_version: int,
    complex_as_json: bool,
) -> list[ColumnPlan]:
    by_name = {f.name: f for f in df.schema.fields}
    seen: set[str] = set()
    for f in df.schema.fields:
        if f.name in seen:
            raise PayloadError(f"table {table!r} has two columns named {f.name!r}")
        seen.add(f.name)
    if not columns:
        raise PayloadError(f"table {table!r} has no columns")
    return [
        plan_column(
            by_name[c],
            table=table,
            database_version=database_version,
            complex_as_json=complex_as_json,
        )
        for c in columns
    ]


def _write_part(
    path: Path,
    staged: Sequence[_Staged],
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
            ref = table_ref(schema, t.name)
            columns = ", ".join(f"{quote_name(p.name)} {p.sql_definition_type}" for p in t.plans)
            conn.execute_command(f"CREATE TABLE {ref} ({columns})")
            rows = 0
            if t.files:
                select = ", ".join(
                    p.hyper_expression(quote_name(s))
                    for p, s in zip(t.plans, t.staged_names, strict=True)
                )
                files = ", ".join(quote_literal(str(f)) for f in t.files)
                where = (
                    ""
                    if (lo, hi) == (0, BUCKETS - 1)
                    else f" WHERE {quote_name(BUCKET_COLUMN)} BETWEEN {lo} AND {hi}"
                )
                rows = int(
                    conn.execute_command(
                        f"INSERT INTO {ref} SELECT {select} FROM "
                        f"external(ARRAY[{files}], FORMAT => 'parquet'){where}"
                    )
                    or 0
                )
            if rows == 0 and drop_empty:
                conn.execute_command(f"DROP TABLE {ref}")
                continue
            digest = ""
            if rows:
                h = quote_name(ROWHASH_COLUMN)
                sums = ", ".join(f"SUM({h} % {m})" for m in _DIGEST_MODULI)
                values = conn.execute_list_query(
                    f"SELECT COUNT(*), {sums} FROM "
                    f"external(ARRAY[{files}], FORMAT => 'parquet'){where}"
                )[0]
                digest = ":".join(str(v) for v in values)
            tables[t.name] = TableInfo(
                schema,
                t.name,
                tuple(ColumnInfo(p.name, p.hyper_type, p.nullable) for p in t.plans),
                rows,
                digest,
            )
    return tables


def build_payload(
    source: DataFrame | Mapping[str, DataFrame],
    *,
    table: str = "Extract",
    schema: str = DEFAULT_SCHEMA,
    key: Sequence[str] | str | None = None,
    op_column: str | None = None,
    order_by: Sequence[str] | str | None = None,
    op_map: Mapping[str, str] | None = None,
    keep_columns: Sequence[str] = (),
    target_table: str = "Extract",
    target_schema: str = DEFAULT_SCHEMA,
    upsert_table: str = "upserts",
    delete_table: str = "deletes",
    database_version: int = DEFAULT_DATABASE_VERSION,
    complex_as_json: bool = False,
    staging_dir: str | os.PathLike[str] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    max_payload_mb: float = DEFAULT_MAX_PAYLOAD_MB,
    keep_files: bool = False,
) -> Payload:
    """Build a ``.hyper`` payload from one DataFrame or a mapping of table name → DataFrame.

    Plain mode writes each DataFrame as a table (``table`` names the single one). CDC mode
    (``key=`` given) reads a change set and writes an ``upserts`` table (every data column)
    and a ``deletes`` table (key columns only), with derived actions delete-then-upsert on
    ``target_schema.target_table``::

        payload = build_payload(changes, key=["region", "id"], op_column="_change_type",
                                order_by="_commit_version")
    """
    if max_payload_mb <= 0:
        raise PayloadError(f"max_payload_mb must be positive, got {max_payload_mb!r}")
    for value, what in (
        (schema, "schema"),
        (table, "table"),
        (target_table, "target_table"),
        (target_schema, "target_schema"),
        (upsert_table, "upsert_table"),
        (delete_table, "delete_table"),
    ):
        _check_names(value, what)
    if isinstance(source, Mapping):
        frames = dict(source)
        if not frames:
            raise PayloadError("build_payload needs at least one DataFrame")
        for name in frames:
            _check_names(name, "a table name")
    else:
        frames = {table: source}
    for name, df in frames.items():
        if not hasattr(df, "schema") or not hasattr(df, "write"):
            raise PayloadError(
                f"table {name!r}: expected a Spark DataFrame, got {type(df).__name__}"
            )
    cdc = key is not None or op_column is not None
    if cdc and len(frames) != 1:
        raise PayloadError("a change set (key=/op_column=) is one DataFrame, not a mapping")
    if cdc and key is None:
        raise PayloadError("a change set needs key= (the column(s) that identify a row)")
    if cdc and upsert_table == delete_table:
        raise PayloadError("upsert_table and delete_table must differ")

    # Plan every column before any Spark job or file write: bad types fail here.
    spark_frames: list[tuple[str, DataFrame, list[ColumnPlan]]] = []
    spec: CdcSpec | None = None
    if cdc:
        ((_, df),) = frames.items()
        spec = CdcSpec.create(
            df.columns,
            key=key or (),
            op_column=op_column,
            order_by=order_by,
            op_map=op_map,
            keep_columns=keep_columns,
        )
        data_columns = spec.data_columns(df.columns)
        plans = _plans(
            df,
            upsert_table,
            data_columns,
            database_version=database_version,
            complex_as_json=complex_as_json,
        )
        spark_frames.append((upsert_table, df, plans))
    else:
        for name, df in frames.items():
            plans = _plans(
                df,
                name,
                df.columns,
                database_version=database_version,
                complex_as_json=complex_as_json,
            )
            spark_frames.append((name, df, plans))

    stage = _private_dir(staging_dir, "tabhyper-stage-")
    out = Path(output_dir) if output_dir is not None else None
    owned = _private_dir(out, "tabhyper-payload-")
    try:
        started = time.perf_counter()
        staged = _stage(spark_frames, spec, stage, delete_table=delete_table)
        log.debug("Spark staged the change set in %.2f s", time.perf_counter() - started)
        started = time.perf_counter()
        parts = _build_parts(
            staged,
            owned,
            schema=schema,
            database_version=database_version,
            cap_bytes=int(max_payload_mb * _MB),
            drop_empty=spec is not None,
        )
        log.debug("Hyper wrote %d part(s) in %.2f s", len(parts), time.perf_counter() - started)
        if spec is not None:
            parts = [
                PayloadPart(
                    p.path,
                    p.size_bytes,
                    p.tables,
                    ActionBatch(
                        actions=derived_actions(
                            spec.key,
                            target_schema=target_schema,
                            target_table=target_table,
                            source_schema=schema,
                            delete_table=delete_table if delete_table in p.tables else None,
                            upsert_table=upsert_table if upsert_table in p.tables else None,
                        )
                    ),
                )
                for p in parts
            ]
    except BaseException:
        shutil.rmtree(owned, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if not parts:
        shutil.rmtree(owned, ignore_errors=True)
        log.info("the change set is empty: nothing to upload")
    payload = Payload(
        parts,
        schema=schema,
        keep_files=keep_files,
        key=spec.key if spec is not None else None,
        _owned_dir=owned,
    )
    log.info(
        "built payload: %d part(s), %d bytes, tables %s",
        len(parts),
        payload.size_bytes,
        {n: t.row_count for n, t in payload.tables.items()},
    )
    return payload


def _stage(
    frames: Sequence[tuple[str, DataFrame, list[ColumnPlan]]],
    spec: CdcSpec | None,
    stage: Path,
    *,
    delete_table: str,
) -> list[_Staged]:
    """Write the change set (or tables) to Parquet with Spark; nothing is collected."""
    from pyspark.sql import functions as F

    staged: list[_Staged] = []
    for index, (name, df, plans) in enumerate(frames):
        staged_names = [f"c{i}" for i in range(len(plans))]
        values = [p.spark_column(F.col(f"`{p.name.replace('`', '``')}`")) for p in plans]
        columns = [v.alias(s) for v, s in zip(values, staged_names, strict=True)]
        columns.append(F.xxhash64(*values).alias(ROWHASH_COLUMN))
        target = stage / f"t{index}"
        with _spark_conf(df.sparkSession):
            if spec is None:
                bucket = F.pmod(F.monotonically_increasing_id(), F.lit(BUCKETS))
                (
                    df.select(*columns, bucket.cast("smallint").alias(BUCKET_COLUMN))
                    .write.mode("overwrite")
                    .options(**_PARQUET_OPTIONS)
                    .parquet(target.resolve().as_uri())
                )
                staged.append(_Staged(name, plans, staged_names, _parquet_files(target)))
                continue
            keys = [F.col(f"`{k.replace('`', '``')}`") for k in spec.key]
            bucket = F.pmod(F.xxhash64(*keys), F.lit(BUCKETS))
            latest = spec.latest_changes(df)
            (
                latest.select(
                    *columns,
                    bucket.cast("smallint").alias(BUCKET_COLUMN),
                    F.col(KIND_COLUMN),
                    F.col(OP_TEXT_COLUMN),
                    F.col(ORDER_TEXT_COLUMN),
                )
                .write.mode("overwrite")
                .options(**_PARQUET_OPTIONS)
                .partitionBy(KIND_COLUMN)
                .parquet(target.resolve().as_uri())
            )
        _raise_on_change_set_errors(spec, plans, staged_names, target)
        key_idx = [i for i, p in enumerate(plans) if p.name in spec.key]
        upserts = _parquet_files(target / f"{KIND_COLUMN}={KIND_UPSERT}")
        deletes = _parquet_files(target / f"{KIND_COLUMN}={KIND_DELETE}")
        staged.append(_Staged(name, plans, staged_names, upserts))
        staged.append(
            _Staged(
                delete_table,
                [plans[i] for i in key_idx],
                [staged_names[i] for i in key_idx],
                deletes,
            )
        )
    return staged


def _raise_on_change_set_errors(
    spec: CdcSpec, plans: Sequence[ColumnPlan], staged_names: Sequence[str], target: Path
) -> None:
    for kind in KIND_ERRORS:
        files = _parquet_files(target / f"{KIND_COLUMN}={kind}")
        if not files:
            continue
        by_name = dict(zip((p.name for p in plans), staged_names, strict=True))
        key_cols = ", ".join(quote_name(by_name[k]) for k in spec.key)
        source = (
            f"external(ARRAY[{', '.join(quote_literal(str(f)) for f in files)}], "
            "FORMAT => 'parquet')"
        )
        with connect() as conn:
            count = int(conn.execute_scalar_query(f"SELECT COUNT(*) FROM {source}"))
            if count == 0:
                continue
            row = conn.execute_list_query(
                f"SELECT {key_cols}, {quote_name(OP_TEXT_COLUMN)}, "
                f"{quote_name(ORDER_TEXT_COLUMN)} FROM {source} LIMIT 1"
            )[0]
        n = len(spec.key)
        raise PayloadError(spec.describe_error(kind, row[:n], row[n], row[n + 1], count))


def _build_parts(
    staged: Sequence[_Staged],
    directory: Path,
    *,
    schema: str,
    database_version: int,
    cap_bytes: int,
    drop_empty: bool,
) -> list[PayloadPart]:
    """Write the payload, splitting by bucket range until every part fits under the cap."""

    def write(buckets: tuple[int, int]) -> tuple[Path, dict[str, TableInfo]]:
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

    pending = [(0, BUCKETS - 1)]
    done: list[tuple[tuple[int, int], Path, dict[str, TableInfo]]] = []
    while pending:
        lo, hi = pending.pop(0)
        path, tables = write((lo, hi))
        size = path.stat().st_size
        if sum(t.row_count for t in tables.values()) == 0:
            # No rows in this range (or at all): an empty update is a no-op, not an upload.
            path.unlink()
            continue
        if size <= cap_bytes:
            done.append(((lo, hi), path, tables))
            continue
        path.unlink()
        if lo == hi:
            raise PayloadError(
                f"the payload cannot be split under max_payload_mb={cap_bytes / _MB:g}: one "
                f"split unit alone takes {size / _MB:.1f} MB (a single key, or one of "
                f"{BUCKETS} buckets of rows); raise max_payload_mb together with the "
                "server's api.server.update_uploaded_file.max_size_in_mb"
            )
        pieces = max(2, math.ceil(size / (cap_bytes * _SPLIT_HEADROOM)))
        span = hi - lo + 1
        pieces = min(pieces, span)
        bounds = [lo + (span * i) // pieces for i in range(pieces + 1)]
        pending[:0] = [(bounds[i], bounds[i + 1] - 1) for i in range(pieces)]
        log.info(
            "payload part over %.1f MB (%.1f MB): splitting buckets %d-%d into %d",
            cap_bytes / _MB,
            size / _MB,
            lo,
            hi,
            pieces,
        )

    done.sort(key=lambda d: d[0])
    total = len(done)
    parts: list[PayloadPart] = []
    for index, (_, tmp, tables) in enumerate(done, start=1):
        final = directory / (
            "payload.hyper" if total == 1 else f"payload-part-{index:03d}-of-{total:03d}.hyper"
        )
        os.replace(tmp, final)
        parts.append(PayloadPart(final, final.stat().st_size, tables))
    return parts

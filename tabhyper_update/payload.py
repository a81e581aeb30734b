"""The payload model: a change set as ``.hyper`` part files, with its tables and identity.

:func:`tabhyper_update.build.build_payload` makes a :class:`Payload` from Spark; this module
holds what it makes: the parts (one ``.hyper`` file each, one atomic update each), their
tables, the digest that identifies the change set, the check of an action batch against the
tables, and the manifest that lets ``tabhyper-update apply`` pick a payload up later.

A payload's **digest** covers every row (each value with its NULL flag) and, for a change set,
the op and ordering values of each change: its position in the source. Two slices of a feed
with equal rows at different positions have different digests; the same slice rebuilt after
a crash has the same digest, however Spark partitioned it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

from .actions import DEFAULT_SCHEMA, ActionBatch, Delete, Insert, Replace, Upsert
from .cdc import ChangeSet, derived_actions
from .conditions import condition_columns
from .errors import (
    ConfigurationError,
    InvalidActionBatchError,
    InvalidArgumentError,
    PayloadAppliedError,
    PayloadError,
    Problem,
    TabHyperError,
)
from .folders import check_folder
from .redaction import get_logger

if TYPE_CHECKING:
    from .client import DataSourceRef, TableauClient
    from .publish import PublishMode
    from .roundtrip import UploadedPayload

__all__ = [
    "BUCKETS",
    "DEFAULT_MAX_PAYLOAD_MB",
    "ColumnInfo",
    "Payload",
    "PayloadPart",
    "RowDigest",
    "TableInfo",
]

log = get_logger(__name__)

DEFAULT_MAX_PAYLOAD_MB = 100
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

    def __str__(self) -> str:
        return ":".join(str(v) for v in (self.rows, *self.sums))

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
        return _sha256(self.path)

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


@dataclass
class Payload:
    """The result of :func:`build_payload`: zero or more parts, and their derived actions.

    An empty change set gives a payload with no parts (``is_empty``): a clear no-op.
    Use it as a context manager (or call :meth:`cleanup`) to remove its files.
    """

    parts: list[PayloadPart]
    schema: str = DEFAULT_SCHEMA
    keep_files: bool = False
    #: How the rows were read as a change set (``None`` for a plain payload).
    change_set: ChangeSet | None = None
    #: A multi-table change set: each target table's ChangeSet, naming its payload tables.
    change_sets: Mapping[str, ChangeSet] | None = None
    _owned_dir: Path | None = field(default=None, repr=False)
    #: The manifest this payload was loaded from, if any.
    _manifest: Path | None = field(default=None, repr=False)

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
        return self.change_set is not None or bool(self.change_sets)

    @property
    def key(self) -> tuple[str, ...] | None:
        """The change set's key columns (``None`` for a plain payload)."""
        return self.change_set.key if self.change_set is not None else None

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
                    else TableInfo(
                        seen.schema,
                        name,
                        seen.columns,
                        seen.row_count + info.row_count,
                        str(RowDigest.parse(seen.row_digest) + RowDigest.parse(info.row_digest)),
                    )
                )
        return merged

    @property
    def digest(self) -> str:
        """The identity of the whole change set: every table's columns and rows and, for a
        change set, the op and ordering values of each change. The same for a rebuild of the
        same slice of a feed; different for a later slice with equal rows."""
        identity: list[Any] = [
            self.schema,
            list(self.key) if self.key is not None else None,
            [
                [t.name, [[c.name, c.hyper_type, c.nullable] for c in t.columns], t.row_digest]
                for t in sorted(self.tables.values(), key=lambda t: t.name)
            ],
        ]
        if self.change_sets:
            identity.append(
                [
                    [name, list(cs.key), cs.upsert_table, cs.delete_table]
                    for name, cs in self.change_sets.items()
                ]
            )
        text = json.dumps(identity, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def derived_actions(
        self,
        part: PayloadPart | None = None,
        *,
        target_table: str = DEFAULT_SCHEMA,
        target_schema: str = DEFAULT_SCHEMA,
    ) -> ActionBatch:
        """A change set's actions on ``target_schema.target_table``: delete the keys of the
        ``deletes`` table, then upsert the ``upserts`` table, each by key (only the tables
        ``part`` holds; the first part by default). A multi-table change set does so for each
        of its tables, in turn, on the table of the same name (``target_table`` is refused:
        the mapping names the targets)."""
        if not self.is_cdc:
            raise InvalidArgumentError(
                "no actions to apply: pass actions= (only a payload built with a ChangeSet "
                "derives its own)"
            )
        if part is None:
            if not self.parts:
                raise PayloadError("an empty change set has no actions: nothing to apply")
            part = self.parts[0]
        if self.change_sets:
            if target_table != DEFAULT_SCHEMA:
                raise InvalidArgumentError(
                    f"target_table={target_table!r} does not apply to a multi-table change set: "
                    f"each table's changes go to the table of its name "
                    f"({', '.join(map(repr, self.change_sets))})"
                )
            targets = list(self.change_sets.items())
        else:
            assert self.change_set is not None
            targets = [(target_table, self.change_set)]
        actions = []
        for table, cs in targets:
            actions += derived_actions(
                cs.key,
                target_schema=target_schema,
                target_table=table,
                source_schema=self.schema,
                delete_table=cs.delete_table if cs.delete_table in part.tables else None,
                upsert_table=cs.upsert_table if cs.upsert_table in part.tables else None,
            )
        return ActionBatch(actions=actions)

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

    def mark_applied(self, jobs: list[str], target: dict[str, str] | None = None) -> None:
        """Note in the saved manifest (when this payload was loaded from one) that it was
        applied (by ``jobs``, to ``target``), so that a later load says so instead of
        finding its files missing."""
        manifest = self._manifest
        if manifest is None:
            return
        try:
            doc = json.loads(manifest.read_text(encoding="utf-8"))
            doc["applied"] = {
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "jobs": jobs,
                "target": target,
            }
            tmp = manifest.with_name(f".{manifest.name}.tmp")
            tmp.write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")
            tmp.chmod(0o600)
            os.replace(tmp, manifest)
        except (OSError, ValueError) as err:
            log.warning("could not note in %s that it was applied: %s", manifest, err)

    def save_manifest(self, directory: str | os.PathLike[str] | None = None) -> Path:
        """Write ``manifest.json`` beside the parts: what :meth:`load` needs to apply the
        payload later, e.g. from ``tabhyper-update apply``. With ``directory``, the part
        files move there first (a manifest only ever names files in its own folder)."""
        if not self.parts:
            raise PayloadError("an empty payload has no files to describe")
        where = Path(directory) if directory is not None else self.parts[0].path.parent
        check_folder(where, "directory")
        moved = []
        for part in self.parts:
            final = where / part.path.name
            if part.path.resolve() != final.resolve():
                if final.exists():
                    raise PayloadError(
                        f"cannot move payload part {part.path.name!r} into {str(where)!r}: a "
                        "file of that name is already there"
                    )
                shutil.move(part.path, final)
                part = replace(part, path=final)
            moved.append(part)
        self.parts = moved
        doc = {
            "schema": self.schema,
            "change_set": self.change_set.to_dict() if self.change_set is not None else None,
            "change_sets": (
                {name: cs.to_dict() for name, cs in self.change_sets.items()}
                if self.change_sets
                else None
            ),
            "parts": [
                {
                    "file": os.path.relpath(p.path, where),
                    "size_bytes": p.size_bytes,
                    "sha256": p.sha256,
                    "buckets": list(p.buckets),
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
    def from_hyper(cls, path: str | os.PathLike[str], *, schema: str | None = None) -> Payload:
        """A payload of one existing ``.hyper`` file (made by the Hyper API, pantab, Tableau
        Prep or an earlier build), to update a data source without Spark::

            Payload.from_hyper("orders.hyper").upload("Orders").apply(
                [Insert(source_table="Extract", target_table="Extract")])

        Its tables are read from the file; ``schema`` picks one when the file has tables in
        several schemas. The file is yours: it is never changed, moved or removed."""
        from tableauhyperapi import Nullability

        from ._hyper import connect

        file = Path(path)
        if not file.is_file():
            raise PayloadError(f"{str(file)!r} is not a file: give the path of a .hyper file")
        try:
            with connect(file) as connection:
                catalog = connection.catalog
                found = [
                    (str(s.name.unescaped), catalog.get_table_definition(t))
                    for s in catalog.get_schema_names()
                    for t in catalog.get_table_names(s)
                ]
                counts = {
                    (sch, str(d.table_name.name.unescaped)): int(
                        connection.execute_scalar_query(f"SELECT COUNT(*) FROM {d.table_name}")
                    )
                    for sch, d in found
                }
        except Exception as err:  # Hyper's own error for a file that is not a Hyper file
            if isinstance(err, TabHyperError):
                raise
            raise PayloadError(
                f"{str(file)!r} cannot be read as a .hyper file: {str(err).splitlines()[0]}"
            ) from None
        schemas = sorted({sch for sch, _ in found})
        if not found:
            raise PayloadError(f"{str(file)!r} holds no table")
        if schema is None and len(schemas) > 1:
            raise PayloadError(
                f"{str(file)!r} has tables in several schemas ({', '.join(map(repr, schemas))}): "
                "pass schema= to pick one"
            )
        chosen = schema if schema is not None else schemas[0]
        if chosen not in schemas:
            raise PayloadError(
                f"{str(file)!r} has no schema {chosen!r} (its schemas: "
                f"{', '.join(map(repr, schemas))})"
            )
        sha = _sha256(file)
        tables: dict[str, TableInfo] = {}
        for sch, definition in found:
            if sch != chosen:
                continue
            name = str(definition.table_name.name.unescaped)
            columns = tuple(
                ColumnInfo(
                    str(c.name.unescaped),
                    _sql_type_text(c.type),
                    c.nullability == Nullability.NULLABLE,
                )
                for c in definition.columns
            )
            # The file's SHA-256 stands for its rows: the same file, the same identity.
            tables[name] = TableInfo(sch, name, columns, counts[(sch, name)], f"sha256:{sha}")
        part = PayloadPart(file, file.stat().st_size, tables)
        return cls([part], schema=chosen, keep_files=True)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, keep_files: bool = True) -> Payload:
        """A payload from a directory (or manifest file) written by :meth:`save_manifest`.

        Every part must be a file inside the manifest's folder (no ``..``, no absolute path,
        no symbolic link out of it) with the size and SHA-256 the manifest gives.
        """
        manifest = Path(path)
        if manifest.is_dir():
            manifest = manifest / cls.MANIFEST
        try:
            doc = json.loads(manifest.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PayloadError(f"no payload manifest at {str(manifest)!r}") from None
        except (OSError, ValueError, RecursionError) as err:
            raise PayloadError(f"{str(manifest)!r} is not a payload manifest: {err}") from None
        try:
            return cls._from_manifest(manifest, doc, keep_files)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
            if isinstance(err, PayloadError):
                raise
            what = f"missing field {err}" if isinstance(err, KeyError) else str(err)
            raise PayloadError(
                f"{str(manifest)!r} is not a valid payload manifest: {what}"
            ) from None

    @classmethod
    def _from_manifest(cls, manifest: Path, doc: Any, keep_files: bool) -> Payload:
        if not isinstance(doc, dict) or not isinstance(doc.get("parts"), list):
            raise PayloadError(f"{str(manifest)!r} is not a payload manifest: no 'parts' list")
        folder = manifest.parent.resolve()
        parts = []
        for item in doc["parts"]:
            name = item["file"]
            if not isinstance(name, str) or not name:
                raise PayloadError(f"{str(manifest)!r}: a part's 'file' must be a file name")
            relative = Path(name)
            if relative.is_absolute() or ".." in relative.parts:
                raise PayloadError(
                    f"{str(manifest)!r}: payload part {name!r} is outside the manifest's folder; "
                    "refused"
                )
            file = manifest.parent / relative
            if file.is_symlink() or not file.resolve().is_relative_to(folder):
                raise PayloadError(
                    f"{str(manifest)!r}: payload part {name!r} leads outside the manifest's "
                    "folder; refused"
                )
            if not file.is_file():
                applied = doc.get("applied")
                if isinstance(applied, dict):
                    target = applied.get("target")
                    raise PayloadAppliedError(
                        str(manifest),
                        str(applied.get("at")),
                        list(applied.get("jobs") or []),
                        target if isinstance(target, dict) else None,
                    )
                raise PayloadError(
                    f"payload part {str(file)!r} is missing (moved or removed since the payload "
                    "was saved)"
                )
            if file.stat().st_size != int(item["size_bytes"]):
                raise PayloadError(f"payload part {str(file)!r} changed size since it was built")
            tables = {
                str(t["name"]): TableInfo(
                    str(t["schema"]),
                    str(t["name"]),
                    tuple(ColumnInfo(str(c[0]), str(c[1]), bool(c[2])) for c in t["columns"]),
                    int(t["row_count"]),
                    str(t.get("row_digest", "")),
                )
                for t in item["tables"]
            }
            lo, hi = item.get("buckets") or (0, BUCKETS - 1)
            part = PayloadPart(file, int(item["size_bytes"]), tables, (int(lo), int(hi)))
            if part.sha256 != item["sha256"]:
                raise PayloadError(f"payload part {str(file)!r} changed since it was built")
            parts.append(part)
        change_set = ChangeSet.from_dict(doc["change_set"]) if doc.get("change_set") else None
        change_sets = (
            {str(name): ChangeSet.from_dict(cs) for name, cs in doc["change_sets"].items()}
            if doc.get("change_sets")
            else None
        )
        return cls(
            parts,
            schema=str(doc["schema"]),
            keep_files=keep_files,
            change_set=change_set,
            change_sets=change_sets,
            _manifest=manifest,
        )

    # -- the round trip ----------------------------------------------------------------------
    def upload(
        self,
        target: DataSourceRef | str | None = None,
        *,
        client: TableauClient | None = None,
        progress: bool | None = None,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> UploadedPayload:
        """Bind this payload to its target data source and upload it: the target is looked
        up and the first part uploaded before this returns (the others are uploaded by
        ``apply()``, each after the part before it was applied). Nothing is applied yet.

        ``target`` is a :class:`DataSourceRef` (whose client is used) or a name; by default
        ``TABLEAU_DATASOURCE``. ``client`` defaults to the reference's client, else
        :meth:`TableauClient.from_env`. Progress bars show on a terminal unless
        ``progress=False``. Then ``.apply(actions)`` (or ``.apply(target_table=...)`` for a
        change set).
        """
        from .roundtrip import upload_payload

        return upload_payload(self, target, client=client, progress=progress, state_dir=state_dir)

    def publish(
        self,
        name: str,
        *,
        project: str | None = None,
        mode: PublishMode = "create",
        client: TableauClient | None = None,
        description: str | None = None,
        timeout: float | None = None,
    ) -> DataSourceRef:
        """Publish this payload (a snapshot in one file) as the live-to-Hyper data source
        ``name``: :meth:`TableauClient.publish` with ``client`` (by default from the
        environment). The files are removed once published (unless ``keep_files``)."""
        from .client import TableauClient as _Client

        if client is None:
            try:
                client = _Client.from_env()
            except ConfigurationError as err:
                raise ConfigurationError(
                    f"no client to publish with: pass client=TableauClient(...) or configure "
                    f"the environment ({err})"
                ) from None
        ref = client.publish(
            self, name, project=project, mode=mode, description=description, timeout=timeout
        )
        self.cleanup()
        return ref

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


_SQL_TYPE_TEXT = {
    "BIG_INT": "BIGINT",
    "SMALL_INT": "SMALLINT",
    "INT": "INTEGER",
    "DOUBLE": "DOUBLE PRECISION",
    "BOOL": "BOOLEAN",
    "TIMESTAMP_TZ": "TIMESTAMP WITH TIME ZONE",
}


def _sql_type_text(sql_type: Any) -> str:
    """Hyper's SQL spelling of a Hyper API type (``BIG_INT`` → ``BIGINT``)."""
    text = str(sql_type).replace(", ", ",")
    return _SQL_TYPE_TEXT.get(text, text)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(_MB), b""):
            digest.update(block)
    return digest.hexdigest()

"""The payload model: a change set as ``.hyper`` part files, with its tables and identity.

:func:`tabhyper_update.builder.build.build_payload` makes a :class:`Payload` from Spark; this module
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
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from typing_extensions import Unpack

from ..rest.refs import DataSourceRef
from ..rest.session import RestSession, client_for
from ..update.chain import BoundPayload, upload_payload
from ..update.options import BindOptions, PublishOptions
from ..update.publish import publish
from ..values.actions import (
    DEFAULT_SCHEMA,
    DEFAULT_TABLE,
    ActionBatch,
    BatchLike,
    Delete,
    Insert,
    Replace,
    Update,
    Upsert,
    _Action,
    position_guard,
    positions_record,
)
from ..values.changeset import GUARD_COLUMN, ChangeSet
from ..values.conditions import (
    all_of,
    condition_columns,
    key_pairs,
    keys_match,
    source,
    target,
)
from ..values.errors import (
    InvalidActionBatchError,
    InvalidArgumentError,
    PayloadError,
    Problem,
)
from ..values.parts import BUCKETS, ColumnInfo, PayloadPart, RowDigest, TableInfo
from ..values.quarantine import QuarantineReport
from ..values.redaction import get_logger
from .manifest import (
    MANIFEST,
    duplicated_keys,
    note_applied,
    read_hyper,
    read_manifest,
    write_manifest,
)

__all__ = [
    "BUCKETS",
    "DEFAULT_MAX_PAYLOAD_MB",
    "ColumnInfo",
    "Payload",
    "PayloadPart",
    "RowDigest",
    "TableInfo",
]

log = get_logger("tabhyper_update.payload")

DEFAULT_MAX_PAYLOAD_MB = 100


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
    #: Per change set (its upsert table), where it ends in its source: its greatest
    #: ``order_by`` values (column → value, as JSON holds them).
    positions: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: When the source committed the latest of the change set's changes (epoch seconds),
    #: where its change feed says it (Delta's ``_commit_timestamp``): an update's
    #: ``committed_at`` when it is not given one.
    committed_at: float | None = None
    #: The changes the build set aside (``on_bad_rows="quarantine"``): counted, with the
    #: keys they held and where they went. None: nothing was set aside.
    quarantined: QuarantineReport | None = None
    #: Per payload table, the columns whose every row was checked against a target type
    #: (column → that type), those it would change set aside: the schema check lets such a
    #: narrowing through where the data source's type is that one.
    checked_types: dict[str, dict[str, str]] = field(default_factory=dict)
    _owned_dir: Path | None = field(default=None, repr=False)
    #: The manifest this payload was loaded from, if any.
    _manifest: Path | None = field(default=None, repr=False)
    #: Seconds ``build_payload`` took (``None`` for a payload loaded or made otherwise).
    build_seconds: float | None = field(default=None, repr=False)

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
    def last_position(self) -> Any:
        """Where the change set ends in its source, what an update records when it is not
        given ``position=``: its last ``order_by`` values (``{"seq": 42}``; per table for
        a multi-table change set); ``None`` for a plain payload or an empty change set."""
        if len(self.positions) == 1:
            return next(iter(self.positions.values()))
        return dict(self.positions) or None

    @property
    def is_cdc(self) -> bool:
        return self.change_set is not None or bool(self.change_sets)

    @property
    def is_guarded(self) -> bool:
        """Whether a change set of this payload asks for the ordering guard."""
        sets = [self.change_set, *(self.change_sets or {}).values()]
        return any(cs is not None and cs.guard for cs in sets)

    @property
    def updates_in_place(self) -> bool:
        """Whether a change set of this payload keeps history or soft deletes: its updates
        set some columns of a row and leave the others as they are."""
        sets = [self.change_set, *(self.change_sets or {}).values()]
        return any(cs is not None and cs.updates_in_place for cs in sets)

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
        target_table: str = DEFAULT_TABLE,
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
            if target_table != DEFAULT_TABLE:
                raise InvalidArgumentError(
                    f"target_table={target_table!r} does not apply to a multi-table change set: "
                    f"each table's changes go to the table of its name "
                    f"({', '.join(map(repr, self.change_sets))})"
                )
            targets = list(self.change_sets.items())
        else:
            assert self.change_set is not None
            targets = [(target_table, self.change_set)]
        actions: list[_Action] = []
        for table, cs in targets:
            actions += self._table_actions(part, table, cs, target_schema)
        return ActionBatch(actions=actions)

    def _table_actions(
        self, part: PayloadPart, table: str, cs: ChangeSet, target_schema: str
    ) -> list[_Action]:
        """One table's actions from the tables ``part`` holds: the guard's check, the delete
        and the upsert by key, and the positions' record (the guard's, where it is on)."""
        found: list[_Action] = []
        if cs.guard and cs.guard_table in part.tables:
            position = next(
                c
                for c in part.tables[cs.guard_table].column_names
                if c not in cs.key and c != GUARD_COLUMN
            )
            found.append(
                position_guard(
                    cs.key,
                    position,
                    target_schema=target_schema,
                    target_table=f"{table}_positions",
                    source_schema=self.schema,
                    guard_table=cs.guard_table,
                )
            )
        found += _change_set_actions(
            cs,
            target_schema=target_schema,
            target_table=table,
            source_schema=self.schema,
            delete_table=cs.delete_table if cs.delete_table in part.tables else None,
            upsert_table=cs.upsert_table if cs.upsert_table in part.tables else None,
        )
        if cs.guard and cs.positions_table in part.tables:
            # Every touched key's position, deleted keys included: what the guard reads.
            found.append(
                positions_record(
                    cs.key,
                    target_schema=target_schema,
                    target_table=f"{table}_positions",
                    source_schema=self.schema,
                    positions_table=cs.positions_table,
                )
            )
        return found

    # -- checks ----------------------------------------------------------------------------
    def validate(self, batch: BatchLike) -> ActionBatch:
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
        known = ", ".join(map(repr, tables)) or "none"
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
            problems += self._action_problems(where, action, info)
        problems += self._duplicate_keys(batch)
        if problems:
            raise InvalidActionBatchError(problems)

    def _action_problems(self, where: str, action: _Action, info: TableInfo) -> list[Problem]:
        """What an action reading payload table ``info`` (at ``where`` in its batch) asks of
        it that it does not hold: condition columns it lacks, columns a delete's source may
        not hold, rows to write, the whole table in one part for a replace."""
        problems = _condition_problems(where, action, info)
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
        return problems

    def _duplicate_keys(self, batch: ActionBatch) -> list[Problem]:
        """An update or upsert by key equality whose payload table holds a key twice in one
        part: which row the server uses for it is not determined (Hyper uses one, not
        predictably), so the batch is refused. One query per table and part, on the file."""
        problems: list[Problem] = []
        for i, action in enumerate(batch.actions):
            columns = self._key_columns(action)
            if columns is None:
                continue
            for part in self.parts:
                problem = self._held_twice(i, action, columns, part)
                if problem is not None:
                    problems.append(problem)
                    break
        return problems

    def _key_columns(self, action: _Action) -> list[str] | None:
        """The payload table's columns an update or upsert by key equality matches on, where
        its table holds rows and has them all (a missing one is reported apart)."""
        if not isinstance(action, (Update, Upsert)) or action.source_table is None:
            return None
        pairs = key_pairs(action.condition)
        info = self.tables.get(action.source_table)
        if pairs is None or info is None or not info.row_count:
            return None
        columns = [s for _, s in pairs]
        return columns if all(c in info.column_names for c in columns) else None

    def _held_twice(
        self, index: int, action: _Action, columns: list[str], part: PayloadPart
    ) -> Problem | None:
        """The problem of ``part``'s copy of the action's table holding a key twice."""
        table = str(action.source_table)
        if table not in part.tables:
            return None
        found, examples = duplicated_keys(part.path, self.schema, table, columns)
        if not found:
            return None
        return Problem(
            f"$.actions[{index}].source-table",
            f"payload table {table!r} holds {found} key(s) "
            f"more than once on {', '.join(map(repr, columns))} (e.g. {', '.join(examples)}): "
            f"which of their rows the {action.action} uses is not determined "
            "(the server uses one, not predictably); keep one row per key",
        )

    # -- manifest (for the command line) ------------------------------------------------------
    MANIFEST = MANIFEST

    def mark_applied(self, jobs: list[str], target: dict[str, str] | None = None) -> None:
        """Note in the saved manifest (when this payload was loaded from one) that it was
        applied (by ``jobs``, to ``target``), so that a later load says so instead of
        finding its files missing."""
        if self._manifest is not None:
            note_applied(self._manifest, jobs, target)

    def save_manifest(self, directory: str | os.PathLike[str] | None = None) -> Path:
        """Write ``manifest.json`` beside the parts: what :meth:`load` needs to apply the
        payload later, e.g. from ``tabhyper-update apply``. With ``directory``, the part
        files move there first (a manifest only ever names files in its own folder)."""
        path, self.parts = write_manifest(
            self.parts,
            directory,
            schema=self.schema,
            change_set=self.change_set,
            change_sets=self.change_sets,
            positions=self.positions,
            committed_at=self.committed_at,
            quarantined=self.quarantined,
            checked_types=self.checked_types,
        )
        return path

    @classmethod
    def from_hyper(cls, path: str | os.PathLike[str], *, schema: str | None = None) -> Payload:
        """A payload of one existing ``.hyper`` file (made by the Hyper API, pantab, Tableau
        Prep or an earlier build), to update a data source without Spark::

            Payload.from_hyper("orders.hyper").upload("Orders").apply(
                [Insert(source_table="Extract", target_table="Extract")])

        Its tables are read from the file; ``schema`` picks one when the file has tables in
        several schemas. The file is yours: it is never changed, moved or removed."""
        part, chosen = read_hyper(path, schema)
        return cls([part], schema=chosen, keep_files=True)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, keep_files: bool = True) -> Payload:
        """A payload from a directory (or manifest file) written by :meth:`save_manifest`.

        Every part must be a file inside the manifest's folder (no ``..``, no absolute path,
        no symbolic link out of it) with the size and SHA-256 the manifest gives.
        """
        return cls(**read_manifest(path), keep_files=keep_files)

    # -- the round trip ----------------------------------------------------------------------
    def upload(
        self,
        target: DataSourceRef | str | None = None,
        *,
        client: RestSession | None = None,
        **options: Unpack[BindOptions],
    ) -> BoundPayload:
        """Bind this payload to its target data source and upload it: the target is looked
        up and the first part uploaded before this returns (the others are uploaded by
        ``apply()``, each after the part before it was applied). Nothing is applied yet.

        ``target`` is a :class:`DataSourceRef` (whose client is used) or a name; by default
        ``TABLEAU_DATASOURCE``. ``client`` defaults to the reference's client, else
        :meth:`TableauClient.from_env`. Progress bars show on a terminal unless
        ``progress=False``; ``state_dir`` keeps the update's records (see
        :class:`~tabhyper_update.update.options.BindOptions`). Then ``.apply(actions)`` (or
        ``.apply(target_table=...)`` for a change set).
        """
        chosen = client_for(target, client, "upload")
        return upload_payload(self, target, client=chosen, **options)

    def publish(
        self,
        name: str,
        *,
        client: RestSession | None = None,
        **options: Unpack[PublishOptions],
    ) -> DataSourceRef:
        """Publish this payload (a snapshot in one file) as the live-to-Hyper data source
        ``name``: :meth:`TableauClient.publish` with ``client`` (by default from the
        environment) and its ``options``. The files are removed once published (unless
        ``keep_files``)."""
        ref = publish(client_for(None, client, "publish"), self, name, **options)
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


def _change_set_actions(
    cs: ChangeSet,
    *,
    target_schema: str,
    target_table: str,
    source_schema: str,
    delete_table: str | None,
    upsert_table: str | None,
) -> list[_Action]:
    """For the tables that hold rows: delete by key, then upsert by key. In history mode,
    end the current versions the change set supersedes (those that started before), then
    upsert the versions by key and start; with soft deletes, flag the deleted rows, then
    upsert by key. Both updates set only their columns (:attr:`ChangeSet.updates_in_place`)."""
    by_key = keys_match(*cs.key)
    first: type[Delete | Update] = Delete
    condition, upserted_by = by_key, by_key
    if cs.history is not None:
        history = cs.history
        first = Update
        condition = all_of(
            by_key,
            target(history.current) == True,  # noqa: E712 (a condition, not a test)
            target(history.valid_from) < source(history.valid_to),
        )
        upserted_by = keys_match(*cs.key, history.valid_from)
    elif cs.soft_delete is not None:
        first = Update
    return [
        action(
            target_schema=target_schema,
            target_table=target_table,
            source_schema=source_schema,
            source_table=table,
            condition=chosen,
        )
        for action, table, chosen in (
            (first, delete_table, condition),
            (Upsert, upsert_table, upserted_by),
        )
        if table is not None
    ]


def _condition_problems(where: str, action: _Action, info: TableInfo) -> list[Problem]:
    """What an action's condition asks of payload table ``info`` that it does not hold:
    source columns it lacks; for a delete, columns beyond those it names."""
    if action.condition is None or action.condition is True:
        return []
    _, sources = condition_columns(action.condition)
    problems: list[Problem] = []
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
    extra = [c for c in info.column_names if c not in sources]
    if isinstance(action, Delete) and extra:
        problems.append(
            Problem(
                f"{where}.source-table",
                f"a delete's source table may hold only the columns its condition "
                f"names; {info.name!r} also has {', '.join(map(repr, extra))}",
            )
        )
    return problems

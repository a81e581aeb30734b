"""What an update does when the source's schema no longer fits the published data source
(``on_schema_change=``): ``"fail"`` (the default: one error naming every column, before
any part is sent), ``"ignore"`` (leave out the columns the data source lacks, by name, with
a warning naming them), or a :class:`~tabhyper_update.Republish` (overwrite the data source
with the new schema from a snapshot, then go on from the snapshot's position).

Tableau's update API cannot add a column to a published data source: a new column reaches
it only by publishing again.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from tableauhyperapi import SchemaName, TableDefinition, TableName

from ..local.hyper import attach_read_only, connect, quote_name, table_ref
from ..rest.refs import DataSourceRef
from ..rest.session import RestSession
from ..values.actions import ActionBatch
from ..values.errors import SchemaDriftError
from ..values.parts import PayloadLike, PayloadPart, RowDigest, TableInfo
from ..values.redaction import get_logger
from .options import Snapshot
from .results import UpdateResult, report_metrics
from .schema import TargetSchema, check_schema, learn_schema
from .state import StateStore

__all__ = [
    "SchemaCheck",
    "droppable",
    "leave_out",
    "republished",
    "without_columns",
]

log = get_logger("tabhyper_update")


def droppable(
    err: SchemaDriftError, payload: PayloadLike, batches: list[ActionBatch], key: tuple[str, ...]
) -> dict[str, list[str]] | None:
    """Per payload table, the columns to leave out so that the payload fits (the columns its
    target lacks); ``None`` when leaving columns out cannot make it fit (another kind of
    value, a narrower type, NULLs into NOT NULL, or a key column the target lacks)."""
    if err.faults:
        return None
    drop: dict[str, list[str]] = {}
    for source, column in _lacking(err, payload, batches):
        if column not in drop.setdefault(source, []):
            drop[source].append(column)
    if any(c in key for cs in drop.values() for c in cs):
        return None
    return drop


def _lacking(
    err: SchemaDriftError, payload: PayloadLike, batches: list[ActionBatch]
) -> Iterator[tuple[str, str]]:
    """Each payload table's column that the target table of an action reading it lacks."""
    for action in (a for batch in batches for a in batch.actions):
        source = getattr(action, "source_table", None)
        lacking = err.columns.get(action.target_table)
        if source is None or not lacking or source not in payload.tables:
            continue
        names = payload.tables[str(source)].column_names
        yield from ((str(source), c) for c in lacking if c in names)


def without_columns(part: PayloadPart, drop: Mapping[str, list[str]], folder: Path) -> PayloadPart:
    """``part`` written again without the columns ``drop`` names (per table), in ``folder``
    (one of the SDK's own); the same part and the same columns give the same digest on a
    re-run."""
    label = ";".join(f"{t}:{','.join(sorted(cs))}" for t, cs in sorted(drop.items()) if cs)
    tag = hashlib.sha256(label.encode()).hexdigest()[:12]
    path = folder / f"fit-{part.content_digest[:16]}-{tag}.hyper"
    here = path.stem
    tables: dict[str, TableInfo] = {}
    with connect(path, create=True) as conn:
        path.chmod(0o600)
        attach_read_only(conn, part.path, "src")
        for name, info in part.tables.items():
            left_out = set(drop.get(name, ()))
            definition = conn.catalog.get_table_definition(TableName("src", info.schema, name))
            kept = [c for c in definition.columns if str(c.name.unescaped) not in left_out]
            conn.catalog.create_schema_if_not_exists(SchemaName(here, info.schema))
            conn.catalog.create_table(TableDefinition(TableName(here, info.schema, name), kept))
            names = ", ".join(quote_name(str(c.name.unescaped)) for c in kept)
            conn.execute_command(
                f"INSERT INTO {table_ref(info.schema, name, here)} ({names}) "
                f"SELECT {names} FROM {table_ref(info.schema, name, 'src')}"
            )
            tables[name] = replace(
                info,
                columns=tuple(c for c in info.columns if c.name not in left_out),
                row_digest=_marked(info.row_digest, tag) if left_out else info.row_digest,
            )
        conn.execute_command("DETACH DATABASE src")
    return PayloadPart(Path(path), path.stat().st_size, tables, part.buckets)


def _marked(digest: str, tag: str) -> str:
    """A row digest told apart from ``digest`` by ``tag`` (still a digest that adds up)."""
    found = RowDigest.parse(digest)
    return str(RowDigest(found.rows, tuple(s + int(tag, 16) for s in found.sums)))


def leave_out(
    payload: PayloadLike, drop: Mapping[str, list[str]], target: str, folder: Path
) -> None:
    """Rewrite every part of ``payload`` without the columns ``drop`` names (into
    ``folder``), warning."""
    shown = "; ".join(f"{t}: {', '.join(map(repr, cs))}" for t, cs in drop.items() if cs)
    log.warning(
        "on_schema_change='ignore': data source %r lacks column(s) of the payload, left out "
        "of this update: %s",
        target,
        shown,
    )
    payload.parts[:] = [without_columns(p, drop, folder) for p in payload.parts]


class SchemaCheck:
    """The schema check before an update's first part, and what ``on_schema_change`` makes
    of a payload that does not fit. Parts written again go into ``folder()``, the SDK's
    own."""

    def __init__(
        self,
        payload: PayloadLike,
        client: RestSession,
        state: StateStore,
        folder: Callable[[], Path],
    ) -> None:
        self.payload = payload
        self.client = client
        self.state = state
        self.folder = folder
        #: The payload's columns a value can overflow in, once the check knew the target's
        #: exact types (what a failed job's "numeric overflow" is named by).
        self.overflows: dict[str, str] = {}

    def check(
        self, target: DataSourceRef, batches: Sequence[ActionBatch], allow_narrowing: Sequence[str]
    ) -> TargetSchema | None:
        """Refuse (:class:`SchemaDriftError`) a payload whose columns the target cannot take
        whole; what the target's columns were checked against, or ``None`` when nothing
        said."""
        if not self.payload.parts:
            return None
        schema = learn_schema(self.client, target, self.state)
        if schema is None:
            return None
        self.overflows = check_schema(
            schema, self.payload, batches, allow_narrowing=allow_narrowing
        )
        return schema

    def run(
        self,
        target: DataSourceRef,
        batches: Sequence[ActionBatch],
        allow_narrowing: Sequence[str],
        policy: object,
    ) -> DataSourceRef | bool:
        """Refuse, before any request that changes data, a payload whose columns the target
        cannot take whole (see :mod:`.schema`), or do what ``policy`` says instead: ``True``
        when the parts were written again without the columns the target lacks, the data
        source when it was republished."""
        try:
            self.check(target, batches, allow_narrowing)
        except SchemaDriftError as err:
            if isinstance(policy, Snapshot):
                return policy.republish(self.client, target, self.state.directory)
            if policy != "ignore":
                raise
            key = tuple(getattr(self.payload, "key", None) or ())
            drop = droppable(err, self.payload, list(batches), key)
            if drop is None:
                log.warning(
                    "on_schema_change='ignore' leaves out only columns the data source lacks "
                    "(never a key column): the differences below it cannot leave out"
                )
                raise
            leave_out(self.payload, drop, target.label, self.folder())
            return True
        return False


def republished(ref: DataSourceRef, position: object) -> UpdateResult:
    """The result of an update the schema change turned into a republish: nothing sent as
    an update (the snapshot holds its changes)."""
    now = time.time()
    result = UpdateResult(
        [],
        done=True,
        datasource=ref.label,
        started_at=now,
        finished_at=now,
        position=position,
        republished=True,
    )
    report_metrics(result)
    return result

"""``TableauSink``: a Structured Streaming ``foreachBatch`` function that updates a data source.

Spark delivers ``foreachBatch`` at least once: a query that dies after a batch was written
but before the checkpoint's commit runs that batch id again on restart, with the same input.
The sink makes that exactly once. Each batch's update carries a RequestID made of the sink's
id (the query's id unless given), the batch id and the digest of the batch's content, so:

- a replayed batch (same id, same content) whose update the sink's record shows applied is
  skipped without an update request; one whose record was lost is sent with the same
  RequestID, which the server deduplicates; one interrupted mid-update resumes where it
  stopped;
- a later batch is a new update even when its rows equal an earlier batch's;
- a new batch that reuses an old batch id (the checkpoint was reset or replaced under a
  fixed ``sink_id``, with or without the state folder) has other content, so another
  RequestID: it is applied, never taken for the old one. A batch whose content is not
  deterministic is, likewise, a new update when it runs again.

The server remembers a RequestID for a limited time (24 hours is the figure commonly
reported). A replay after that, with the state folder gone, is sent again: a change set's
upserts and deletes give the same result applied twice, and Spark replays only the last
uncommitted batch, so no later batch can have been overwritten by it; an append stream's
(``Insert``) rows would be added twice.

Empty batches send nothing. A failed update raises, which fails the batch and stops the
query; restarting it retries the batch. Each batch is built with :func:`build_payload`
(Spark's executors stage the rows; the driver collects nothing) and sent with
:meth:`TableauClient.update_datasource`, which checks everything before its first request.

    query = (changes.writeStream
             .foreachBatch(TableauSink("Orders", ChangeSet("id", op_column="op",
                                                           order_by="seq"),
                                       target_table="Orders"))
             .option("checkpointLocation", "/checkpoints/orders")
             .trigger(availableNow=True)
             .start())
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import tabhyper_update.values.errors as errors

from ..builder.build import build_with
from ..builder.options import BuildOptions, BuildSettings, check_build_options
from ..local.folders import check_folder, make_private, refuse_symlink
from ..local.private_json import read_json, write_json
from ..payload.model import Payload
from ..rest.refs import DataSourceRef
from ..rest.session import RestSession, client_for
from ..update.chain import bind_payload
from ..update.options import ApplySettings, BindSettings
from ..update.publish import publish, snapshot_of
from ..update.results import UpdateResult, metrics_labels
from ..update.state import StateStore
from ..update.targets import check_target, resolve_target
from ..values.actions import ActionBatch, BatchLike, Insert, Upsert
from ..values.changeset import ChangeSet
from ..values.errors import (
    ArgumentTypeError,
    ConfigurationError,
    InvalidArgumentError,
    TabHyperError,
)
from ..values.names import is_name
from ..values.redaction import get_logger
from ..values.wording import check_choice
from .claims import Claim, claim_sink
from .debezium import Debezium

if TYPE_CHECKING:
    from typing import TypeAlias

    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    Changes: TypeAlias = ChangeSet | Debezium | Mapping[str, ChangeSet | Debezium]
    Prepare: TypeAlias = Callable[[DataFrame], DataFrame | Mapping[str, DataFrame]]

__all__ = ["TableauSink"]

log = get_logger(__name__)


#: Spark sets this local property on the thread that runs a streaming query's batches.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
_SINK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")


def batch_request_id(
    sink_id: str, batch_id: int, digest: str, epoch: int = 0, query_id: str | None = None
) -> str:
    """The request id of batch ``batch_id`` whose content has ``digest``: of query
    ``query_id`` when Spark tells it and the sink id is not that query's own, in the sink
    id's ``epoch`` (see :mod:`.claims`). The SDK scopes it to the data source; parts add
    ``-part-N``."""
    query = f"-q{query_id.replace('-', '')[:8]}" if query_id and query_id != sink_id else ""
    era = f"-e{epoch}" if epoch else ""
    return f"tabhyper-sink-{sink_id}{query}{era}-batch-{batch_id}-{digest[:12]}"


def _sink_build(build: BuildOptions | None) -> BuildSettings:
    """The sink's build options, checked once: no bars and no files kept (each batch is
    built in a folder of its own)."""
    options = check_build_options(build or {}, "TableauSink(build=...)")
    for owned in ("progress", "keep_files", "output_dir"):
        if owned in options:
            raise InvalidArgumentError(
                f"TableauSink(build=...) does not take {owned!r}: the sink builds each "
                "batch in a folder of its own, shows no bars and keeps no files",
                argument=owned,
            )
    return replace(BuildSettings.of(options, "TableauSink(build=...)"), progress=False)


#: What became of a batch, by its result's ``deduplicated``.
_OUTCOMES: dict[bool | None, str] = {
    None: "applied by this batch or an earlier request with its RequestID (cannot tell)",
    True: "skipped (applied before)",
    False: "applied",
}


class TableauSink:
    """A ``foreachBatch`` function: each micro-batch becomes one update of ``target``.

    ``changes``: how a batch is read. A :class:`ChangeSet` (the batch is a change set: the
    last change per key is upserted or deleted on ``target_schema.target_table``), a
    :class:`Debezium` (the batch holds Debezium events), or a mapping of table name → either,
    for a multi-table change set applied in one update, each table to the table of its name
    (tables without changes in a batch are left out). ``None`` with ``actions``: a plain
    stream whose rows the actions read (e.g. append-only facts, ``Insert(source_table=...)``);
    insert and upsert actions whose table is empty in a batch are left out of its update.

    ``prepare``: a function from the batch to the DataFrame (or mapping of table name →
    DataFrame) to build from, e.g. to split one topic into tables; a Debezium's own
    parsing runs after it. A multi-table sink routes each row to one table: Debezium events
    by their ``source.table`` (the mapping key unless the ``Debezium`` names ``table=``),
    anything else through ``prepare`` returning a mapping; a sink that cannot route is
    refused when it is made. ``sink_id``: the identity of this sink across restarts (by
    default the query's id, which lives in the checkpoint). A sink id belongs to the query
    that first runs it: another query running it is refused before its first batch, unless
    it replaces the first (its checkpoint was replaced): ``reset=True`` (see
    :mod:`.claims`). ``client`` defaults to :meth:`TableauClient.from_env`. ``check``
    (default): sign in and look the target up when the sink is made (:meth:`check`), so that
    a data source that does not exist raises :class:`NotFoundError` there, before any batch;
    ``check=False`` makes the sink without a request (it looks the target up on its first
    batch). ``on_schema_change``: what a batch whose columns no longer fit the data source
    does: ``"fail"`` (the default), ``"ignore"`` (leave out the columns the data source
    lacks) or ``Republish(snapshot)`` (see :mod:`tabhyper_update.update.schema_change`).
    ``build``: how each batch's payload is built, a
    :class:`~tabhyper_update.builder.options.BuildOptions` (``max_payload_mb``, ``staging``,
    ``staging_dir``, ...).
    """

    def __init__(
        self,
        target: DataSourceRef | str,
        changes: Changes | None = None,
        *,
        client: RestSession | None = None,
        actions: BatchLike | None = None,
        prepare: Prepare | None = None,
        target_table: str | None = None,
        target_schema: str | None = None,
        sink_id: str | None = None,
        build: BuildOptions | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        timeout: float | None = None,
        reset: bool = False,
        check: bool = True,
        on_schema_change: Any = "fail",
        on_full_refresh: Literal["refuse", "replace"] = "refuse",
    ) -> None:
        tables = _checked_arguments(
            target, changes, actions, target_table, prepare, sink_id, on_full_refresh
        )
        self.actions = ActionBatch.coerce(actions) if actions is not None else None
        check_target(self.actions is not None, target_table, target_schema)
        self._tables = _routed(tables, prepare)
        self.client = client_for(target, client, "run the sink")
        self.changes = changes
        self.prepare = prepare
        self.reset = reset
        self.on_full_refresh = on_full_refresh
        #: Every batch's update options, checked once here (each batch sets its own
        #: ``request_id`` and ``position``).
        update: dict[str, Any] = {"target_table": target_table, "target_schema": target_schema}
        update |= {"timeout": timeout, "on_schema_change": on_schema_change}
        self.update = ApplySettings.of(update, "TableauSink()")
        self._claim: Claim | None = None
        self.sink_id = sink_id
        #: How each batch's payload is built (without ``progress`` and ``keep_files``: a
        #: sink shows no bars and keeps no files).
        self.build = _sink_build(build)
        self.state_dir = state_dir
        self._target = target
        self._lock = threading.Lock()
        #: The last batch's result (``None`` for an empty batch).
        self.last_result: UpdateResult | None = None
        #: Batches by what became of them: applied, found applied before (replays), found
        #: empty ("cannot tell" appears once an answer could not tell which request applied it).
        self.counts = {"applied": 0, "replayed": 0, "empty": 0}
        #: The SDK's error that failed the last batch (``None`` once a batch succeeds).
        self.error: TabHyperError | None = None
        self._resolved_id: str | None = sink_id
        self._started_at = 0.0
        if check:
            # The ordinary idiom (``foreachBatch(sink).start()``, then ``awaitTermination``)
            # gets the SDK's own error here, where the sink is made, not a Spark trace.
            self.check()

    def __getstate__(self) -> dict[str, Any]:
        """What a pickled sink carries (Spark Connect runs a copy on the server): its
        settings and client, not its lock nor the last batch's result or error."""
        state = dict(self.__dict__)
        state.pop("_lock", None)
        state["last_result"] = None
        state["error"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        shown = (
            self._target.name or self._target.id
            if isinstance(self._target, DataSourceRef)
            else self._target
        )
        return f"TableauSink(target={shown!r}, changes={self.changes!r}, sink_id={self.sink_id!r})"

    # -- before and around the query ----------------------------------------------------------
    def check(self) -> DataSourceRef:
        """Check, before the query starts, what every batch needs: the folders, the sign-in and
        the target data source (raises the SDK's error, e.g. :class:`NotFoundError`)."""
        check_folder(self.build.staging_dir, "staging_dir", create=False)
        check_folder(self.state_dir, "state_dir", create=False)
        with self._lock:
            target = self._target
            if isinstance(target, DataSourceRef):
                self.client.datasource(target.id)  # still there, by its LUID
                found = target
            else:
                found = resolve_target(self.client, target)
            self._target = found
        return found

    def start(self, writer: DataStreamWriter) -> StreamingQuery:
        """:meth:`check`, then start ``writer`` (``df.writeStream`` with its options) with
        this sink as its ``foreachBatch`` function; returns the running query. A bad target
        fails here, before the query starts, with the SDK's error. Over Spark Connect the
        sink needs ``sink_id=`` (the query's id is not known inside a batch there)."""
        if self.sink_id is None and _is_connect(writer):
            raise ConfigurationError(_CONNECT_NEEDS_SINK_ID)
        self.check()
        self._started_at = time.time()
        query = writer.foreachBatch(self).start()
        if self.sink_id is not None:
            try:
                # Over Spark Connect the batches cannot tell their query: it is claimed here.
                claim_sink(self._sinks_folder(), self.sink_id, str(query.id), reset=self.reset)
            except ConfigurationError:
                query.stop()
                raise
        return query

    def await_termination(self, query: StreamingQuery, timeout: float | None = None) -> bool:
        """``query.awaitTermination(timeout)``, raising the SDK's own error (the one that
        failed a batch, e.g. :class:`JobFailedError`) rather than Spark's wrapper of it, so
        ``except TabHyperError`` (or a narrower class) catches it. Returns whether the query
        ended (always true without ``timeout``)."""
        try:
            if timeout is None:
                query.awaitTermination()
                return True
            return bool(query.awaitTermination(timeout))  # type: ignore[arg-type]
        except Exception as err:
            failed = self.error or self._recorded_error()
            if failed is not None:
                raise failed from err
            raise

    def _recorded_error(self) -> TabHyperError | None:
        """The error a batch recorded in the progress file since :meth:`start` (over Spark
        Connect it was raised in the server's copy of the sink): the same class and message."""
        try:
            found = self.progress()
        except ConfigurationError:
            return None
        said = (found or {}).get("error")
        if not isinstance(said, dict) or (found or {}).get("updated_at", 0) < self._started_at:
            return None
        return _error_from_record(said)

    # -- one batch ----------------------------------------------------------------------------
    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Apply micro-batch ``batch_id`` (what ``foreachBatch`` calls)."""
        with self._lock, metrics_labels(batch_id=int(batch_id)) as labels:
            try:
                result = self._apply(batch, int(batch_id), labels)
            except TabHyperError as err:
                self.error = err
                self._save_progress(int(batch_id), "failed", None, err)
                raise
            self.error = None
            self.last_result = result
            kind = (
                "empty"
                if result is None
                else "cannot tell"
                if result.deduplicated is None
                else "replayed"
                if result.deduplicated
                else "applied"
            )
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self._save_progress(int(batch_id), kind, result)

    # -- progress, readable where the batches do not run (Spark Connect) --------------------------
    def _sinks_folder(self) -> Path:
        return StateStore(self.state_dir).directory / "sinks"

    def _progress_path(self, sink_id: str) -> Path:
        return self._sinks_folder() / f"{sink_id}.json"

    def _save_progress(
        self,
        batch_id: int,
        kind: str,
        result: UpdateResult | None,
        error: TabHyperError | None = None,
    ) -> None:
        sink_id = self._resolved_id
        if sink_id is None:
            return
        path = self._progress_path(sink_id)
        try:
            make_private(path.parent)
            refuse_symlink(path.parent, "state_dir")
            write_json(
                path,
                {
                    "sink_id": sink_id,
                    "counts": self.counts,
                    "last_batch": batch_id,
                    "last_kind": kind,
                    "last_result": None if result is None else str(result),
                    "error": None if error is None else _error_record(error),
                    "updated_at": time.time(),
                },
                folder_not_a_link=True,
            )
        except (OSError, ConfigurationError) as err:
            log.warning("could not record the sink's progress in %s: %s", path, err)

    def progress(self) -> dict[str, Any] | None:
        """What the sink's batches recorded in the state folder: ``counts`` (applied,
        replayed, empty, cannot tell), ``last_batch``, ``last_kind``, ``last_result`` (text) and
        ``updated_at``; ``None`` before the first batch. Over Spark Connect the batches run
        in a copy of the sink on the server, so its ``counts`` attribute stays at zero here:
        read this instead (with ``sink_id=`` and a ``state_dir`` both sides see)."""
        sink_id = self.sink_id or self._resolved_id
        if sink_id is None:
            return None
        try:
            found = read_json(self._progress_path(sink_id))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            raise ConfigurationError(f"the sink's progress record cannot be read: {err}") from None
        return found if isinstance(found, dict) else None

    def _apply(
        self, batch: DataFrame, batch_id: int, labels: dict[str, Any]
    ) -> UpdateResult | None:
        query_id = _known_query_id(batch)
        sink_id = self.sink_id or query_id or _query_id(batch)
        self._resolved_id = sink_id
        labels["sink_id"] = sink_id  # on the batch's metrics line, to find it in Spark's UI
        frames = self.prepare(batch) if self.prepare is not None else batch
        source, change_sets = self._source(frames)
        claim = self._claim
        if claim is None or (query_id is not None and claim.query_id != query_id):
            claim, refreshed = self._claimed(sink_id, query_id, batch_id, source, change_sets)
            self._claim = claim
            if refreshed is not None:
                self._target = refreshed
                return None
        position = {"sink_id": sink_id, "batch_id": batch_id}
        payload = build_with(source, change_sets, self.build)
        with payload:
            actions = self.actions
            if actions is not None:
                actions = _without_empty_sources(actions, payload)
                if actions is None:
                    log.info("batch %d: no rows to send; nothing sent", batch_id)
                    return None
            if payload.is_empty and actions is None:
                log.info("batch %d: no changes; nothing sent", batch_id)
                return None
            request_id = batch_request_id(sink_id, batch_id, payload.digest, claim.epoch, query_id)
            result = self._send(payload, actions, request_id, position)
        how = _OUTCOMES[result.deduplicated]
        log.info("batch %d of sink %s: %s (RequestID %s)", batch_id, sink_id, how, request_id)
        return result

    def _send(
        self,
        payload: Payload,
        actions: ActionBatch | None,
        request_id: str,
        position: dict[str, Any],
    ) -> UpdateResult:
        """Apply one batch's payload (and ``actions``) as the update ``request_id``: its
        position where the batch ends, the change set's last order_by values, else the
        batch's (``position``)."""
        uploaded = bind_payload(
            payload,
            self._target,
            self.client,
            BindSettings(progress=False, state_dir=self.state_dir),
            upload_first=False,
        )
        settings = replace(
            self.update, request_id=request_id, position=payload.last_position or position
        )
        result = uploaded.apply_settings(actions, settings)
        self._target = uploaded.target  # later batches need no lookup
        return result

    def _claimed(
        self,
        sink_id: str,
        query_id: str | None,
        batch_id: int,
        source: DataFrame | Mapping[str, DataFrame],
        change_sets: ChangeSet | dict[str, ChangeSet] | None,
    ) -> tuple[Claim, DataSourceRef | None]:
        """The sink id claimed for this query, before anything is built or sent (one query
        per sink id), and the data source a full refresh replaced its tables in (a new query
        at batch 0 is a stream started over: refused, or under ``on_full_refresh="replace"``
        its first batch replaces the tables; ``None`` otherwise)."""
        refreshed: list[DataSourceRef] = []

        def refresh() -> None:
            refreshed.append(self._replace_from(source, change_sets, batch_id))

        claim = claim_sink(
            self._sinks_folder(),
            sink_id,
            query_id,
            reset=self.reset,
            batch_id=batch_id,
            refresh=refresh if self.on_full_refresh == "replace" else None,
        )
        return claim, refreshed[0] if refreshed else None

    def _replace_from(
        self,
        source: DataFrame | Mapping[str, DataFrame],
        change_sets: ChangeSet | dict[str, ChangeSet] | None,
        batch_id: int,
    ) -> DataSourceRef:
        """Publish the batch's last change per key over the data source (``overwrite``):
        each change set's upserts as the table of its name (one file, every part of the
        change in one publish: the data source is never half old)."""
        target = resolve_target(self.client, self._target)
        with build_with(source, change_sets, replace(self.build, max_payload_mb=None)) as payload:
            snapshot = snapshot_of(payload, self.update.target_table or "Extract")
            try:
                log.warning(
                    "sink %s: the stream starts over at batch %d (a full refresh): publishing "
                    "its rows over data source %r",
                    self._resolved_id,
                    batch_id,
                    target.label,
                )
                named = target if target.name else self.client.datasource(target.id)
                return publish(
                    self.client,
                    snapshot,
                    named.name or named.id,
                    mode="overwrite",
                    project=named.project_id or named.project,
                    state_dir=self.state_dir,
                )
            finally:
                snapshot.unlink(missing_ok=True)

    def _source(
        self, frames: DataFrame | Mapping[str, DataFrame]
    ) -> tuple[DataFrame | Mapping[str, DataFrame], ChangeSet | dict[str, ChangeSet] | None]:
        """What to build from: the frames (Debezium events parsed) and their change sets."""
        if self._tables is None:
            return frames, None
        by_table = self._frames_by_table(self._tables, frames)
        read = {name: _read(how, by_table[name]) for name, how in self._tables.items()}
        if isinstance(self.changes, (ChangeSet, Debezium)):
            ((df, cs),) = read.values()
            return df, cs
        return {n: df for n, (df, _) in read.items()}, {n: cs for n, (_, cs) in read.items()}

    @staticmethod
    def _frames_by_table(
        tables: Mapping[str, ChangeSet | Debezium], frames: DataFrame | Mapping[str, DataFrame]
    ) -> Mapping[str, DataFrame]:
        """The DataFrame ``prepare()`` gave for each of the sink's ``tables``: one given for
        all of them only where each table can tell its own rows apart (one table, or
        Debezium tables, which take their own events)."""
        if not isinstance(frames, Mapping):
            unroutable = [n for n, how in tables.items() if not isinstance(how, Debezium)]
            if len(tables) > 1 and unroutable:
                raise InvalidArgumentError(
                    f"prepare() gave one DataFrame for a sink of {len(tables)} tables: "
                    f"the rows of {', '.join(map(repr, unroutable))} cannot be told apart. "
                    "Return a mapping of table name → DataFrame"
                )
            return dict.fromkeys(tables, frames)
        missing = [n for n in tables if n not in frames]
        if missing:
            raise InvalidArgumentError(
                f"prepare() gave no DataFrame for table(s) {', '.join(map(repr, missing))} of "
                "the sink's change sets"
            )
        return frames


def _read(how: ChangeSet | Debezium, frame: DataFrame) -> tuple[DataFrame, ChangeSet]:
    """A table's DataFrame as the build takes it and its change set (Debezium's events
    parsed into changes)."""
    if isinstance(how, Debezium):
        return how.changes(frame), how.change_set
    return frame, how


def _checked_arguments(
    target: object,
    changes: Changes | None,
    actions: object,
    target_table: str | None,
    prepare: object,
    sink_id: object,
    on_full_refresh: object,
) -> dict[str, ChangeSet | Debezium] | None:
    """The change sets by table (``None`` for a plain stream), once every ``TableauSink``
    argument is checked: one of the wrong type, or arguments that do not go together,
    refused naming them."""
    _check_fields(target, prepare, sink_id, on_full_refresh)
    tables = _check_changes(changes)
    # Each refusal of arguments that do not go together: whether it applies, its words.
    refusals = (
        (
            tables is None and actions is None,
            "TableauSink needs changes= (a ChangeSet, a Debezium, or a mapping of table "
            "name → either) or actions= for a plain stream",
        ),
        (
            tables is not None and actions is not None,
            "TableauSink takes changes= (whose actions are derived) or actions=, not both",
        ),
        (
            tables is not None and len(tables) > 1 and target_table is not None,
            "target_table= does not apply to a multi-table change set: each table's "
            "changes go to the table of its name",
        ),
        (
            on_full_refresh == "replace" and tables is None,
            "on_full_refresh='replace' replaces the data source's tables from a change "
            "set's first batch: a plain stream (actions=) has none to replace them from",
        ),
    )
    for refused, message in refusals:
        if refused:
            raise InvalidArgumentError(message)
    return tables


def _check_fields(
    target: object, prepare: object, sink_id: object, on_full_refresh: object
) -> None:
    """Refuse a ``TableauSink`` argument that is wrong on its own, naming it."""
    if not isinstance(target, (DataSourceRef, str)) or not target:
        raise ArgumentTypeError(
            f"TableauSink's target is a data source name or a DataSourceRef, got {target!r}"
        )
    if prepare is not None and not callable(prepare):
        raise ArgumentTypeError(f"prepare= takes a function, got {prepare!r}")
    if sink_id is not None and not (isinstance(sink_id, str) and _SINK_ID.fullmatch(sink_id)):
        raise InvalidArgumentError(
            f"sink_id must be 1-128 letters, digits, '.', '_', ':' or '-' (starting with a "
            f"letter or digit), got {sink_id!r}"
        )
    check_choice(on_full_refresh, ("refuse", "replace"), "on_full_refresh", InvalidArgumentError)


def _check_changes(changes: Changes | None) -> dict[str, ChangeSet | Debezium] | None:
    if changes is None:
        return None
    if isinstance(changes, (ChangeSet, Debezium)):
        return {"Extract": changes}
    if isinstance(changes, Mapping) and changes:
        for name, how in changes.items():
            if not is_name(name):
                raise ArgumentTypeError(f"TableauSink changes: {name!r} is not a table name")
            if not isinstance(how, (ChangeSet, Debezium)):
                raise ArgumentTypeError(
                    f"TableauSink changes[{name!r}]: expected a ChangeSet or a Debezium, got "
                    f"{type(how).__name__}"
                )
        return dict(changes)
    raise ArgumentTypeError(
        "TableauSink changes= takes a ChangeSet, a Debezium, or a non-empty mapping of table "
        f"name → either, got {changes!r}"
    )


def _routed(
    tables: dict[str, ChangeSet | Debezium] | None, prepare: Prepare | None
) -> dict[str, ChangeSet | Debezium] | None:
    """The tables of a multi-table sink, each able to pick its rows out of a batch: refused
    when one cannot. Without ``prepare=``, Debezium events go to the table their
    ``source.table`` names (the mapping key unless ``table=`` says otherwise); a
    ``ChangeSet`` has no such field, so it needs ``prepare=`` to split the batch."""
    if tables is None or len(tables) == 1 or prepare is not None:
        return tables
    unroutable = [name for name, how in tables.items() if isinstance(how, ChangeSet)]
    if unroutable:
        raise InvalidArgumentError(
            f"TableauSink cannot tell which rows of a batch belong to "
            f"{', '.join(map(repr, unroutable))}: without prepare= every table would get the "
            "whole batch. Pass prepare= returning a mapping of table name → DataFrame (e.g. "
            "lambda b: {'Sales': b.where(\"tbl = 'sales'\"), ...}), or describe Debezium events "
            "(routed by their source table)"
        )
    return {
        name: how if not isinstance(how, Debezium) or how.table is not None else how.for_table(name)
        for name, how in tables.items()
    }


def _error_record(error: TabHyperError) -> dict[str, Any]:
    """What a batch's error leaves in the progress record: its class, its message and its
    plain fields, so that :meth:`TableauSink.await_termination` raises the same error."""
    fields = {
        name: value
        for name, value in vars(error).items()
        if not name.startswith("_") and isinstance(value, (str, int, float, bool, type(None)))
    }
    return {"class": type(error).__name__, "message": str(error), "fields": fields}


def _error_from_record(said: dict[str, Any]) -> TabHyperError:
    """The error :func:`_error_record` recorded, made again: its class (the SDK's, else
    ``TabHyperError``), its message and its fields (a job's id, notes, status, code...)."""
    cls = getattr(errors, str(said.get("class")), None)
    if not (isinstance(cls, type) and issubclass(cls, TabHyperError)):
        cls = TabHyperError
    rebuilt = cls.__new__(cls)
    TabHyperError.__init__(rebuilt, str(said.get("message")))
    for name, value in (said.get("fields") or {}).items():
        setattr(rebuilt, name, value)
    return rebuilt


_CONNECT_NEEDS_SINK_ID = (
    "over Spark Connect a batch cannot read its query's id: pass TableauSink(..., "
    "sink_id=...) naming this sink (a new one whenever the checkpoint is replaced)"
)


def _is_connect(thing: Any) -> bool:
    """Whether ``thing`` (a DataFrame, writer or session) belongs to Spark Connect."""
    return type(thing).__module__.startswith("pyspark.sql.connect")


def _known_query_id(batch: DataFrame) -> str | None:
    """The id of the query running this batch, when Spark tells it (not over Connect)."""
    if _is_connect(batch):
        return None
    found = batch.sparkSession.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    return str(found) if found else None


def _query_id(batch: DataFrame) -> str:
    if _is_connect(batch):
        raise ConfigurationError(_CONNECT_NEEDS_SINK_ID)
    context = batch.sparkSession.sparkContext
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    if not query_id:
        raise ConfigurationError(
            "the streaming query's id is not known here (not called by foreachBatch, or a "
            "Spark Connect session): pass TableauSink(..., sink_id=...) naming this sink"
        )
    return str(query_id)


def _without_empty_sources(batch: ActionBatch, payload: Payload) -> ActionBatch | None:
    """``batch`` less the inserts and upserts whose table holds no rows in this batch;
    ``None`` when nothing is left to send."""
    tables = payload.tables
    kept = []
    for action in batch.actions:
        if isinstance(action, (Insert, Upsert)):
            info = tables.get(action.source_table or "")
            if info is not None and info.row_count == 0:
                log.info(
                    "table %r is empty in this batch: its %s is left out",
                    info.name,
                    action.action,
                )
                continue
        kept.append(action)
    if not kept or (payload.is_empty and all(a.reads_source for a in kept)):
        return None
    return ActionBatch(actions=kept)

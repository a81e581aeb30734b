"""The one-line round trip: ``build_payload(df).upload().apply(actions)``.

``upload()`` binds the payload to its target (an argument, or ``TABLEAU_DATASOURCE`` with the
client's environment), looks the target up and uploads the first part; ``apply()`` submits
each part's update and, by default, waits until it is applied, raising when it is not. A
payload in several parts is uploaded and applied part by part, in order: each part waits for
the one before it. :meth:`TableauClient.update_datasource` does both in one call and checks
everything (actions, target, the update's record) before its first request.

Which RequestID each part carries, and when a repeat is the same update, is the identity rule
of :mod:`tabhyper_update.update.identity`. Before the first request goes out the update's record is
written (see :mod:`tabhyper_update.update.state`); a re-run after a crash reads it, continues at the
first part not yet applied and never applies one twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from typing_extensions import Unpack

from ..local.folders import DerivedFolder
from ..local.progress import show_progress
from ..local.telemetry import span
from ..readback.check import ExpectedChanges, expected_changes, read_back, verify_option
from ..readback.drift import DriftReport
from ..rest.refs import DataSourceRef
from ..rest.session import RestSession
from ..values.actions import ActionBatch, BatchLike
from ..values.errors import (
    ArgumentTypeError,
    ConfigurationError,
    DriftError,
    InvalidArgumentError,
    PayloadError,
)
from ..values.parts import NoPayload, PayloadLike
from ..values.redaction import get_logger
from .identity import open_record
from .options import (
    ApplyOptions,
    ApplySettings,
    BindOptions,
    BindSettings,
    UpdateOptions,
    update_settings,
)
from .oversize import OversizeSplitter
from .resplit import key_columns
from .results import PartUpdate, PlannedPart, UpdatePlan, UpdateResult
from .run import UpdateRun
from .schema import TargetSchema
from .schema_change import SchemaCheck, republished
from .state import StateStore
from .targets import (
    derived_target,
    refuse_replace_from_nothing,
    resolve_target,
    target_name,
)
from .units import Unit, step
from .uploading import PartUploader

__all__ = [
    "BoundPayload",
    "PartUpdate",
    "UpdateResult",
    "resolve_target",
    "update_datasource",
    "upload_payload",
]

log = get_logger("tabhyper_update")


@dataclass(frozen=True)
class _Prepared:
    """An update's settings and its units, part by part, checked; where its changes end in
    their source and when the source committed them (as given, else the payload's)."""

    settings: ApplySettings
    given: ActionBatch | None
    table: dict[str, str]
    units: list[Unit]
    sample: int | None
    position: Any
    committed_at: float | None


class BoundPayload:
    """A payload bound to its target data source and client (what ``payload.upload()``
    returns, its first part uploaded by then).

    ``Payload.upload()`` looks the target up and uploads the first part before it returns;
    :meth:`apply` checks the actions against the payload, then submits that part's update
    and uploads and applies the others in turn.
    """

    def __init__(
        self,
        payload: PayloadLike,
        client: RestSession,
        target: DataSourceRef | str | None,
        *,
        progress: bool | None = None,
        state: StateStore | None = None,
    ) -> None:
        self.payload = payload
        self.client = client
        self._target_spec = target
        self._target: DataSourceRef | None = target if isinstance(target, DataSourceRef) else None
        self.progress = show_progress(progress)
        self.state = state or StateStore()
        #: The SDK's own folder for files derived from the parts (sub-parts of a part over
        #: the server's cap, parts without columns the target lacks): never beside the
        #: caller's files; removed with the run (or when this is collected).
        self._derived = DerivedFolder()
        self._uploads = PartUploader(payload, client, progress=self.progress)
        self._splitter = OversizeSplitter(client, self.state, self._derived)
        self._schema = SchemaCheck(payload, client, self.state, self._derived)

    def upload_first_part(self) -> None:
        """Look the target up and upload the first part (what ``upload()`` does before it
        returns); :meth:`apply` uses that upload for the part's first submission."""
        if self.payload.parts and self._uploads.first is None:
            _ = self.target
            self._uploads.upload_first()

    @property
    def target(self) -> DataSourceRef:
        """The data source (looked up on first use)."""
        if self._target is None:
            self._target = step(
                "data source lookup",
                "nothing was submitted",
                lambda: resolve_target(self.client, self._target_spec),
            )
        return self._target

    def __repr__(self) -> str:
        shown = self._target.name or self._target.id if self._target else self._target_spec
        return f"{type(self).__name__}(target={shown!r}, parts={len(self.payload.parts)})"

    # -- the update ------------------------------------------------------------------------
    def plan(self, actions: BatchLike | None = None, **options: Unpack[ApplyOptions]) -> UpdatePlan:
        """What :meth:`apply` would send, checked as it checks it (the actions against the
        payload's tables and keys, the target looked up, the payload's columns against the
        data source's where the SDK knows them), with nothing sent that changes data: the
        parts, their rows and each part's actions (``apply --dry-run``)."""
        ready = self._prepare(actions, ApplySettings.of(options, "plan()"))
        units = ready.units
        target = self.target
        schema = self._schema.check(
            target, [u.batch for u in units], ready.settings.allow_narrowing
        )
        parts = [PlannedPart.of(n, unit.part, unit.batch) for n, unit in enumerate(units, 1)]
        return UpdatePlan(
            target.label,
            target.id,
            parts,
            schema.origin if units and schema is not None else None,
            _unconfirmed(units, schema) if units else [],
        )

    def apply(
        self, actions: BatchLike | None = None, **options: Unpack[ApplyOptions]
    ) -> UpdateResult:
        """Apply the payload: submit every part's update, in order, and wait until each is
        applied (raising :class:`JobFailedError` and friends when one is not).

        ``actions`` default to the payload's derived actions (a change set), on the table
        ``target_schema.target_table`` (``Extract.Extract`` unless given). ``verify=True``
        then reads the update back through the VizQL Data Service and raises
        :class:`DriftError` when something differs (``verify=n``: a sample of n keys; the
        report is ``result.readback``). ``request_id`` binds the update's identity to a
        position of the caller's own (:mod:`tabhyper_update.update.identity`). With
        ``wait=False`` the call returns once the last part is submitted; then call
        ``result.wait()`` (and ``result.verify()``). The options are
        :class:`~tabhyper_update.update.options.ApplyOptions`.
        """
        return self.apply_settings(actions, ApplySettings.of(options, "apply()"))

    def apply_settings(self, actions: BatchLike | None, settings: ApplySettings) -> UpdateResult:
        """:meth:`apply` with its options already made, checked, as one
        :class:`~tabhyper_update.update.options.ApplySettings` (the sink makes its own once
        and changes only the batch's ``request_id`` and ``position``)."""
        ready = self._prepare(actions, settings)
        if not ready.units:
            # Nothing to send; what the build set aside (every change, say) is still said.
            self._cleanup()
            return UpdateResult(
                [], done=True, quarantined=getattr(self.payload, "quarantined", None)
            )
        checked = self._fit_schema(ready)
        if isinstance(checked, UpdateResult):
            return checked  # republished: the snapshot holds the update's changes
        units, replaced = checked
        # Read before the files go: what the update must leave, to be read back after it.
        expected = None if ready.sample is None else expected_changes(self.payload, ready.sample)
        run = self._run(ready, units, replaced)
        started, wait, timeout = time.time(), ready.settings.wait, ready.settings.timeout
        with span("update", datasource=self.target.label, parts=len(run.units)):
            result = UpdateResult(
                run.send(wait=wait, timeout=timeout),
                waiter=run.finish,
                verifier=self._verifier(expected, ready.settings.verify_budget),
                datasource=self.target.label,
                started_at=started,
                position=ready.position,
                committed_at=ready.committed_at,
                build_seconds=getattr(self.payload, "build_seconds", None),
                quarantined=getattr(self.payload, "quarantined", None),
            )
            if wait:
                result.wait(timeout)
                if expected is not None:
                    _verified(result)
        return result

    def _prepare(self, actions: BatchLike | None, settings: ApplySettings) -> _Prepared:
        """The update :meth:`plan` shows and :meth:`apply` sends, its options checked the
        same way for both (a dry run refuses exactly what a run refuses), nothing sent."""
        given = ActionBatch.coerce(actions) if actions is not None else None
        table = derived_target(self.payload, given, settings.target_table, settings.target_schema)
        sample = verify_option(settings.verify, actions_given=given is not None)
        return _Prepared(
            settings,
            given,
            table,
            self._units(given, table),
            sample,
            _given_or(settings.position, getattr(self.payload, "last_position", None)),
            _given_or(settings.committed_at, getattr(self.payload, "committed_at", None)),
        )

    def _fit_schema(self, ready: _Prepared) -> UpdateResult | tuple[list[Unit], str]:
        """The units checked against the data source's columns under the schema policy: as
        they were, written again without the columns the data source lacks (``replaced``
        then says the first part's early upload is not used), or the republish's result."""
        settings = ready.settings
        changed = self._schema.run(
            self.target,
            [unit.batch for unit in ready.units],
            settings.allow_narrowing,
            settings.on_schema_change,
        )
        if isinstance(changed, DataSourceRef):
            self._cleanup()
            return republished(changed, ready.position)
        if not changed:
            return ready.units, ""
        replaced = ""
        if self._uploads.first is not None:
            replaced = (
                "the upload made by upload() holds the columns on_schema_change left "
                "out: it is not sent; the part is uploaded again without them"
            )
            log.warning(replaced)
            self._uploads.first = None
        return self._units(ready.given, ready.table), replaced

    def _run(self, ready: _Prepared, units: list[Unit], replaced: str) -> UpdateRun:
        """The run of ``units``: its record (an interrupted run's, or a new one), its parts
        split as the record says."""
        record = open_record(
            self.state, self.payload, self.target, units, ready.settings.request_id, ready.position
        )
        if replaced and replaced not in record.notes:
            record.notes.append(replaced)
            self.state.save(record)
        keys = key_columns(self.payload, units[0].batch, derived=ready.given is None)
        return UpdateRun(
            client=self.client,
            target=self.target,
            store=self.state,
            record=record,
            units=self._splitter.as_recorded(units, record, keys),
            keys=keys,
            uploader=self._uploads,
            splitter=self._splitter,
            progress=self.progress,
            cleanup=self._cleanup,
            overflows=self._schema.overflows,
        )

    def _verifier(
        self, expected: ExpectedChanges | None, budget: int | None
    ) -> Callable[..., DriftReport] | None:
        """What reads the update back, when ``verify=`` asked for it."""
        if expected is None:
            return None
        return partial(read_back, self.client, self.target, expected, budget=budget)

    def _units(self, given: ActionBatch | None, table: dict[str, str]) -> list[Unit]:
        """What goes to the server, part by part (empty when there is nothing to update)."""
        parts = self.payload.parts
        if parts:
            if given is not None:
                self.payload.validate(given)
            return [Unit(p, given or self.payload.derived_actions(p, **table)) for p in parts]
        if given is None or given.reads_source:
            if given is not None:
                refuse_replace_from_nothing(given)
            log.info("empty payload: no rows to insert, upsert or delete by; nothing to update")
            return []
        # An update that reads nothing from the payload (e.g. delete by constant).
        self.payload.validate(given)
        return [Unit(None, given)]

    def _cleanup(self) -> None:
        if not self.payload.keep_files:
            self.payload.cleanup()
        self._derived.remove()


def _verified(result: UpdateResult) -> None:
    """Read the applied update back; a difference raises :class:`DriftError`."""
    report = result.verify()
    if not report.ok:
        raise DriftError(report, applied=f"the update was applied ({result.brief()})")


def _given_or(given: Any, otherwise: Any) -> Any:
    return otherwise if given is None else given


def upload_payload(
    payload: PayloadLike,
    target: DataSourceRef | str | None,
    *,
    client: RestSession,
    **options: Unpack[BindOptions],
) -> BoundPayload:
    """:meth:`Payload.upload`: bind the payload to its target, look the target up and upload
    the first part."""
    return bind_payload(payload, target, client, BindSettings.of(options, "upload()"))


def bind_payload(
    payload: PayloadLike,
    target: DataSourceRef | str | None,
    client: RestSession,
    settings: BindSettings,
    *,
    upload_first: bool = True,
) -> BoundPayload:
    """The payload bound to its target by ``settings``, checked before anything is sent;
    the first part uploaded unless ``upload_first=False`` (then nothing is sent before
    ``apply()``)."""
    if payload.parts and any(not p.path.exists() for p in payload.parts):
        raise PayloadError("the payload's files were already removed (cleanup() ran)")
    if not isinstance(target, DataSourceRef):
        target_name(target, os.environ)
    store = StateStore(settings.state_dir)
    store.check()
    check_vouched(payload, store, client.server, client.site)
    bound = BoundPayload(payload, client, target, progress=settings.progress, state=store)
    if upload_first:
        bound.upload_first_part()
    return bound


def update_datasource(
    client: RestSession,
    target: DataSourceRef | str,
    payload: PayloadLike | None = None,
    *,
    actions: BatchLike | None = None,
    **options: Unpack[UpdateOptions],
) -> UpdateResult:
    """:meth:`TableauClient.update_datasource`: bind, upload and apply in one call, every
    argument checked before the first request."""
    binding, applying = update_settings(options, "update_datasource()")
    return update_with(client, target, payload, actions, binding, applying)


def update_with(
    client: RestSession,
    target: DataSourceRef | str,
    payload: PayloadLike | None,
    actions: BatchLike | None,
    binding: BindSettings,
    applying: ApplySettings,
) -> UpdateResult:
    """:func:`update_datasource` with its options made into their settings."""
    if payload is not None and not isinstance(payload, PayloadLike):
        hint = (
            "; pass an action batch as actions=..."
            if not isinstance(payload, (str, os.PathLike))
            else "; for a .hyper file use Payload.from_hyper(path)"
        )
        raise ArgumentTypeError(
            "update_datasource's second argument is a Payload (from build_payload(...)), "
            f"got {type(payload).__name__}{hint}",
            argument="payload",
        )
    if payload is None and actions is None:
        raise InvalidArgumentError("give a payload, actions, or both")
    chosen: PayloadLike = payload if payload is not None else NoPayload()
    bound = bind_payload(chosen, target, client, binding, upload_first=False)
    return bound.apply_settings(actions, applying)


def check_vouched(payload: PayloadLike, store: StateStore, server: str, site: str) -> None:
    """Refuse, before anything is sent, a change set whose updates rest on what no probe
    of the server has shown: a guarded one (a stale update refused: an assumed guard that
    protects nothing is worse than none), or one keeping history or soft deletes (an update
    that sets some columns and keeps the others, ``partial_update``)."""
    needs = [
        (what, case, wanted)
        for what, case, wanted, asked in (
            ("ChangeSet(guard=True)", "guard", "works", "is_guarded"),
            (
                "ChangeSet(history=...) or (soft_delete=...)",
                "partial_update",
                "kept",
                "updates_in_place",
            ),
        )
        if getattr(payload, asked, False)
    ]
    if not needs:
        return
    found = store.probe(server, site)
    command = f"tabhyper-update probe --project NAME --state-dir {store.directory}"
    for what, case, wanted in needs:
        got = None if found is None else getattr(found, case)
        if got == wanted:
            continue
        why = (
            f"no probe of {server} (site {site!r}) is remembered in {str(store.directory)!r}"
            if found is None
            else f"the probe of {server} (site {site!r}) found {case} {got!r}"
            + (f" (NOT NULL {found.not_null})" if case == "guard" else "")
        )
        raise ConfigurationError(
            f"{what} is sent only to a server whose probe found {case} {wanted!r}; {why}. "
            f"Run `{command}` (or client.probe(project=...)) against it first, or build "
            f"without {what.removeprefix('ChangeSet')}"
        )


def _unconfirmed(units: Sequence[Unit], schema: TargetSchema | None) -> list[str]:
    """The target tables of ``units``' actions the schema check did not find by name: only
    the server's job can confirm them (the VizQL Data Service lists a data source's columns,
    not its tables)."""
    named = set() if schema is None else {t for t in schema.tables if t is not None}
    return sorted(
        {
            a.target_table
            for u in units
            for a in u.batch.actions
            if getattr(a, "target_table", None) and a.target_table not in named
        }
    )

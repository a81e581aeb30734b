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
import shutil
import time
import weakref
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from typing_extensions import Unpack

from ..local.folders import Lease, private_dir
from ..local.progress import bar as progress_bar
from ..local.progress import show_progress
from ..local.telemetry import span
from ..readback.check import expected_changes, read_back, verify_option
from ..rest.jobs import Job
from ..rest.refs import DataSourceRef, check_request_id
from ..rest.session import RestSession
from ..values.actions import ActionBatch, BatchLike
from ..values.errors import (
    ApiError,
    ArgumentTypeError,
    DriftError,
    InvalidArgumentError,
    JobCancelledError,
    JobFailedError,
    NotFoundError,
    OutOfOrderError,
    PayloadError,
    TabHyperError,
)
from ..values.parts import NoPayload, PayloadLike, PayloadPart
from ..values.redaction import get_logger
from .identity import (
    MAX_REQUEST_ID,
    created_before,
    next_attempt,
    open_record,
    progress_of,
)
from .options import ApplyOptions, BindOptions, UpdateOptions, split_options
from .oversize import Oversize
from .resplit import (
    key_columns,
    parts_needed,
    splittable,
    too_large,
)
from .results import PartUpdate, UpdateResult, report_metrics
from .resume import earlier_job_stands, resume_submitted
from .schema_change import SchemaPolicy, check_policy
from .state import PartState, StateStore, UpdateRecord
from .targets import (
    derived_target,
    refuse_replace_from_nothing,
    resolve_target,
    target_name,
)
from .uploading import (
    UPLOAD_SESSION_UNKNOWN,
    FirstUpload,
    PartUploads,
    Unit,
    step,
)

__all__ = [
    "BoundPayload",
    "PartUpdate",
    "UpdateResult",
    "resolve_target",
    "update_datasource",
    "upload_payload",
]

log = get_logger("tabhyper_update")
#: How many new attempts one run makes for a part whose earlier job had failed.
MAX_ATTEMPTS_PER_RUN = 3


class BoundPayload(PartUploads, Oversize, SchemaPolicy):
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
        #: The first part's upload session, sent by ``upload()`` and not yet used, and the
        #: seconds its upload took.
        self._uploaded_first: FirstUpload | None = None
        #: The next part's upload, made while the server runs the previous part's job.
        self._ahead: tuple[PayloadPart, Future[FirstUpload]] | None = None
        self._uploader: ThreadPoolExecutor | None = None
        #: The SDK's own folder for files derived from the parts (sub-parts of a part the
        #: server refused as too large, parts without columns the target lacks): never
        #: beside the caller's files; removed with the run (or when this is collected).
        self._derived: Path | None = None
        self._derived_gone: weakref.finalize[Any, Any] | None = None

    def upload_first_part(self) -> None:
        """Look the target up and upload the first part (what ``upload()`` does before it
        returns); :meth:`apply` uses that upload for the part's first submission."""
        if not self.payload.parts or self._uploaded_first is not None:
            return
        _ = self.target
        started = time.perf_counter()
        session = step(
            "upload of part 1",
            "this part was not submitted",
            partial(self._upload_part, 0, self.payload.parts[0]),
        )
        self._uploaded_first = FirstUpload(session, time.perf_counter() - started)

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
    def apply(
        self, actions: BatchLike | None = None, **options: Unpack[ApplyOptions]
    ) -> UpdateResult:
        """Apply the payload: submit every part's update, in order, and wait until each is
        applied (raising :class:`JobFailedError` and friends when one is not).

        ``verify=True`` then reads the update back through the VizQL Data Service (every
        upserted key once with the payload's values, every deleted key gone) and raises
        :class:`DriftError` when something differs; ``verify=n`` checks a random sample of
        n keys. The report is ``result.readback``; with ``wait=False`` call
        ``result.wait()`` and then ``result.verify()``.

        ``actions`` default to the payload's derived actions (a change set), on the table
        ``target_schema.target_table`` of the data source (``Extract.Extract`` unless
        given). ``request_id`` binds the update's identity to a position of the caller's
        own (see :mod:`tabhyper_update.update.identity`). With ``wait=False`` the call
        returns once the last part is submitted (earlier parts are still waited on, so that
        parts apply in order); then call ``.wait()`` on the result. The options are
        :class:`~tabhyper_update.update.options.ApplyOptions`.
        """
        given = ActionBatch.coerce(actions) if actions is not None else None
        table = derived_target(
            self.payload, given, options.get("target_table"), options.get("target_schema")
        )
        sample = verify_option(options.get("verify", False), actions_given=given is not None)
        request_id = options.get("request_id")
        if request_id is not None:
            check_request_id(request_id, most=MAX_REQUEST_ID)
        units = self._units(given, table)
        if not units:
            self._cleanup()
            return UpdateResult([], done=True)
        policy = options.get("on_schema_change", "fail")
        check_policy(policy)
        changed = self._check_schema(
            [unit.batch for unit in units], options.get("allow_narrowing", ()), policy
        )
        if isinstance(changed, DataSourceRef):
            return self._republished(changed, options.get("position"))
        if changed:  # parts written again without the columns the data source lacks
            units = self._units(given, table)
        # Read before the files go: what the update must leave, to be read back after it.
        expected = expected_changes(self.payload, sample) if sample is not None else None
        record = self._record(units, request_id)
        keys = key_columns(self.payload, units[0].batch, derived=given is None)
        units = self._as_recorded(units, record, keys)
        verifier = (
            None
            if expected is None
            else partial(
                read_back,
                self.client,
                self.target,
                expected,
                budget=options.get("verify_budget"),
            )
        )
        result = UpdateResult(
            [],
            waiter=lambda r, t: self._finish(record, r, t),
            verifier=verifier,
            datasource=self.target.label,
            started_at=time.time(),
            position=options.get("position"),
            committed_at=options.get("committed_at"),
            build_seconds=getattr(self.payload, "build_seconds", None),
        )
        wait, timeout = options.get("wait", True), options.get("timeout")
        with span("update", datasource=self.target.label, parts=len(units)):
            self._run_parts(record, units, keys, result.parts, wait=wait, timeout=timeout)
            if wait:
                result.wait(timeout)
                if expected is not None:
                    report = result.verify()
                    if not report.ok:
                        raise DriftError(
                            report, applied=f"the update was applied ({result.brief()})"
                        )
        return result

    def _units(self, given: ActionBatch | None, table: dict[str, str]) -> list[Unit]:
        """What goes to the server, part by part (empty when there is nothing to update)."""
        if not self.payload.parts and given is not None and given.reads_source:
            refuse_replace_from_nothing(given)
            log.info("empty payload: no rows to insert, upsert or delete by; nothing to update")
            return []
        if given is not None:
            self.payload.validate(given)
        if self.payload.parts:
            return [
                Unit(p, given or self.payload.derived_actions(p, **table))
                for p in self.payload.parts
            ]
        if given is None or given.reads_source:
            log.info("empty payload: nothing to update")
            return []
        # An update that reads nothing from the payload (e.g. delete by constant).
        return [Unit(None, given)]

    def _run_parts(
        self,
        record: UpdateRecord,
        units: list[Unit],
        keys: Mapping[str, tuple[str, ...]] | None,
        updates: list[PartUpdate],
        *,
        wait: bool,
        timeout: float | None,
    ) -> None:
        """Submit each part not applied before, in order, waiting for each but the last
        (and for the last too when ``wait``). A part over the server's cap is split (before
        it is sent, once the cap is known; else when the server refuses it) and its
        sub-parts sent in its place."""
        try:
            index = 0
            while index < len(record.parts):
                state = record.parts[index]
                # A finished record may hold another split than this payload (same content, or
                # the same request id): it is reported as recorded, part by part.
                part, batch = units[min(index, len(units) - 1)]
                if state.status == "applied":
                    updates.append(self._part_update(record, state, part, batch))
                    index += 1
                    continue
                cap = self.client.update_cap_bytes
                if (
                    part is not None
                    and cap is not None
                    and part.size_bytes > cap
                    and keys
                    and splittable(part, record.parts[index].digest, cap)
                ):
                    self._split(record, units, index, keys, parts_needed(part.size_bytes, cap))
                    continue
                update = self._part_update(record, state, part, batch)
                try:
                    self._submit(record, state, part, batch, update)
                    if wait or index < len(record.parts) - 1:
                        self._upload_ahead(record, units, index + 1)
                        self._wait_part(record, state, update, timeout)
                except ApiError as err:
                    if not too_large(err) or part is None or state.jobs_seen:
                        err.note_progress(progress_of(record, index))
                        raise
                    self._refused_as_too_large(record, units, index, keys, err)
                    continue
                except TabHyperError as err:
                    err.note_progress(progress_of(record, index))
                    raise
                updates.append(update)
                index += 1
        finally:
            self._stop_uploading()
        if self._uploaded_first is not None:
            self._uploaded_first = None
            log.info(
                "the first part's upload made by upload() went unused: that part had been "
                "applied or submitted before"
            )

    def _part_update(
        self, record: UpdateRecord, state: PartState, part: PayloadPart | None, batch: ActionBatch
    ) -> PartUpdate:
        """The result's entry for one part (one applied before: marked skipped)."""
        applied = state.status == "applied"
        update = PartUpdate(
            state.index,
            state.request_id,
            batch,
            attempt=state.attempt,
            recorded_job_id=state.job_id if applied else None,
        )
        if part is not None and state.index < len(record.parts):
            update.rows = {n: t.row_count for n, t in part.tables.items()}
            update.size_bytes = part.size_bytes
        if applied:
            update.deduplicated = update.skipped = update.applied = True
            log.warning(
                "part %d/%d of %s was applied before (job %s, RequestID %s): skipped, "
                "not submitted again",
                state.index + 1,
                len(record.parts),
                record.label,
                state.job_id,
                state.request_id,
            )
        return update

    def _record(self, units: Sequence[Unit], request_id: str | None) -> UpdateRecord:
        """This update's record: the one an interrupted run left, or a new one (saved)."""
        return open_record(self.state, self.payload, self.target, units, request_id)

    # -- steps -------------------------------------------------------------------------------------
    def _submit(
        self,
        record: UpdateRecord,
        state: PartState,
        part: PayloadPart | None,
        batch: ActionBatch,
        update: PartUpdate,
    ) -> None:
        """Submit one part (or follow the job an earlier run submitted for it), as many new
        attempts as it takes for the server to answer with a job of this request."""
        resumable = state.status == "submitted" and state.job_id
        if resumable and resume_submitted(
            self.client, self.target, self.state, record, state, batch, update
        ):
            return
        for _ in range(MAX_ATTEMPTS_PER_RUN + 1):
            job, sent_at = self._send_part(record, state, part, batch, update)
            earlier = job.id in state.jobs_seen or created_before(job.created_at, sent_at)
            if job.id not in state.jobs_seen:
                state.jobs_seen.append(job.id)
            state.job_id, state.status = job.id, "submitted"
            self.state.save(record)
            update.job = job
            if not earlier:
                log.info(
                    "part %d/%d submitted as job %s (RequestID %s)",
                    state.index + 1,
                    len(record.parts),
                    job.id,
                    state.request_id,
                )
                return
            if earlier_job_stands(self.state, record, state, job, update):
                return
        raise PayloadError(
            f"part {state.index + 1} of {record.label}: {MAX_ATTEMPTS_PER_RUN} new attempts "
            "in a row were answered with earlier failed jobs; giving up"
        )

    def _send_part(
        self,
        record: UpdateRecord,
        state: PartState,
        part: PayloadPart | None,
        batch: ActionBatch,
        update: PartUpdate,
    ) -> tuple[Job, float]:
        """Upload the part (unless ``upload()`` did) and send the update request once; the
        record says "sending" before the request leaves. Returns the job the server answered
        with and when this part was first sent."""
        index = state.index
        update.request_id, update.attempt = state.request_id, state.attempt
        early = self._take_first_upload(index, part, batch) or self._take_ahead(part, batch)
        if part is not None and batch.reads_source:
            if early is not None:
                state.upload_session_id = early.session_id
                update.seconds["upload"] = early.seconds
            else:
                self._upload_into(state, index, part, update)
            update.upload_session_id = state.upload_session_id
        else:
            state.upload_session_id = None
        sent_at = state.sent_at = state.sent_at if state.sent_at is not None else time.time()
        state.status = "sending"
        self.state.save(record)
        started = time.perf_counter()
        try:
            job = self._send_update(state, batch)
        except NotFoundError as err:
            if early is None or err.code != UPLOAD_SESSION_UNKNOWN or part is None:
                raise
            # The server let the upload made by upload() lapse before apply() came:
            # nothing was submitted, so upload the part again and send the same request.
            log.warning(
                "part %d/%d: the server no longer knows the upload made by upload() "
                "(session %s); uploading the part again",
                index + 1,
                len(record.parts),
                state.upload_session_id,
            )
            self._upload_into(state, index, part, update)
            self.state.save(record)
            started = time.perf_counter()
            job = self._send_update(state, batch)
        update.seconds["submit"] = time.perf_counter() - started
        return job, sent_at

    def _send_update(self, state: PartState, batch: ActionBatch) -> Job:
        return step(
            f"update request of part {state.index + 1}",
            f"the update may or may not have been submitted (RequestID {state.request_id}); "
            "running the same job again is safe: its record makes the re-run resume it",
            lambda: self.client.update_data(
                self.target,
                batch,
                upload_session_id=state.upload_session_id,
                request_id=state.request_id,
            ),
        )

    def _wait_part(
        self,
        record: UpdateRecord,
        state: PartState,
        update: PartUpdate,
        timeout: float | None,
    ) -> None:
        assert update.job is not None
        started = time.perf_counter()
        with progress_bar(
            self.progress, total=100, unit="%", desc=f"job for part {update.part + 1}"
        ) as bar:

            def on_poll(job: Job) -> None:
                if bar is not None and job.succeeded:
                    bar.update(100 - bar.n)

            try:
                with span("wait", part=update.part + 1, job=update.job.id):
                    update.job.wait(timeout=timeout, on_poll=on_poll, learn_as=self.target.id)
            except (JobFailedError, JobCancelledError) as err:
                # Batches are atomic: this part applied nothing. The next run submits it
                # again as a new attempt (a new RequestID derived from the identity).
                next_attempt(record, state)
                if record.kind == "run" and not any(p.status == "applied" for p in record.parts):
                    self.state.remove(record.key)
                else:
                    self.state.save(record)
                err.at_step(
                    f"job of part {update.part + 1}",
                    "nothing of this part was applied; running the job again submits it anew",
                )
                guard = _guard_table(update.actions)
                if isinstance(err, JobFailedError) and guard and guard in (err.notes or ""):
                    refused = OutOfOrderError(err.job_id, err.notes, guard_table=guard)
                    refused.at_step(
                        f"job of part {update.part + 1}", "nothing of this part was applied"
                    )
                    raise refused from err
                raise
        update.seconds["wait"] = time.perf_counter() - started
        update.applied = True
        state.status = "applied"
        self.state.save(record)

    def _finish(self, record: UpdateRecord, result: UpdateResult, timeout: float | None) -> None:
        try:
            for update in result.parts:
                state = record.parts[update.part]
                if update.job is not None and state.status != "applied":
                    try:
                        self._wait_part(record, state, update, timeout)
                    except TabHyperError as err:
                        err.note_progress(progress_of(record, update.part))
                        raise
            if record.kind == "run":
                self.state.remove(record.key)
            result.finished_at, result.done = time.time(), True
            report_metrics(result)
        finally:
            self._cleanup()

    def _derived_dir(self) -> Path:
        if self._derived is None:
            self._derived, lease = private_dir(None, "tabhyper-payload-")
            self._derived_gone = weakref.finalize(self, _remove, self._derived, lease)
        return self._derived

    def _cleanup(self) -> None:
        if not self.payload.keep_files:
            self.payload.cleanup()
        if self._derived_gone is not None:
            self._derived_gone()


def _remove(folder: Path, lease: Lease) -> None:
    lease.release()
    shutil.rmtree(folder, ignore_errors=True)


def _guard_table(batch: ActionBatch) -> str | None:
    """The positions table of a guarded change set's update (its first action), if any."""
    first = batch.actions[0] if batch.actions else None
    table = getattr(first, "source_table", None)
    if first is not None and first.action == "update" and str(table).endswith("_guard"):
        return str(table)
    return None


def upload_payload(
    payload: PayloadLike,
    target: DataSourceRef | str | None,
    *,
    client: RestSession,
    upload_first: bool = True,
    **options: Unpack[BindOptions],
) -> BoundPayload:
    """:meth:`Payload.upload`: bind the payload to its target, look the target up and upload
    the first part (unless ``upload_first=False``: then nothing is sent before ``apply()``)."""
    if payload.parts and any(not p.path.exists() for p in payload.parts):
        raise PayloadError("the payload's files were already removed (cleanup() ran)")
    if not isinstance(target, DataSourceRef):
        target_name(target, os.environ)
    store = StateStore(options.get("state_dir"))
    store.check()
    bound = BoundPayload(payload, client, target, progress=options.get("progress"), state=store)
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
    binding, applying = split_options(options)
    bound = upload_payload(chosen, target, client=client, upload_first=False, **binding)
    return bound.apply(actions, **applying)

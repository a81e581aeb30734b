"""One ``apply()``'s run (:class:`UpdateRun`): the update's record, its parts (units) and
their keys, taken part by part through upload, submission and the job's end.

A run is made by :meth:`~tabhyper_update.update.chain.BoundPayload.apply` once the actions,
the schema and the record are settled, and composes what it is handed: the
:class:`~.uploading.PartUploader` (parts in flight), the
:class:`~.oversize.OversizeSplitter` (parts over the server's cap) and the state store that
keeps the record. Before each request that may change data, the record says what is about to
happen; a re-run after a crash reads it and never applies a part twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..local.progress import bar as progress_bar
from ..local.telemetry import span
from ..rest.jobs import Job
from ..rest.refs import DataSourceRef
from ..rest.session import RestSession
from ..values.actions import ActionBatch, bookkeeping_role
from ..values.errors import (
    ApiError,
    JobCancelledError,
    JobFailedError,
    NotFoundError,
    OutOfOrderError,
    PayloadError,
    TabHyperError,
)
from ..values.parts import PayloadPart
from ..values.redaction import get_logger
from .identity import next_attempt, predates_request, progress_of
from .resplit import parts_needed, splittable, too_large
from .results import PartUpdate
from .resume import earlier_job_stands, resume_submitted
from .state import PartState, StateStore, UpdateRecord
from .units import PartRun, Unit, step
from .uploading import UPLOAD_SESSION_UNKNOWN, FirstUpload

if TYPE_CHECKING:
    from .oversize import OversizeSplitter
    from .uploading import PartUploader

__all__ = ["MAX_ATTEMPTS_PER_RUN", "UpdateRun", "duplicate_refused", "ignored_as_repeat"]

log = get_logger("tabhyper_update")
#: How many new attempts one run makes for a part whose earlier job had failed.
MAX_ATTEMPTS_PER_RUN = 3


class UpdateRun:
    """One update's parts, sent in order, each waited for before the next is submitted."""

    def __init__(
        self,
        *,
        client: RestSession,
        target: DataSourceRef,
        store: StateStore,
        record: UpdateRecord,
        units: list[Unit],
        keys: Mapping[str, tuple[str, ...]] | None,
        uploader: PartUploader,
        splitter: OversizeSplitter,
        progress: bool,
        cleanup: Callable[[], None],
        overflows: Mapping[str, str] | None = None,
    ) -> None:
        self.client = client
        self.target = target
        self.store = store
        self.record = record
        self.units = units
        self.keys = keys
        self.uploader = uploader
        self.splitter = splitter
        self.progress = progress
        self.cleanup = cleanup
        #: The payload's columns a value can overflow in (the schema check's), named when a
        #: job fails on an overflow.
        self.overflows = dict(overflows or {})
        #: The parts sent (or found applied before), in order: :meth:`finish` waits for
        #: those still running.
        self.sent: list[PartRun] = []

    def send(self, *, wait: bool, timeout: float | None) -> list[PartUpdate]:
        """Submit each part not applied before, in order, waiting for each but the last
        (and for the last too when ``wait``); each part's update, in order. A part over the
        server's cap is split (before it is sent, once the cap is known; else when the
        server refuses it) and its sub-parts sent in its place."""
        record, units, keys = self.record, self.units, self.keys
        index = 0
        try:
            while index < len(record.parts):
                state = record.parts[index]
                # A finished record may hold another split than this payload (same content, or
                # the same request id): it is reported as recorded, part by part.
                part, batch = units[min(index, len(units) - 1)]
                if state.status == "applied":
                    self.sent.append(self.part_run(state, part, batch))
                    index += 1
                    continue
                # Split ahead only a change set's part (its keys say how).
                if keys and (k := self._parts_ahead(part, state.digest)):
                    self.splitter.split(record, units, index, keys, k)
                    continue
                one = self.part_run(state, part, batch)
                if self._send_or_split(one, index, wait=wait, timeout=timeout):
                    self.sent.append(one)
                    index += 1
        except TabHyperError as err:
            # Said once, where a failure of any step leaves the run: how far it got.
            err.note_progress(progress_of(record, index))
            raise
        finally:
            self.uploader.stop()
        return [one.update for one in self.sent]

    def _send_or_split(
        self, one: PartRun, index: int, *, wait: bool, timeout: float | None
    ) -> bool:
        """Send the part at ``index`` and wait for its job (the last part's only when
        ``wait``): False where the server refused it as too large and it was split in its
        place (its first sub-part is then at ``index``)."""
        record, units = self.record, self.units
        try:
            self.submit(one)
            # No job: the server refused a repeat of this request (it was applied before).
            if one.update.job is not None and (wait or index < len(record.parts) - 1):
                self.uploader.ahead(record, units, index + 1)
                self.wait_part(one, timeout)
        except ApiError as err:
            if not too_large(err) or one.part is None or one.state.jobs_seen:
                raise
            self.splitter.refused(record, units, index, self.keys, err)
            return False
        return True

    def _parts_ahead(self, part: PayloadPart | None, digest: str) -> int:
        """How many parts ``part`` is split into before it is sent: 0 unless the server's
        cap is known, the part is over it, and its rows can be split."""
        cap = self.client.update_cap_bytes
        if part is None or cap is None or part.size_bytes <= cap:
            return 0
        return parts_needed(part.size_bytes, cap) if splittable(part, digest, cap) else 0

    def part_run(self, state: PartState, part: PayloadPart | None, batch: ActionBatch) -> PartRun:
        """One part to send, with the result's entry for it (one applied before: marked
        skipped)."""
        applied = state.status == "applied"
        update = PartUpdate(
            state.index,
            state.request_id,
            batch,
            attempt=state.attempt,
            recorded_job_id=state.job_id if applied else None,
        )
        if part is not None and state.index < len(self.record.parts):
            update.rows = {n: t.row_count for n, t in part.tables.items()}
            update.size_bytes = part.size_bytes
        if applied:
            update.deduplicated = update.skipped = update.applied = True
            log.warning(
                "part %d/%d of %s was applied before (job %s, RequestID %s): skipped, "
                "not submitted again",
                state.index + 1,
                len(self.record.parts),
                self.record.label,
                state.job_id,
                state.request_id,
            )
        return PartRun(state, part, batch, update)

    # -- steps -------------------------------------------------------------------------------
    def _follow(self, one: PartRun, job: Job, earlier: bool | None) -> None:
        """The job the server answered a part's request with, recorded as the part's
        (``earlier``: it was made before this request; ``None``: that cannot be told)."""
        record, state = self.record, one.state
        if job.id not in state.jobs_seen:
            state.jobs_seen.append(job.id)
        state.job_id, state.status = job.id, "submitted"
        self.store.save(record)
        one.update.job = job
        where = (state.index + 1, len(record.parts))
        if earlier is None:
            one.update.deduplicated = None
            log.warning(
                "part %d/%d: the server answered RequestID %s with job %s, made %s; "
                "whether by this request or by an earlier one with the same RequestID "
                "cannot be told (the job is followed either way; nothing is applied twice)",
                *where,
                state.request_id,
                job.id,
                job.created_at,
            )
        if not earlier:
            log.info(
                "part %d/%d submitted as job %s (RequestID %s)", *where, job.id, state.request_id
            )

    def submit(self, one: PartRun) -> None:
        """Submit one part (or follow the job an earlier run submitted for it), as many new
        attempts as it takes for the server to answer with a job of this request."""
        record, state, update = self.record, one.state, one.update
        resumable = state.status == "submitted" and state.job_id
        if resumable and resume_submitted(self.client, self.target, self.store, record, one):
            return
        for _ in range(MAX_ATTEMPTS_PER_RUN + 1):
            first = state.sent_at is None  # no earlier run sent this request
            try:
                job, sent_at = self._send_part(one)
            except ApiError as err:
                if not duplicate_refused(err):
                    raise
                self._refused_as_repeat(one, err)
                return
            earlier = job.id in state.jobs_seen or predates_request(
                job, sent_at, update.seconds["submit"] if first else None
            )
            self._follow(one, job, earlier)
            if not earlier:
                return
            if earlier_job_stands(self.store, record, one, job):
                return
        raise PayloadError(
            f"part {state.index + 1} of {record.label}: {MAX_ATTEMPTS_PER_RUN} new attempts "
            "in a row were answered with earlier failed jobs; giving up"
        )

    def _uploaded(self, one: PartRun) -> FirstUpload | None:
        """The part's upload session, where its actions read it: one made before its turn
        (returned), else one made now."""
        state, part, batch, update = one.state, one.part, one.batch, one.update
        early = self.uploader.take_first(part, batch) or self.uploader.take_ahead(part, batch)
        if part is None or not batch.reads_source:
            state.upload_session_id = None
            return early
        if early is not None:
            state.upload_session_id = early.session_id
            update.seconds["upload"] = early.seconds
        else:
            self.uploader.upload_into(one)
        update.upload_session_id = state.upload_session_id
        return early

    def _send_part(self, one: PartRun) -> tuple[Job, float]:
        """Upload the part (unless it was uploaded before its turn) and send the update
        request once; the record says "sending" before the request leaves. Returns the job
        the server answered with and when this part was first sent."""
        state, part, update = one.state, one.part, one.update
        update.request_id, update.attempt = state.request_id, state.attempt
        early = self._uploaded(one)
        sent_at = state.sent_at = state.sent_at if state.sent_at is not None else time.time()
        state.status = "sending"
        self.store.save(self.record)
        started = time.perf_counter()
        try:
            job = self._send_update(one)
        except NotFoundError as err:
            if early is None or err.code != UPLOAD_SESSION_UNKNOWN or part is None:
                raise
            # The server let the early upload lapse before its turn came: nothing was
            # submitted, so upload the part again and send the same request.
            log.warning(
                "part %d/%d: the server no longer knows the upload made before its turn "
                "(session %s); uploading the part again",
                state.index + 1,
                len(self.record.parts),
                state.upload_session_id,
            )
            self.uploader.upload_into(one)
            self.store.save(self.record)
            started = time.perf_counter()
            job = self._send_update(one)
        update.seconds["submit"] = time.perf_counter() - started
        return job, sent_at

    def _refused_as_repeat(self, one: PartRun, err: ApiError) -> None:
        """The server refused the request as a repeat of one it had (its answer names the
        duplicate): this run applies nothing, and the part is the earlier request's."""
        state, update = one.state, one.update
        log.warning(
            "part %d/%d: the server refused RequestID %s as a repeat of a request it already "
            "had (%s): %s was submitted before (deduplicated); nothing was sent again, and "
            "its outcome is that earlier request's",
            state.index + 1,
            len(self.record.parts),
            state.request_id,
            err.code,
            self.record.label,
        )
        update.deduplicated = update.applied = True
        state.status = "applied"
        self.store.save(self.record)

    def _send_update(self, one: PartRun) -> Job:
        state = one.state
        return step(
            f"update request of part {state.index + 1}",
            f"the update may or may not have been submitted (RequestID {state.request_id}); "
            "running the same job again is safe: its record makes the re-run resume it",
            lambda: self.client.update_data(
                self.target,
                one.batch,
                upload_session_id=state.upload_session_id,
                request_id=state.request_id,
            ),
        )

    def wait_part(self, one: PartRun, timeout: float | None) -> None:
        """Wait for one part's job; a job that failed leaves the record ready for a new
        attempt (batches are atomic: nothing of the part was applied)."""
        state, update = one.state, one.update
        assert update.job is not None
        record = self.record
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
                refused = self._job_failed(one, err)
                if refused is None:
                    raise
                raise refused from err
        update.seconds["wait"] = time.perf_counter() - started
        if ignored_as_repeat(update.job):
            log.warning(
                "part %d/%d: job %s says it applied nothing, its RequestID %s being a "
                "repeat (deduplicated)",
                update.part + 1,
                len(record.parts),
                update.job.id,
                state.request_id,
            )
            update.deduplicated = True
        update.applied = True
        state.status = "applied"
        self.store.save(record)

    def _job_failed(
        self, one: PartRun, err: JobFailedError | JobCancelledError
    ) -> OutOfOrderError | None:
        """A part's job failed or was cancelled: its record left ready for a new attempt
        (the next run submits the part again, with a new RequestID derived from the
        identity), ``err`` told so; an :class:`OutOfOrderError` returned in its place where
        the guard's check failed it."""
        record, part = self.record, one.update.part + 1
        next_attempt(record, one.state)
        if record.kind == "run" and not any(p.status == "applied" for p in record.parts):
            self.store.remove(record.key)
        else:
            self.store.save(record)
        err.at_step(
            f"job of part {part}",
            "nothing of this part was applied; running the job again submits it anew",
        )
        if not isinstance(err, JobFailedError):
            return None
        err.name_overflow(self.overflows)
        guard = _guard_table(one.update.actions)
        if not guard or guard not in (err.notes or ""):
            return None
        refused = OutOfOrderError(err.job_id, err.notes, guard_table=guard)
        refused.at_step(f"job of part {part}", "nothing of this part was applied")
        return refused

    def finish(self, timeout: float | None) -> None:
        """Wait for every part still running (``result.wait()``), then close the record."""
        record = self.record
        try:
            for one in self.sent:
                if one.update.job is not None and one.state.status != "applied":
                    try:
                        self.wait_part(one, timeout)
                    except TabHyperError as err:
                        err.note_progress(progress_of(record, one.state.index))
                        raise
            if record.kind == "run":
                self.store.remove(record.key)
        finally:
            self.cleanup()


def duplicate_refused(err: ApiError) -> bool:
    """Whether the server refused a request as a repeat of one it already had (a 409 or
    400 whose words name a duplicate request)."""
    said = f"{err.summary or ''} {err.detail or ''}".lower()
    return err.status in (400, 409) and "duplicate" in said and "request" in said


def ignored_as_repeat(job: Job) -> bool:
    """Whether a finished job says it applied nothing because its request was a repeat."""
    notes = (job.notes or "").lower()
    return job.succeeded and "duplicate" in notes and "nothing applied" in notes


def _guard_table(batch: ActionBatch) -> str | None:
    """The positions table of a guarded change set's update (its first action), if any."""
    first = batch.actions[0] if batch.actions else None
    if first is not None and bookkeeping_role(first) == "guard":
        return first.source_table
    return None

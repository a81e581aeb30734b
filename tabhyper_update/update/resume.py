"""What a run does with a part submitted before: follow the job an earlier run submitted,
or decide whether a job the server answered a RequestID with (one that existed before the
request: a deduplicated answer) stands for the part, or applied nothing and the part goes
again as a new attempt."""

from __future__ import annotations

from ..rest.jobs import FINISH_CANCELLED, FINISH_FAILED, Job
from ..rest.refs import DataSourceRef
from ..rest.session import RestSession
from ..rest.updates import check_job_target
from ..values.actions import ActionBatch
from ..values.errors import JobOutcomeUnknownError, NotFoundError, UpdateStateError
from ..values.redaction import get_logger
from .identity import next_attempt
from .state import StateStore, UpdateRecord
from .units import PartRun

__all__ = ["earlier_job_stands", "idempotent", "resume_submitted"]

log = get_logger("tabhyper_update")


def resume_submitted(
    client: RestSession,
    target: DataSourceRef,
    store: StateStore,
    record: UpdateRecord,
    one: PartRun,
) -> bool:
    """Follow the job an earlier run submitted for this part; False when the server no
    longer knows it and the part may be submitted again (its batch is idempotent)."""
    state, batch, update = one.state, one.batch, one.update
    index, total = state.index, len(record.parts)
    assert state.job_id is not None
    try:
        update.job = check_job_target(client.job(state.job_id), target, state.request_id)
    except NotFoundError:
        if not idempotent(batch):
            raise UpdateStateError(
                f"part {index + 1}/{total} of {record.label}: job {state.job_id} "
                f"(RequestID {state.request_id}), submitted by an earlier run, is no "
                "longer known to the server, so whether it was applied cannot be told, "
                "and submitting its insert again could add its rows twice. Look at the "
                "data source; then forget the record with `tabhyper-update state clear "
                f"--state-dir {store.directory}` and, if the rows are missing, run "
                "the job again"
            ) from None
        log.warning(
            "part %d/%d: job %s, submitted by an earlier run, is no longer known to "
            "the server; submitting the part again under the same RequestID %s (its "
            "actions give the same result applied once or twice)",
            index + 1,
            total,
            state.job_id,
            state.request_id,
        )
        return False
    log.info(
        "part %d/%d was submitted by an earlier run (job %s): waiting on it",
        index + 1,
        total,
        state.job_id,
    )
    update.resumed = True
    return True


def earlier_job_stands(store: StateStore, record: UpdateRecord, one: PartRun, job: Job) -> bool:
    """The server answered with a job that existed before this request: True when that
    job stands for the part (running, or succeeded); False when it applied nothing and
    the part goes again as a new attempt."""
    state, update = one.state, one.update
    index, total = state.index, len(record.parts)
    update.deduplicated = True
    log.warning(
        "part %d/%d: the server answered RequestID %s with job %s, which existed "
        "before this request: %s had been submitted before (deduplicated)",
        index + 1,
        total,
        state.request_id,
        job.id,
        record.label,
    )
    job.refresh()
    if not job.is_done or job.succeeded:
        return True
    if job.finish_code not in (FINISH_FAILED, FINISH_CANCELLED):
        # Neither applied nor not: never submitted again, never counted as applied.
        raise JobOutcomeUnknownError(job.id, job.finish_code)
    # That earlier job failed or was cancelled, so it applied nothing (batches are
    # atomic): submit the part again as a new attempt.
    log.warning(
        "part %d/%d: that job %s did not succeed (finish code %s) and applied "
        "nothing; submitting the part again as attempt %d",
        index + 1,
        total,
        job.id,
        job.finish_code,
        state.attempt + 2,
    )
    update.deduplicated = False
    next_attempt(record, state)
    store.save(record)
    return False


def idempotent(batch: ActionBatch) -> bool:
    """Whether applying ``batch`` twice leaves what applying it once does (no insert)."""
    return all(action.action != "insert" for action in batch.actions)

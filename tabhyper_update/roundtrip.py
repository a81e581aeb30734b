"""The one-line round trip: ``build_payload(df).upload().apply(actions).wait()``.

``upload()`` finds the target (an argument, or ``TABLEAU_DATASOURCE`` with the client's
environment), ``apply()`` submits each part's update with a deterministic RequestID, and
the result's ``wait()`` follows the jobs to their end. A payload in several parts is
uploaded and applied part by part, in order: each part waits for the one before it.

Resume after a crash: before each part the state record (see :mod:`tabhyper_update.state`)
is consulted; a part whose job was already submitted is waited on, not submitted again, and
the deterministic RequestID makes the server ignore a resubmission in the gap before the
record was written.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .actions import ActionBatch
from .client import DataSourceRef, TableauClient
from .errors import ConfigurationError, JobFailedError, PayloadError, TabHyperError
from .jobs import Job
from .state import PartRecord, StateStore

if TYPE_CHECKING:
    from .payload import Payload, PayloadPart

__all__ = ["PartUpdate", "UpdateResult", "UploadedPayload", "resolve_target"]

log = logging.getLogger("tabhyper_update")
_T = TypeVar("_T")


def resolve_target(
    client: TableauClient,
    target: DataSourceRef | str | None,
    env: Mapping[str, str] | None = None,
) -> DataSourceRef:
    """A data source reference from ``target`` or ``TABLEAU_DATASOURCE`` (``TABLEAU_PROJECT``,
    ``TABLEAU_CONNECTION`` optional)."""
    if isinstance(target, DataSourceRef):
        return target
    e = os.environ if env is None else env
    name = target or e.get("TABLEAU_DATASOURCE")
    if not name:
        raise ValueError("no target data source: pass one to upload() or set TABLEAU_DATASOURCE")
    return client.datasource(
        name,
        project=e.get("TABLEAU_PROJECT") or None,
        connection=e.get("TABLEAU_CONNECTION") or None,
    )


def _step(step: str, consequence: str, fn: Callable[[], _T]) -> _T:
    """Run one step; an error of ours leaving it says which step and what it means."""
    try:
        return fn()
    except TabHyperError as err:
        err.step = step
        note = f"[{step} failed: {consequence}]"
        if err.args and isinstance(err.args[0], str) and note not in err.args[0]:
            err.args = (f"{err.args[0]} {note}", *err.args[1:])
        raise


def _show_progress(progress: bool | None) -> bool:
    return sys.stderr.isatty() if progress is None else progress


@contextmanager
def _bar(enabled: bool, **kwargs: Any) -> Iterator[Any]:
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(file=sys.stderr, leave=False, **kwargs)
    try:
        yield bar
    finally:
        bar.close()


@dataclass
class PartUpdate:
    """One part's update: its RequestID, upload session, job and time taken."""

    part: int
    request_id: str
    actions: ActionBatch
    upload_session_id: str | None = None
    job: Job | None = None
    resumed: bool = False
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class UpdateResult:
    """The updates submitted for a payload; :meth:`wait` follows them to their end."""

    parts: list[PartUpdate]
    _finish: Callable[[UpdateResult, float | None], None] | None = None
    done: bool = False

    @property
    def jobs(self) -> list[Job]:
        return [p.job for p in self.parts if p.job is not None]

    def wait(self, timeout: float | None = None) -> UpdateResult:
        """Wait for every part's job; raise :class:`JobFailedError` (or cancelled / timed
        out) on the first that did not succeed."""
        if not self.done and self._finish is not None:
            self._finish(self, timeout)
        self.done = True
        return self


class UploadedPayload:
    """A payload bound to its target data source and client.

    Nothing is sent until :meth:`apply` has checked the actions against the payload: then
    the target is looked up and each part is uploaded and applied in turn.
    """

    def __init__(
        self,
        payload: Payload,
        client: TableauClient,
        target: DataSourceRef | str | None,
        *,
        progress: bool | None = None,
        state: StateStore | None = None,
    ) -> None:
        self.payload = payload
        self.client = client
        self._target_spec = target
        self._target: DataSourceRef | None = target if isinstance(target, DataSourceRef) else None
        self.progress = _show_progress(progress)
        self.state = state or StateStore()
        self._sessions: dict[int, str] = {}

    @property
    def target(self) -> DataSourceRef:
        """The data source (looked up on first use)."""
        if self._target is None:
            self._target = _step(
                "data source lookup",
                "nothing was submitted",
                lambda: resolve_target(self.client, self._target_spec),
            )
        return self._target

    def __repr__(self) -> str:
        shown = self._target.name or self._target.id if self._target else self._target_spec
        return (
            f"UploadedPayload(target={shown!r}, "
            f"parts={len(self.payload.parts)}, uploaded={sorted(self._sessions)})"
        )

    # -- steps -------------------------------------------------------------------------------------
    def _upload_part(self, index: int, part: PayloadPart) -> str:
        if index in self._sessions:
            return self._sessions[index]
        started = time.perf_counter()
        label = f"upload part {index + 1}/{len(self.payload.parts)}"
        with _bar(
            self.progress, total=part.size_bytes, unit="B", unit_scale=True, desc=label
        ) as bar:
            seen = [0]

            def tick(sent: int, total: int) -> None:
                if bar is not None:
                    bar.update(sent - seen[0])
                    seen[0] = sent

            session = self.client.upload(part.path, progress=tick)
        log.info("%s: %d bytes in %.2f s", label, part.size_bytes, time.perf_counter() - started)
        self._sessions[index] = session
        return session

    def _batch_for(self, part: PayloadPart | None, actions: ActionBatch | None) -> ActionBatch:
        if actions is not None:
            return actions
        if part is not None and part.actions is not None:
            return part.actions
        raise ValueError(
            "no actions to apply: pass actions= (only a change set built with key= derives its own)"
        )

    def _request_id(
        self, index: int, batch: ActionBatch, part: PayloadPart | None, given: str | None
    ) -> str:
        if given is not None:
            return given if len(self.payload.parts) <= 1 else f"{given}-part-{index + 1}"
        return self.client.request_id_for(
            self.target, batch, payload_digest=part.content_digest if part else None
        )

    def apply(
        self, actions: Any = None, *, request_id: str | None = None, timeout: float | None = None
    ) -> UpdateResult:
        """Submit the update of every part, in order; returns the result to ``wait()`` on.

        ``actions`` default to the payload's derived actions (a change set). Each part but
        the last is waited on before the next is uploaded, so parts apply in order and a
        failure stops the rest.
        """
        given = ActionBatch.coerce(actions) if actions is not None else None
        if given is not None:
            self.payload.validate(given)
        parts = self.payload.parts
        if not parts:
            if given is None or given.reads_source:
                log.info("empty payload: nothing to update")
                return UpdateResult([], None, done=True)
            # An update that reads nothing from the payload (e.g. delete by constant).
            update = self._submit(0, None, given, request_id)
            return UpdateResult([update], self._finish)
        updates: list[PartUpdate] = []
        for index, part in enumerate(parts):
            batch = self._batch_for(part, given)
            update = self._submit(index, part, batch, request_id)
            updates.append(update)
            if index < len(parts) - 1:
                self._wait_part(update, timeout)
        return UpdateResult(updates, self._finish)

    def _submit(
        self, index: int, part: PayloadPart | None, batch: ActionBatch, given_id: str | None
    ) -> PartUpdate:
        rid = self._request_id(index, batch, part, given_id)
        update = PartUpdate(index, rid, batch)
        record = self.state.load(rid)
        if record is not None and record.job_id:
            # A previous run submitted this very update: wait on its job, do not resubmit.
            log.info("part %d was submitted before (job %s): resuming", index + 1, record.job_id)
            update.job = self.client.job(record.job_id)
            update.resumed = True
            return update
        if part is not None and batch.reads_source:
            started = time.perf_counter()
            update.upload_session_id = _step(
                f"upload of part {index + 1}",
                "this part was not submitted",
                lambda: self._upload_part(index, part),
            )
            update.seconds["upload"] = time.perf_counter() - started
        record = PartRecord(
            rid,
            self.target.id,
            self.target.connection_id,
            index,
            part.content_digest if part else "",
            update.upload_session_id,
        )
        self.state.save(record)
        started = time.perf_counter()
        update.job = _step(
            f"update request of part {index + 1}",
            f"the update may or may not have been submitted (RequestID {rid}); running the "
            "same job again is safe: the server ignores a repeated RequestID for 24 hours",
            lambda: self.client.update_data(
                self.target, batch, upload_session_id=update.upload_session_id, request_id=rid
            ),
        )
        update.seconds["submit"] = time.perf_counter() - started
        record.job_id = update.job.id
        self.state.save(record)
        log.info(
            "part %d/%d submitted as job %s",
            index + 1,
            max(1, len(self.payload.parts)),
            update.job.id,
        )
        return update

    def _wait_part(self, update: PartUpdate, timeout: float | None) -> None:
        assert update.job is not None
        started = time.perf_counter()
        with _bar(
            self.progress, total=100, unit="%", desc=f"job for part {update.part + 1}"
        ) as bar:

            def on_poll(job: Job) -> None:
                if bar is not None:
                    done = int(float(job.progress or 0))
                    bar.update(max(0, done - bar.n))

            try:
                update.job.wait(timeout=timeout, on_poll=on_poll)
            except JobFailedError:
                # A failed job stays failed under its RequestID: forget it, so that a fixed
                # re-run is not held to the old failure.
                self.state.remove(update.request_id)
                raise
        update.seconds["wait"] = time.perf_counter() - started
        self.state.remove(update.request_id)

    def _finish(self, result: UpdateResult, timeout: float | None) -> None:
        try:
            for update in result.parts:
                if update.job is not None and "wait" not in update.seconds:
                    self._wait_part(update, timeout)
        finally:
            if not self.payload.keep_files:
                self.payload.cleanup()


def upload_payload(
    payload: Payload,
    target: DataSourceRef | str | None = None,
    *,
    client: TableauClient | None = None,
    progress: bool | None = None,
    state_dir: str | os.PathLike[str] | None = None,
) -> UploadedPayload:
    """:meth:`Payload.upload`: bind the payload to its target (no request is sent yet)."""
    if payload.parts and any(not p.path.exists() for p in payload.parts):
        raise PayloadError("the payload's files were already removed (cleanup() ran)")
    if client is None:
        client = TableauClient.from_env()
    if target is None and not os.environ.get("TABLEAU_DATASOURCE"):
        raise ConfigurationError(
            "no target data source: pass one to upload() or set TABLEAU_DATASOURCE"
        )
    return UploadedPayload(payload, client, target, progress=progress, state=StateStore(state_dir))

"""Asynchronous server jobs: the model, polling with a deadline, cancel.

Polling: the first poll at once, then waits of 0.05 s doubling up to 30 s (see
:class:`PollPolicy`), until the job finishes or the deadline passes. ``sleep`` and
``clock`` are injectable so that tests assert the waits instead of sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from ..values.errors import (
    InvalidArgumentError,
    JobCancelledError,
    JobFailedError,
    JobOutcomeUnknownError,
    JobTimeoutError,
    TransportError,
)
from ..values.policies import JobTimes, PollPolicy
from ..values.redaction import get_logger, scrub_value
from .transport import child

if TYPE_CHECKING:
    import requests

__all__ = ["Job", "JobSource", "PollPolicy", "get_job", "learned_time"]

log = get_logger("tabhyper_update")

#: Only 0 is success; any other code than these three is an unknown outcome (an error).
FINISH_SUCCESS = 0
FINISH_FAILED = 1
FINISH_CANCELLED = 2


class JobSource(Protocol):
    """What a job needs of the session it came from: to be fetched again or cancelled, and
    the policy, clock and history that pace its polling (the REST session is one)."""

    job_times: JobTimes

    @property
    def poll(self) -> PollPolicy: ...

    @property
    def sleep(self) -> Callable[[float], None]: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    def request(
        self, method: str, rest: str, *, retry: bool, site_scoped: bool = True, **kwargs: Any
    ) -> tuple[requests.Response, dict[str, Any] | None]: ...

    def job(self, job_id: str) -> Job: ...

    def cancel_job(self, job_id: str) -> None: ...


class Job(BaseModel):
    """A server job as last seen. Unknown server fields are kept (``model_extra``)."""

    model_config = ConfigDict(
        extra="allow", populate_by_name=True, validate_by_alias=True, validate_by_name=True
    )

    id: str
    mode: str | None = None
    type: str | None = None
    progress: str | None = None
    created_at: str | None = Field(default=None, alias="createdAt")
    started_at: str | None = Field(default=None, alias="startedAt")
    completed_at: str | None = Field(default=None, alias="completedAt")
    finish_code: int | None = Field(default=None, alias="finishCode")
    update_uploaded_file_job: dict[str, Any] | None = Field(
        default=None, alias="updateUploadedFileJob"
    )
    status_notes: Any = Field(default=None, alias="statusNotes")

    @field_validator(
        "id", "mode", "type", "progress", "created_at", "started_at", "completed_at", mode="before"
    )
    @classmethod
    def _text(cls, value: Any) -> Any:
        """A text field as text (a number the server sent as one, too); not a bool or an
        object."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError(f"{value!r} is not text")
        return str(value)

    @field_validator("finish_code", mode="before")
    @classmethod
    def _finish_code(cls, value: Any) -> int | None:
        """A finish code as a number (text of one too); empty or missing: not finished."""
        if value is None or value == "":
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        raise ValueError(f"{value!r} is not a number")

    _client: JobSource | None = PrivateAttr(default=None)
    _answered_at: float | None = PrivateAttr(default=None)

    @property
    def answered_at(self) -> float | None:
        """When the server answered the request that brought this job (its ``Date``
        header, whole epoch seconds on the server's clock), where it said."""
        return self._answered_at

    def answered(self, date_header: str | None) -> Job:
        """This job, noted as answered at ``date_header`` (an HTTP date; ignored when
        missing or unreadable)."""
        try:
            when = parsedate_to_datetime(date_header) if date_header else None
        except (TypeError, ValueError):
            when = None
        if when is not None and when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)  # HTTP dates are GMT
        self._answered_at = None if when is None else when.timestamp()
        return self

    @classmethod
    def from_response(cls, body: dict[str, Any] | None, client: JobSource | None) -> Job:
        raw = child(body, "job")
        if not isinstance(raw, dict):
            raise TransportError("the server answered without a job")
        # The server's words (notes above all) are scrubbed of the client's secrets before
        # they are kept: a job's repr and errors show them.
        data = scrub_value(dict(raw))
        if not data.get("id"):
            raise TransportError("the server answered without a job id")
        try:
            job = cls.model_validate(data)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(map(str, first["loc"]))
            raise TransportError(
                f"the server's job answer is malformed: {where}: {first['msg']}"
            ) from None
        job._client = client
        return job

    # -- state -------------------------------------------------------------------------------
    @property
    def is_done(self) -> bool:
        return self.finish_code is not None

    @property
    def succeeded(self) -> bool:
        return self.finish_code == FINISH_SUCCESS

    @property
    def datasource_id(self) -> str | None:
        """The data source the server says this update job belongs to, when it says."""
        details = self.update_uploaded_file_job or {}
        datasource = details.get("datasource")
        if isinstance(datasource, dict) and datasource.get("id"):
            return str(datasource["id"])
        return None

    @property
    def notes(self) -> str | None:
        """The server's notes on the job (the reason of a failure)."""
        candidates: list[Any] = []
        if self.update_uploaded_file_job:
            candidates.append(self.update_uploaded_file_job.get("notes"))
        candidates.append(self.status_notes)
        for value in candidates:
            text = _notes_text(value)
            if text:
                return text
        return None

    def _require_client(self) -> JobSource:
        if self._client is None:
            raise InvalidArgumentError("this Job is not bound to a client; use client.job(id)")
        return self._client

    def _update_from(self, other: Job) -> None:
        for name in type(self).model_fields:
            setattr(self, name, getattr(other, name))
        if other.model_extra is not None and self.model_extra is not None:
            self.model_extra.clear()
            self.model_extra.update(other.model_extra)

    # -- actions -----------------------------------------------------------------------------
    def refresh(self) -> Job:
        """Fetch the job again; returns ``self``, updated."""
        self._update_from(self._require_client().job(self.id))
        return self

    def cancel(self) -> Job:
        """Ask the server to cancel the job (update jobs may not be cancellable)."""
        self._require_client().cancel_job(self.id)
        return self.refresh()

    def raise_for_status(self) -> Job:
        """Raise when the job failed, was cancelled or finished with an unknown code; return
        ``self`` otherwise (not finished yet, or succeeded)."""
        if self.finish_code == FINISH_FAILED:
            raise JobFailedError(self.id, self.notes)
        if self.finish_code == FINISH_CANCELLED:
            raise JobCancelledError(self.id)
        if self.finish_code is not None and self.finish_code != FINISH_SUCCESS:
            raise JobOutcomeUnknownError(self.id, self.finish_code)
        return self

    def server_seconds(self) -> float | None:
        """The job's time by the server's clock (creation to end, whole seconds), if it
        says."""
        created, completed = _moment(self.created_at), _moment(self.completed_at)
        if created is None or completed is None:
            return None
        return (completed - created).total_seconds()

    def wait(
        self,
        timeout: float | None = None,
        *,
        poll: PollPolicy | None = None,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] | None = None,
        on_poll: Callable[[Job], None] | None = None,
        learn_as: str | None = None,
    ) -> Job:
        """Poll until the job finishes; raise if it failed, was cancelled or took too long.

        ``learn_as``: the key (an update's data source id) of jobs like this one. The wait
        polls near the time the last of them took to be seen finished
        (:meth:`PollPolicy.expecting`, from ``client.job_times``), and a success adds this
        one's time. ``None``: the policy's doubling waits.

        >>> job.wait(timeout=600)  # doctest: +SKIP
        """
        client = self._require_client()
        policy = poll or client.poll
        sleep = sleep or client.sleep
        clock = clock or client.clock
        deadline_s = policy.timeout if timeout is None else timeout
        start = clock()
        times = client.job_times
        expected = None if learn_as is None else times.expected(learn_as)
        next_wait = policy.expecting(expected)
        if policy.usable(expected):
            # A job like the last ones: the first poll just before their usual time.
            sleep(min(next_wait(), deadline_s))

        #: When a poll last saw the job unfinished (seconds from the start).
        unfinished: float | None = None

        def succeeded() -> Job:
            done = self.raise_for_status()
            if learn_as is not None:
                took = learned_time(unfinished, clock() - start, self.server_seconds())
                times.note(learn_as, took)
            return done

        while True:
            self.refresh()
            if on_poll is not None:
                on_poll(self)
            if self.is_done:
                log.info("job %s finished with code %s", self.id, self.finish_code)
                return succeeded()
            waited = unfinished = clock() - start
            pause = next_wait()
            if waited + pause > deadline_s:
                if self._done_after(deadline_s - waited, sleep):
                    return succeeded()
                raise JobTimeoutError(self.id, clock() - start)
            log.debug(
                "job %s not finished (progress %s); next poll in %.1f s",
                self.id,
                self.progress,
                pause,
            )
            sleep(pause)

    def _done_after(self, remaining: float, sleep: Callable[[float], None]) -> bool:
        """Whether the job is done by a last poll at the deadline, ``remaining`` seconds on
        (none where it has passed)."""
        if remaining <= 0:
            return False
        sleep(remaining)
        self.refresh()
        return self.is_done


def learned_time(unfinished: float | None, seen: float, server: float | None = None) -> float:
    """What a job's time is taken to be, so that the next polls neither drift late nor stay
    early: the middle of what is known of its end, between the last poll that saw it
    unfinished and the one that saw it finished, narrowed by the server's own time
    (``server``: creation to end in whole seconds, so within a second); with no poll that
    saw it unfinished, the time it was seen finished (no more than the server's time)."""
    if unfinished is None:
        return seen if server is None else max(0.0, min(seen, server + 1.0))
    low, high = unfinished, seen
    if server is not None and max(low, server - 1.0) <= min(high, server + 1.0):
        low, high = max(low, server - 1.0), min(high, server + 1.0)
    return (low + high) / 2


def _moment(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def get_job(client: JobSource, job_id: str) -> Job:
    """The job ``job_id`` as the server sees it now."""
    _, body = client.request("GET", f"jobs/{job_id}", retry=True)
    return Job.from_response(body, client)


def _notes_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, dict):
        return _notes_text(value.get("value") or value.get("notes") or value.get("statusNote"))
    if isinstance(value, list):
        parts = [t for t in (_notes_text(v) for v in value) if t]
        return "; ".join(parts) or None
    return str(value)

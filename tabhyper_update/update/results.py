"""What an update did, part by part: :class:`UpdateResult` (returned by ``apply()`` and
``client.update_datasource``) and its :class:`PartUpdate` rows."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ..local.telemetry import record
from ..readback.drift import DriftReport
from ..rest.jobs import Job
from ..values.actions import ActionBatch, bookkeeping_role
from ..values.errors import InvalidArgumentError
from ..values.parts import PayloadPart
from ..values.quarantine import QuarantineReport
from ..values.redaction import get_logger
from ..values.wording import counted

__all__ = [
    "PartUpdate",
    "PlannedPart",
    "UpdatePlan",
    "UpdateResult",
    "metrics_labels",
    "report_metrics",
]


@dataclass
class PartUpdate:
    """One part's update: its RequestID, job, and how it came about.

    ``deduplicated``: nothing new was applied for this part because it had been applied (or
    submitted) before under the same identity: either this SDK's record showed it
    (``skipped``: no request was sent) or the server answered with a job that existed before
    the request (``job`` is that original job). None: the server answered with a job made
    a little before its answer, and whether by this request or by an earlier one with the
    same RequestID cannot be told (job times have whole seconds; nothing is applied twice
    either way). ``resumed``: a job submitted by an earlier,
    interrupted run was followed to its end. ``attempt`` counts submissions after failed or
    cancelled jobs (0 for the first).
    """

    part: int
    request_id: str
    actions: ActionBatch = field(repr=False)
    upload_session_id: str | None = None
    job: Job | None = None
    resumed: bool = False
    deduplicated: bool | None = False
    skipped: bool = False
    attempt: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    #: Rows per payload table this part carries, and the size of its file.
    rows: dict[str, int] = field(default_factory=dict)
    size_bytes: int = 0

    #: The job an earlier run applied this part with, as its record says (``skipped``).
    recorded_job_id: str | None = field(default=None, repr=False)
    #: Whether this part is applied (by this run, or before it).
    applied: bool = False

    @property
    def job_id(self) -> str | None:
        return self.job.id if self.job is not None else self.recorded_job_id


@dataclass
class PlannedPart:
    """One part of an update not sent (``apply --dry-run``): its file, bytes, rows per
    payload table and the actions its update would carry."""

    part: int
    file: str | None
    size_bytes: int
    rows: dict[str, int]
    actions: ActionBatch

    @classmethod
    def of(cls, number: int, part: PayloadPart | None, actions: ActionBatch) -> PlannedPart:
        """Part ``number`` of a plan: payload ``part``'s file (none: actions only) with
        ``actions``."""
        if part is None:
            return cls(number, None, 0, {}, actions)
        rows = {table: info.row_count for table, info in part.tables.items()}
        return cls(number, part.path.name, part.size_bytes, rows, actions)

    def as_dict(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "file": self.file,
            "bytes": self.size_bytes,
            "rows": self.rows,
            "actions": json.loads(self.actions.to_json()),
        }


@dataclass
class UpdatePlan:
    """What an update would send, checked as :meth:`BoundPayload.apply` checks it, nothing
    sent that changes data (:meth:`BoundPayload.plan`, ``apply --dry-run``)."""

    datasource: str
    datasource_id: str
    parts: list[PlannedPart]
    #: Where the data source's columns the payload was checked against came from (``None``:
    #: nothing said, so the server's job is the check).
    schema_checked: str | None
    #: Target tables the dry run could not find by name (Tableau lists a data source's
    #: columns, not its tables, unless the SDK published it): the server's job checks them.
    tables_unconfirmed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "datasource": self.datasource,
            "datasource_id": self.datasource_id,
            "schema_checked": self.schema_checked,
            "tables_unconfirmed": list(self.tables_unconfirmed),
            "parts": [p.as_dict() for p in self.parts],
        }

    def __str__(self) -> str:
        if not self.parts:
            return f"nothing to update on data source {self.datasource!r}: nothing would be sent"
        lines = [
            f"dry run: data source {self.datasource!r} ({self.datasource_id}); "
            + (
                f"the payload's columns fit ({self.schema_checked})"
                if self.schema_checked
                else "its columns are not known here: the server's job checks them"
            )
        ]
        if self.tables_unconfirmed:
            shown = ", ".join(map(repr, self.tables_unconfirmed))
            lines.append(
                f"table(s) {shown} not confirmed: Tableau lists the data source's columns, "
                "not its tables, so only the server's job can refuse a table it lacks"
            )
        for p in self.parts:
            rows = ", ".join(f"{t} {counted(n, 'row')}" for t, n in p.rows.items()) or "no payload"
            lines.append(f"part {p.part}: {p.file or '-'} ({p.size_bytes:,} bytes; {rows})")
            for action in p.actions.actions:
                lines.append("  " + action.model_dump_json(by_alias=True, exclude_none=True))
        lines.append("nothing was sent")
        return "\n".join(lines)


#: How a part of a run ended, as its summary says it, by the first of its fields that
#: holds the value (a part none names was applied, or submitted where the run did not wait).
_PART_STATES = (
    ("skipped", True, "skipped: applied before"),
    ("deduplicated", True, "deduplicated"),
    (
        "deduplicated",
        None,
        "applied by this request or an earlier one with its RequestID (cannot tell)",
    ),
    ("resumed", True, "resumed"),
)


@dataclass
class UpdateResult:
    """The updates of a payload, part by part. After ``apply()`` (which waits by default)
    every part is applied; after ``apply(wait=False)`` call :meth:`wait`."""

    parts: list[PartUpdate]
    done: bool = False
    #: What reading the update back found (``apply(verify=...)`` or :meth:`verify`).
    readback: DriftReport | None = None
    #: Waits for the parts' jobs still running and ends the run (given by the chain that
    #: made this; it reads nothing of the result).
    waiter: Callable[[float | None], None] | None = field(default=None, repr=False)
    #: Reads the update back (given when ``apply(verify=...)`` read what to expect).
    verifier: Callable[..., DriftReport] | None = field(default=None, repr=False)
    #: The data source updated (its name, else LUID), and when the update began and ended
    #: (epoch seconds; ended once every part is applied).
    datasource: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    #: Where in the source the update's changes end (a stream's batch, a table version) and
    #: when the source committed them (epoch seconds), when the caller or the sink says.
    position: Any = None
    committed_at: float | None = None
    #: Seconds the payload took to build, when known.
    build_seconds: float | None = None
    #: The source's schema had changed and the data source was republished from a snapshot
    #: (``on_schema_change=Republish(...)``) instead of updated.
    republished: bool = False
    #: The changes the build set aside (``on_bad_rows="quarantine"``): their keys keep the
    #: value they had in the data source.
    quarantined: QuarantineReport | None = None

    def metrics(self) -> dict[str, Any]:
        """The update's figures as plain values, for a scheduler or a metrics system: rows
        by action (``insert``, ``update``, ``delete``, ``replace``, ``upsert``; the SDK's own
        position bookkeeping aside), bytes, parts, seconds per step (summed over the parts),
        job ids and the server's seconds, the source's position and commit time, and the lag
        from that commit to the data being in Tableau."""
        return {
            "datasource": self.datasource,
            "done": self.done,
            "parts": len(self.parts),
            "applied_parts": len(self.applied_parts),
            "deduplicated": self.deduplicated,
            "republished": self.republished,
            "rows": self._rows_by_action(),
            # What the server received from this run: the parts it uploaded.
            "bytes": sum(p.size_bytes for p in self.parts if "upload" in p.seconds),
            "seconds": self._seconds_by_step(),
            "total_seconds": _span(self.started_at, self.finished_at),
            "jobs": [p.job_id for p in self.parts if p.job_id],
            "server_seconds": self._server_seconds(),
            "position": self.position,
            "committed_at": self.committed_at,
            "lag_seconds": _span(self.committed_at, self.finished_at),
            "readback": None if self.readback is None else dict(self.readback.cost),
            "quarantined": None if self.quarantined is None else self.quarantined.as_dict(),
        }

    def _rows_by_action(self) -> dict[str, int]:
        """Rows by action over the parts this run applied (a part applied before, or
        skipped, counted by the run that applied it), the SDK's bookkeeping aside."""
        rows: dict[str, int] = {}
        for p in self.parts:
            if p.deduplicated or p.skipped:
                continue
            for action in p.actions.actions:
                source = getattr(action, "source_table", None)
                if source is None or bookkeeping_role(action) is not None:
                    continue
                name = type(action).__name__.lower()
                rows[name] = rows.get(name, 0) + p.rows.get(source, 0)
        return rows

    def _seconds_by_step(self) -> dict[str, float]:
        """Seconds per step, summed over the parts, and the build's."""
        steps: dict[str, float] = {}
        for p in self.parts:
            for step, seconds in p.seconds.items():
                steps[step] = round(steps.get(step, 0.0) + seconds, 3)
        if self.build_seconds is not None:
            steps["build"] = round(self.build_seconds, 3)
        return steps

    @property
    def jobs(self) -> list[Job]:
        return [p.job for p in self.parts if p.job is not None]

    @property
    def applied_parts(self) -> list[int]:
        """The parts applied so far (numbered from 1): all of them once :meth:`wait`
        returned; after an error, the ones before the part that failed."""
        return [p.part + 1 for p in self.parts if p.applied]

    @property
    def empty(self) -> bool:
        """True when there was nothing to update (an empty change set, or a payload without
        rows for actions that read it): no request was sent."""
        return not self.parts and not self.republished

    @property
    def deduplicated(self) -> bool | None:
        """True when no part applied anything new: the whole update had been applied (or
        submitted) before under the same identity. None when no part is known to be new but
        for some the server's answer cannot tell (:attr:`PartUpdate.deduplicated`)."""
        found = [p.deduplicated for p in self.parts]
        if not found or False in found:
            return False
        return None if None in found else True

    def summary(self) -> list[dict[str, Any]]:
        """One plain dict per part, for a job's log: rows per table, bytes, RequestID, job,
        how it came about, seconds per step."""
        return [
            {
                "part": p.part + 1,
                "rows": dict(p.rows),
                "size_bytes": p.size_bytes,
                "request_id": p.request_id,
                "job_id": p.job_id,
                "succeeded": p.job.succeeded if p.job is not None and p.job.is_done else None,
                "attempt": p.attempt,
                "deduplicated": p.deduplicated,
                "skipped": p.skipped,
                "resumed": p.resumed,
                "seconds": {k: round(v, 3) for k, v in p.seconds.items()},
            }
            for p in self.parts
        ]

    def _server_seconds(self) -> float | None:
        """The seconds the server says its finished jobs took, summed (none where no job
        says)."""
        said = [s for j in self.jobs if j.is_done and (s := j.server_seconds()) is not None]
        return sum(said) if said else None

    def __str__(self) -> str:
        if self.republished:
            return (
                f"data source {self.datasource!r} republished from the snapshot (the source's "
                "schema changed); this update was not sent: the snapshot holds its changes"
            )
        if not self.parts:
            return "nothing to update: the payload holds no rows"
        done = "applied" if self.done else "submitted"
        return "\n".join(_part_line(p, done) for p in self.summary())

    def wait(self, timeout: float | None = None) -> UpdateResult:
        """Wait for every part's job; raise :class:`JobFailedError` (or cancelled / timed
        out) on the first that did not succeed.

        The run ends here, whatever its jobs did: the payload's files are removed (unless
        it was built with ``keep_files=True``), and the run's record leaves the state store
        when every part was applied, or none was. A run that applied some parts keeps its
        record, so the next run submits only what is left."""
        if not self.done and self.waiter is not None:
            self.waiter(timeout)
            self.finished_at, self.done = time.time(), True
            report_metrics(self)
        self.done = True
        return self

    def brief(self) -> str:
        """One line: how many parts, and their jobs."""
        jobs = ", ".join(str(p.job_id) for p in self.parts)
        return f"{len(self.parts)} part(s), job(s) {jobs}"

    def verify(self, **options: Any) -> DriftReport:
        """Read the update back (after waiting for it): every upserted key once with the
        payload's values, every deleted key gone. Returns the report (also kept as
        ``readback``); drift is in the report, not raised. Needs ``apply(verify=...)``,
        which read what to expect before the payload's files were removed. ``options``:
        ``keys_per_request``, ``tolerance``."""
        if self.verifier is None:
            raise InvalidArgumentError(
                "this update was applied without verify=: pass verify=True (or a sample "
                "size) to apply() to read it back, or reconcile the data source",
                argument="verify",
            )
        self.wait()
        self.readback = self.verifier(**options)
        return self.readback


#: One JSON line per finished update at INFO (silent unless this logger is set to INFO).
metrics_log = get_logger("tabhyper_update.metrics")
#: What the caller adds to each update's line while it runs (a sink: its id and batch).
_line_labels: ContextVar[dict[str, Any] | None] = ContextVar("line_labels", default=None)


def _span(start: float | None, end: float | None) -> float | None:
    """Seconds from ``start`` to ``end`` (rounded to the millisecond), where both are known."""
    return None if start is None or end is None else round(end - start, 3)


@contextlib.contextmanager
def metrics_labels(**labels: Any) -> Iterator[dict[str, Any]]:
    """Labels added to the metrics line of every update finished inside the block (the
    dict yielded takes more, such as an id known only later)."""
    held = dict(labels)
    token = _line_labels.set(held)
    try:
        yield held
    finally:
        _line_labels.reset(token)


def report_metrics(result: UpdateResult) -> None:
    """A finished update's figures: one structured log line on ``tabhyper_update.metrics``
    (when that logger is set to INFO) and OpenTelemetry metrics (when installed)."""
    figures = result.metrics()
    if metrics_log.isEnabledFor(logging.INFO):
        labels = _line_labels.get() or {}
        line = {"event": "update", **labels, **figures}
        metrics_log.info("%s", json.dumps(line, default=str))
    record(
        rows=figures["rows"],
        size_bytes=figures["bytes"],
        seconds=figures["total_seconds"] or 0.0,
        lag=figures["lag_seconds"],
        datasource=str(result.datasource or ""),
        deduplicated=result.deduplicated,
        skipped=bool(result.parts) and all(p.skipped for p in result.parts),
        quarantined=0 if result.quarantined is None else result.quarantined.rows,
    )


def _part_line(p: Mapping[str, Any], done: str) -> str:
    """One part of an update's summary as a line (``done``: how a part whose job is not
    deduplicated, resumed or skipped was applied)."""
    how = next((said for key, value, said in _PART_STATES if p[key] is value), done)
    steps = ", ".join(f"{k} {v:.2f} s" for k, v in p["seconds"].items())
    rows = ", ".join(f"{n} {counted(c, 'row')}" for n, c in p["rows"].items())
    return (
        f"part {p['part']}: job {p['job_id']} ({how}), RequestID {p['request_id']}"
        + (f"; {rows}, {p['size_bytes']} bytes" if rows else "")
        + (f"; {steps}" if steps else "")
    )

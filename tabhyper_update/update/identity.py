"""The identity of an update: which RequestID it carries, and when a repeat is the same update.

The rule: **an update's identity is the position of the change in its source, never its
content alone.** Replaying the same position is deduplicated; anything new is applied.

- A change set (``build_payload(..., key=, op_column=, order_by=)``): the payload digest
  covers each change's op and ordering values (commit versions, LSNs, sequence numbers), so
  the same slice of a feed rebuilt after a crash has the same identity, and a later slice
  with equal rows does not. Kind ``"position"``.
- ``request_id=``: the caller binds the identity to a position of its own (say the date
  partition a nightly job publishes). Kind ``"position"``. The RequestID sent is the
  caller's id scoped to the data source (``nightly-1@<12 hex digits>``): the server runs a
  RequestID once whatever the data source, so the same id on another data source is
  another update.
- Anything else (plain payloads, batches without a payload): each new run is a new update,
  with a fresh random identity. Only resuming an unfinished run reuses it, through its
  record. Kind ``"run"``.

A payload in several parts gives each part its own RequestID derived from the identity and
the part's bucket range and digest; a failed or cancelled part applied nothing (batches are
atomic) and is submitted again as a new attempt, with a RequestID derived from the attempt
number.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone

from ..rest.jobs import Job
from ..rest.refs import DataSourceRef
from ..values.actions import ActionBatch
from ..values.errors import UpdateProgress, UpdateStateError
from ..values.parts import PayloadLike, PayloadPart
from ..values.redaction import get_logger
from .state import PartState, RecordKind, StateStore, UpdateRecord

__all__ = [
    "CLOCK_SKEW_SECONDS",
    "REQUEST_ID_NAMESPACE",
    "new_record",
    "next_attempt",
    "open_record",
    "part_request_id",
    "predates_request",
    "scoped_request_id",
]

log = get_logger("tabhyper_update")

#: Namespace of derived RequestIDs (a fixed, random UUID of this project).
REQUEST_ID_NAMESPACE = uuid.UUID("0f9b1c3e-6a2d-4e8f-9b1d-3c7a5e2f8d41")
#: How far the server's clock may be behind ours before a job it says it created before we
#: sent the request is taken for one created by an earlier request (a deduplicated answer).
#: Job times have whole seconds.
CLOCK_SKEW_SECONDS = 5.0


def _sha256(*fields: str) -> str:
    return hashlib.sha256("\x1f".join(fields).encode("utf-8", "surrogatepass")).hexdigest()


def _batches_text(batches: Sequence[ActionBatch]) -> str:
    return "\x1e".join(b.canonical_json() for b in batches)


def _key_and_identity(
    kind: RecordKind,
    target: DataSourceRef,
    *,
    request_id: str | None,
    payload_digest: str,
    batches: Sequence[ActionBatch],
) -> tuple[str, str]:
    """The name of an update's record (the same for a re-run of the same update), and the
    identity its part RequestIDs derive from (see the module docstring)."""
    where = (target.id, target.connection_id or "")
    if request_id is not None:
        return _sha256("request-id", *where, request_id), scoped_request_id(request_id, target)
    content = (payload_digest, _batches_text(batches))
    key = _sha256(kind, *where, *content)
    if kind == "position":
        name = "\x1f".join(("change-set", *where, *content))
        return key, str(uuid.uuid5(REQUEST_ID_NAMESPACE, name))
    return key, str(uuid.uuid4())


def scoped_request_id(request_id: str, target: DataSourceRef) -> str:
    """The RequestID of the caller's ``request_id`` on ``target`` (and its connection): the
    server deduplicates RequestIDs across data sources, so each is bound to its target."""
    scope = _sha256("target", target.id.lower(), target.connection_id or "")[:12]
    return f"{request_id}@{scope}"


def part_request_id(
    identity: str,
    *,
    explicit: bool,
    index: int,
    parts: int,
    buckets: tuple[int, int] | None,
    digest: str,
    attempt: int,
) -> str:
    """The RequestID of one part's attempt."""
    if explicit:
        rid = identity if parts == 1 else f"{identity}-part-{index + 1}"
        if "#" in digest:  # a sub-part of a part the server refused as too large
            rid += "-split-" + "-".join(s.replace("/", "of") for s in digest.split("#")[1:])
        return rid if attempt == 0 else f"{rid}-attempt-{attempt + 1}"
    if parts == 1 and attempt == 0:
        return identity
    span = "" if buckets is None else f"{buckets[0]}-{buckets[1]}"
    name = "\x1f".join([identity, "part", str(index), span, digest, "attempt", str(attempt)])
    return str(uuid.uuid5(REQUEST_ID_NAMESPACE, name))


def new_record(
    kind: RecordKind,
    target: DataSourceRef,
    *,
    request_id: str | None,
    payload_digest: str,
    batches: Sequence[ActionBatch],
    plan: Sequence[tuple[tuple[int, int] | None, str]],
    label: str,
) -> UpdateRecord:
    """A fresh record for an update whose parts are ``plan`` (buckets, digest)."""
    key, identity = _key_and_identity(
        kind, target, request_id=request_id, payload_digest=payload_digest, batches=batches
    )
    record = UpdateRecord(
        key=key,
        kind=kind,
        identity=identity,
        label=label,
        datasource_id=target.id,
        connection_id=target.connection_id,
        parts=[
            PartState(index=i, buckets=buckets, digest=digest, request_id="")
            for i, (buckets, digest) in enumerate(plan)
        ],
        explicit_id=request_id is not None,
    )
    for part in record.parts:
        part.request_id = _part_request_id(record, part)
    return record


def next_attempt(record: UpdateRecord, part: PartState) -> None:
    """Prepare ``part`` to be submitted again (its last job failed or was cancelled)."""
    part.attempt += 1
    part.status = "pending"
    part.job_id = None
    part.upload_session_id = None
    part.sent_at = None
    part.request_id = _part_request_id(record, part)


def planned(record: UpdateRecord) -> list[tuple[tuple[int, int] | None, str]]:
    """The parts ``record`` was made for (buckets, digest), its sub-parts (a part split after
    the server refused it as too large: ``digest#j/k``) counted as the part they split."""
    plan: list[tuple[tuple[int, int] | None, str]] = []
    for part in record.parts:
        entry = (part.buckets, part.digest.split("#", 1)[0])
        if "#" not in part.digest or not plan or plan[-1] != entry:
            plan.append(entry)
    return plan


def split_in_record(record: UpdateRecord, index: int, k: int) -> None:
    """Replace part ``index`` (not applied) with ``k`` sub-parts, each with a RequestID of its
    own; the parts after it, never sent, are renumbered and named anew."""
    gone = record.parts[index]
    record.parts[index : index + 1] = [
        PartState(index=0, buckets=gone.buckets, digest=f"{gone.digest}#{j + 1}/{k}", request_id="")
        for j in range(k)
    ]
    for i, part in enumerate(record.parts):
        part.index = i
        if i >= index and part.status == "pending" and not part.jobs_seen:
            part.request_id = _part_request_id(record, part)


def _part_request_id(record: UpdateRecord, part: PartState) -> str:
    return part_request_id(
        record.identity,
        explicit=record.explicit_id,
        index=part.index,
        parts=len(record.parts),
        buckets=part.buckets,
        digest=part.digest,
        attempt=part.attempt,
    )


def _instant(text: str | None) -> float | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def predates_request(job: Job, sent_at: float, exchange_seconds: float | None) -> bool | None:
    """Whether the job a request was answered with existed before the request: True when
    it certainly did (a repeated RequestID's original job), False when it was made by this
    request as far as anything can tell, None when it cannot be told.

    ``sent_at``: when the request was first sent (our clock); ``exchange_seconds``: how long
    the exchange took when it was the request's first (None after an earlier run sent it:
    the job may be that send's). Two clocks tell it. Ours against the job's ``createdAt`` (the
    server's, in whole seconds): older than the first send by more than the skew allowed.
    The server's own against itself: its answer's ``Date`` against ``createdAt`` (both
    whole seconds), where the job is older than its answer by more than the exchange took,
    it was there before the request arrived; older by more than a second but within the
    exchange (a slow answer, or a retried one) cannot be told. A job made a second or less
    before the request cannot be told from one made by it and counts as made by it."""
    created = _instant(job.created_at)
    if created is None:
        return False
    if created < sent_at - 1.0 - CLOCK_SKEW_SECONDS:
        return True
    answered = job.answered_at
    if answered is None or exchange_seconds is None:
        return False
    # Whole seconds: the job is older than its answer by more than this.
    older_by = math.floor(answered) - math.floor(created) - 1
    if older_by <= 0:
        return False
    return True if older_by >= exchange_seconds else None


def open_record(
    state: StateStore,
    payload: PayloadLike,
    target: DataSourceRef,
    units: Sequence[tuple[PayloadPart | None, ActionBatch]],
    request_id: str | None,
    position: object = None,
) -> UpdateRecord:
    """The record of the update of ``payload`` (split into ``units``) on ``target``: the one
    an interrupted run left, or a new one (saved). ``position`` (what ``status`` shows beside
    the data source's name) goes into the record's first write; a record found is written
    again only when it differs there."""
    fresh, plan = _fresh_record(payload, target, units, request_id, position)
    state.sweep_if_due()
    record = state.load(fresh.key)
    if record is not None and planned(record) == plan:
        return _resumed(state, record, fresh, fresh.label)
    if record is None or not record.started:
        state.save(fresh)
        return fresh
    return _planned_otherwise(state, record, fresh.label, len(plan))


def _fresh_record(
    payload: PayloadLike,
    target: DataSourceRef,
    units: Sequence[tuple[PayloadPart | None, ActionBatch]],
    request_id: str | None,
    position: object,
) -> tuple[UpdateRecord, list[tuple[tuple[int, int] | None, str]]]:
    """A new record of the update (not saved), and its plan: each part's buckets and
    content digest. ``position`` kept as it is where JSON holds it, else as its text."""
    try:
        json.dumps(position)
    except (TypeError, ValueError):
        position = str(position)
    kind: RecordKind = "position" if (request_id is not None or payload.is_cdc) else "run"
    digest = payload.digest if payload.parts else ""
    plan: list[tuple[tuple[int, int] | None, str]] = [
        (part.buckets, part.content_digest) if part is not None else (None, "") for part, _ in units
    ]
    fresh = new_record(
        kind,
        target,
        request_id=request_id,
        payload_digest=digest,
        batches=[batch for _, batch in units],
        plan=plan,
        label=_label(kind, request_id, digest),
    )
    fresh.datasource_name, fresh.position = target.name, position
    report = getattr(payload, "quarantined", None)
    fresh.quarantined = None if report is None else report.as_dict()
    return fresh, plan


def _resumed(
    state: StateStore, record: UpdateRecord, fresh: UpdateRecord, label: str
) -> UpdateRecord:
    """The record an earlier run of the same plan left, with what ``status`` shows of it
    (name, position, quarantine) taken from this run's ``fresh`` one where they differ."""
    seen = (fresh.datasource_name, fresh.position, fresh.quarantined)
    if (record.datasource_name, record.position, record.quarantined) != seen:
        record.datasource_name, record.position, record.quarantined = seen
        state.save(record)
    if record.finished and record.kind == "run":
        log.info("%s finished before its record was removed: nothing to resend", label)
    elif record.started:
        log.info("%s was interrupted: resuming it", label)
    return record


def _label(kind: RecordKind, request_id: str | None, digest: str) -> str:
    """How the logs and errors name an update: by its request id, its change set or its
    payload."""
    if request_id is not None:
        return f"request id {request_id!r}"
    if kind == "position":
        return f"change set {digest[:12]}"
    return f"run of payload {digest[:12]}" if digest else "run of an update"


def _planned_otherwise(
    state: StateStore, record: UpdateRecord, label: str, parts: int
) -> UpdateRecord:
    """A started update found planned in other parts than the payload now splits into
    (``parts``): finished, it is not sent again (said); unfinished, it cannot be resumed
    without applying rows twice (refused, with what to do)."""
    if record.finished:
        log.warning(
            "%s was applied before with other content (%d part(s)); nothing is sent: "
            "pass a new request_id to apply this payload as a new update",
            label,
            len(record.parts),
        )
        return record
    raise UpdateStateError(
        f"{label} was interrupted after part(s) of it reached the server, and this payload "
        f"splits differently ({parts} part(s) now, {len(record.parts)} then): resuming "
        "it could apply rows twice. Rebuild with the same max_payload_mb to resume, or, "
        "once you know what the server applied, remove the record with "
        f"`tabhyper-update state clear --state-dir {state.directory}`"
    )


def progress_of(record: UpdateRecord, failed: int) -> UpdateProgress | None:
    """How far an update in several parts got when part ``failed`` (from 0) failed; None
    for an update in one part (its own error says what became of it)."""
    if len(record.parts) < 2:
        return None
    applied = tuple(
        (state.index + 1, state.job_id) for state in record.parts if state.status == "applied"
    )
    return UpdateProgress(len(record.parts), applied, failed + 1)

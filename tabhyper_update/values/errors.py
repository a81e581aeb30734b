"""The one exception tree of tabhyper_update.

Everything the SDK raises on bad input, a failing server or a failing job derives from
:class:`TabHyperError`, so a CDC job can catch one type. Argument misuse (a wrong value or
type passed to a function) raises :class:`InvalidArgumentError` or
:class:`ArgumentTypeError`: they are also ``ValueError`` / ``TypeError``, so code written
against the built-in types keeps working. Messages never carry a secret:
URLs are stored without query strings that could hold one, no header is ever kept, and every
text an error keeps (its message and fields, whatever a server said) is scrubbed of the
secrets the SDK's clients hold (:mod:`tabhyper_update.values.redaction`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .redaction import scrub, scrub_value

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "ApiError",
    "ApplyError",
    "ArgumentTypeError",
    "AuthenticationError",
    "ConfigurationError",
    "ConnectionFailedError",
    "DataServiceError",
    "DriftError",
    "InvalidActionBatchError",
    "InvalidArgumentError",
    "JobCancelledError",
    "JobFailedError",
    "JobOutcomeUnknownError",
    "JobTimeoutError",
    "NotFoundError",
    "OutOfOrderError",
    "PayloadAppliedError",
    "PayloadArgumentError",
    "PayloadError",
    "ProbeError",
    "Problem",
    "QueryBudgetError",
    "RequestTimeoutError",
    "SchemaDriftError",
    "TabHyperError",
    "TargetMismatchError",
    "TlsVerificationError",
    "TransportError",
    "UnknownHostError",
    "UnsupportedServerError",
    "UpdateProgress",
    "UpdateStateError",
]


def _parts(numbers: Sequence[int]) -> str:
    """``[1, 2, 3, 5]`` → ``"parts 1-3, 5"``; ``[4]`` → ``"part 4"``."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and spans[-1][1] == n - 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    shown = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
    return f"part {shown}" if len(numbers) == 1 else f"parts {shown}"


@dataclass(frozen=True)
class UpdateProgress:
    """How far an update in several parts got when one of them failed: the parts applied
    (numbered from 1, with their jobs), the part that failed, and how many there are."""

    total: int
    applied: tuple[tuple[int, str | None], ...]
    failed: int

    @property
    def applied_parts(self) -> list[int]:
        return [n for n, _ in self.applied]

    @property
    def not_applied(self) -> list[int]:
        done = set(self.applied_parts)
        return [n for n in range(1, self.total + 1) if n not in done]

    def __str__(self) -> str:
        if not self.applied:
            return (
                f"No part of this update was applied ({self.total} parts); running the same "
                "call again starts it anew."
            )
        jobs = ", ".join(str(job) for _, job in self.applied)
        done, rest = self.applied_parts, self.not_applied
        return (
            f"{_parts(done).capitalize()} of {self.total} "
            f"{'was' if len(done) == 1 else 'were'} applied ({'job' if len(done) == 1 else 'jobs'} "
            f"{jobs}) and stay applied; "
            f"{_parts(rest)} {'was' if len(rest) == 1 else 'were'} not (part {self.failed} "
            f"failed). Running the same call again resumes at part {self.failed} and applies "
            "nothing twice."
        )


class TabHyperError(Exception):
    """Root of every error raised by tabhyper_update.

    An error keeps what it is about in fields and builds its message from them: the text it
    was raised with, then how many times the request was tried (when more than once), then
    which step of an update failed and what that means for the update."""

    #: How many times the failing request was tried (set by the transport's retry loop).
    attempts: int = 1
    #: The round-trip step that failed ("upload of part 1", ...), when known, and what its
    #: failure means for the update ("this part was not submitted").
    step: str | None = None
    consequence: str | None = None
    #: The keyword argument the error is about, when it is about one (``request_id``): the
    #: command line names its flag instead.
    argument: str | None = None
    #: For an update in several parts: which parts were applied when this one failed.
    progress: UpdateProgress | None = None

    def __init__(self, *args: Any, argument: str | None = None) -> None:
        super().__init__(*scrub_value(args))
        if argument is not None:
            self.argument = argument

    def __setattr__(self, name: str, value: Any) -> None:
        # Fields (a server's summary, detail, notes) are scrubbed as set.
        super().__setattr__(name, scrub_value(value))

    @property
    def message(self) -> str:
        """The text the error was raised with, without what the fields add."""
        return scrub(str(self.args[0])) if self.args else ""

    def at_step(self, step: str, consequence: str) -> None:
        """Say which step of an update failed and what that means (the innermost step
        named is kept: it is the most precise)."""
        if self.step is None:
            self.step = step
            self.consequence = consequence

    def __str__(self) -> str:
        text = self.message if self.args else super().__str__()
        if self.attempts > 1:
            text += f" (after {self.attempts} attempts)"
        if self.step is not None:
            text += f" [{self.step} failed: {self.consequence}]"
        if self.progress is not None:
            text += f" {self.progress}"
        return text

    def note_progress(self, progress: UpdateProgress | None) -> None:
        """Say how far the update got (the first note is kept: it is where it stopped)."""
        if self.progress is None:
            self.progress = progress


class InvalidArgumentError(TabHyperError, ValueError):
    """An argument has a value the function cannot take; the message names it."""


class ArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument has a type the function cannot take; the message names it."""


class Problem:
    """One problem found in an action batch: where (a JSON path) and what."""

    __slots__ = ("message", "path")

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def __repr__(self) -> str:
        return f"Problem(path={self.path!r}, message={self.message!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Problem) and other.path == self.path and other.message == self.message
        )

    def __hash__(self) -> int:
        return hash((self.path, self.message))


class InvalidActionBatchError(TabHyperError, ValueError):
    """An action batch that Tableau would refuse, with every problem found.

    ``problems`` lists each problem with its JSON path (``$.actions[2].condition.args[0]``).
    """

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        lines = list(map(str, self.problems)) or ["invalid action batch"]
        if len(lines) == 1:
            text = f"invalid action batch: {lines[0]}"
        else:
            text = "invalid action batch:\n" + "\n".join(f"  - {line}" for line in lines)
        super().__init__(text)


class ConfigurationError(TabHyperError, ValueError):
    """Settings are missing or contradictory (credentials, target, server URL)."""


class PayloadError(TabHyperError, ValueError):
    """A change set or payload that cannot be turned into a valid upload."""


class PayloadArgumentError(InvalidArgumentError, PayloadError):
    """An argument of ``build_payload`` or ``ChangeSet`` that no payload can be built from
    (a size cap that is not positive, an empty name, a change set for a table not given).

    Argument misuse: catch it as :class:`InvalidArgumentError` (or ``ValueError``) beside
    every other; it is also a :class:`PayloadError`, as it was before it had its own class."""


class PayloadAppliedError(PayloadError):
    """A saved payload was applied already and its part files removed after: nothing is
    left to apply. ``applied_at`` (ISO time), ``jobs`` and ``target`` (the server, site and
    data source it was applied to, as the command named them) say when, how and where."""

    def __init__(
        self,
        manifest: str,
        applied_at: str,
        jobs: Sequence[str],
        target: dict[str, str] | None = None,
    ) -> None:
        self.manifest = manifest
        self.applied_at = applied_at
        self.jobs = list(jobs)
        self.target = target
        super().__init__(
            f"the payload of {manifest!r} was applied at {applied_at} (job(s) "
            f"{', '.join(self.jobs) or 'none'}) and its part files were removed after it: "
            "nothing is left to apply. To apply a payload more than once, keep its files "
            "(keep_files=True; command line: --keep)"
        )


class SchemaDriftError(PayloadError):
    """The payload does not fit the published data source's tables (refused before any
    request that changes data). ``columns``: target table → the columns it lacks;
    ``faults``: target table → each column it holds as another kind of value, narrower, or
    NOT NULL against NULLs; ``origin``: where the target's columns were learned."""

    def __init__(
        self,
        columns: dict[str, list[str]],
        *,
        faults: dict[str, list[str]] | None = None,
        origin: str | None = None,
    ) -> None:
        self.columns = columns
        self.faults = faults or {}
        self.origin = origin
        listed = [
            f"table {table!r} lacks {', '.join(map(repr, names))}"
            for table, names in columns.items()
        ] + [f"table {table!r}: {'; '.join(found)}" for table, found in self.faults.items()]
        where = f" (its columns as {origin})" if origin else ""
        advice = (
            "Select only the target's columns before building the change set, or republish "
            "the data source with the new columns (client.publish(..., mode='overwrite')); a "
            "published source takes new rows incrementally, not new columns"
            if columns
            else "Cast the columns to the data source's types before building the payload, "
            "or republish the data source with the new types"
        )
        super().__init__(
            f"the payload does not fit the published data source{where}: "
            f"{'; '.join(listed)}. No update was sent. {advice}"
        )


class ApplyError(TabHyperError):
    """An action batch could not be applied to a ``.hyper`` file; nothing was changed.

    ``action_index`` is the failing action's position in the batch (``None`` when the
    batch failed before any action, e.g. a missing file), ``reason`` the cause.
    """

    def __init__(
        self, reason: str, *, action_index: int | None = None, action: str | None = None
    ) -> None:
        self.reason = reason
        self.action_index = action_index
        self.action = action
        if action_index is None:
            super().__init__(reason)
        else:
            super().__init__(f"action {action_index} ({action}) failed: {reason}")


class TransportError(TabHyperError):
    """Talking to the server failed before a usable answer came back."""

    def __init__(self, message: str, *, method: str | None = None, url: str | None = None) -> None:
        self.method = method
        self.url = url
        super().__init__(message)


class ConnectionFailedError(TransportError, ConnectionError):
    """The connection could not be made or was dropped. ``refused_locally``: a loopback
    address refused it, nothing listens there (never retried: a server that is not running
    does not start in a few seconds)."""

    def __init__(
        self,
        message: str,
        *,
        method: str | None = None,
        url: str | None = None,
        refused_locally: bool = False,
    ) -> None:
        self.refused_locally = refused_locally
        super().__init__(message, method=method, url=url)


class TlsVerificationError(ConnectionFailedError):
    """The server's TLS certificate could not be verified (never retried)."""


class UnknownHostError(ConnectionFailedError):
    """The server's host name does not resolve (never retried: a typo in the URL does not
    fix itself)."""


class RequestTimeoutError(TransportError, TimeoutError):
    """The server did not answer within the client's timeout."""


class ApiError(TabHyperError):
    """The server answered with an HTTP error (Tableau's error body parsed when present).

    ``status`` is the HTTP status the server answered with. A lookup the SDK settles from a
    listing (no data source of that name, a name held in two projects) never got an error
    from the server: its ``status`` is ``None`` and its message names no HTTP status."""

    def __init__(
        self,
        *,
        status: int | None,
        code: str | None = None,
        summary: str | None = None,
        detail: str | None = None,
        method: str | None = None,
        url: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.summary = summary
        self.detail = detail
        self.method = method
        self.url = url
        self.hint = hint
        #: Seconds the server asked to wait before retrying (``Retry-After``), if any.
        self.retry_after: float | None = None
        parts = [f"HTTP {status}"] if status is not None else []
        if code:
            parts.append(f"code {code}")
        text = ", ".join(parts)
        if summary:
            text += f": {summary}" if text else summary
        if detail:
            text += f" ({detail})"
        if method and url:
            text += f" [{method} {url}]"
        if hint:
            text += f". {hint}"
        super().__init__(text)

    def with_hint(self, hint: str) -> ApiError:
        """The same error (same class and fields) with advice for the reader appended."""
        again = type(self)(
            status=self.status,
            code=self.code,
            summary=self.summary,
            detail=self.detail,
            method=self.method,
            url=self.url,
            hint=hint,
        )
        again.retry_after, again.attempts = self.retry_after, self.attempts
        return again


class AuthenticationError(ApiError):
    """Sign-in failed, or the session could not be restored after it expired."""


class NotFoundError(ApiError):
    """A site, data source, connection, upload session or job does not exist."""


class DataServiceError(ApiError):
    """The VizQL Data Service could not answer: the server has none (Tableau Server before
    2025.1), the user may not query the data source, or it refused the query. Reading back
    is separate from updating: an update that was applied stays applied."""


class QueryBudgetError(DataServiceError):
    """A read-back stopped before it was done: the queries it may spend (``budget=``) are
    spent, or the service's quota is (429). What was checked so far stands; the report says
    what was not."""


class UnsupportedServerError(TabHyperError):
    """The server's REST API is older than the Hyper update endpoints (3.12)."""


class JobFailedError(TabHyperError):
    """The server ran the update job and it failed; ``notes`` holds the server's reason."""

    def __init__(self, job_id: str, notes: str | None) -> None:
        self.job_id = job_id
        self.notes = notes
        reason = notes if notes else "the server gave no notes"
        #: Columns the server says the target lacks (schema drift), when its notes tell.
        self.missing_columns = _missing_in_notes(notes or "")
        remedy = ""
        if self.missing_columns:
            remedy = (
                f" [the payload has column(s) {', '.join(map(repr, self.missing_columns))} that "
                "the published data source lacks: select only the target's columns before "
                "building the payload, or republish the data source with the new columns "
                "(client.publish(..., mode='overwrite'))]"
            )
        super().__init__(f"job {job_id} failed: {reason}{remedy}")
        #: Columns whose values can be too large for the target's type (payload type into
        #: target type), named when the server's notes say a value overflowed.
        self.overflow_columns: dict[str, str] = {}

    def name_overflow(self, columns: Mapping[str, str]) -> None:
        """Name the columns a value can overflow in, when the notes say one did (the server
        names none): those whose target type holds fewer digits than the payload's."""
        if not columns or not _OVERFLOW_NOTES.search(self.notes or ""):
            return
        self.overflow_columns = dict(columns)
        named = ", ".join(f"{name!r} ({why})" for name, why in columns.items())
        self.args = (
            f"{self.message} [a value too large for its column, which can only be in "
            f"{named}: set such rows aside with build_payload(..., on_bad_rows='quarantine', "
            "target_columns=...), or widen the column]",
        )


#: What Hyper's (and the fake's) notes say of a value too large for its column.
_OVERFLOW_NOTES = re.compile(r"overflow|out of range", re.I)


class OutOfOrderError(JobFailedError):
    """A guarded update (``ChangeSet(guard=True)``) met keys whose position in the data
    source is later than this update's: the whole update was refused and applied nothing
    (an older change never replaces a newer one). ``guard_table`` is the payload table of
    the positions it checked."""

    def __init__(self, job_id: str, notes: str | None, *, guard_table: str) -> None:
        super().__init__(job_id, notes)
        self.guard_table = guard_table
        self.args = (
            f"job {job_id} refused the update: the data source's positions hold a later one "
            f"than this update's for at least one key it changes (guard table {guard_table!r}), "
            "so it applied nothing rather than leave an older value. Another producer applied "
            "later changes first: rebuild this change set from the data source's position on, "
            "or give each key range one producer",
        )


_MISSING_COLUMN_NOTES = (
    # This SDK's engine (and so the fake server).
    re.compile(r"source column\(s\) (.+?) of .+? do not exist in target table"),
    # Hyper's own wording.
    re.compile(r'column "?([^"\s]+)"? (?:of relation \S+ )?does not exist', re.I),
)


def _missing_in_notes(notes: str) -> list[str]:
    for pattern in _MISSING_COLUMN_NOTES:
        match = pattern.search(notes)
        if match:
            return re.findall(r"'((?:[^'\\]|\\.)*)'", match.group(1)) or [match.group(1)]
    return []


class JobCancelledError(TabHyperError):
    """The update job was cancelled before it finished."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} was cancelled")


class JobOutcomeUnknownError(TabHyperError):
    """The job finished with a finish code the SDK does not know: whether it applied the
    update cannot be told, so it is not counted as applied. Look at the data source."""

    def __init__(self, job_id: str, finish_code: object) -> None:
        self.job_id = job_id
        self.finish_code = finish_code
        super().__init__(
            f"job {job_id} finished with finish code {finish_code!r}, which is neither success "
            "(0), failure (1) nor cancellation (2): whether the update was applied is unknown, "
            "so it is not recorded as applied. Look at the data source before running the job "
            "again (a re-run waits on the same job and stops here again)"
        )


class TargetMismatchError(TabHyperError):
    """The server's answer names another data source (or job of another data source) than
    the one asked about: nothing further was sent to it."""


class JobTimeoutError(TabHyperError, TimeoutError):
    """Waiting for a job passed its deadline; the job may still finish: wait again."""

    def __init__(self, job_id: str, waited_seconds: float) -> None:
        self.job_id = job_id
        self.waited_seconds = waited_seconds
        super().__init__(
            f"job {job_id} did not finish within {waited_seconds:.1f} s; "
            "it may still complete: call wait() on it again"
        )


class ProbeError(TabHyperError):
    """The probe of a server (``tabhyper-update probe``) could not finish: it would have
    sent more than its bound of requests, or its canary could not be published."""


class UpdateStateError(TabHyperError):
    """An earlier, interrupted run of this update cannot be resumed without risking a lost or
    doubled change (its payload now splits differently, or the server forgot a job whose
    insert may or may not have been applied). The message says how to resolve it."""


class DriftError(TabHyperError):
    """Reading back found the published data source differing from what was expected (the
    keys an update touched, or the source it was reconciled with). ``report`` says where;
    an update that was applied stays applied, and ``report`` can be repaired."""

    def __init__(self, report: Any, *, applied: str | None = None) -> None:
        self.report = report
        #: What had been applied before the read-back (for an update check), if anything.
        self.applied = applied
        text = str(report)
        if applied:
            text = f"{applied}; reading it back found drift: {text}"
        super().__init__(text)


def _staged_named(text: str, columns: Mapping[str, Sequence[str]]) -> str:
    """Staged columns are named c0, c1, ...: which column of which table each one ``text``
    names is (`` (...)``; empty where it names none)."""
    named = [
        f"c{i} is column {name!r} of table {table!r}"
        for table, names in columns.items()
        for i, name in enumerate(names)
        if re.search(rf"\bc{i}\b", text)
    ]
    return f" ({'; '.join(named)})" if named else ""


def build_failure(
    err: Exception, columns: Mapping[str, Sequence[str]], stage: Path, owned: Path
) -> PayloadError:
    """Our error for a failure inside Spark or Hyper while a payload was built, naming what
    a user can act on; ``columns`` lists each table's columns in staged order."""
    text = scrub(str(err))  # whole, before any cut
    first = _first_cause(text) or type(err).__name__
    if len(first) > 400:
        first = first[:400] + "…"
    engine = "Hyper" if type(err).__module__.startswith("tableauhyperapi") else "Spark"
    if "No space left on device" in text or "no space left" in text.lower():
        return PayloadError(
            f"no space left on device while building the payload (staging in {str(stage)!r}, "
            f"payload files in {str(owned)!r}): free space there, or pass staging_dir= / "
            f"output_dir= on a larger disk ({engine}: {first})"
        )
    where = _staged_named(first, columns) if engine == "Hyper" else ""
    if "PYTHON_VERSION_MISMATCH" in first:
        where = (
            ": Spark's Python workers run another Python than this driver; set "
            "PYSPARK_PYTHON (or spark.pyspark.python) to this interpreter, "
            f"{sys.executable!r}, before the SparkSession starts"
        )
    return PayloadError(f"{engine} failed while building the payload: {first}{where}")


#: What Spark says of an error that only wraps the error that caused it.
_WRAPPERS = (
    "[TASK_WRITE_FAILED]",
    "Exception thrown in awaitResult",
    "Job aborted due to stage failure",
)
#: A Java exception's class before its message (``java.lang.RuntimeException: ``).
_JAVA_CLASS = re.compile(r"^(?:[a-z_][\w]*\.)+[A-Z][\w$]*: ")
#: Spark's error classes (``[MALFORMED_RECORD_IN_PARSING.WITHOUT_SUGGESTION]``).
_ERROR_CLASS = re.compile(r"\[[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*\]")


def _first_cause(text: str) -> str:
    """The line of an engine's error that says what went wrong: the first naming a Spark
    error class, else the first that is not Py4J's "An error occurred while calling"; where
    that line only wraps another error (Spark 3.x's failed task, a failed job, the wait for
    a result), the deepest cause Java names."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    named = _error_classes(lines)
    causes = [line for line in named if not _wraps(line)]
    if causes:
        return causes[0]
    plain = [line for line in lines if not line.startswith(_NOT_THE_CAUSE)]
    first = next(iter([*named, *plain, *lines]), "")
    deepest = [line for line in lines if line.startswith("Caused by: ")]
    if _wraps(first) and deepest:
        return _JAVA_CLASS.sub("", deepest[-1].removeprefix("Caused by: "))
    return first


#: How the lines of an engine's error that say nothing of its cause start.
_NOT_THE_CAUSE = ("An error occurred while calling", "at ", "Traceback")


def _error_classes(lines: Sequence[str]) -> list[str]:
    """The lines of an error that name a Spark error class, each from that name on (not a
    stack frame's)."""
    return [
        line[found.start() :]
        for line in lines
        if (found := _ERROR_CLASS.search(line)) is not None and not line.startswith("at ")
    ]


def _wraps(line: str) -> bool:
    return any(wrapper in line for wrapper in _WRAPPERS)


# Each exception shows under the public module that exports it (a traceback reads
# ``tabhyper_update.errors.PayloadError``), which is also where pickle finds it.
for _exported in list(globals().values()):
    if isinstance(_exported, type) and issubclass(_exported, TabHyperError):
        _exported.__module__ = "tabhyper_update.errors"
del _exported

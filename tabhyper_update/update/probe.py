"""The probe: what one real server does where Tableau's documentation is silent, measured on a
canary data source the SDK publishes (and removes), instead of assumed.

>>> with TableauClient.from_env() as client:  # doctest: +SKIP
...     found = client.probe(project="Sandbox")
...     found.guard, found.multi_match
('works', 'one_row_used')

Each case is a scripted update of the canary whose outcome differs by semantics, and each
outcome is read back from the canary's rows: through the VizQL Data Service where the server
has one, else by a follow-up update that fails exactly when a row holds a value (it sets a
NOT NULL column to NULL for that row: refused, it applies nothing). The cases:

* ``multi_match``: a key matched by two source rows: ``"refused"`` or ``"one_row_used"``;
* ``not_null``: NULL into a NOT NULL column: ``"enforced"`` or ``"not_enforced"``;
* ``narrowing``: a ``NUMERIC(12,4)`` value into ``NUMERIC(12,2)``: ``"refused"``,
  ``"rounded"`` or ``"kept"``;
* ``extra_columns``: an update whose source holds a column the target lacks: ``"refused"``
  or ``"ignored"`` (the other columns applied);
* ``missing_columns``: rows inserted from a source lacking target columns: ``"null"``
  (those columns NULL) or ``"refused"``;
* ``partial_update``: rows updated from a source lacking target columns: ``"kept"`` (those
  columns as they were: Hyper's ``UPDATE``), ``"null"`` or ``"refused"``;
* ``download_types``: the canary downloaded without its extract (Tableau's "Download Data
  Source"): its file records its columns' types ``"exact"`` (as the canary declares them:
  type, precision, scale), ``"coarse"`` or the download is ``"refused"``; only where
  ``"exact"`` does the SDK learn a data source's types this way;
* ``replay``: the same RequestID sent again with other rows: ``"original"`` (the first
  job), ``"new_job"`` (a new job that applies nothing), ``"refused"`` (an error naming the
  duplicate) or ``"applied_again"`` (the server ran it twice);
* ``guard``: a stale update under the ordering guard (``ChangeSet(guard=True)``) refused and
  a later one applied: ``"works"``, else ``"unavailable"``;
* ``data_service``: the VizQL Data Service's release, or ``"absent"``;
* ``scopes``: under a connected app, the calls refused and the scope each needed;
* ``cap_mb``: the update cap (only with ``cap=True``: one or two bounded uploads).

The result is remembered per server and site in the state folder
(:func:`remembered_probe`); the SDK reads it before it sends a guarded change set, and
``FakeTableauServer(profile="<probe JSON>")`` answers as the probed server did. The probe
touches nothing but its canary, sends at most :data:`MAX_REQUESTS` requests, and never shows
a secret.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from typing_extensions import Unpack

from ..local.folders import DerivedFolder
from ..readback.dataservice import DataService, dimension
from ..rest.downloads import download_columns
from ..rest.refs import DataSourceRef
from ..rest.session import RestSession
from ..rest.uploads import ChunkBody, multipart_framing, refuses_sequence_ids
from ..values.actions import ActionBatch, Update, _Action, position_guard
from ..values.conditions import Condition, all_of, keys_match, target
from ..values.errors import (
    ApiError,
    InvalidArgumentError,
    JobFailedError,
    NotFoundError,
    ProbeError,
    TabHyperError,
)
from ..values.narrowing import column_type, declared_columns
from ..values.probes import ProbeResult
from ..values.redaction import get_logger
from .canary import (
    CANARY,
    ROW,
    ROW_CASES,
    SCHEMA,
    by_id,
    hyper_file,
    insert_from,
    oracle,
    padding_file,
    upsert_by,
)
from .options import ProbeOptions, ProbeSettings
from .publish import publish
from .resplit import stated_cap, too_large
from .state import StateStore

__all__ = [
    "MAX_REQUESTS",
    "ProbeResult",
    "probe",
]

log = get_logger("tabhyper_update")

#: The most requests one probe sends (each case a handful: upload, update, polls, reads).
MAX_REQUESTS = 200
#: The update caps the probe can tell apart with ``cap=True`` (MB): one padded upload just
#: over each, smallest first, until one is refused.
_CAPS_TRIED = (10, 100)


class _ScopeRefused(Exception):
    """A call of a case was refused for a connected-app scope: the case cannot be told."""


@dataclass
class _Outcome:
    """An update's end: applied (its job id), or refused (what the server said)."""

    applied: bool
    job_id: str | None = None
    refusal: str | None = None
    error: ApiError | None = None


class _Probe:
    def __init__(
        self,
        client: RestSession,
        project: str,
        folder: Path,
        *,
        name: str,
    ) -> None:
        self.client = client
        self.project = project
        self.folder = folder
        self.name = name
        self.sent_before = client.requests_sent
        self.ref: DataSourceRef | None = None
        self.service: DataService | None = None
        self.scopes: list[dict[str, str]] = []
        self.notes: dict[str, str] = {}
        self.not_null_enforced = False

    # -- plumbing ----------------------------------------------------------------------------
    @property
    def canary(self) -> DataSourceRef:
        """The canary data source, once the probe has published it."""
        if self.ref is None:
            raise ProbeError("the probe's canary data source was not published")
        return self.ref

    @property
    def requests(self) -> int:
        return self.client.requests_sent - self.sent_before

    def budget(self, more: int) -> None:
        if self.requests + more > MAX_REQUESTS:
            raise ProbeError(
                f"the probe stopped before sending more than {MAX_REQUESTS} requests "
                f"({self.requests} sent)"
            )

    def file(self, tables: Mapping[str, tuple[str, Sequence[str]]]) -> Path:
        return hyper_file(self.folder / f"{uuid.uuid4().hex}.hyper", tables)

    def scope_refused(self, case: str, err: ApiError) -> bool:
        if err.status != 403:
            return False
        found = re.search(r"scope '([^']+)'", str(err))
        self.scopes.append({"case": case, "scope": found.group(1) if found else "unknown"})
        return True

    def update(
        self,
        case: str,
        tables: Mapping[str, tuple[str, Sequence[str]]],
        actions: Sequence[_Action],
        *,
        request_id: str | None = None,
    ) -> _Outcome:
        """Upload ``tables`` and apply ``actions`` to the canary, bypassing the SDK's own
        checks (the probe asks the server, not the SDK); the outcome as the job ended."""
        self.budget(12)
        path = self.file(tables)
        try:
            session = self.client.upload(path)
            job = self.client.update_data(
                self.canary,
                ActionBatch(actions=list(actions)),
                upload_session_id=session,
                request_id=request_id,
            )
            job.wait(timeout=600)
        except JobFailedError as err:
            self.notes.setdefault(case, str(err.notes or err))
            return _Outcome(False, job_id=err.job_id, refusal=str(err.notes or err))
        except ApiError as err:
            if self.scope_refused(case, err):
                raise _ScopeRefused(case) from None
            self.notes.setdefault(case, str(err))
            return _Outcome(False, refusal=str(err), error=err)
        finally:
            path.unlink(missing_ok=True)
        return _Outcome(True, job_id=job.id)

    # -- reading the canary back ---------------------------------------------------------------
    def read_values(self, column: str) -> list[Any] | None:
        """The distinct values of ``column`` through the VizQL Data Service (None without)."""
        if self.service is None:
            return None
        self.budget(2)
        field_info = self.service.field(column)
        rows = self.service.query([dimension(field_info.caption, "v")])
        return [row["v"] for row in rows]

    def row_holds(
        self,
        key: int,
        condition: Condition,
        *,
        table: str = "Extract",
        key_column: str = "id",
    ) -> bool | None:
        """Whether row ``key`` of the canary's ``table`` meets ``condition``, by a follow-up
        update that sets its columns, NOT NULL ones included, to NULL only there: refused
        (nothing applied) if it does. None where NOT NULL is not enforced, or not by the
        rows a batch meets (the follow-up would prove nothing)."""
        if not self.not_null_enforced:
            return None
        outcome = self.update(
            "read_back",
            {"oracle": oracle(table, key_column, key)},
            [
                Update(
                    target_schema=SCHEMA,
                    target_table=table,
                    source_schema=SCHEMA,
                    source_table="oracle",
                    condition=all_of(keys_match(key_column), condition),
                )
            ],
        )
        return not outcome.applied

    def value_of(self, key: int, column: str, candidates: Sequence[Any]) -> Any:
        """Which of ``candidates`` the canary's row ``key`` holds in ``column`` (None: none
        of them, or it cannot be read; a ``None`` candidate is NULL)."""
        if self.service is not None:
            return self._value_read(self.service, key, column, candidates)
        numeric = any(isinstance(c, float) for c in candidates)
        return next(
            (c for c in candidates if self.row_holds(key, _holding(column, c, numeric))), None
        )

    def _value_read(
        self, service: DataService, key: int, column: str, candidates: Sequence[Any]
    ) -> Any:
        """:meth:`value_of` by a query of the VizQL Data Service (two requests)."""
        self.budget(2)
        id_field = service.field("id").caption
        col_field = service.field(column).caption
        rows = service.query([dimension(id_field, "id"), dimension(col_field, "v")])
        found = [r["v"] for r in rows if _same(r["id"], key)]
        return next((c for c in candidates if any(_same(v, c) for v in found)), None)

    # -- the cases -----------------------------------------------------------------------------
    def publish(self) -> None:
        self.budget(12)
        canary = self.file(CANARY)
        try:
            self.ref = publish(
                self.client, canary, self.name, project=self.project, state_dir=self.folder
            )
        finally:
            canary.unlink(missing_ok=True)

    def data_service(self) -> str:
        self.budget(6)
        service = DataService(self.client, self.canary.id)
        if not service._service_answers():
            return "absent"
        try:
            service.fields()
        except ApiError as err:
            if self.scope_refused("data_service", err):
                return "denied"
            self.notes["data_service"] = str(err)
            return "denied"
        self.service = service
        # The release by the options it takes: each later release added some.
        release = "2025.1"
        later = (("bypassMetadataCache", True, "20253"), ("rowLimit", 1, "20261"))
        for option, value, named in later:
            try:
                self.client.request(
                    "POST",
                    "api/v1/vizql-data-service/query-datasource",
                    retry=False,
                    site_scoped=False,
                    json_body={
                        "datasource": {"datasourceLuid": self.canary.id},
                        "query": {"fields": [{"fieldCaption": service.field("id").caption}]},
                        "options": {"returnFormat": "ARRAYS", option: value},
                    },
                )
            except ApiError:
                break
            release = named
        return release

    def not_null(self) -> str:
        outcome = self.update(
            "not_null",
            {"nulls": (ROW, ["(2, 'two', 2.00, NULL)"])},
            [by_id("nulls")],
        )
        if outcome.applied:
            return "not_enforced"
        # The follow-up read-back rests on it: one that matches no row must apply.
        self.not_null_enforced = True
        if self.row_holds(1, target("val") == "never-there"):
            log.info("NOT NULL is enforced by what a batch holds, not the rows it meets")
            self.not_null_enforced = False
        return "enforced"

    def row_case(self, case: str) -> str:
        """A case of :data:`ROW_CASES`: ``"refused"`` if the server refuses its update, else
        what the value its canary row holds says (``"unknown"``: none of those values)."""
        tables, action, (key, column), found = ROW_CASES[case]
        if not self.update(case, tables, [action]).applied:
            return "refused"
        return found.get(self.value_of(key, column, list(found)), "unknown")

    def download_types(self) -> str:
        """What the canary's file, downloaded without its extract, records of its types."""
        try:
            found = download_columns(self.client, self.canary).get("Extract", {})
        except ApiError as err:
            if (err.status or 0) >= 500:
                raise
            if "scope" not in str(err) or not self.scope_refused("download_types", err):
                self.notes["download_types"] = str(err)
            return "refused"
        declared = declared_columns(CANARY["Extract"][0], "the canary", InvalidArgumentError)
        exact = all(
            (typed := found.get(name)) is not None and column_type(typed) == column.type
            for name, column in declared.items()
        )
        return "exact" if exact else "coarse"

    def replay(self) -> str:
        request_id = f"tabhyper-probe-{uuid.uuid4()}"
        first = self.update(
            "replay",
            {"r": (ROW, ["(4, 'replay-1', 4.00, TRUE)"])},
            [by_id("r")],
            request_id=request_id,
        )
        if not first.applied:
            return "unknown"
        again = self.update(
            "replay",
            {"r": (ROW, ["(4, 'replay-2', 4.00, TRUE)"])},
            [by_id("r")],
            request_id=request_id,
        )
        if not again.applied and again.error is not None and again.error.status in (400, 409):
            return "refused"
        held = self.value_of(4, "val", ["replay-1", "replay-2"])
        if held == "replay-2":
            return "applied_again"
        if again.job_id == first.job_id:
            return "original"
        return "new_job" if held == "replay-1" else "unknown"

    def guard(self) -> str:
        def guarded(position: int, value: str) -> _Outcome:
            return self.update(
                "guard",
                {
                    "g_upserts": ("gid BIGINT, gval TEXT", [f"(5, '{value}')"]),
                    "g_upserts_guard": (
                        "gid BIGINT, gseq BIGINT, guarded BOOLEAN",
                        [f"(5, {position}, NULL)"],
                    ),
                    "g_positions": (
                        "gid BIGINT, gseq BIGINT, guarded BOOLEAN",
                        [f"(5, {position}, TRUE)"],
                    ),
                },
                [
                    position_guard(
                        ["gid"],
                        "gseq",
                        target_schema=SCHEMA,
                        target_table="Guarded_positions",
                        source_schema=SCHEMA,
                        guard_table="g_upserts_guard",
                    ),
                    upsert_by("g_upserts", "Guarded", "gid"),
                    upsert_by("g_positions", "Guarded_positions", "gid"),
                ],
            )

        stale = guarded(5, "stale")  # the canary holds position 10
        if stale.applied:
            return "unavailable"
        fresh = guarded(20, "fresh")
        if not fresh.applied:
            return "unavailable"
        values = self.read_values("gval")
        if values is not None:
            return "works" if values == ["fresh"] else "unavailable"
        # Without the service: the positions reached the fresh update's (the stale one's
        # job failed, so it applied nothing; the fresh one applied atomically).
        holds = self.row_holds(
            5,
            target("gseq") == 20,
            table="Guarded_positions",
            key_column="gid",
        )
        return "works" if holds else "unavailable"

    def cap(self) -> float | None:
        for mb in _CAPS_TRIED:
            size = int((mb + 0.5) * 1024 * 1024)
            path = self.folder / f"pad-{mb}.hyper"
            padding_file(path, size)
            self.budget(12 + size // self.client.chunk_size)
            try:
                session = self.client.upload(path)
                job = self.client.update_data(
                    self.canary,
                    ActionBatch(
                        actions=[insert_from("Padding", "Padding")],
                    ),
                    upload_session_id=session,
                )
                job.wait(timeout=600)
            except ApiError as err:
                if too_large(err):
                    stated = stated_cap(err, size)
                    return round(stated / 1024 / 1024, 1) if stated else float(mb)
                raise
            finally:
                path.unlink(missing_ok=True)
        return None

    def _backwards_upload(self, path: Path) -> str | None:
        """``path`` uploaded in two blocks by ``sequenceID``, the second first: the upload
        session (``None`` where the server refused the parameter)."""
        size = path.stat().st_size
        half = -(-size // 2)
        session = self.client.initiate_upload()
        boundary = uuid.uuid4().hex
        head, tail = multipart_framing(boundary)
        with path.open("rb") as f:
            for sequence in (2, 1):
                offset = (sequence - 1) * half
                body = ChunkBody(head, f, offset, min(half, size - offset), tail)
                try:
                    self.client.append_chunk(session, body, boundary, sequence)
                except ApiError as err:
                    if err.status != 400:
                        raise
                    self.notes.setdefault("parallel_upload", str(err))
                    refuses_sequence_ids(self.client.server)
                    return None
        return session

    def parallel_upload(self) -> str:
        """Two blocks of one file sent with ``sequenceID``, the second first: "refused"
        where the parameter is, "sequence" where the file arrives whole (its row applied),
        "ignored" where the blocks were taken as they came (the file broken, the job
        failed)."""
        self.budget(14)
        path = self.file({"seq": (ROW, ["(6, 'in-sequence', 6.00, TRUE)"])})
        try:
            session = self._backwards_upload(path)
            if session is None:
                return "refused"
            job = self.client.update_data(
                self.canary, ActionBatch(actions=[by_id("seq")]), upload_session_id=session
            )
            job.wait(timeout=600)
        except JobFailedError as err:
            self.notes.setdefault("parallel_upload", str(err.notes or err))
            refuses_sequence_ids(self.client.server)
            return "ignored"
        except ApiError as err:
            if self.scope_refused("parallel_upload", err):
                raise _ScopeRefused("parallel_upload") from None
            raise
        finally:
            path.unlink(missing_ok=True)
        if self.value_of(6, "val", ["in-sequence"]) == "in-sequence":
            return "sequence"
        refuses_sequence_ids(self.client.server)
        return "ignored"

    def remove(self) -> None:
        if self.ref is None:
            return
        with contextlib.suppress(NotFoundError):  # removed already (a retried DELETE)
            self.client.delete_datasource(self.ref)


def _same(found: Any, expected: Any) -> bool:
    if isinstance(expected, float):
        try:
            return abs(float(found) - expected) < 5e-5
        except (TypeError, ValueError):
            return False
    if isinstance(expected, int) and not isinstance(expected, bool):
        try:
            return int(found) == expected
        except (TypeError, ValueError):
            return False
    return bool(found == expected)


def probe(
    client: RestSession,
    *,
    project: str,
    **options: Unpack[ProbeOptions],
) -> ProbeResult:
    """:meth:`TableauClient.probe`: publish a canary data source into ``project``, run the
    cases, read them back, remove the canary (unless ``keep``), remember the result in the
    state folder, and return it."""
    if not isinstance(project, str) or not project.strip():
        raise InvalidArgumentError(
            "the probe needs a project to publish its canary into (project=...)",
            argument="project",
        )
    settings = ProbeSettings.of(options, "probe()")
    keep, cap = settings.keep, settings.cap
    store = StateStore(settings.state_dir)
    name = f"tabhyper-probe-{uuid.uuid4().hex[:12]}"
    derived = DerivedFolder("tabhyper-probe-")
    run = _Probe(client, project, derived(), name=name)
    step = settings.on_step or (lambda _: None)

    def case(what: str, measure: Callable[[], Any]) -> Any:
        step(what)
        try:
            return measure()
        except _ScopeRefused:
            return "unknown"

    results: dict[str, Any] = {}
    try:
        step(f"publishing the canary {name!r} into {project!r}")
        run.publish()
        for field, what, measure in _CASES:
            results[field] = case(what, partial(measure, run))
        cap_mb = case("the update cap (a bounded upload)", run.cap) if cap else None
        results["cap_mb"] = None if cap_mb == "unknown" else cap_mb
    finally:
        if not keep:
            step("removing the canary")
            try:
                run.remove()
            except TabHyperError as err:
                log.warning("the canary %r was not removed: %s", name, err)
        derived.remove()
    found = _result(client, run, keep, results)
    store.remember_probe(found)
    return found


#: The probe's cases in the order they run: the result's field, what the case tells (as
#: the progress says it), and how the run measures it.
_CASES: tuple[tuple[str, str, Callable[[_Probe], Any]], ...] = (
    ("data_service", "the VizQL Data Service", lambda run: run.data_service()),
    ("not_null", "NULL into a NOT NULL column", lambda run: run.not_null()),
    ("multi_match", "a key matched by two source rows", lambda run: run.row_case("multi_match")),
    (
        "narrowing",
        "a NUMERIC(12,4) value into NUMERIC(12,2)",
        lambda run: run.row_case("narrowing"),
    ),
    (
        "extra_columns",
        "a source column the target lacks",
        lambda run: run.row_case("extra_columns"),
    ),
    (
        "missing_columns",
        "rows inserted from a source lacking target columns",
        lambda run: run.row_case("missing_columns"),
    ),
    (
        "partial_update",
        "rows updated from a source lacking target columns",
        lambda run: run.row_case("partial_update"),
    ),
    (
        "download_types",
        "the canary downloaded without its extract",
        lambda run: run.download_types(),
    ),
    ("replay", "the same RequestID sent twice", lambda run: run.replay()),
    ("guard", "a stale update under the ordering guard", lambda run: run.guard()),
    (
        "parallel_upload",
        "an upload's blocks sent at once (sequenceID)",
        lambda run: run.parallel_upload(),
    ),
)


def _result(client: RestSession, run: _Probe, keep: bool, results: dict[str, Any]) -> ProbeResult:
    """What the probe found: its cases' ``results``, how it read them back, what it sent."""
    read_back = (
        "data_service"
        if run.service is not None
        else ("not_null" if run.not_null_enforced else "answers")
    )
    return ProbeResult(
        server=client.server,
        site=client.site,
        read_back=read_back,
        requests=run.requests,
        canary=run.name,
        api_version=client.api_version,
        kept=keep,
        scopes=run.scopes if _is_connected_app(client) else None,
        notes=run.notes,
        **results,
    )


def _is_connected_app(client: RestSession) -> bool:
    from ..rest.auth import ConnectedAppJWT

    return isinstance(client.auth, ConnectedAppJWT)


def _holding(column: str, value: Any, numeric: bool) -> Condition:
    """The condition that the target's ``column`` holds ``value`` (``None``: NULL, of a
    ``numeric`` column or a text one; a float: within the server's rounding of it)."""
    if value is None:
        return target(column).is_null(type="double" if numeric else "string")
    if isinstance(value, float):
        return all_of(target(column) > value - 5e-5, target(column) < value + 5e-5)
    equal: Condition = target(column) == value
    return equal

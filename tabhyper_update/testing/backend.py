"""The fake server's state and behaviour, with no HTTP in it: who may sign in, the data
sources and their ``.hyper`` files, upload sessions, and the jobs that apply updates with
real Hyper (one worker per data source, in order, through
:func:`tabhyper_update.local.engine.apply`).

Operations raise :class:`~.wire.ApiFailure` with the status and code the real server uses;
:mod:`.handlers` turns requests into these calls and their results into answers.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from typing_extensions import Unpack

from ..local.engine import SourceColumns
from ..local.engine import apply as apply_locally
from ..local.hyper import connect
from ..values.actions import ActionBatch, Insert
from ..values.errors import ApplyError
from ..values.redaction import get_logger
from .limits import Limits
from .sessions import Session, SignIns
from .settings import BackendConfig, BackendSettings
from .uploads import MB, Uploads
from .wire import ApiFailure, bad_request, not_found

__all__ = ["MB", "DataSource", "FakeBackend", "Job", "Project", "Session"]


log = get_logger("tabhyper_update.testing")


@dataclass
class DataSource:
    id: str
    name: str
    project: str
    project_id: str
    path: Path
    connections: list[str]
    queue: queue.Queue[Job | None] = field(default_factory=queue.Queue, repr=False)
    worker: threading.Thread | None = field(default=None, repr=False)
    #: When a refresh of the data source (run by someone else) ends, on ``time.time()``.
    refresh_until: float = 0.0


@dataclass
class Project:
    id: str
    name: str
    parent_id: str | None = None


@dataclass
class Job:
    id: str
    datasource: DataSource
    connection: str | None
    batch: ActionBatch | None
    upload: Path | None
    created_at: str
    #: "UpdateUploadedFile" or "PublishDatasource".
    kind: str = "UpdateUploadedFile"
    started_at: str | None = None
    completed_at: str | None = None
    finish_code: int | None = None
    notes: str | None = None
    progress: int = 0
    cancel_requested: bool = False
    #: When the job was queued, began and finished running, on ``time.time()`` (for
    #: measurements).
    queued_at: float = field(default_factory=time.time)
    began_at: float | None = None
    finished_at: float | None = None


def _tables(file: Path) -> list[tuple[str, str]]:
    """(schema, table) of every table in a ``.hyper`` file."""
    with connect(file) as conn:
        return [
            (str(schema.name.unescaped), str(table.name.unescaped))
            for schema in conn.catalog.get_schema_names()
            for table in conn.catalog.get_table_names(schema)
        ]


def _check_hyper(file: Path) -> None:
    try:
        found = _tables(file)
    except Exception as err:
        raise bad_request(f"the uploaded file is not a Hyper database: {err}") from None
    if not found:
        raise bad_request("the uploaded Hyper database holds no table")


def _overwrite(ds: DataSource, file: Path) -> None:
    """``ds``'s data replaced by ``file``'s in one step (a reader sees the old file or the
    new one, never a part of either)."""
    staged = ds.path.with_suffix(".publish")
    shutil.copyfile(file, staged)
    staged.chmod(0o600)
    os.replace(staged, ds.path)


def _append(ds: DataSource, file: Path) -> None:
    """Insert the rows of each table of ``file`` into the same table of ``ds``."""
    batch = ActionBatch(
        actions=[
            Insert(target_schema=s, target_table=t, source_schema=s, source_table=t)
            for s, t in _tables(file)
        ]
    )
    try:
        apply_locally(batch, target=ds.path, payload=file)
    except ApplyError as err:
        raise bad_request(f"the file cannot be appended to '{ds.name}': {err}") from None


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeBackend:
    """Everything the fake server knows and does (see the module docstring), configured by
    :class:`BackendSettings`."""

    def __init__(self, **settings: Unpack[BackendSettings]) -> None:
        config = BackendConfig.of(settings)
        #: The settings as given, resolved against their profile.
        self.config = config
        self.profile = config.profile
        #: The VizQL Data Service: "on", "absent" (a server before 2025.1) or "denied" (the
        #: user lacks the permission to query data sources); its release (which query
        #: options it takes).
        self.data_service = config.data_service
        self.service_release = config.service_release
        self.service_queries = 0
        self.service_truncates_at = config.service_truncates_at
        self.api_version = config.api_version
        self.product_version = config.product_version
        self.dedup_window = config.dedup_window
        #: Seconds each job waits in the queue before it runs (a busy server).
        self.job_delay = config.job_delay
        self.job_seconds_per_mb = config.job_seconds_per_mb
        self.busy_conflicts = config.busy_conflicts
        #: How jobs apply their batches ("hyper" or "strict"), and the seed that picks one of
        #: several source rows for a key under "hyper".
        self.semantics = config.semantics
        self.seed = config.seed
        #: How source columns that differ from the target's are met (where Tableau is silent).
        self.source_columns = SourceColumns(
            extra=config.extra_columns,
            missing=config.missing_columns,
            partial=config.partial_update,
        )
        #: What a data source downloaded without its extract records of its columns' types
        #: ("exact", "coarse"), or "refuse" to download it.
        self.download_types = config.download_types
        #: How a repeated RequestID is answered: "original" (the first request's job),
        #: "new_job" (a new job that applies nothing) or "refuse" (409, naming the duplicate).
        self.replay = config.replay
        self.limits = Limits(
            calls_per_window=config.rest_calls_per_window,
            queries_per_window=config.service_query_quota,
            max_concurrent=config.max_concurrent,
            window=config.rate_window,
        )
        self.owns_directory = config.directory is None
        self.directory = Path(config.directory or tempfile.mkdtemp(prefix="tabhyper-fake-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        #: Its parts: sign-ins and sessions, upload sessions.
        self.sign_ins = SignIns(config)
        self.uploads = Uploads(config, self.directory)
        self.lock = threading.RLock()
        self.sources: dict[str, DataSource] = {}
        self.jobs: dict[str, Job] = {}
        self.request_ids: dict[str, tuple[float, str]] = {}
        self.jobs_run: Counter[str] = Counter()
        self.projects: dict[str, Project] = {}
        self.default_project = self.add_project("Default")

    def shutdown(self) -> None:
        """Stop the job workers and remove the files this backend made."""
        for ds in self.sources.values():
            if ds.worker is not None:
                ds.queue.put(None)
                ds.worker.join(timeout=30)
                ds.worker = None
        if self.owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)
        else:
            shutil.rmtree(self.directory / "uploads", ignore_errors=True)

    # -- data sources ------------------------------------------------------------------------
    def add_datasource(
        self,
        name: str,
        hyper_path: str | os.PathLike[str],
        *,
        project: str = "Default",
        project_id: str | None = None,
        connections: int = 1,
    ) -> str:
        """Publish a copy of ``hyper_path`` as a live-to-Hyper data source; returns its LUID."""
        if project_id is None:
            found = [p for p in self.projects.values() if p.name == project and p.parent_id is None]
            project_id = found[0].id if found else self.add_project(project)
        elif project_id not in self.projects:
            raise not_found("404005", f"Project '{project_id}' could not be found.")
        return self._new_datasource(name, project_id, Path(hyper_path), connections).id

    def _new_datasource(
        self, name: str, project_id: str, file: Path, connections: int = 1
    ) -> DataSource:
        luid = str(uuid.uuid4())
        path = self.directory / f"{luid}.hyper"
        shutil.copyfile(file, path)
        path.chmod(0o600)
        ds = DataSource(
            luid,
            name,
            self.projects[project_id].name,
            project_id,
            path,
            [str(uuid.uuid4()) for _ in range(connections)],
        )
        with self.lock:
            self.sources[luid] = ds
        return ds

    def delete_datasource(self, luid: str) -> None:
        """Delete Data Source: gone with its file, once its queued jobs have run."""
        source = self.datasource(luid)
        with self.lock:
            del self.sources[luid]
        if source.worker is not None:
            source.queue.put(None)
            source.worker.join(timeout=30)
        with contextlib.suppress(FileNotFoundError):
            source.path.unlink()

    # -- projects and publishing ---------------------------------------------------------------
    def add_project(self, name: str, parent: str | None = None) -> str:
        """A new project (under the project LUID ``parent``); returns its LUID."""
        if parent is not None and parent not in self.projects:
            raise not_found("404005", f"Project '{parent}' could not be found.")
        luid = str(uuid.uuid4())
        with self.lock:
            self.projects[luid] = Project(luid, name, parent)
        return luid

    def publish(self, name: str, project_id: str | None, file: Path, mode: str) -> DataSource:
        """Publish ``file`` as data source ``name``: ``create`` (409 when the name is taken in
        the project), ``overwrite`` (replace its data, same LUID) or ``append`` (insert its
        tables' rows into the existing tables; a missing data source is created)."""
        project_id = project_id or self.default_project
        if project_id not in self.projects:
            raise not_found("404005", f"Project '{project_id}' could not be found.")
        _check_hyper(file)
        with self.lock:
            existing = [
                d for d in self.sources.values() if d.name == name and d.project_id == project_id
            ]
            if not existing:
                return self._new_datasource(name, project_id, file)
            (ds,) = existing
            if mode == "create":
                raise ApiFailure(
                    409,
                    "409004",
                    "Resource Conflict",
                    f"A data source named '{name}' already exists in project "
                    f"'{self.projects[project_id].name}'; publish with overwrite=true or "
                    "append=true",
                )
            # Every unfinished update job of the data source counts (queued, waiting for the
            # worker, running): an older update must never land on a newer snapshot.
            if self._being_updated(ds):
                raise ApiFailure(409, "409000", "Conflict", "the data source is being updated")
            if mode == "overwrite":
                _overwrite(ds, file)
                return ds
        _append(ds, file)
        return ds

    def _being_updated(self, ds: DataSource) -> bool:
        """Whether an update job of ``ds`` is unfinished (queued, waiting for the worker,
        running)."""
        return any(
            j.datasource is ds and j.kind == "UpdateUploadedFile" and j.finish_code is None
            for j in self.jobs.values()
        )

    def finished_job(self, kind: str, ds: DataSource) -> Job:
        """A job record for work already done (a publish answered as a job)."""
        now = now_iso()
        job = Job(str(uuid.uuid4()), ds, None, None, None, now, kind=kind)
        job.started_at = job.completed_at = now
        job.finish_code, job.progress = 0, 100
        with self.lock:
            self.jobs[job.id] = job
        return job

    def datasource(self, luid: str) -> DataSource:
        ds = self.sources.get(luid)
        if ds is None:
            raise not_found("404011", f"Datasource '{luid}' could not be found.")
        return ds

    def find_datasources(self, filters: Mapping[str, str]) -> list[DataSource]:
        """Data sources matching equality filters on ``name`` and ``projectName``."""
        found = []
        for ds in self.sources.values():
            if "name" in filters and ds.name != filters["name"]:
                continue
            if "projectName" in filters and ds.project != filters["projectName"]:
                continue
            found.append(ds)
        return found

    # -- updates and jobs ----------------------------------------------------------------------
    def start_refresh(self, luid: str, seconds: float) -> None:
        """A refresh of the data source runs for ``seconds`` from now (an update sent
        meanwhile is refused with 409093)."""
        with self.lock:
            self.datasource(luid).refresh_until = time.time() + seconds

    def check_not_busy(self, source: DataSource) -> None:
        """409093 while a refresh of ``source`` runs, or (``busy_conflicts``) while another
        of its jobs has not finished."""
        with self.lock:
            refreshing = source.refresh_until > time.time()
            running = self.busy_conflicts and any(
                j.datasource is source and j.finish_code is None for j in self.jobs.values()
            )
        if refreshing or running:
            what = "a refresh" if refreshing else "another job"
            raise ApiFailure(
                409,
                "409093",
                "Conflict",
                f"{what} of data source '{source.name}' is running; try again when it ends",
            )

    def ignored_job(self, earlier: Job) -> Job:
        """A new job, finished at once, that applies nothing: a repeated RequestID's answer
        under ``replay="new_job"`` (its notes say why)."""
        job = Job(str(uuid.uuid4()), earlier.datasource, earlier.connection, None, None, now_iso())
        job.started_at = job.completed_at = now_iso()
        job.began_at = job.finished_at = time.time()
        job.finish_code, job.progress = 0, 100
        job.notes = f"duplicate request: job {earlier.id} had the same RequestID; nothing applied"
        with self.lock:
            self.jobs[job.id] = job
        return job

    def job_for_request(self, request_id: str) -> Job | None:
        """The job an earlier request with this RequestID created, within the window."""
        with self.lock:
            seen = self.request_ids.get(request_id)
            if seen is not None and time.time() - seen[0] < self.dedup_window:
                return self.jobs[seen[1]]
        return None

    def submit_update(
        self,
        source: DataSource,
        connection: str | None,
        request_id: str,
        batch: ActionBatch,
        upload: Path | None,
    ) -> Job:
        """Queue ``batch`` as a job on ``source``'s worker."""
        job = Job(str(uuid.uuid4()), source, connection, batch, upload, now_iso())
        with self.lock:
            self.jobs[job.id] = job
            self.request_ids[request_id] = (time.time(), job.id)
            if source.worker is None:
                source.worker = threading.Thread(
                    target=self._work, args=(source,), name=f"fake-job-{source.name}", daemon=True
                )
                source.worker.start()
        source.queue.put(job)
        return job

    def _run(self, source: DataSource, job: Job) -> tuple[int, str | None]:
        """Apply a job's batch to its data source: its finish code and notes (a job always
        finishes); its upload removed after it."""
        try:
            assert job.batch is not None
            if self.job_seconds_per_mb and job.upload is not None:
                time.sleep(job.upload.stat().st_size / MB * self.job_seconds_per_mb)
            apply_locally(
                job.batch,
                target=source.path,
                payload=job.upload,
                semantics=self.semantics,
                seed=self.seed,
                source_columns=self.source_columns,
            )
            return 0, None
        except ApplyError as err:
            return 1, str(err)
        except Exception as err:  # a job must always finish
            return 1, f"{type(err).__name__}: {err}"
        finally:
            if job.upload is not None:
                with contextlib.suppress(FileNotFoundError):
                    job.upload.unlink()

    def _work(self, source: DataSource) -> None:
        while True:
            job = source.queue.get()
            if job is None:
                return
            if self.job_delay:
                time.sleep(self.job_delay)
            with self.lock:
                if job.cancel_requested:
                    job.finish_code, job.completed_at = 2, now_iso()
                    continue
                job.started_at, job.began_at = now_iso(), time.time()
            code, notes = self._run(source, job)
            with self.lock:
                self.jobs_run[source.id] += 1
                job.finish_code, job.notes = code, notes
                job.progress, job.completed_at = 100, now_iso()
                job.finished_at = time.time()

    def job(self, job_id: str) -> Job:
        found = self.jobs.get(job_id)
        if found is None:
            raise not_found("404002", f"Job '{job_id}' could not be found.")
        return found

    def cancel_job(self, job_id: str) -> Job:
        with self.lock:
            found = self.job(job_id)
            if found.started_at is not None:
                raise ApiFailure(
                    409, "409000", "Conflict", "the job has started and cannot be cancelled"
                )
            found.cancel_requested = True
            return found

    def age_jobs(self, seconds: float) -> None:
        """Move every job's times, and the RequestIDs it remembers, ``seconds`` into the past
        (as if that much time had passed since they were submitted)."""

        def shift(value: str | None) -> str | None:
            if value is None:
                return None
            when = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
            return (when - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")

        with self.lock:
            for job in self.jobs.values():
                job.created_at = shift(job.created_at) or job.created_at
                job.started_at = shift(job.started_at)
                job.completed_at = shift(job.completed_at)
            for rid, (when, job_id) in list(self.request_ids.items()):
                self.request_ids[rid] = (when - seconds, job_id)

    def forget_jobs(self) -> int:
        """Forget every finished job and the RequestIDs that led to them, as a server does
        once its retention has passed; returns how many jobs were forgotten."""
        with self.lock:
            gone = {j for j, job in self.jobs.items() if job.finish_code is not None}
            for job_id in gone:
                del self.jobs[job_id]
            for rid, (_, job_id) in list(self.request_ids.items()):
                if job_id in gone:
                    del self.request_ids[rid]
            return len(gone)

    def wait_idle(self, timeout: float = 30) -> None:
        """Wait until every queued job has finished."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if all(j.finish_code is not None for j in self.jobs.values()):
                    return
            time.sleep(0.01)
        raise TimeoutError("jobs still running")

"""Uploading an update's parts (:class:`PartUploader`): the first part's upload made by
``upload()``, each part's upload as its turn comes, and the next part's upload made while
the server runs the job of the part before it (parts in flight)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import ClassVar, NamedTuple

from ..local.progress import bar as progress_bar
from ..local.telemetry import span
from ..rest.session import RestSession
from ..values.actions import ActionBatch
from ..values.parts import PayloadLike, PayloadPart
from ..values.redaction import get_logger
from .state import UpdateRecord
from .units import PartRun, Unit, step

__all__ = ["UPLOAD_SESSION_UNKNOWN", "FirstUpload", "PartUploader"]

log = get_logger("tabhyper_update")

#: Tableau's error code for an upload session it does not know (consumed or expired).
UPLOAD_SESSION_UNKNOWN = "404003"


class FirstUpload(NamedTuple):
    """A part's upload made before its turn: the part it holds, its session and seconds."""

    part: PayloadPart
    session_id: str
    seconds: float


class PartUploader:
    """The uploads of one bound payload's parts (see the module docstring)."""

    #: Upload the next part while the server runs the previous part's job (off: one part
    #: after another, as a baseline to measure against).
    parts_in_flight: ClassVar[bool] = True

    def __init__(self, payload: PayloadLike, client: RestSession, *, progress: bool) -> None:
        self.payload = payload
        self.client = client
        self.progress = progress
        #: The first part's upload, made by ``upload()`` and not yet used.
        self.first: FirstUpload | None = None
        #: The next part's upload, made while the server runs the previous part's job.
        self._ahead: tuple[PayloadPart, Future[FirstUpload]] | None = None
        self._pool: ThreadPoolExecutor | None = None

    def upload(self, index: int, part: PayloadPart) -> str:
        """Upload one part (with its progress bar); returns the upload session."""
        started = time.perf_counter()
        label = f"upload part {index + 1}/{len(self.payload.parts)}"
        with progress_bar(
            self.progress, total=part.size_bytes, unit="B", unit_scale=True, desc=label
        ) as bar:
            seen = [0]

            def tick(sent: int, total: int) -> None:
                if bar is not None:
                    bar.update(sent - seen[0])
                    seen[0] = sent

            with span("upload", part=index + 1, bytes=part.size_bytes):
                session = self.client.upload(part.path, progress=tick)
        log.info("%s: %d bytes in %.2f s", label, part.size_bytes, time.perf_counter() - started)
        return session

    def upload_first(self) -> None:
        """Upload the first part now (what ``upload()`` does before it returns)."""
        if not self.payload.parts or self.first is not None:
            return
        part = self.payload.parts[0]
        started = time.perf_counter()
        session = step(
            "upload of part 1",
            "this part was not submitted",
            partial(self.upload, 0, part),
        )
        self.first = FirstUpload(part, session, time.perf_counter() - started)

    def take_first(self, part: PayloadPart | None, batch: ActionBatch) -> FirstUpload | None:
        """The upload ``upload()`` made, for the part it holds (once): ``None`` when this is
        another part (e.g. the first part written again by the schema policy)."""
        early, self.first = self.first, None
        if early is not None and (part is None or part is not early.part or not batch.reads_source):
            log.info("the upload made by upload() is not this part's: it goes unused")
            return None
        return early

    def ahead(self, record: UpdateRecord, units: Sequence[Unit], index: int) -> None:
        """Upload part ``index`` in the background while the server runs the job of the part
        before it (its update request still waits for that job: parts apply in order)."""
        if not self.parts_in_flight or index >= len(record.parts) or self._ahead is not None:
            return
        part, batch = units[min(index, len(units) - 1)]
        state = record.parts[index]
        if part is None or not batch.reads_source or state.status != "pending":
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="tabhyper-upload")

        def upload() -> FirstUpload:
            started = time.perf_counter()
            session = self.upload(index, part)
            return FirstUpload(part, session, time.perf_counter() - started)

        self._ahead = (part, self._pool.submit(upload))

    def take_ahead(self, part: PayloadPart | None, batch: ActionBatch) -> FirstUpload | None:
        """The upload made ahead for ``part``, once it is done (``None`` when there is none,
        or it failed: the part is then uploaded as usual)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        if ahead[0] is not part or not batch.reads_source:
            log.info("the upload made ahead is not this part's: it goes unused")
            return None
        try:
            return ahead[1].result()
        except Exception as err:  # the part is uploaded again in turn, whose error counts
            log.warning("uploading part ahead failed (%s); uploading it again", err)
            return None

    def stop(self) -> None:
        """Wait for an upload made ahead and not used (an update that stopped early); say
        so when the first part's upload went unused."""
        self._ahead = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self.first is not None:
            self.first = None
            log.info(
                "the first part's upload made by upload() went unused: that part had been "
                "applied or submitted before"
            )

    def upload_into(self, one: PartRun) -> None:
        """Upload the part in its turn into its state's upload session."""
        state, part, update = one.state, one.part, one.update
        assert part is not None
        started = time.perf_counter()
        state.upload_session_id = step(
            f"upload of part {state.index + 1}",
            "this part was not submitted",
            partial(self.upload, state.index, part),
        )
        update.seconds["upload"] = time.perf_counter() - started

"""Uploading an update's parts: the first part's upload made by ``upload()``, each part's
upload as its turn comes, and the next part's upload made while the server runs the job of
the part before it (parts in flight). Mixed into :class:`~.chain.BoundPayload`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import ClassVar, NamedTuple, TypeVar

from ..local.progress import bar as progress_bar
from ..local.telemetry import span
from ..rest.session import RestSession
from ..values.actions import ActionBatch
from ..values.errors import TabHyperError
from ..values.parts import PayloadLike, PayloadPart
from ..values.redaction import get_logger
from .results import PartUpdate
from .state import PartState, UpdateRecord

__all__ = ["UPLOAD_SESSION_UNKNOWN", "FirstUpload", "PartUploads", "Unit", "step"]

log = get_logger("tabhyper_update")
_T = TypeVar("_T")

#: Tableau's error code for an upload session it does not know (consumed or expired).
UPLOAD_SESSION_UNKNOWN = "404003"


def step(step: str, consequence: str, fn: Callable[[], _T]) -> _T:
    """Run one step; an error of ours leaving it says which step and what it means."""
    try:
        return fn()
    except TabHyperError as err:
        err.at_step(step, consequence)
        raise


class Unit(NamedTuple):
    """One part's update: the part (None for a batch that reads no table) and its batch."""

    part: PayloadPart | None
    batch: ActionBatch


class FirstUpload(NamedTuple):
    """A part's upload made before its turn: its session and seconds."""

    session_id: str
    seconds: float


class PartUploads:
    """The uploads of a bound payload's parts (see the module docstring)."""

    #: Upload the next part while the server runs the previous part's job (off: one part
    #: after another, as a baseline to measure against).
    parts_in_flight: ClassVar[bool] = True

    payload: PayloadLike
    client: RestSession
    progress: bool
    _uploaded_first: FirstUpload | None
    _ahead: tuple[PayloadPart, Future[FirstUpload]] | None
    _uploader: ThreadPoolExecutor | None

    def _upload_part(self, index: int, part: PayloadPart) -> str:
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

    def _take_first_upload(
        self, index: int, part: PayloadPart | None, batch: ActionBatch
    ) -> FirstUpload | None:
        """The upload ``upload()`` made, for the first part's first submission (once)."""
        early, self._uploaded_first = self._uploaded_first, None
        first = self.payload.parts[0] if self.payload.parts else None
        if early is not None and (part is None or part is not first or not batch.reads_source):
            log.info("the upload made by upload() is not needed: it goes unused")
            return None
        return early

    def _upload_ahead(self, record: UpdateRecord, units: Sequence[Unit], index: int) -> None:
        """Upload part ``index`` in the background while the server runs the job of the part
        before it (its update request still waits for that job: parts apply in order)."""
        if not self.parts_in_flight or index >= len(record.parts) or self._ahead is not None:
            return
        part, batch = units[min(index, len(units) - 1)]
        state = record.parts[index]
        if part is None or not batch.reads_source or state.status != "pending":
            return
        if self._uploader is None:
            self._uploader = ThreadPoolExecutor(1, thread_name_prefix="tabhyper-upload")

        def upload() -> FirstUpload:
            started = time.perf_counter()
            session = self._upload_part(index, part)
            return FirstUpload(session, time.perf_counter() - started)

        self._ahead = (part, self._uploader.submit(upload))

    def _take_ahead(self, part: PayloadPart | None, batch: ActionBatch) -> FirstUpload | None:
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

    def _stop_uploading(self) -> None:
        """Wait for an upload made ahead and not used (an update that stopped early)."""
        self._ahead = None
        if self._uploader is not None:
            self._uploader.shutdown(wait=True, cancel_futures=True)
            self._uploader = None

    def _upload_into(
        self, state: PartState, index: int, part: PayloadPart, update: PartUpdate
    ) -> None:
        started = time.perf_counter()
        state.upload_session_id = step(
            f"upload of part {index + 1}",
            "this part was not submitted",
            partial(self._upload_part, index, part),
        )
        update.seconds["upload"] = time.perf_counter() - started

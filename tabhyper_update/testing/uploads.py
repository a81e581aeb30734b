"""The fake server's upload sessions: initiate, append (in order,
or as blocks with ``sequenceID``, assembled by sequence), and one use by an update or a
publish."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .settings import BackendConfig
from .wire import ApiFailure, bad_request, not_found

__all__ = ["MB", "Upload", "Uploads"]

MB = 1024 * 1024


@dataclass
class Upload:
    path: Path
    size: int = 0
    consumed: bool = False
    #: Blocks sent with ``sequenceID``: sequence → its file (assembled when consumed).
    blocks: dict[int, Path] = field(default_factory=dict)


class Uploads:
    """Upload sessions, behaving as the fake's settings say (a part of the backend:
    ``backend.uploads``)."""

    def __init__(self, config: BackendConfig, directory: Path) -> None:
        self.directory = directory
        (directory / "uploads").mkdir(exist_ok=True)
        #: Upload sessions by id.
        self.sessions: dict[str, Upload] = {}
        #: False counts upload bytes without keeping them (for transfer benchmarks); an
        #: update that reads such an upload is refused.
        self.store_uploads = config.store_uploads
        self.max_upload_mb = config.max_upload_mb
        self.upload_seconds_per_mb = config.upload_seconds_per_mb
        #: Whether an upload's blocks may carry ``sequenceID``; appends being received now,
        #: and the most at once so far.
        self.sequence_ids = config.sequence_ids
        self.appends_in_flight = 0
        self.most_appends_in_flight = 0
        self.lock = threading.RLock()

    def initiate(self) -> str:
        session_id = f"{uuid.uuid4().int % 10000}:{uuid.uuid4().hex}-1:0"
        path = self.directory / "uploads" / f"{uuid.uuid4().hex}.part"
        path.touch(mode=0o600)
        with self.lock:
            self.sessions[session_id] = Upload(path)
        return session_id

    def open(self, session_id: str) -> Upload:
        with self.lock:
            upload = self.sessions.get(session_id)
        if upload is None or upload.consumed:
            raise not_found("404003", f"upload session '{session_id}' could not be found")
        return upload

    def append(
        self, session_id: str, chunk: memoryview | bytes, sequence: int | None = None
    ) -> int:
        """Append ``chunk`` to the upload (as block ``sequence``: one sent again replaces
        it); returns its size in bytes so far."""
        upload = self.open(session_id)
        if sequence is not None and not self.sequence_ids:
            raise bad_request("unknown query parameter 'sequenceID'")
        # An upload that has begun goes on the way it began: in blocks or appended to.
        begun = upload.size or upload.blocks
        if begun and bool(upload.blocks) != (sequence is not None):
            raise bad_request("an upload's blocks either all carry sequenceID or none does")
        with self.lock:
            self.appends_in_flight += 1
            self.most_appends_in_flight = max(self.most_appends_in_flight, self.appends_in_flight)
        try:
            if self.upload_seconds_per_mb:
                time.sleep(len(chunk) / MB * self.upload_seconds_per_mb)
            if sequence is not None:
                return self._put_block(upload, sequence, chunk)
            return self._append(upload, chunk)
        finally:
            with self.lock:
                self.appends_in_flight -= 1

    def _append(self, upload: Upload, chunk: memoryview | bytes) -> int:
        with self.lock:
            if self.store_uploads:
                with open(upload.path, "ab") as f:
                    f.write(chunk)
            upload.size += len(chunk)
            return upload.size

    def _put_block(self, upload: Upload, sequence: int, chunk: memoryview | bytes) -> int:
        if sequence < 1:
            raise bad_request(f"sequenceID must be 1 or more, got {sequence}")
        block = upload.path.with_name(f"{upload.path.name}.{sequence}")
        if self.store_uploads:
            block.write_bytes(chunk)
        with self.lock:
            old = upload.blocks.get(sequence)
            upload.size += len(chunk) - (old.stat().st_size if old and old.exists() else 0)
            upload.blocks[sequence] = block
            return upload.size

    def _assemble(self, upload: Upload) -> None:
        """A sequenced upload's blocks, in sequence, as its file; a gap is refused."""
        missing = sorted(set(range(1, max(upload.blocks) + 1)) - set(upload.blocks))
        if missing:
            raise bad_request(
                f"the upload's blocks leave a gap: sequenceID {', '.join(map(str, missing[:5]))} "
                "never arrived"
            )
        with open(upload.path, "wb") as out:
            for sequence in sorted(upload.blocks):
                with open(upload.blocks[sequence], "rb") as f:
                    shutil.copyfileobj(f, out, 4 * MB)
                upload.blocks[sequence].unlink()
        upload.blocks.clear()

    def consume(self, session_id: str, *, capped: bool = True) -> Path:
        """The uploaded file, for one use (a session cannot be used twice); ``capped``: the
        update's size cap applies (publishing has none)."""
        upload = self.open(session_id)
        with self.lock:
            if upload.blocks and self.store_uploads:
                self._assemble(upload)
            if not self.store_uploads:
                raise bad_request("this fake server does not keep uploads (store_uploads=False)")
            if capped and upload.size > self.max_upload_mb * MB:
                raise ApiFailure(
                    413,
                    "413000",
                    "Payload Too Large",
                    f"the uploaded file is {upload.size / MB:.1f} MB; this server accepts at "
                    f"most {self.max_upload_mb:g} MB",
                )
            upload.consumed = True
            return upload.path

    def forget(self) -> int:
        """Forget every upload session not yet used, as the server does once they expire;
        returns how many were forgotten."""
        with self.lock:
            gone = [k for k, u in self.sessions.items() if not u.consumed]
            for key in gone:
                with contextlib.suppress(FileNotFoundError):
                    self.sessions.pop(key).path.unlink()
            return len(gone)

"""The chunked file upload protocol (initiate, then append chunks in order).

Each append is a ``multipart/mixed`` body of exactly two parts: an empty
``request_payload`` and the chunk as ``tableau_file``. The chunk is read from the file into
one reusable buffer that already holds the multipart framing, so memory stays at one chunk
plus a constant whatever the file size.

An append is not idempotent: replaying one whose outcome is unknown (timeout, dropped
connection, 5xx) could duplicate bytes. Such an append is never replayed; the whole upload
restarts in a fresh upload session instead, a bounded number of times.
"""

from __future__ import annotations

import io
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ApiError, ConnectionFailedError, RequestTimeoutError, TransportError

if TYPE_CHECKING:
    from .client import TableauClient

__all__ = ["MAX_CHUNK_MB", "ProgressCallback", "multipart_framing", "upload_file"]

log = logging.getLogger("tabhyper_update")

MB = 1024 * 1024
#: The server refuses requests larger than 64 MB.
MAX_CHUNK_MB = 64

ProgressCallback = Callable[[int, int], None]


def multipart_framing(boundary: str, filename: str = "payload.hyper") -> tuple[bytes, bytes]:
    """The bytes before and after a chunk in an append body."""
    head = (
        f"--{boundary}\r\n"
        'Content-Disposition: name="request_payload"\r\n'
        "Content-Type: text/xml\r\n"
        "\r\n"
        "\r\n"
        f"--{boundary}\r\n"
        f'Content-Disposition: name="tableau_file"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n"
        "\r\n"
    ).encode("ascii")
    tail = f"\r\n--{boundary}--\r\n".encode("ascii")
    return head, tail


class _Body(io.RawIOBase):
    """A read-only view over the append buffer; ``len()`` lets requests send Content-Length."""

    def __init__(self, view: memoryview) -> None:
        self._view = view
        self._pos = 0

    def __len__(self) -> int:
        return len(self._view)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, min(len(self._view), base + offset))
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        end = (
            len(self._view) if size is None or size < 0 else min(len(self._view), self._pos + size)
        )
        data = bytes(self._view[self._pos : end])
        self._pos = end
        return data


def _unknown_outcome(error: BaseException) -> bool:
    if isinstance(error, (ConnectionFailedError, RequestTimeoutError)):
        return True
    if isinstance(error, ApiError):
        return error.status >= 500 or error.status == 429
    return isinstance(error, TransportError)


class UploadRestart(Exception):
    """An append whose outcome is unknown, or a size mismatch: start a fresh session."""


def _reported_mb(body: dict[str, Any] | None) -> float | None:
    try:
        return float((body or {})["fileUpload"]["fileSize"])
    except (KeyError, TypeError, ValueError):
        return None


def upload_file(
    client: TableauClient,
    path: str | os.PathLike[str],
    *,
    chunk_size: int,
    max_restarts: int,
    progress: ProgressCallback | None = None,
) -> str:
    """Upload ``path``; returns the upload session id to pass to the update call."""
    path = Path(path)
    total = path.stat().st_size
    boundary = uuid.uuid4().hex
    head, tail = multipart_framing(boundary)
    buffer = bytearray(len(head) + chunk_size + len(tail))
    buffer[: len(head)] = head
    restarts = 0
    while True:
        try:
            return _upload_once(
                client, path, total, buffer, head, tail, boundary, chunk_size, progress
            )
        except UploadRestart as reason:
            restarts += 1
            if restarts > max_restarts:
                cause = reason.__cause__
                message = (
                    f"upload of {path.name} failed: {reason}; gave up after "
                    f"{max_restarts} fresh upload sessions"
                )
                if isinstance(cause, ApiError):
                    raise ApiError(
                        status=cause.status,
                        code=cause.code,
                        summary=cause.summary,
                        detail=cause.detail,
                        method=cause.method,
                        url=cause.url,
                        hint=message,
                    ) from cause
                raise ConnectionFailedError(message) from cause
            log.warning(
                "upload of %s: %s; starting a fresh upload session (%d of %d)",
                path.name,
                reason,
                restarts,
                max_restarts,
            )


def _upload_once(
    client: TableauClient,
    path: Path,
    total: int,
    buffer: bytearray,
    head: bytes,
    tail: bytes,
    boundary: str,
    chunk_size: int,
    progress: ProgressCallback | None,
) -> str:
    session_id = client.initiate_upload()
    log.info("uploading %s (%d bytes) in session %s", path.name, total, session_id)
    view = memoryview(buffer)
    sent = 0
    if progress is not None:
        progress(0, total)
    with path.open("rb") as f:
        while True:
            n = f.readinto(view[len(head) : len(head) + chunk_size])
            if not n:
                if sent == 0 and total == 0:
                    raise TransportError(f"{path.name} is empty: nothing to upload")
                break
            end = len(head) + n
            view[end : end + len(tail)] = tail
            body = view[: end + len(tail)]
            try:
                answer = client.append_chunk(session_id, _Body(body), boundary)
            except Exception as err:
                if _unknown_outcome(err):
                    raise UploadRestart(
                        f"append of bytes {sent}-{sent + n - 1} had an unknown outcome ({err})"
                    ) from err
                raise
            sent += n
            reported = _reported_mb(answer)
            # fileSize is the cumulative size in MB; allow for the server's rounding.
            if reported is not None and abs(reported - sent / MB) > 1.0:
                raise UploadRestart(
                    f"the server reports {reported:g} MB received after {sent / MB:.2f} MB "
                    "were sent"
                )
            if progress is not None:
                progress(sent, total)
    if sent != total:
        raise UploadRestart(f"read {sent} bytes of {path.name} but it holds {total}")
    return session_id

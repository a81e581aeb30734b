"""The chunked file upload protocol (initiate, then append chunks in order).

Each append is a ``multipart/mixed`` body of exactly two parts: an empty
``request_payload`` and the chunk as ``tableau_file``. The chunk is streamed from the file
as it is sent (with a Content-Length), so memory stays constant whatever the chunk and file
sizes, and reading the file overlaps sending it.

An append is not idempotent: replaying one whose outcome is unknown (timeout, dropped
connection, 5xx) could duplicate bytes. Such an append is never replayed; the whole upload
restarts in a fresh upload session instead, a bounded number of times.
"""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

from ..values.errors import (
    ApiError,
    ConnectionFailedError,
    PayloadError,
    RequestTimeoutError,
    TransportError,
)
from ..values.redaction import get_logger
from .caller import ProgressCallback, RestCaller

__all__ = [
    "MAX_BLOCKS",
    "MAX_CHUNK_MB",
    "ProgressCallback",
    "append_chunk",
    "block_size",
    "initiate_upload",
    "multipart_framing",
    "upload_file",
]

log = get_logger("tabhyper_update")

MB = 1024 * 1024
#: The server refuses requests larger than 64 MB.
MAX_CHUNK_MB = 64
#: Tableau's REST reference limits a file upload to 1,000 appended blocks.
MAX_BLOCKS = 1000


def block_size(total: int, chunk_size: int, name: str) -> int:
    """The block size for a file of ``total`` bytes: ``chunk_size``, grown so that the file
    fits in :data:`MAX_BLOCKS` blocks, within the 64 MB request cap; a file that cannot fit
    is refused before anything is sent."""
    # The append body adds a few hundred bytes of framing to each block.
    largest = MAX_CHUNK_MB * MB - 4096
    needed = -(-total // MAX_BLOCKS)
    if needed > largest:
        raise PayloadError(
            f"{name} is {total / MB:,.0f} MB: more than {MAX_BLOCKS} blocks of the largest "
            f"request the server takes ({MAX_CHUNK_MB} MB) hold; nothing was sent. Build the "
            "payload in smaller parts (max_payload_mb)"
        )
    if needed > chunk_size:
        log.info(
            "uploading %s in blocks of %.1f MB (not %.1f MB): a file takes at most %d blocks",
            name,
            needed / MB,
            chunk_size / MB,
            MAX_BLOCKS,
        )
        return needed
    return chunk_size


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


class _ChunkBody(io.RawIOBase):
    """One append body, streamed: framing head, ``length`` bytes of the file from
    ``offset``, framing tail. ``len()`` lets requests send a Content-Length; nothing but
    the block being sent is held in memory, and reading the file overlaps sending it."""

    def __init__(self, head: bytes, file: BinaryIO, offset: int, length: int, tail: bytes) -> None:
        self._head, self._tail = head, tail
        self._file, self._offset, self._length = file, offset, length
        self._size = len(head) + length + len(tail)
        self._pos: int = 0
        self.seek(0)

    def __len__(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base: int = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, min(self._size, base + offset))
        in_file = min(max(0, self._pos - len(self._head)), self._length)
        self._file.seek(self._offset + in_file)
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self._size - self._pos
        out = bytearray()
        while len(out) < size and self._pos < self._size:
            want = size - len(out)
            head, body_end = len(self._head), len(self._head) + self._length
            if self._pos < head:
                piece = self._head[self._pos : self._pos + want]
            elif self._pos < body_end:
                piece = self._file.read(min(want, body_end - self._pos))
                if not piece:
                    raise OSError("the payload file shrank while it was being uploaded")
            else:
                start = self._pos - body_end
                piece = self._tail[start : start + want]
            out += piece
            self._pos += len(piece)
        return bytes(out)


def _unknown_outcome(error: BaseException) -> bool:
    if isinstance(error, (ConnectionFailedError, RequestTimeoutError)):
        return True
    if isinstance(error, ApiError):
        return error.status is not None and (error.status >= 500 or error.status == 429)
    return isinstance(error, TransportError)


class UploadRestart(Exception):
    """An append whose outcome is unknown, or a size mismatch: start a fresh session."""


def initiate_upload(client: RestCaller) -> str:
    """Open an upload session; returns its id."""
    _, body = client.request("POST", "fileUploads", retry=True, expected=(200, 201))
    session_id = ((body or {}).get("fileUpload") or {}).get("uploadSessionId")
    if not session_id:
        raise TransportError("fileUploads answered without an uploadSessionId")
    return str(session_id)


def append_chunk(
    client: RestCaller, session_id: str, body: Any, boundary: str
) -> dict[str, Any] | None:
    """Append one chunk to an upload session; the server's answer."""
    # Never retried by the transport: an append with an unknown outcome restarts the upload.
    _, answer = client.request(
        "PUT",
        f"fileUploads/{quote(session_id, safe='')}",
        retry=False,
        data=body,
        headers={"Content-Type": f"multipart/mixed; boundary={boundary}"},
    )
    return answer


def _reported_mb(body: dict[str, Any] | None) -> float | None:
    try:
        return float((body or {})["fileUpload"]["fileSize"])
    except (KeyError, TypeError, ValueError):
        return None


def upload_file(
    client: RestCaller,
    path: str | os.PathLike[str],
    *,
    chunk_size: int,
    max_restarts: int,
    progress: ProgressCallback | None = None,
) -> str:
    """Upload ``path``; returns the upload session id to pass to the update call."""
    path = Path(path)
    try:
        total = path.stat().st_size
        if not path.is_file():
            raise IsADirectoryError(f"{path} is not a file")
    except OSError as err:
        raise PayloadError(f"cannot upload {str(path)!r}: {err.strerror or err}") from None
    if total == 0:
        raise PayloadError(f"{str(path)!r} is empty: nothing to upload")
    chunk_size = block_size(total, chunk_size, path.name)
    restarts = 0
    while True:
        try:
            return _upload_once(client, path, total, chunk_size, progress)
        except UploadRestart as reason:
            restarts += 1
            if restarts > max_restarts:
                cause = reason.__cause__
                message = (
                    f"upload of {path.name} failed: {reason}; gave up after "
                    f"{max_restarts} fresh upload sessions"
                )
                if isinstance(cause, ApiError):
                    raise cause.with_hint(message) from cause
                raise ConnectionFailedError(message) from cause
            log.warning(
                "upload of %s: %s; starting a fresh upload session (%d of %d)",
                path.name,
                reason,
                restarts,
                max_restarts,
            )


def _upload_once(
    client: RestCaller,
    path: Path,
    total: int,
    chunk_size: int,
    progress: ProgressCallback | None,
) -> str:
    session_id = client.initiate_upload()
    log.info("uploading %s (%d bytes) in session %s", path.name, total, session_id)
    boundary = uuid.uuid4().hex
    head, tail = multipart_framing(boundary)
    sent = 0
    if progress is not None:
        progress(0, total)
    with path.open("rb") as f:
        while sent < total:
            n = min(chunk_size, total - sent)
            body = _ChunkBody(head, f, sent, n, tail)
            try:
                answer = client.append_chunk(session_id, body, boundary)
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
    return session_id

"""The chunked file upload protocol (initiate, then append chunks in order).

Each append is a ``multipart/mixed`` body of exactly two parts: an empty
``request_payload`` and the chunk as ``tableau_file``. The chunk is streamed from the file
as it is sent (with a Content-Length), so memory stays constant whatever the chunk and file
sizes, and reading the file overlaps sending it.

An append is not idempotent: replaying one whose outcome is unknown (timeout, dropped
connection, 5xx) could duplicate bytes. Such an append is never replayed; the whole upload
restarts in a fresh upload session instead, a bounded number of times.

Where the server takes ``sequenceID`` (Tableau's REST reference: blocks may then be sent at
once, and are assembled by sequence), a file of several blocks goes as ``streams`` blocks in
flight. A block whose answer was lost is sent again alone, under its sequence, and the
server's answer to that says whether it could be: a refusal restarts the upload in a fresh
session as above. A server that refuses the parameter gets its blocks one after another, and
is remembered (per server, in this process) so that the next upload does not ask again; one
remembered as taking it that refuses it later (put back to an older release at the same
address) is relearnt: that upload starts again in a fresh session, one block after another.
"""

from __future__ import annotations

import io
import os
import threading
import uuid
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, BinaryIO, NoReturn
from urllib.parse import quote

from ..values.errors import (
    ApiError,
    ConnectionFailedError,
    InvalidArgumentError,
    PayloadError,
    RequestTimeoutError,
    TransportError,
)
from ..values.redaction import get_logger
from .caller import ProgressCallback, RestCaller
from .transport import child

__all__ = [
    "DEFAULT_UPLOAD_STREAMS",
    "MAX_BLOCKS",
    "MAX_CHUNK_MB",
    "ChunkBody",
    "ProgressCallback",
    "append_chunk",
    "block_size",
    "check_upload_streams",
    "initiate_upload",
    "multipart_framing",
    "refuses_sequence_ids",
    "takes_sequence_ids",
    "upload_file",
]

log = get_logger("tabhyper_update")

MB = 1024 * 1024
#: The server refuses requests larger than 64 MB.
MAX_CHUNK_MB = 64
#: Tableau's REST reference limits a file upload to 1,000 appended blocks.
MAX_BLOCKS = 1000
#: Blocks in flight at once where the server takes ``sequenceID`` (``upload_streams=``):
#: measured in ``benchmarks/parallel_upload.py``.
DEFAULT_UPLOAD_STREAMS = 4

#: Servers (their URLs) that refused ``sequenceID`` (their blocks go one after another),
#: and those that took it (their blocks all go at once, the first one too).
_SEQUENTIAL: set[str] = set()
_SEQUENCED: set[str] = set()
_SEQUENCE_LOCK = threading.Lock()


def check_upload_streams(value: object) -> int:
    """``upload_streams`` checked: a whole number of blocks in flight, 1 to 32."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(
            f"upload_streams must be a whole number of blocks in flight, got {value!r}",
            argument="upload_streams",
        )
    if not 1 <= value <= 32:
        raise InvalidArgumentError(
            f"upload_streams must be in [1, 32], got {value}", argument="upload_streams"
        )
    return value


def _server_key(server: str) -> str:
    return server.rstrip("/").lower()


def takes_sequence_ids(server: str) -> bool:
    """Whether blocks to ``server`` may carry ``sequenceID`` (until it refused one)."""
    with _SEQUENCE_LOCK:
        return _server_key(server) not in _SEQUENTIAL


def refuses_sequence_ids(server: str) -> None:
    """Remember that ``server`` refused ``sequenceID``."""
    with _SEQUENCE_LOCK:
        _SEQUENTIAL.add(_server_key(server))
        _SEQUENCED.discard(_server_key(server))


def _took_sequence_ids(server: str) -> bool:
    with _SEQUENCE_LOCK:
        return _server_key(server) in _SEQUENCED


def _takes_sequence_ids(server: str) -> None:
    with _SEQUENCE_LOCK:
        _SEQUENCED.add(_server_key(server))


def even_blocks(total: int, chunk_size: int, streams: int) -> int:
    """A block size for ``streams`` blocks in flight: at most ``chunk_size``, and a number of
    blocks that is a multiple of ``streams`` (no stream idle in the last round), within
    :data:`MAX_BLOCKS`."""
    rounds = -(-total // (chunk_size * streams))
    count = min(MAX_BLOCKS, rounds * streams)
    return max(chunk_size if count == MAX_BLOCKS else 1, -(-total // count))


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


class ChunkBody(io.RawIOBase):
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


class SequenceRefused(Exception):
    """The server refused ``sequenceID``: send the blocks one after another."""


def initiate_upload(client: RestCaller) -> str:
    """Open an upload session; returns its id."""
    _, body = client.request("POST", "fileUploads", retry=True, expected=(200, 201))
    session_id = child(body, "fileUpload", "uploadSessionId")
    if not session_id:
        raise TransportError("fileUploads answered without an uploadSessionId")
    return str(session_id)


def append_chunk(
    client: RestCaller, session_id: str, body: Any, boundary: str, sequence: int | None = None
) -> dict[str, Any] | None:
    """Append one chunk to an upload session (as block ``sequence``, where given); the
    server's answer."""
    # Never retried by the transport: an append with an unknown outcome restarts the upload.
    _, answer = client.request(
        "PUT",
        f"fileUploads/{quote(session_id, safe='')}",
        retry=False,
        data=body,
        headers={"Content-Type": f"multipart/mixed; boundary={boundary}"},
        params=None if sequence is None else {"sequenceID": str(sequence)},
    )
    return answer


def _reported_mb(body: dict[str, Any] | None) -> float | None:
    try:
        return float((body or {})["fileUpload"]["fileSize"])
    except (KeyError, TypeError, ValueError):
        return None


def _size_to_upload(path: Path) -> int:
    """The size of the file ``path``; refused when it is no file or empty."""
    try:
        total = path.stat().st_size
        if not path.is_file():
            raise IsADirectoryError(f"{path} is not a file")
    except OSError as err:
        raise PayloadError(f"cannot upload {str(path)!r}: {err.strerror or err}") from None
    if total == 0:
        raise PayloadError(f"{str(path)!r} is empty: nothing to upload")
    return total


def _give_up(path: Path, reason: UploadRestart, max_restarts: int) -> NoReturn:
    """Fail the upload of ``path`` once ``max_restarts`` fresh sessions failed too: as the
    server's own error where it answered one, else as a failed connection."""
    cause = reason.__cause__
    message = (
        f"upload of {path.name} failed: {reason}; gave up after "
        f"{max_restarts} fresh upload sessions"
    )
    if isinstance(cause, ApiError):
        raise cause.with_hint(message) from cause
    raise ConnectionFailedError(message) from cause


def upload_file(
    client: RestCaller,
    path: str | os.PathLike[str],
    *,
    chunk_size: int,
    max_restarts: int,
    progress: ProgressCallback | None = None,
    streams: int = 1,
) -> str:
    """Upload ``path``; returns the upload session id to pass to the update call.
    ``streams``: blocks in flight at once where the server takes ``sequenceID``."""
    path = Path(path)
    total = _size_to_upload(path)
    chunk_size = block_size(total, chunk_size, path.name)
    restarts = 0
    while True:
        parallel = streams > 1 and total > chunk_size and takes_sequence_ids(client.server)
        try:
            if parallel:
                block = even_blocks(total, chunk_size, streams)
                return _upload_blocks(client, path, total, block, streams, progress)
            return _upload_once(client, path, total, chunk_size, progress)
        except SequenceRefused as refused:
            refuses_sequence_ids(client.server)
            log.info(
                "the server refused sequenceID (%s): its uploads go one block after another",
                refused,
            )
            continue  # not a restart of the same kind: this server sends one block at a time
        except UploadRestart as reason:
            restarts += 1
            if restarts > max_restarts:
                _give_up(path, reason, max_restarts)
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
            body = ChunkBody(head, f, sent, n, tail)
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


def _upload_blocks(
    client: RestCaller,
    path: Path,
    total: int,
    chunk_size: int,
    streams: int,
    progress: ProgressCallback | None,
) -> str:
    """Upload ``path`` as sequenced blocks, ``streams`` in flight (see the module docstring)."""
    session_id = client.initiate_upload()
    count = -(-total // chunk_size)
    log.info(
        "uploading %s (%d bytes) in session %s: %d blocks, %d at once",
        path.name,
        total,
        session_id,
        count,
        min(streams, count),
    )
    blocks = _Blocks(client, session_id, path, total, chunk_size, progress)
    if progress is not None:
        progress(0, total)
    # A server not yet known to take sequenceID gets the first block alone: one that refuses
    # it says so before the others go.
    first = 1
    if not _took_sequence_ids(client.server):
        blocks.send(1)
        _takes_sequence_ids(client.server)
        first = 2
    blocks.send_all(range(first, count + 1), streams)
    return session_id


class _Blocks:
    """A file's blocks, sent by their ``sequenceID`` in one upload session, any number at
    once, each counted to the progress once sent."""

    def __init__(
        self,
        client: RestCaller,
        session_id: str,
        path: Path,
        total: int,
        chunk_size: int,
        progress: ProgressCallback | None,
    ) -> None:
        self.client, self.session_id, self.path = client, session_id, path
        self.total, self.chunk_size, self.progress = total, chunk_size, progress
        self.boundary = uuid.uuid4().hex
        self.head, self.tail = multipart_framing(self.boundary)
        self._done = 0
        self._lock = threading.Lock()

    def send(self, sequence: int) -> None:
        """Send block ``sequence`` (from 1): once more, alone, where the first sending's
        outcome is unknown (the server's answer then says whether it may be)."""
        offset = (sequence - 1) * self.chunk_size
        n = min(self.chunk_size, self.total - offset)
        with self.path.open("rb") as f:
            for first in (True, False):
                body = ChunkBody(self.head, f, offset, n, self.tail)
                try:
                    self.client.append_chunk(self.session_id, body, self.boundary, sequence)
                    break
                except Exception as err:
                    failure = _block_failure(err, sequence, offset, n, first=first)
                    if failure is err:
                        raise
                    if failure is not None:
                        raise failure from err
        with self._lock:
            self._done += n
            if self.progress is not None:
                self.progress(self._done, self.total)

    def send_all(self, sequences: range, streams: int) -> None:
        """Send the blocks ``sequences``, ``streams`` at once; at the first that fails, the
        rest are cancelled and its error raised (a refused ``sequenceID`` first: it explains
        the blocks that failed beside it)."""
        if not sequences:
            return
        with ThreadPoolExecutor(max_workers=streams, thread_name_prefix="tabhyper-upload") as pool:
            futures = [pool.submit(self.send, s) for s in sequences]
            finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
            errors = [e for e in (f.exception() for f in finished) if e is not None]
            if errors:
                for f in futures:
                    f.cancel()
                refused = [e for e in errors if isinstance(e, SequenceRefused)]
                raise (refused or errors)[0]


def _block_failure(
    err: Exception, sequence: int, offset: int, n: int, *, first: bool
) -> BaseException | None:
    """What a failed sending of a block raises (``None``: send it again, alone). A 400 to
    its ``first`` sending: the parameter refused (a server remembered as taking it may have
    changed at the same address). An answer that was lost, or any error answer: the upload
    starts again in a fresh session; any other error as it is."""
    if isinstance(err, ApiError) and err.status == 400 and first:
        return SequenceRefused(str(err))
    if first and _unknown_outcome(err):
        return None
    if isinstance(err, ApiError) or _unknown_outcome(err):
        return _restart(sequence, offset, n, err)
    return err


def _restart(sequence: int, offset: int, n: int, err: BaseException) -> UploadRestart:
    return UploadRestart(
        f"block {sequence} (bytes {offset}-{offset + n - 1}) could not be sent again ({err})"
    )

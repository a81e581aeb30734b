"""What the REST resources need from the session they are called through.

The resources (projects, data sources, uploads, updates, jobs) and the references they
return call back into the session (a job refreshes itself, a reference remembers whom it
was found with). They take this protocol rather than :class:`~.session.RestSession`, which
sits above them and composes them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .jobs import JobSource

__all__ = ["ProgressCallback", "RestCaller"]

#: Called with (bytes sent, bytes in all) as an upload goes.
ProgressCallback = Callable[[int, int], None]


class RestCaller(JobSource, Protocol):
    """A signed-in view of one site: calls, listings, uploads and jobs (with the policies
    that pace them, from :class:`~.jobs.JobSource`); :class:`~.session.RestSession` is the
    one implementation."""

    site: str
    chunk_size: int

    @property
    def max_upload_restarts(self) -> int: ...

    @property
    def upload_streams(self) -> int: ...

    @property
    def server(self) -> str: ...

    def list_items(
        self,
        rest: str,
        item: str,
        *,
        filters: Sequence[str] = (),
        what: str,
        remedy: str,
    ) -> list[dict[str, Any]]: ...

    def initiate_upload(self) -> str: ...

    def append_chunk(
        self, session_id: str, body: Any, boundary: str, sequence: int | None = None
    ) -> dict[str, Any] | None: ...

    def upload(
        self, path: str | os.PathLike[str], *, progress: ProgressCallback | None = None
    ) -> str: ...

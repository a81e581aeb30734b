"""Serve a :class:`FakeTableauServer` to ``requests`` in-process through ``responses``.

For users' own unit tests of their CDC jobs: no socket is opened, and the same fake (its
data sources, jobs, faults and counts) answers every call made with ``requests``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs, urlsplit

import requests

from .wire import Request, Response, encode

if TYPE_CHECKING:
    import responses

__all__ = ["Served", "mock"]


class Served(Protocol):
    """What the adapter serves: a fake's base URL and its request handler
    (:class:`~tabhyper_update.testing.fake_server.FakeTableauServer`)."""

    @property
    def url(self) -> str: ...

    def handle(self, request: Request) -> Response: ...


@contextmanager
def mock(server: Served) -> Iterator[responses.RequestsMock]:
    """A ``responses`` mock that routes every request under ``server.url`` to the fake."""
    import responses

    def callback(prepared: requests.PreparedRequest) -> tuple[int, dict[str, str], bytes]:
        parts = urlsplit(prepared.url or "")
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        body: Any = prepared.body
        if body is None:
            data = b""
        elif isinstance(body, str):
            data = body.encode()
        elif isinstance(body, bytes):
            data = body
        else:  # a file-like body (the chunked upload streams one)
            data = body.read()
        request = Request(
            prepared.method or "GET",
            parts.path,
            query,
            {k.lower(): v for k, v in prepared.headers.items()},
            data,
        )
        response = server.handle(request)
        if response.drop is not None:
            raise requests.ConnectionError("connection dropped (fault injected)")
        if response.delay:
            time.sleep(response.delay)
        headers = dict(response.headers)
        if response.raw is not None:
            return response.status, headers, response.raw
        payload, ctype = encode(response.body, as_json=request.wants_json)
        if response.status != 204:
            headers["Content-Type"] = ctype
        return response.status, headers, payload

    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        pattern = re.compile(re.escape(server.url.rstrip("/")) + r"/.*")
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            rsps.add_callback(method, pattern, callback=callback)
        yield rsps

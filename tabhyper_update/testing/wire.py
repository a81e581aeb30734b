"""The fake server's wire: requests and answers as data, Tableau's XML and JSON shapes,
its error bodies, and strict multipart parsing."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ApiFailure",
    "MultipartError",
    "Part",
    "Request",
    "Response",
    "encode",
    "parse_multipart",
    "parse_parts",
    "parse_xml_request",
]


@dataclass
class Request:
    """One request as the fake sees it, whether it came over HTTP or through ``responses``."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: bytes
    #: The body as read by the handler that parsed it (JSON), when one did.
    parsed: Any = None

    @property
    def wants_json(self) -> bool:
        # The VizQL Data Service answers JSON only, whatever the request accepts.
        return "json" in self.headers.get("accept", "") or self.path.startswith(
            "/api/v1/vizql-data-service/"
        )


@dataclass
class Response:
    """One answer: a status and a body in the JSON shape (encoded as the client asked)."""

    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    #: Fault handling: "before" drops the connection without an answer, "after" once the
    #: request was processed (the client cannot tell whether it was).
    drop: str | None = None
    delay: float = 0.0
    #: Bytes sent as they are (a malformed answer), with ``headers["Content-Type"]``.
    raw: bytes | None = None


class ApiFailure(Exception):
    """An error answer in Tableau's shape: HTTP status, error code, summary and detail."""

    def __init__(
        self,
        status: int,
        code: str,
        summary: str,
        detail: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(summary)
        self.status = status
        self.code = code
        self.summary = summary
        self.detail = detail
        self.headers = dict(headers or {})

    def response(self) -> Response:
        return Response(
            self.status,
            {"error": {"code": self.code, "summary": self.summary, "detail": self.detail}},
            headers=self.headers,
        )


def not_found(code: str, detail: str) -> ApiFailure:
    return ApiFailure(404, code, "Resource Not Found", detail)


def bad_request(detail: str, code: str = "400000") -> ApiFailure:
    return ApiFailure(400, code, "Bad Request", detail)


NS = "http://tableau.com/api"
#: Keys Tableau writes as child elements with text rather than as attributes.
TEXT_ELEMENTS = frozenset({"restApiVersion", "summary", "detail", "notes"})


def _to_xml(parent: ET.Element, name: str, value: Any) -> None:
    if isinstance(value, list):
        for item in value:
            _to_xml(parent, name, item)
        return
    child = ET.SubElement(parent, name)
    if isinstance(value, dict):
        for key, sub in value.items():
            if key == "value":
                child.text = str(sub)
            elif isinstance(sub, (dict, list)) or (key in TEXT_ELEMENTS and sub is not None):
                _to_xml(child, key, sub)
            elif sub is not None:
                child.set(key, _scalar(sub))
    elif value is not None:
        child.text = _scalar(value)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def encode(body: dict[str, Any] | None, *, as_json: bool) -> tuple[bytes, str]:
    """Body bytes and Content-Type, in the format the client asked for."""
    if body is None:
        return b"", "text/plain"
    if as_json:
        return json.dumps(body).encode(), "application/json;charset=utf-8"
    root = ET.Element("tsResponse", {"xmlns": NS})
    for key, value in body.items():
        _to_xml(root, key, value)
    text = ET.tostring(root, encoding="unicode")
    return (
        "<?xml version='1.0' encoding='UTF-8'?>" + text
    ).encode(), "application/xml;charset=utf-8"


def parse_xml_request(text: str) -> dict[str, Any]:
    """A ``tsRequest`` body mapped to the JSON shape (attributes and child elements)."""
    root = ET.fromstring(text)  # noqa: S314

    def convert(element: ET.Element) -> dict[str, Any]:
        data: dict[str, Any] = dict(element.attrib)
        for child in element:
            data[child.tag.split("}")[-1]] = convert(child)
        return data

    return convert(root)


class MultipartError(ValueError):
    pass


_DISPOSITION = re.compile(r'^(?:form-data;\s*)?name="([^"]+)"(?:;\s*filename="([^"]*)")?$')


@dataclass
class Part:
    """One part of a ``multipart/mixed`` body (its data is a view, not a copy)."""

    name: str
    filename: str | None
    content_type: str
    data: memoryview


def parse_parts(body: bytes, content_type: str) -> list[Part]:
    """The parts of a ``multipart/mixed`` body, parsed strictly."""
    match = re.match(r"^multipart/mixed;\s*boundary=(\S+)$", content_type.strip(), re.I)
    if match is None:
        raise MultipartError(
            f"Content-Type must be multipart/mixed with a boundary, got {content_type!r}"
        )
    boundary = match.group(1).strip('"').encode()
    delimiter = b"--" + boundary
    separator = b"\r\n" + delimiter + b"\r\n"
    if not body.startswith(delimiter + b"\r\n"):
        raise MultipartError("the body does not start with the boundary")
    closing = b"\r\n" + delimiter + b"--"
    end = body.rfind(closing)
    if end < 0 or body[end + len(closing) :] not in (b"", b"\r\n"):
        raise MultipartError("the body does not end with the closing boundary")
    view = memoryview(body)
    return [
        _part(body, view, begin, stop)
        for begin, stop in _part_bounds(body, len(delimiter) + 2, end, separator)
    ]


def _part_bounds(body: bytes, begin: int, end: int, separator: bytes) -> list[tuple[int, int]]:
    """Where each part of a multipart body starts and stops (the first at ``begin``, the
    last stopping at ``end``, the closing boundary), cut at each ``separator``."""
    bounds: list[tuple[int, int]] = []
    while (middle := body.find(separator, begin, end)) >= 0:
        bounds.append((begin, middle))
        begin = middle + len(separator)
    return [*bounds, (begin, end)]


def _part(body: bytes, view: memoryview, begin: int, stop: int) -> Part:
    """The part of ``body`` from ``begin`` to ``stop``: its headers, then its bytes."""
    head_end = body.find(b"\r\n\r\n", begin, stop)
    if head_end < 0:
        raise MultipartError("a part has no blank line after its headers")
    headers = {}
    for line in body[begin:head_end].decode("latin-1").split("\r\n"):
        key, colon, value = line.partition(":")
        if not colon:
            raise MultipartError(f"malformed part header {line!r}")
        headers[key.strip().lower()] = value.strip()
    disposition = _DISPOSITION.match(headers.get("content-disposition", ""))
    if disposition is None:
        raise MultipartError("a part lacks a Content-Disposition with a name")
    return Part(
        disposition.group(1),
        disposition.group(2),
        headers.get("content-type", ""),
        view[head_end + 4 : stop],
    )


def parse_multipart(body: bytes, content_type: str) -> memoryview:
    """The file bytes of an append body (a view, not a copy), checked strictly against
    Tableau's layout: exactly ``request_payload`` then ``tableau_file``."""
    parts = parse_parts(body, content_type)
    names = [p.name for p in parts]
    if len(parts) != 2:
        raise MultipartError(f"expected exactly 2 parts, found {len(parts)}")
    if names != ["request_payload", "tableau_file"]:
        raise MultipartError(f"parts must be request_payload then tableau_file, got {names}")
    return parts[1].data

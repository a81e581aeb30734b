"""Download Data Source without its extract (``GET .../datasources/{id}/content
?includeExtract=false``): the data source's file, a ``.tds`` or a ``.tdsx`` holding one, and
the column types its metadata records hold.

A metadata record of class ``column`` names the column (``remote-name``), its table
(``parent-name``, bracketed), its type as the source declares it (``remote-type``, an OLE DB
type code) and, where it has them, its ``precision``, ``scale`` and ``width``. How much of it
a server fills in is what ``tabhyper-update probe`` measures (``download_types``): the SDK
reads a data source's types this way only where the probe found them exact.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
import zipfile
from typing import TYPE_CHECKING

from ..values.errors import TransportError

if TYPE_CHECKING:
    from .caller import RestCaller
    from .refs import DataSourceRef

__all__ = ["REMOTE_TYPES", "columns_in_file", "download_columns"]

#: OLE DB type codes, as metadata records write them, and the SQL type each is.
REMOTE_TYPES = {
    "2": "SMALLINT",
    "3": "INTEGER",
    "20": "BIGINT",
    "4": "REAL",
    "5": "DOUBLE PRECISION",
    "11": "BOOLEAN",
    "7": "DATE",
    "133": "DATE",
    "135": "TIMESTAMP",
    "146": "TIMESTAMP WITH TIME ZONE",
    "129": "TEXT",
    "130": "TEXT",
    "131": "NUMERIC",
}
#: A file larger than this is no data source without its extract.
_MAX_BYTES = 64 * 1024 * 1024
#: A text column's width from which it is unlimited (Hyper's TEXT).
_UNLIMITED_WIDTH = 1 << 30


def download_columns(client: RestCaller, target: DataSourceRef) -> dict[str, dict[str, str | None]]:
    """The data source's columns per table, each with its SQL type where its metadata record
    says it whole (None where it does not)."""
    response, _ = client.request(
        "GET",
        f"datasources/{target.id}/content",
        retry=True,
        params={"includeExtract": "false"},
        raw=True,
    )
    return columns_in_file(response.content)


def columns_in_file(content: bytes) -> dict[str, dict[str, str | None]]:
    """The columns a ``.tds`` (or the ``.tds`` in a ``.tdsx``) records, per table."""
    try:
        root = ET.fromstring(_tds(content))  # noqa: S314 (the server's own file, capped)
    except (ET.ParseError, zipfile.BadZipFile, KeyError, ValueError) as err:
        raise TransportError(f"the data source's file could not be read: {err}") from None
    found: dict[str, dict[str, str | None]] = {}
    for record in root.iter("metadata-record"):
        name = record.findtext("remote-name")
        if record.get("class") != "column" or not name:
            continue
        table = (record.findtext("parent-name") or "").strip().removeprefix("[").removesuffix("]")
        found.setdefault(table, {})[name] = _sql_type(record)
    return found


def _tds(content: bytes) -> bytes:
    """The ``.tds`` XML: the content itself, or the one ``.tds`` a ``.tdsx`` zip holds."""
    if len(content) > _MAX_BYTES:
        raise ValueError(f"{len(content)} bytes")
    if not content.startswith(b"PK"):
        return content
    with zipfile.ZipFile(io.BytesIO(content)) as packed:
        (name,) = [n for n in packed.namelist() if n.lower().endswith(".tds")]
        if packed.getinfo(name).file_size > _MAX_BYTES:
            raise ValueError(f"{name} is too large")
        return packed.read(name)


def _sql_type(record: ET.Element) -> str | None:
    """A column's SQL type from its metadata record (None: not said whole)."""
    base = REMOTE_TYPES.get((record.findtext("remote-type") or "").strip())
    if base == "NUMERIC":
        precision, scale = record.findtext("precision"), record.findtext("scale")
        if not (precision and scale and precision.isdigit() and scale.isdigit()):
            return None
        return f"NUMERIC({int(precision)},{int(scale)})"
    if base == "TEXT":
        width = (record.findtext("width") or "").strip()
        if width.isdigit() and int(width) < _UNLIMITED_WIDTH:
            return f"VARCHAR({int(width)})"
    return base

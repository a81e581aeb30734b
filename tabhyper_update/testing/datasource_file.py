"""A data source's file as the fake's "Download Data Source" answers without its extract: a
``.tdsx`` holding a ``.tds`` whose metadata records describe each column of the ``.hyper``
file, with its type code, precision, scale and width (``"exact"``), or its kind only
(``"coarse"``)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

from tableauhyperapi import TypeTag

from ..local.hyper import connect

__all__ = ["datasource_file"]

#: Hyper's types → (OLE DB type code, the kind a coarse record gives).
_CODES = {
    TypeTag.SMALL_INT: ("2", "integer"),
    TypeTag.INT: ("3", "integer"),
    TypeTag.BIG_INT: ("20", "integer"),
    TypeTag.DOUBLE: ("5", "real"),
    TypeTag.NUMERIC: ("131", "real"),
    TypeTag.BOOL: ("11", "boolean"),
    TypeTag.DATE: ("133", "date"),
    TypeTag.TIMESTAMP: ("135", "datetime"),
    TypeTag.TIMESTAMP_TZ: ("146", "datetime"),
    TypeTag.TEXT: ("129", "string"),
    TypeTag.VARCHAR: ("129", "string"),
    TypeTag.CHAR: ("129", "string"),
}


def datasource_file(hyper: Path, name: str, exact: bool) -> bytes:
    """The ``.tdsx`` of data source ``name`` whose extract is ``hyper``, without it."""
    records: list[str] = []
    with connect(hyper, read_only=True) as conn:
        for schema in conn.catalog.get_schema_names():
            for table_name in conn.catalog.get_table_names(schema):
                table = conn.catalog.get_table_definition(table_name)
                parent = escape(f"[{table_name.name.unescaped}]")
                for column in table.columns:
                    records.append(_record(column, parent, exact))
    tds = (
        "<?xml version='1.0' encoding='utf-8' ?>\n"
        f"<datasource formatted-name={_quoted(name)} inline='true' version='18.1'>"
        "<connection class='hyper' dbname='Data/Extracts/extract.hyper'>"
        f"<metadata-records>{''.join(records)}</metadata-records></connection></datasource>"
    )
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as out:
        out.writestr(f"{name}.tds", tds)
    return packed.getvalue()


def _record(column: object, parent: str, exact: bool) -> str:
    """One column's metadata record."""
    kind = column.type  # type: ignore[attr-defined]
    code, local = _CODES.get(kind.tag, ("129", "string"))
    parts = [
        f"<remote-name>{escape(str(column.name.unescaped))}</remote-name>",  # type: ignore[attr-defined]
        f"<parent-name>{parent}</parent-name>",
        f"<local-type>{local}</local-type>",
    ]
    if exact:
        parts.append(f"<remote-type>{code}</remote-type>")
        if kind.tag == TypeTag.NUMERIC:
            parts.append(f"<precision>{kind.precision}</precision><scale>{kind.scale}</scale>")
        if kind.tag in (TypeTag.VARCHAR, TypeTag.CHAR):
            parts.append(f"<width>{kind.max_length}</width>")
    return f"<metadata-record class='column'>{''.join(parts)}</metadata-record>"


def _quoted(text: str) -> str:
    return "'" + escape(text, {"'": "&apos;"}) + "'"

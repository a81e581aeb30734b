"""A payload on disk: the manifest written beside its part files (what ``tabhyper-update
apply`` picks up later), the note that it was applied, and reading an existing ``.hyper``
file as a one-part payload.

A manifest only ever names files in its own folder; reading one checks each part's place,
size and SHA-256 before anything is sent.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..local.folders import check_folder
from ..local.hyper import connect, quote_name, table_ref
from ..local.private_json import write_json
from ..values.changeset import ChangeSet
from ..values.errors import PayloadAppliedError, PayloadError, TabHyperError
from ..values.names import is_name
from ..values.parts import BUCKETS, ColumnInfo, PayloadPart, TableInfo, file_sha256, sql_type_text
from ..values.quarantine import QuarantineReport
from ..values.redaction import get_logger

__all__ = ["MANIFEST", "note_applied", "read_hyper", "read_manifest", "write_manifest"]

log = get_logger("tabhyper_update.payload")

MANIFEST = "manifest.json"


def note_applied(manifest: Path, jobs: list[str], target: dict[str, str] | None) -> None:
    """Note in ``manifest`` that its payload was applied (by ``jobs``, to ``target``), so
    that a later load says so instead of finding its files missing."""
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
        doc["applied"] = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "jobs": jobs,
            "target": target,
        }
        write_json(manifest, doc, indent=2)
    except (OSError, ValueError) as err:
        log.warning("could not note in %s that it was applied: %s", manifest, err)


def _moved_into(where: Path, parts: list[PayloadPart]) -> list[PayloadPart]:
    moved = []
    for part in parts:
        final = where / part.path.name
        if part.path.resolve() != final.resolve():
            if final.exists():
                raise PayloadError(
                    f"cannot move payload part {part.path.name!r} into {str(where)!r}: a "
                    "file of that name is already there"
                )
            shutil.move(part.path, final)
            part = replace(part, path=final)
        moved.append(part)
    return moved


def _part_doc(part: PayloadPart, where: Path) -> dict[str, Any]:
    return {
        "file": os.path.relpath(part.path, where),
        "size_bytes": part.size_bytes,
        "sha256": part.sha256,
        "buckets": list(part.buckets),
        "tables": [
            {
                "schema": t.schema,
                "name": t.name,
                "row_count": t.row_count,
                "row_digest": t.row_digest,
                "columns": [[c.name, c.hyper_type, c.nullable] for c in t.columns],
            }
            for t in part.tables.values()
        ],
    }


def write_manifest(
    parts: list[PayloadPart],
    directory: str | os.PathLike[str] | None,
    *,
    schema: str,
    change_set: ChangeSet | None,
    change_sets: Mapping[str, ChangeSet] | None,
    positions: Mapping[str, Mapping[str, Any]] | None = None,
    committed_at: float | None = None,
    quarantined: QuarantineReport | None = None,
    checked_types: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[Path, list[PayloadPart]]:
    """:meth:`Payload.save_manifest`: the manifest's path, and the parts where they now are.
    An empty payload (an empty change set) is a manifest without parts, in ``directory``:
    loading it gives an empty payload, which an update reports as nothing to update."""
    if not parts and directory is None:
        raise PayloadError("an empty payload has no files: give the folder for its manifest")
    where = Path(directory) if directory is not None else parts[0].path.parent
    check_folder(where, "directory")
    parts = _moved_into(where, parts)
    doc = {
        "schema": schema,
        "change_set": change_set.to_dict() if change_set is not None else None,
        "change_sets": (
            {name: cs.to_dict() for name, cs in change_sets.items()} if change_sets else None
        ),
        "parts": [_part_doc(p, where) for p in parts],
        "positions": dict(positions or {}),
        "committed_at": committed_at,
        # What the build set aside and the columns it checked (a quarantine's), for the
        # update that applies the payload later.
        "quarantined": quarantined.as_dict() if quarantined is not None else None,
        "checked_types": {t: dict(cols) for t, cols in (checked_types or {}).items()},
    }
    path = where / MANIFEST
    write_json(path, doc, indent=2)
    return path, parts


def read_hyper(path: str | os.PathLike[str], schema: str | None) -> tuple[PayloadPart, str]:
    """:meth:`Payload.from_hyper`: the file as one part, and the schema of its tables."""
    from tableauhyperapi import Nullability

    file = Path(path)
    if not file.is_file():
        raise PayloadError(f"{str(file)!r} is not a file: give the path of a .hyper file")
    found, counts = _catalog(file)
    chosen = _one_schema(file, sorted({sch for sch, _ in found}), schema)
    sha = file_sha256(file)
    tables: dict[str, TableInfo] = {}
    for sch, definition in found:
        if sch != chosen:
            continue
        name = str(definition.table_name.name.unescaped)
        columns = tuple(
            ColumnInfo(
                str(c.name.unescaped),
                sql_type_text(c.type),
                c.nullability == Nullability.NULLABLE,
            )
            for c in definition.columns
        )
        # The file's SHA-256 stands for its rows: the same file, the same identity.
        tables[name] = TableInfo(sch, name, columns, counts[(sch, name)], f"sha256:{sha}")
    return PayloadPart(file, file.stat().st_size, tables), chosen


def _catalog(file: Path) -> tuple[list[tuple[str, Any]], dict[tuple[str, str], int]]:
    """The tables of the Hyper file ``file``: each with its schema's name, and each one's
    rows by schema and name; a file Hyper cannot read refused as no ``.hyper`` file."""
    try:
        with connect(file, read_only=True) as connection:
            catalog = connection.catalog
            found = [
                (str(s.name.unescaped), catalog.get_table_definition(t))
                for s in catalog.get_schema_names()
                for t in catalog.get_table_names(s)
            ]
            counts = {
                (sch, str(d.table_name.name.unescaped)): int(
                    connection.execute_scalar_query(f"SELECT COUNT(*) FROM {d.table_name}")
                )
                for sch, d in found
            }
    except Exception as err:  # Hyper's own error for a file that is not a Hyper file
        if isinstance(err, TabHyperError):
            raise
        raise PayloadError(
            f"{str(file)!r} cannot be read as a .hyper file: {str(err).splitlines()[0]}"
        ) from None
    return found, counts


def _one_schema(file: Path, schemas: list[str], schema: str | None) -> str:
    if not schemas:
        raise PayloadError(f"{str(file)!r} holds no table")
    if schema is None and len(schemas) > 1:
        raise PayloadError(
            f"{str(file)!r} has tables in several schemas ({', '.join(map(repr, schemas))}): "
            "pass schema= to pick one"
        )
    chosen = schema if schema is not None else schemas[0]
    if chosen not in schemas:
        raise PayloadError(
            f"{str(file)!r} has no schema {chosen!r} (its schemas: {', '.join(map(repr, schemas))})"
        )
    return chosen


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """:meth:`Payload.load`: the payload's fields (``parts``, ``schema``, ``change_set``,
    ``change_sets``, ``_manifest``) from a directory or manifest file, every part checked."""
    manifest = Path(path)
    if manifest.is_dir():
        manifest = manifest / MANIFEST
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PayloadError(f"no payload manifest at {str(manifest)!r}") from None
    except (OSError, ValueError, RecursionError) as err:
        raise PayloadError(f"{str(manifest)!r} is not a payload manifest: {err}") from None
    try:
        return _fields(manifest, doc)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        if isinstance(err, PayloadError):
            raise
        what = f"missing field {err}" if isinstance(err, KeyError) else str(err)
        raise PayloadError(f"{str(manifest)!r} is not a valid payload manifest: {what}") from None


def _fields(manifest: Path, doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict) or not isinstance(doc.get("parts"), list):
        raise PayloadError(f"{str(manifest)!r} is not a payload manifest: no 'parts' list")
    parts = [_read_part(manifest, doc, item) for item in doc["parts"]]
    return {
        "parts": parts,
        "schema": str(doc["schema"]),
        "change_set": _given(doc.get("change_set"), ChangeSet.from_dict),
        "change_sets": _given(
            doc.get("change_sets"),
            lambda sets: {str(name): ChangeSet.from_dict(cs) for name, cs in sets.items()},
        ),
        "positions": _per_table(doc.get("positions"), dict),
        "committed_at": _committed_at(doc.get("committed_at")),
        "quarantined": _given(doc.get("quarantined"), QuarantineReport.from_dict),
        "checked_types": _per_table(
            doc.get("checked_types"), lambda cols: {str(c): str(v) for c, v in cols.items()}
        ),
        "_manifest": manifest,
    }


def _given(value: Any, read: Callable[[Any], Any]) -> Any:
    """An optional entry of a manifest, read; ``None`` where it is missing or empty."""
    return read(value) if value else None


def _per_table(value: Any, read: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    """A manifest's entry of one object per table, each read (anything but an object is
    left out; a missing entry: none)."""
    return {str(t): read(cols) for t, cols in (value or {}).items() if isinstance(cols, dict)}


def _committed_at(value: Any) -> float | None:
    # Manifests written before the commit time was recorded have none.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _read_part(manifest: Path, doc: dict[str, Any], item: Any) -> PayloadPart:
    file = _part_file(manifest, doc, item["file"])
    if file.stat().st_size != int(item["size_bytes"]):
        raise PayloadError(f"payload part {str(file)!r} changed size since it was built")
    tables = {
        str(t["name"]): TableInfo(
            str(t["schema"]),
            str(t["name"]),
            tuple(ColumnInfo(str(c[0]), str(c[1]), bool(c[2])) for c in t["columns"]),
            int(t["row_count"]),
            str(t.get("row_digest", "")),
        )
        for t in item["tables"]
    }
    lo, hi = item.get("buckets") or (0, BUCKETS - 1)
    part = PayloadPart(file, int(item["size_bytes"]), tables, (int(lo), int(hi)))
    if part.sha256 != item["sha256"]:
        raise PayloadError(f"payload part {str(file)!r} changed since it was built")
    return part


def _part_file(manifest: Path, doc: dict[str, Any], name: Any) -> Path:
    """The part file ``name`` names, inside the manifest's folder and present."""
    if not is_name(name):
        raise PayloadError(f"{str(manifest)!r}: a part's 'file' must be a file name")
    relative = Path(name)
    if relative.is_absolute() or ".." in relative.parts:
        raise PayloadError(
            f"{str(manifest)!r}: payload part {name!r} is outside the manifest's folder; refused"
        )
    file = manifest.parent / relative
    if file.is_symlink() or not file.resolve().is_relative_to(manifest.parent.resolve()):
        raise PayloadError(
            f"{str(manifest)!r}: payload part {name!r} leads outside the manifest's folder; refused"
        )
    if not file.is_file():
        raise _missing(manifest, doc, file)
    return file


def _missing(manifest: Path, doc: dict[str, Any], file: Path) -> PayloadError:
    """The error of a part ``file`` the manifest names and the folder lacks: the payload
    applied (its files removed after it), where the manifest says so; else moved or
    removed."""
    applied = doc.get("applied")
    if not isinstance(applied, dict):
        return PayloadError(
            f"payload part {str(file)!r} is missing (moved or removed since the payload was saved)"
        )
    target = applied.get("target")
    return PayloadAppliedError(
        str(manifest),
        str(applied.get("at")),
        list(applied.get("jobs") or []),
        target if isinstance(target, dict) else None,
    )


def duplicated_keys(
    path: Path, schema: str, table: str, columns: Sequence[str], *, shown: int = 3
) -> tuple[int, list[str]]:
    """How many keys (on ``columns``) ``table`` of the ``.hyper`` file holds more than once,
    and up to ``shown`` of them as text: one query on the file."""
    keys = ", ".join(map(quote_name, columns))
    text = " || ', ' || ".join(f"COALESCE(CAST({quote_name(c)} AS TEXT), 'NULL')" for c in columns)
    with connect(path, read_only=True) as conn:
        rows = conn.execute_list_query(
            f"SELECT {text}, COUNT(*) OVER () FROM {table_ref(schema, table)} "
            f"GROUP BY {keys} HAVING COUNT(*) > 1 LIMIT {int(shown)}"
        )
    if not rows:
        return 0, []
    return int(rows[0][1]), [str(r[0]) if len(columns) == 1 else f"({r[0]})" for r in rows]

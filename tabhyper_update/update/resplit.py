"""Parts the server refuses as too large (413), split smaller where they stand.

A part is one atomic update; a server whose update cap is below it (10 MB by default before
Tableau Server 2022.1, configurable) refuses it before anything is applied. The part is then
split into ``k`` sub-parts by a hash of each row's key (a change set's key, or the whole row
for a batch of inserts), so that every key's rows (its upsert or delete, its position, its
guard row) stay in one sub-part and the sub-parts can be applied one after another. The
split is deterministic: the same part split the same ``k`` ways gives the same sub-parts, so
a re-run that finds sub-parts in its record rebuilds them exactly (see :func:`expand`).

A sub-part is named in the record by its parent's digest and ``#j/k`` (``j`` of ``k``,
nested for a sub-part split again).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from tableauhyperapi import SchemaName, TableDefinition, TableName

from ..local.hyper import attach_read_only, connect, quote_literal, quote_name, table_ref
from ..values.actions import ActionBatch, Insert
from ..values.errors import ApiError, PayloadError
from ..values.parts import PayloadLike, PayloadPart, TableInfo
from ..values.redaction import get_logger

__all__ = [
    "MAX_SPLIT",
    "expand",
    "key_columns",
    "parts_needed",
    "split_part",
    "splittable",
    "stated_cap",
    "too_large",
]

log = get_logger("tabhyper_update")

#: The most sub-parts one part is split into at a time.
MAX_SPLIT = 64
_HEX = "0123456789abcdef"
_MB = 1024 * 1024


def _change_set_keys(payload: PayloadLike) -> dict[str, tuple[str, ...]]:
    """Each payload table of the payload's change set(s) with the change set's key."""
    sets = getattr(payload, "change_sets", None) or {}
    single = getattr(payload, "change_set", None)
    found: dict[str, tuple[str, ...]] = {}
    for cs in [*sets.values(), *([single] if single is not None else [])]:
        for table in (cs.upsert_table, cs.delete_table, cs.guard_table, cs.positions_table):
            found[table] = tuple(cs.key)
    return found


def key_columns(
    payload: PayloadLike, batch: ActionBatch, *, derived: bool
) -> dict[str, tuple[str, ...]] | None:
    """Per payload table, the columns whose values must stay together when its rows are
    split; ``None`` when the update cannot be split (neither a change set's ``derived``
    actions nor a batch of inserts only)."""
    found = _change_set_keys(payload) if derived else {}
    if found:
        return found
    if batch.actions and all(isinstance(a, Insert) for a in batch.actions):
        return {name: tuple(info.column_names) for name, info in payload.tables.items()}
    return None


#: The smallest ``.hyper`` file (its header and catalog): no split goes below it.
SMALLEST_FILE = 64 * 1024
#: How many times a part is split again at most (sub-parts of sub-parts).
MAX_DEPTH = 3


def splittable(part: PayloadPart, digest: str, cap: int) -> bool:
    """Whether splitting ``part`` (named ``digest`` in its record) can bring it under
    ``cap``: it holds more than one row, was split fewer than :data:`MAX_DEPTH` times, and
    the cap leaves room for rows beside a file's fixed size."""
    return part.row_count > 1 and digest.count("#") < MAX_DEPTH and cap > SMALLEST_FILE * 1.5


def parts_needed(size: int, cap: int) -> int:
    """How many sub-parts bring ``size`` bytes under ``cap`` (each file carries a fixed
    size besides its rows; a quarter to spare), at least 2 and at most :data:`MAX_SPLIT`."""
    rows, room = max(size - SMALLEST_FILE, 1), max(cap - SMALLEST_FILE, 1)
    return max(2, min(MAX_SPLIT, math.ceil(rows * 1.25 / room)))


def split_part(
    part: PayloadPart, keys: Mapping[str, tuple[str, ...]], k: int, label: str, folder: Path
) -> list[PayloadPart]:
    """``part`` as ``k`` sub-parts (files in ``folder``, one of the SDK's own), each key's
    rows in one of them. ``label`` (the parent's record digest) salts the hash, so that a
    sub-part split again spreads its rows anew."""
    salt = hashlib.sha256(label.encode()).hexdigest()[:16]
    subs: list[PayloadPart] = []
    for j in range(k):
        path = folder / f"split-{salt}-{j + 1}of{k}.hyper"
        tables: dict[str, TableInfo] = {}
        here = path.stem  # the name Hyper gives the file's database
        with connect(path, create=True) as conn:
            path.chmod(0o600)
            attach_read_only(conn, part.path, "src")
            for name, info in part.tables.items():
                source = TableName("src", info.schema, name)
                definition = conn.catalog.get_table_definition(source)
                conn.catalog.create_schema_if_not_exists(SchemaName(here, info.schema))
                conn.catalog.create_table(
                    TableDefinition(TableName(here, info.schema, name), definition.columns)
                )
                group = _group(salt, keys.get(name) or tuple(info.column_names), k)
                rows = conn.execute_command(
                    f"INSERT INTO {table_ref(info.schema, name, here)} "
                    f"SELECT * FROM {table_ref(info.schema, name, 'src')} WHERE {group} = {j}"
                )
                tables[name] = TableInfo(
                    info.schema, name, info.columns, int(rows), f"{info.row_digest}#{j + 1}/{k}"
                )
            conn.execute_command("DETACH DATABASE src")
        subs.append(PayloadPart(path, path.stat().st_size, tables, part.buckets))
    if sum(s.row_count for s in subs) != part.row_count:
        raise PayloadError(
            f"splitting {part.path.name} into {k} lost rows: "
            f"{sum(s.row_count for s in subs)} of {part.row_count}"
        )
    return subs


def _group(salt: str, columns: Sequence[str], k: int) -> str:
    """SQL: which of ``k`` groups a row falls in, from an MD5 of its ``columns``' text."""
    # Two keys that read alike (a NULL and the text '\N') may share a group: harmless, a
    # group only has to hold all the rows of each of its keys.
    text = " || '|' || ".join(f"COALESCE(CAST({quote_name(c)} AS TEXT), '\\N')" for c in columns)
    digest = f"md5({quote_literal(salt)} || {text})"
    number = " + ".join(
        f"(strpos('{_HEX}', substr({digest}, {i + 1}, 1)) - 1) * {16 ** (3 - i)}" for i in range(4)
    )
    return f"(({number}) % {k})"


def expand(
    units: Sequence[tuple[PayloadPart | None, ActionBatch]],
    digests: Sequence[str],
    keys: Mapping[str, tuple[str, ...]] | None,
    folder: Path,
) -> list[tuple[PayloadPart | None, ActionBatch]]:
    """``units`` (the payload's parts) as the record names them (``digests``, some of them
    sub-parts ``parent#j/k``, nested for a sub-part split again): each part split again the
    same way, once, into ``folder``."""
    made: dict[str, tuple[PayloadPart, ActionBatch]] = {
        part.content_digest: (part, batch) for part, batch in units if part is not None
    }

    def unit(digest: str) -> tuple[PayloadPart, ActionBatch]:
        if digest not in made:
            parent, _, tail = digest.rpartition("#")
            if not parent or keys is None:
                raise PayloadError(f"the record names part {digest[:20]}… that this payload lacks")
            whole, batch = unit(parent)
            k = int(tail.split("/")[1])
            for j, sub in enumerate(split_part(whole, keys, k, parent, folder)):
                made[f"{parent}#{j + 1}/{k}"] = (sub, batch)
        return made[digest]

    return list(map(unit, digests))


def stated_cap(err: ApiError, size: int) -> int | None:
    """The cap the server's refusal states (``... at most 10 MB``), when it states one below
    the refused size."""
    text = f"{err.summary or ''} {err.detail or ''}"
    found = [int(float(m) * _MB) for m in re.findall(r"(\d+(?:\.\d+)?)\s*MB", text, flags=re.I)]
    below = [v for v in found if 0 < v < size]
    return min(below) if below else None


def too_large(err: BaseException) -> bool:
    """Whether ``err`` is the server refusing an update as over its size cap."""
    return isinstance(err, ApiError) and err.status == 413

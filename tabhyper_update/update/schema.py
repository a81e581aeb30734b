"""The target's columns, learned before the first part is sent, and every part's tables
checked against them: all or nothing is decided before any request that changes data.

Where the target's columns come from, in this order:

1. what the SDK recorded when it published the data source (each table's columns with
   their Hyper types and nullability, in the state folder);
2. the columns given with the reference (``client.datasource(..., columns=...)``, or the
   reference ``publish`` returned): as DDL, names with their exact types and NOT NULL;
   else names only;
3. where the server's probe found them exact (``download_types``), the types the data
   source's file records (Download Data Source without its extract), NOT NULL unknown;
4. the VizQL Data Service's ``read-metadata``: names and coarse types (INTEGER, REAL,
   STRING, ...), not tied to a table; one query, remembered for the session's data source.

When none answers, the update goes on with a warning: a part may then still fail.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..local.hyper import connect, quote_name, table_ref
from ..readback.dataservice import DataService
from ..rest.caller import RestCaller
from ..rest.downloads import download_columns
from ..rest.refs import DataSourceRef
from ..values.actions import ActionBatch, bookkeeping_role
from ..values.changeset import GUARD_COLUMN
from ..values.errors import (
    ApiError,
    ConfigurationError,
    PayloadError,
    SchemaDriftError,
    TabHyperError,
)
from ..values.narrowing import column_type, losses
from ..values.parts import ColumnInfo, PayloadLike, TableInfo
from ..values.redaction import get_logger
from .state import StateStore

__all__ = ["Column", "TargetSchema", "check_schema", "learn_schema", "record_schema"]

log = get_logger("tabhyper_update")

#: How long a schema read from the server (the VizQL Data Service, or the data source's
#: file) is trusted (one request per period).
SERVICE_SCHEMA_SECONDS = 900.0


@dataclass(frozen=True)
class Column:
    """A target column as far as it is known: its name, its Hyper type (``NUMERIC(12,2)``)
    and nullability when the SDK published it, else the service's coarse type."""

    name: str
    hyper_type: str | None = None
    nullable: bool | None = None
    service_type: str | None = None


@dataclass(frozen=True)
class TargetSchema:
    """The target's tables (``None``: columns not tied to a table) and where that came from."""

    origin: str
    tables: Mapping[str | None, Mapping[str, Column]]

    def columns_of(self, table: str) -> Mapping[str, Column] | None:
        return self.tables.get(table, self.tables.get(None))


_cache: dict[tuple[str, str, str, str], tuple[float, TargetSchema | None]] = {}
_cache_lock = threading.Lock()


def record_schema(store: StateStore, datasource_id: str, tables: Mapping[str, TableInfo]) -> None:
    """Keep what a published data source's tables hold, for the updates after it."""
    store.save_schema(
        datasource_id,
        {
            name: [
                {"name": c.name, "hyper_type": c.hyper_type, "nullable": c.nullable}
                for c in table.columns
            ]
            for name, table in tables.items()
        },
    )


def learn_schema(
    client: RestCaller, target: DataSourceRef, store: StateStore
) -> TargetSchema | None:
    """The target's columns from the first source that has them (see the module docstring),
    or None when none does."""
    return (
        _recorded(target, store)
        or _given(target)
        or _downloaded(client, target, store)
        or _from_service(client, target)
    )


def _recorded(target: DataSourceRef, store: StateStore) -> TargetSchema | None:
    """What the SDK recorded when it published the data source (with this state folder)."""
    recorded = store.schema(target.id)
    if not recorded:
        return None
    return TargetSchema(
        "the columns the SDK recorded when it published the data source",
        {
            str(table): {
                str(c["name"]): Column(
                    str(c["name"]), str(c.get("hyper_type") or ""), c.get("nullable")
                )
                for c in columns
                if isinstance(c, dict) and c.get("name")
            }
            for table, columns in recorded.items()
            if isinstance(columns, list)
        },
    )


def _downloaded(
    client: RestCaller, target: DataSourceRef, store: StateStore
) -> TargetSchema | None:
    """The types the data source's file records (Download Data Source without its extract),
    where the server's probe found them exact; None elsewhere, or when the download fails
    (the next source answers then)."""
    found = store.probe(client.server, client.site)
    if found is None or found.download_types != "exact":
        return None
    return _once_per_period("file", client, target, lambda: _read_file(client, target))


def _read_file(client: RestCaller, target: DataSourceRef) -> TargetSchema | None:
    """The data source's file read for its columns' types (None: unread, or not whole)."""
    try:
        tables = download_columns(client, target)
    except TabHyperError as err:
        log.warning("the file of data source %s could not be read (%s)", target.label, err)
        return None
    if not tables or any(t is None for cs in tables.values() for t in cs.values()):
        return None
    return TargetSchema(
        "the data source's file (Download Data Source)",
        {t: {c: Column(c, typed) for c, typed in cs.items()} for t, cs in tables.items()},
    )


def exact_columns(client: RestCaller, target: DataSourceRef, store: StateStore) -> dict[str, str]:
    """Each table's columns as DDL with their exact types (``"id BIGINT NOT NULL, amount
    NUMERIC(12,2)"``), as the schema check learns them: what a quarantine's
    ``target_columns`` takes. Refused where only coarse types are known."""
    declared = _given(target) if target.declared else None
    schema = _recorded(target, store) or declared or _downloaded(client, target, store)
    if schema is None:
        raise ConfigurationError(
            f"the exact column types of data source {target.label!r} are not known here: "
            "the SDK did not publish it (or not with this state folder), none were declared "
            "(client.datasource(..., columns={'Extract': 'id BIGINT NOT NULL, ...'})), and no "
            "probe of this server found its data sources' files to record them "
            "(tabhyper-update probe: download_types)"
        )
    return {
        str(table): ", ".join(
            f'"{c.name}" {c.hyper_type}' + (" NOT NULL" if c.nullable is False else "")
            for c in columns.values()
        )
        for table, columns in schema.tables.items()
    }


def _given(target: DataSourceRef) -> TargetSchema | None:
    """The columns the caller gave with the reference: declared with their types, or names."""
    if target.declared:
        return TargetSchema(
            "the columns declared with the data source",
            {
                t: {c: Column(c, d.text, not d.not_null) for c, d in cs.items()}
                for t, cs in target.declared.items()
            },
        )
    if target.columns:
        return TargetSchema(
            "the columns given with the data source",
            {t: {c: Column(c) for c in cs} for t, cs in target.columns.items()},
        )
    return None


def _from_service(client: RestCaller, target: DataSourceRef) -> TargetSchema | None:
    """What the service says, asked once per period: an answer that it cannot say is kept
    too, so that a sink's batches do not ask (and warn) every time."""
    return _once_per_period("service", client, target, lambda: _ask_service(client, target))


def _once_per_period(
    source: str,
    client: RestCaller,
    target: DataSourceRef,
    ask: Callable[[], TargetSchema | None],
) -> TargetSchema | None:
    """``ask``'s answer for the data source from ``source``, kept for
    :data:`SERVICE_SCHEMA_SECONDS` (a sink's batches ask once, not each time)."""
    key = (source, client.server, client.site, target.id.lower())
    with _cache_lock:
        cached = _cache.get(key)
    if cached is not None and time.monotonic() - cached[0] < SERVICE_SCHEMA_SECONDS:
        return cached[1]
    schema = ask()
    with _cache_lock:
        _cache[key] = (time.monotonic(), schema)
    return schema


def _ask_service(client: RestCaller, target: DataSourceRef) -> TargetSchema | None:
    try:
        fields = DataService(client, target.id).fields()
    except (ApiError, TabHyperError) as err:
        log.warning(
            "the columns of data source %s could not be learned before the update (%s): "
            "its parts are sent unchecked, and a part whose columns do not fit fails on the "
            "server. Publish the data source with this SDK, or pass columns= to "
            "client.datasource(), to check them first",
            target.label,
            str(err).splitlines()[0],
        )
        return None
    if len({f.table for f in fields.values()}) > 1:
        # Several tables: the service names fields apart from their tables (a column two
        # tables share is two fields of other names), so it cannot say which table has what.
        log.info(
            "data source %s has several tables: its parts are checked on the server",
            target.label,
        )
        return None
    return TargetSchema(
        "the VizQL Data Service's read-metadata",
        {None: {f.name: Column(f.name, service_type=f.data_type) for f in fields.values()}},
    )


# -- the check -------------------------------------------------------------------------------

#: What each of the service's coarse types takes from the payload without narrowing.
_SERVICE_TAKES = {
    "INTEGER": {"integer"},
    "REAL": {"integer", "numeric", "float"},
    "STRING": {"text"},
    "BOOLEAN": {"boolean"},
    "DATE": {"date"},
    "DATETIME": {"timestamp", "timestamptz"},
}


def _can_overflow(payload: str, target: str) -> bool:
    """Whether a value of the payload's type can be too large for the target's."""
    held, kept = column_type(payload), column_type(target)
    if held is None or kept is None:
        return False
    return any(loss.hyper == "refuses" for loss in losses(held, kept) or ())


def compare_types(payload: str, target: str) -> tuple[str, str] | None:
    """``("narrows", why)`` when the target column keeps less than the payload's type,
    ``("differs", why)`` when it is another kind of value, None when it takes it whole
    (the rules: :mod:`tabhyper_update.values.narrowing`)."""
    p, t = column_type(payload), column_type(target)
    if p is None or t is None or payload.replace(" ", "") == target.replace(" ", ""):
        return None
    found = losses(p, t)
    if found is None:
        return "differs", f"{payload} in the payload, {target} in the data source"
    if found:
        return "narrows", f"{payload} into {target} {found[0].says}"
    return None


def _is_guard(action: object, column: str) -> bool:
    """The guard's own NULL (``ChangeSet(guard=True)``): meant to meet NOT NULL."""
    return column == GUARD_COLUMN and bookkeeping_role(action) == "guard"


def check_schema(
    schema: TargetSchema,
    payload: PayloadLike,
    batches: Sequence[ActionBatch],
    *,
    allow_narrowing: Sequence[str] = (),
) -> dict[str, str]:
    """Refuse, before anything is sent, every payload column the target lacks, holds as
    another kind of value, holds narrower (unless named in ``allow_narrowing``), or holds
    NOT NULL while the payload has NULLs in it: one :class:`SchemaDriftError` naming them.
    Returns the columns let through that a value can still overflow in (the target's exact
    type holds fewer digits: Hyper then fails the update naming none), each with its
    payload and target types."""
    overflows: dict[str, str] = {}
    lacking: dict[str, list[str]] = {}
    faults: dict[str, list[str]] = {}
    for target_table, table, column, columns in _columns_sent(schema, payload, batches):
        found = columns.get(column.name)
        if found is None:
            lacking.setdefault(target_table, []).append(column.name)
            continue
        fault = _fault(column, found, allow_narrowing, payload, table)
        if fault is not None:
            faults.setdefault(target_table, []).append(fault)
        elif _can_overflow(column.hyper_type, found.hyper_type or ""):
            overflows[column.name] = f"{column.hyper_type} into {found.hyper_type}"
    if lacking or faults:
        raise SchemaDriftError(lacking, faults=faults, origin=schema.origin)
    return overflows


def _check_table_known(schema: TargetSchema, table: str) -> None:
    """Refuse a target ``table`` the data source lacks, where its tables are known by name."""
    if None not in schema.tables:
        known = ", ".join(repr(str(t)) for t in sorted(map(str, schema.tables)))
        raise PayloadError(
            f"the data source has no table {table!r} (its tables, from {schema.origin}: "
            f"{known or 'none'}): nothing was sent; name one of them as the target"
        )


def _columns_sent(
    schema: TargetSchema, payload: PayloadLike, batches: Sequence[ActionBatch]
) -> Iterator[tuple[str, TableInfo, ColumnInfo, Mapping[str, Column]]]:
    """Each payload column an action sends into a target table whose columns are known,
    once per target, source and column (the guard's own columns left out): its target
    table, its payload table, the column and the target table's columns. A target table
    the data source lacks, where its tables are known by name, is refused naming them."""
    seen: set[tuple[str, str, str]] = set()
    for batch in batches:
        for action in batch.actions:
            source = getattr(action, "source_table", None)
            if action.action == "delete" or source not in payload.tables:
                continue
            columns = schema.columns_of(action.target_table)
            if columns is None:
                _check_table_known(schema, action.target_table)
                continue
            table = payload.tables[str(source)]
            for column in table.columns:
                mark = (action.target_table, str(source), column.name)
                if mark not in seen and not _is_guard(action, column.name):
                    seen.add(mark)
                    yield action.target_table, table, column, columns


def _fault(
    column: ColumnInfo,
    target: Column,
    allow_narrowing: Sequence[str],
    payload: PayloadLike,
    table: TableInfo,
) -> str | None:
    if target.hyper_type:
        return _hyper_fault(column, target, target.hyper_type, allow_narrowing, payload, table)
    if target.service_type:
        return _service_fault(column, target.service_type)
    return None


def _hyper_fault(
    column: ColumnInfo,
    target: Column,
    hyper_type: str,
    allow_narrowing: Sequence[str],
    payload: PayloadLike,
    table: TableInfo,
) -> str | None:
    """What keeps ``column`` from a target column whose Hyper type is known: a type it
    cannot take, a narrowing its rows were not checked for, NULLs for a NOT NULL column."""
    name = column.name
    compared = compare_types(column.hyper_type, hyper_type)
    if compared is not None:
        how, why = compared
        if how == "differs":
            return f"{name!r}: {why}"
        if name not in allow_narrowing and not _rows_checked(payload, table, name, target):
            return f"{name!r}: {why} (allow_narrowing=[{name!r}] lets it through)"
    if target.nullable is False and column.nullable and _holds_nulls(payload, table, name):
        return f"{name!r}: NULL in the payload, NOT NULL in the data source"
    return None


def _service_fault(column: ColumnInfo, service_type: str) -> str | None:
    """What keeps ``column`` from a target column known only by the VizQL Data Service's
    type (``service_type``): a kind of value that type does not take."""
    parsed = column_type(column.hyper_type)
    kind = parsed.kind if parsed is not None else ""
    takes = _SERVICE_TAKES.get(service_type.upper())
    if takes is not None and kind and kind not in takes:
        return (
            f"{column.name!r}: {column.hyper_type} in the payload, {service_type} in the "
            "data source"
        )
    return None


def _rows_checked(payload: PayloadLike, table: TableInfo, name: str, target: Column) -> bool:
    """Whether every row of the column was checked against this very type, and those it
    would change set aside (``on_bad_rows="quarantine"`` with ``target_columns``)."""
    checked = getattr(payload, "checked_types", {}).get(table.name, {}).get(name)
    return checked is not None and compare_types(checked, target.hyper_type or "") is None


def _holds_nulls(payload: PayloadLike, table: TableInfo, column: str) -> bool:
    """Whether any part's ``table`` holds a NULL in ``column`` (read from the part files)."""
    for part in payload.parts:
        if table.name not in part.tables:
            continue
        with connect(part.path, read_only=True) as conn:
            count: Any = conn.execute_scalar_query(
                f"SELECT COUNT(*) FROM {table_ref(table.schema, table.name)} "
                f"WHERE {quote_name(column)} IS NULL"
            )
        if int(count or 0):
            return True
    return False

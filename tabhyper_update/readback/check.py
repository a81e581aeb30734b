"""Checking an update by reading it back: after a change set's jobs finished, every upserted
key must be in the data source once, with the payload's values, and every deleted key
must be gone.

:func:`expected_changes` reads what the payload's parts hold (all keys, or a random sample)
before the payload's files are removed; :func:`check_update` asks the VizQL Data Service
for those keys, a batch of keys per request, and returns a :class:`DriftReport`.
``apply(verify=True)`` does both and raises :class:`DriftError` on drift.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ..local.hyper import connect, quote_name, table_ref
from ..local.telemetry import span
from ..rest.refs import DataSourceRef
from ..values.errors import (
    DataServiceError,
    InvalidArgumentError,
    QueryBudgetError,
    TabHyperError,
)
from ..values.parts import PayloadLike, PayloadPart
from .compare import Tolerance, canonical, same
from .dataservice import DataService, FieldInfo, dimension, measure, set_filter
from .drift import DriftReport, KeyDrift

if TYPE_CHECKING:
    from tableauhyperapi import Connection

    from ..rest.caller import RestCaller
    from ..values.changeset import ChangeSet

__all__ = [
    "ExpectedChanges",
    "FoundRows",
    "check_update",
    "expected_changes",
    "judge_key",
    "read_back",
    "rows_by_key",
    "verify_option",
]

#: Keys per read-back request by default (a SET filter of this many values): a micro-batch's
#: keys in one query, 100,000 keys in two.
KEYS_PER_REQUEST = 50_000


@dataclass
class ExpectedChanges:
    """What a change set's update must have left: the upserted rows (every column) and
    the deleted keys, all of them or a random sample of ``touched`` keys."""

    key: tuple[str, ...]
    columns: tuple[str, ...]
    upserts: list[tuple[Any, ...]]
    deletes: list[tuple[Any, ...]]
    touched: int

    @property
    def checked(self) -> int:
        return len(self.upserts) + len(self.deletes)


def verify_option(verify: object, *, actions_given: bool = False) -> int | None:
    """``apply``'s ``verify=``: ``True`` (every key) → 0, an int n > 0 (a sample of n
    keys) → n, ``False``/``None`` → ``None`` (no check). A check reads back a change set's
    own actions: with ``actions=`` given it is refused."""
    if verify is None or verify is False:
        return None
    if actions_given:
        raise InvalidArgumentError(
            "verify reads back a change set's own actions; with actions= given, "
            "reconcile the data source with its source instead",
            argument="verify",
        )
    if verify is True:
        return 0
    if isinstance(verify, int) and not isinstance(verify, bool) and verify > 0:
        return verify
    raise InvalidArgumentError(
        f"verify must be True, False or a number of keys to sample (> 0), got {verify!r}",
        argument="verify",
    )


def _one_change_set(payload: PayloadLike) -> ChangeSet:
    """The one change set ``payload`` was built with; refused for any other payload."""
    change_set: ChangeSet | None = getattr(payload, "change_set", None)
    if not payload.is_cdc or change_set is None:
        raise InvalidArgumentError(
            "verify needs a payload built with one ChangeSet (its keys are what is read "
            "back); a plain or multi-table payload cannot be checked this way: reconcile "
            "the data source with its source instead",
            argument="verify",
        )
    return change_set


def expected_changes(payload: PayloadLike, sample: int = 0) -> ExpectedChanges:
    """The rows a change-set payload upserts and the keys it deletes, read from its parts
    (``sample`` > 0: about that many keys, drawn at random across the parts)."""
    change_set = _one_change_set(payload)
    schema = str(getattr(payload, "schema", "Extract"))
    key = tuple(change_set.key)
    written = (change_set.upsert_table, change_set.delete_table)
    touched = sum(t.row_count for p in payload.parts for n, t in p.tables.items() if n in written)
    share = 1.0 if not sample or sample >= touched else sample / touched
    columns: tuple[str, ...] = ()
    upserts: list[tuple[Any, ...]] = []
    deletes: list[tuple[Any, ...]] = []
    for part in payload.parts:
        with connect(part.path, read_only=True) as conn:
            read, rows = _rows_of(conn, part, schema, change_set.upsert_table, share)
            columns = read or columns
            upserts += rows
            deletes += _rows_of(conn, part, schema, change_set.delete_table, share, key)[1]
    return ExpectedChanges(key, columns or key, upserts, deletes, touched)


def _rows_of(
    conn: Connection,
    part: PayloadPart,
    schema: str,
    name: str,
    share: float,
    columns: Sequence[str] = (),
) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """The columns read and the rows of table ``name`` in ``part`` (over ``conn``):
    ``columns`` of them (every column when none is named), all or a random ``share``;
    nothing where the part holds no row of the table."""
    table = part.tables.get(name)
    if table is None or not table.row_count:
        return (), []
    read = tuple(columns or table.column_names)
    text = _read_query(table_ref(schema, name), read, table.row_count, share)
    return read, list(map(tuple, conn.execute_list_query(text)))


def _read_query(table: str, columns: Sequence[str], rows: int, share: float) -> str:
    """SQL reading ``columns`` of ``table`` (of ``rows`` rows): all of them, or a random
    ``share`` of them."""
    text = f"SELECT {', '.join(map(quote_name, columns))} FROM {table}"
    if share < 1.0:
        text += f" ORDER BY RANDOM() LIMIT {math.ceil(rows * share)}"
    return text


def _filter_value(value: Any) -> Any:
    if hasattr(value, "to_datetime"):
        value = value.to_datetime()
    elif hasattr(value, "to_date"):
        value = value.to_date()
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    return value


def _batches(items: Sequence[tuple[Any, ...]], size: int) -> Iterator[Sequence[tuple[Any, ...]]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


#: Canonical key → the distinct rows the data source holds for it, each with its count.
FoundRows = dict[tuple[Any, ...], list[tuple[dict[str, Any], int]]]


def rows_by_key(
    service: DataService,
    fields: Mapping[str, FieldInfo],
    key: Sequence[str],
    columns: Sequence[str],
    filters: Sequence[Mapping[str, Any]],
) -> FoundRows:
    """The data source's rows that pass ``filters`` (``key`` and ``columns``, canonical),
    grouped by every column with a row count, so that a repeated row is seen."""
    wanted = [*key, *[c for c in columns if c not in key]]
    aliases = {c: f"c{i}" for i, c in enumerate(wanted)}
    query = [dimension(fields[c].caption, aliases[c]) for c in wanted]
    query.append(measure(fields[key[0]].caption, "COUNT", "n_rows"))
    found: FoundRows = {}
    for row in service.query(query, filters):
        values = {c: canonical(row.get(aliases[c]), fields[c].data_type) for c in wanted}
        count = int(row.get("n_rows") or 0)
        found.setdefault(tuple(values[k] for k in key), []).append((values, count))
    return found


def judge_key(
    key: tuple[Any, ...],
    want: dict[str, Any],
    rows: list[tuple[dict[str, Any], int]],
    fields: Mapping[str, FieldInfo],
    tolerance: Tolerance | None,
) -> KeyDrift | None:
    """The drift of one key that should hold ``want`` (canonical), given the rows found for
    it: missing, duplicated, changed (the columns named), or ``None``."""
    if not rows:
        return KeyDrift("missing", key, expected=want)
    found = tuple(r for r, _ in rows)
    if sum(n for _, n in rows) > 1:
        return KeyDrift("duplicated", key, expected=want, found=found)
    got = rows[0][0]
    differ = tuple(c for c in want if not same(want[c], got.get(c), fields[c].data_type, tolerance))
    if differ:
        return KeyDrift("changed", key, differ, expected=want, found=found)
    return None


class _KeyReader:
    """Reads the data source's rows of given keys, a batch per request."""

    def __init__(self, service: DataService, key: Sequence[str], columns: Sequence[str]) -> None:
        self.service = service
        self.key = list(key)
        self.fields: dict[str, FieldInfo] = {c: service.field(c) for c in columns}

    def canonical_key(self, values: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(
            canonical(v, self.fields[k].data_type) for k, v in zip(self.key, values, strict=True)
        )

    def filters(self, keys: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
        """A SET filter per key column (the answer is matched on the whole key)."""
        return [
            set_filter(
                dimension(self.fields[k].caption),
                sorted({_filter_value(key[i]) for key in keys}, key=repr),
            )
            for i, k in enumerate(self.key)
        ]

    def rows(self, keys: Sequence[tuple[Any, ...]], columns: Sequence[str]) -> FoundRows:
        """The rows of ``keys``, every column of ``columns``."""
        return rows_by_key(self.service, self.fields, self.key, columns, self.filters(keys))

    def check_whole(self, keys: Sequence[tuple[Any, ...]], found: FoundRows) -> None:
        """Refuse an answer that was cut short: the rows counted for ``keys`` against the
        rows received (the service may truncate a large answer without saying so)."""
        received = sum(n for rows in found.values() for _, n in rows)
        counted = self.service.count(self.fields[self.key[0]].caption, self.filters(keys))
        if counted > received:
            raise DataServiceError(
                status=None,
                summary=(
                    f"the VizQL Data Service's answer was cut short: it holds {counted} rows "
                    f"for these keys but sent {received}"
                ),
                hint="read back fewer keys per query (keys_per_request=)",
            )


def _keys_to_read(
    expected: ExpectedChanges,
) -> list[tuple[tuple[Any, ...], tuple[Any, ...] | None]]:
    """Each key ``expected`` reads back with the row it should hold (``None``: deleted)."""
    index = {c: i for i, c in enumerate(expected.columns)}
    upserted = [(tuple(row[index[k]] for k in expected.key), row) for row in expected.upserts]
    return [*upserted, *((key, None) for key in expected.deletes)]


def _checked_batch(
    reader: _KeyReader,
    batch: Sequence[tuple[Any, ...]],
    expected: ExpectedChanges,
    index: Mapping[str, int],
    tolerance: Tolerance | None,
) -> list[KeyDrift]:
    """The drift of one batch of keys read back (``index``: each column's place in a row);
    where a key is missing, the answer is checked whole first (a cut-short answer is
    refused, not read as drift)."""
    found = reader.rows([key for key, _ in batch], expected.columns)
    drift = _judge_batch(batch, found, reader, index, expected.key, tolerance)
    if any(d.kind == "missing" for d in drift):
        reader.check_whole([key for key, _ in batch], found)
    return drift


def check_update(
    client: RestCaller,
    target: DataSourceRef,
    expected: ExpectedChanges,
    *,
    keys_per_request: int = KEYS_PER_REQUEST,
    tolerance: Tolerance | None = None,
    budget: int | None = None,
) -> DriftReport:
    """Read back the keys of ``expected`` from ``target`` and report what differs: upserted
    and deleted keys together, ``keys_per_request`` per query, at most ``budget`` queries
    (the keys left when it, or the site's quota, is spent are reported as not checked)."""
    if keys_per_request < 1:
        raise InvalidArgumentError("keys_per_request must be >= 1", argument="keys_per_request")
    service = DataService(client, target.id, budget=budget)
    reader = _KeyReader(service, expected.key, expected.columns)
    report = DriftReport(
        "update", target.name or "", target.id, expected.key, expected.checked, expected.touched
    )
    work = _keys_to_read(expected)
    index = {c: i for i, c in enumerate(expected.columns)}
    done = 0
    try:
        for batch in _batches(work, keys_per_request):
            report.drift += _checked_batch(reader, batch, expected, index, tolerance)
            done += len(batch)
    except QueryBudgetError as err:
        report.unchecked = len(work) - done
        report.stopped = str(err)
    if expected.checked < expected.touched:
        report.confidence = _sample_confidence(expected.checked, expected.touched)
    report.cost = service.stats.as_dict()
    return report


def _judge_batch(
    batch: Sequence[tuple[tuple[Any, ...], tuple[Any, ...] | None]],
    found: FoundRows,
    reader: _KeyReader,
    index: Mapping[str, int],
    key_columns: Sequence[str],
    tolerance: Tolerance | None,
) -> list[KeyDrift]:
    """The drift among one batch's keys: an upserted key (with its row) must hold the row,
    a deleted one (without) must be gone."""
    drift: list[KeyDrift] = []
    for raw, row in batch:
        if row is None:
            gone = reader.canonical_key(raw)
            if rows := found.get(gone):
                drift.append(KeyDrift("extra", gone, found=tuple(r for r, _ in rows)))
            continue
        want = {c: canonical(row[i], reader.fields[c].data_type) for c, i in index.items()}
        key = tuple(want[k] for k in key_columns)
        judged = judge_key(key, want, found.get(key, []), reader.fields, tolerance)
        if judged is not None:
            drift.append(judged)
    return drift


def read_back(
    client: RestCaller, target: DataSourceRef, expected: ExpectedChanges, **options: Any
) -> DriftReport:
    """:func:`check_update` after an update was applied: a failure says that only the
    check failed."""
    try:
        with span("readback", datasource=target.label, keys=expected.checked):
            return check_update(client, target, expected, **options)
    except TabHyperError as err:
        err.at_step("read-back", "the update itself was applied; only its check failed")
        raise


def _sample_confidence(checked: int, touched: int) -> str:
    """What a clean sample of ``checked`` of ``touched`` keys says (the rule of three)."""
    bound = min(1.0, 3.0 / max(checked, 1))
    return (
        f"a random sample of {checked} of {touched} keys: when it finds no drift, fewer than "
        f"{bound:.2%} of the touched keys differ, with 95% confidence"
    )

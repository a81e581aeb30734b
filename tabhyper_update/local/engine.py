"""Apply an action batch to a local ``.hyper`` file with Hyper: the reference semantics.

>>> from tabhyper_update import local
>>> local.apply(batch, target="orders.hyper", payload="payload.hyper")  # doctest: +SKIP

Semantics (the fake server runs exactly this), in one of two modes:

* actions run in order in one transaction; any failure rolls the whole batch back and
  names the failing action's index and the reason;
* columns are matched by exact name; insert fills target columns the source lacks with
  NULL; update and upsert set every source column on the matching target rows; a source
  column the target lacks is refused (each of these two as Hyper's SQL does, and each a
  setting where a probed server differs: :class:`SourceColumns`);
* delete removes the target rows the condition matches (for some source row, when a source
  table is given, which may hold only the columns the condition names);
* replace empties the target and inserts the source; names and types must match exactly
  (NOT NULL is ignored);
* upsert updates, then inserts the source rows that match no target row (matched after the
  update: for key conditions, the usual case, that is the same set as before it);
* ``eq neq gt lt gte lte`` follow SQL (NULL never matches), ``is`` is ``IS NOT DISTINCT
  FROM``, ``has`` is substring containment. Datetime constants are instants: a TIMESTAMP
  column is compared in UTC wall-clock time, a DATE column as midnight of that date.

``semantics="hyper"`` (the default) does what Hyper documents and nothing stricter, as a
server applying the batch with Hyper would: a target row matched by several source rows
takes one of them (by key equality, one chosen by ``seed``: the same one for the same
seed, not always the first; under another condition, the one Hyper picks); a decimal with
more decimal places than its column is rounded, a text longer than its ``VARCHAR(n)`` cut;
an integer out of range, a decimal with too many whole digits and a NULL into a NOT NULL
column fail the batch (Hyper refuses them). ``semantics="strict"`` refuses, naming the
table, the column and the value, every batch whose outcome would depend on which source row
is used or that would change a value (the narrowing rules of
:mod:`tabhyper_update.values.narrowing`).

Every identifier and constant is quoted by Hyper's own escaping, so no table name, column
name or string value can change the SQL.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from tableauhyperapi import HyperException, Name, SqlType, TableName, TypeTag

from ..values.actions import (
    ActionBatch,
    ActionCondition,
    BatchLike,
    Delete,
    Insert,
    Replace,
    Update,
    _Action,
)
from ..values.conditions import And, Comparison, Const, Or, condition_columns, key_pairs
from ..values.errors import ApplyError
from ..values.narrowing import ColumnType, losses
from ..values.parts import PayloadLike
from ..values.redaction import get_logger
from ..values.wording import check_choice
from .hyper import attach_read_only, connect, quote_literal, quote_name

if TYPE_CHECKING:
    from tableauhyperapi import Connection

    from ..values.conditions import Condition

__all__ = ["SEMANTICS", "Semantics", "SourceColumns", "apply", "check_semantics"]

log = get_logger("tabhyper_update")

TARGET_DB = "tabhyper_target"
SOURCE_DB = "tabhyper_payload"
#: Hyper SQL of each comparison, over its two sides.
_COMPARISONS = {
    "eq": "({left} = {right})",
    "neq": "({left} <> {right})",
    "gt": "({left} > {right})",
    "lt": "({left} < {right})",
    "gte": "({left} >= {right})",
    "lte": "({left} <= {right})",
    "is": "({left} IS NOT DISTINCT FROM {right})",
    "has": "(STRPOS(CAST({left} AS TEXT), CAST({right} AS TEXT)) > 0)",
}

_INTEGERS = {TypeTag.SMALL_INT, TypeTag.INT, TypeTag.BIG_INT, TypeTag.OID}
_TEXTS = {TypeTag.TEXT, TypeTag.VARCHAR, TypeTag.CHAR, TypeTag.JSON}
_FLOATS = {TypeTag.DOUBLE, TypeTag.FLOAT}


#: The types whose values pass between each other as one kind.
_KINDS = {
    **dict.fromkeys(_INTEGERS, "integer"),
    **dict.fromkeys(_TEXTS, "text"),
    **dict.fromkeys(_FLOATS, "float"),
}


def _category(tag: TypeTag) -> str:
    """A type's kind (:data:`_KINDS`; any other type its own)."""
    return _KINDS.get(tag) or str(tag.name).lower()


def _assignable(source: SqlType, target: SqlType) -> bool:
    """Whether Hyper can store a source value in the target column without surprises."""
    s, t = _category(source.tag), _category(target.tag)
    if s == t:
        return True
    # Hyper takes a TIMESTAMP into a TIMESTAMPTZ column as that wall-clock time in UTC
    # (measured): the instant the SDK's UTC wall-clock TIMESTAMP stands for.
    widening = {
        ("integer", "numeric"),
        ("integer", "float"),
        ("numeric", "float"),
        ("timestamp", "timestamp_tz"),
    }
    return (s, t) in widening


@dataclass(frozen=True)
class _Table:
    db: str
    schema: str
    name: str
    columns: dict[str, SqlType]

    @property
    def ref(self) -> str:
        return ".".join(map(quote_name, (self.db, self.schema, self.name)))

    @property
    def label(self) -> str:
        return f"{self.schema}.{self.name}"


def _table(conn: Connection, db: str, schema: str, name: str) -> _Table:
    table_name = TableName(db, schema, name)
    if not conn.catalog.has_table(table_name):
        # Worded like the server's job notes, so both read the same.
        raise _Refusal(f"Specified table does not exist: {schema}.{name} (errorCode=410012)")
    definition = conn.catalog.get_table_definition(table_name)
    return _Table(db, schema, name, {c.name.unescaped: c.type for c in definition.columns})


class _Refusal(Exception):
    pass


#: The types of a timestamp constant and of a DATE column it is compared with (the column
#: then read as a timestamp).
_DATE_AS_TIMESTAMP = (TypeTag.TIMESTAMP, TypeTag.DATE)


class _Sql:
    """Translation of conditions to SQL over aliases ``t`` (target) and ``s`` (source)."""

    def __init__(self, target: _Table, source: _Table | None) -> None:
        self.target = target
        self.source = source

    def column(self, side: str, name: str) -> tuple[str, SqlType]:
        table = self.target if side == "t" else self.source
        if table is None:
            raise _Refusal(
                f"the condition reads source column {name!r} but no source table is given"
            )
        if name not in table.columns:
            kind = "target" if side == "t" else "source"
            raise _Refusal(
                f"{kind} table {table.label} has no column {name!r} (its columns: "
                f"{', '.join(map(repr, table.columns))})"
            )
        return f"{side}.{quote_name(name)}", table.columns[name]

    def const(self, const: Const, other: SqlType) -> tuple[str, SqlType | None]:
        value = const.python_value()
        if value is None:
            return "NULL", None
        if const.type == "boolean":
            return ("TRUE" if value else "FALSE"), SqlType.bool()
        if isinstance(value, datetime):
            instant = value.astimezone(timezone.utc)
            if other.tag == TypeTag.TIMESTAMP_TZ:
                return f"CAST({quote_literal(instant.isoformat())} AS TIMESTAMPTZ)", other
            wall = instant.replace(tzinfo=None).isoformat(sep=" ")
            return f"CAST({quote_literal(wall)} AS TIMESTAMP)", SqlType.timestamp()
        if const.type == "integer":
            return f"CAST({int(value)} AS BIGINT)", SqlType.big_int()
        if const.type == "double":
            return (
                f"CAST({quote_literal(repr(float(value)))} AS DOUBLE PRECISION)",
                SqlType.double(),
            )
        return quote_literal(str(value)), SqlType.text()

    def condition(self, node: Condition | bool) -> str:
        if node is True:
            return "TRUE"
        if isinstance(node, (And, Or)):
            joined = (" AND " if isinstance(node, And) else " OR ").join(
                map(self.condition, node.args)
            )
            return f"({joined})"
        assert isinstance(node, Comparison)
        left, right = self._operands(node)
        return _COMPARISONS[node.op].format(left=left, right=right)

    def _operands(self, node: Comparison) -> tuple[str, str]:
        """A comparison's two sides as SQL (a DATE column met with a timestamp constant
        read as a timestamp); refused when their types cannot be compared."""
        left, left_type = self.column(*node.left)
        right_type: SqlType | None
        if node.const is None:
            # The left side is then the target's column.
            right, right_type = self.column("s", cast("str", node.source_col))
        else:
            right, right_type = self.const(node.const, left_type)
            if right_type is not None and (right_type.tag, left_type.tag) == _DATE_AS_TIMESTAMP:
                left, left_type = f"CAST({left} AS TIMESTAMP)", SqlType.timestamp()
        if (
            right_type is not None
            and node.op != "has"
            and not (_assignable(left_type, right_type) or _assignable(right_type, left_type))
        ):
            raise _Refusal(
                f"cannot compare {left_type} with {right_type} in "
                f"{node.model_dump_json(by_alias=True, exclude_none=True)}"
            )
        return left, right


def _check_insertable(source: _Table, target: _Table, columns: SourceColumns) -> list[str]:
    """The source columns written into ``target``, once checked to exist there with a
    compatible type (a column the target lacks refused, or left out under
    ``extra="ignore"``)."""
    extra = [c for c in source.columns if c not in target.columns]
    if extra and columns.extra == "refuse":
        raise _Refusal(
            f"source column(s) {', '.join(map(repr, extra))} of {source.label} do not exist "
            f"in target table {target.label} (its columns: "
            f"{', '.join(map(repr, target.columns))})"
        )
    written = [c for c in source.columns if c in target.columns]
    for name in written:
        stype, ttype = source.columns[name], target.columns[name]
        if not _assignable(stype, ttype):
            raise _Refusal(
                f"column {name!r} is {stype} in source table {source.label} but {ttype} in "
                f"target table {target.label}"
            )
    return written


#: Hyper SQL that holds for a value ``col`` of each way a value can fail to fit (``inexact``:
#: an integer past 2^53 in a double).
_LOSS_TESTS = {
    "range": "{col} < {low} OR {col} > {limit}",
    "whole_digits": "ABS({col}) >= CAST(1E{limit} AS DOUBLE PRECISION)",
    "scale": "{col} <> ROUND({col}, {limit})",
    "length": "CHAR_LENGTH({col}) > {limit}",
    "inexact": "ABS({col}) > {limit}",
}

_TYPE_NAMES = {
    TypeTag.SMALL_INT: "SMALLINT",
    TypeTag.INT: "INTEGER",
    TypeTag.BIG_INT: "BIGINT",
    TypeTag.NUMERIC: "NUMERIC",
}


def _column_type(t: SqlType) -> ColumnType:
    kind = _category(t.tag)
    return ColumnType(
        kind,
        _TYPE_NAMES.get(t.tag, str(t.tag.name)),
        t.precision,
        t.scale,
        t.max_length if kind == "text" else None,
    )


def _loses(name: str, stype: SqlType, ttype: SqlType) -> tuple[str, str] | None:
    """Hyper SQL that holds for a source value of column ``name`` the target column cannot
    keep as it is, and what it means; None when every value fits (the rules:
    :mod:`tabhyper_update.values.narrowing`). Reads alias ``s``."""
    found = losses(_column_type(stype), _column_type(ttype)) or ()
    # A decimal inexact in a double is the double's own rounding, as the column's type says.
    integer = _category(stype.tag) == "integer"
    tests = [
        _LOSS_TESTS[loss.what].format(col=f"s.{quote_name(name)}", low=loss.low, limit=loss.limit)
        for loss in found
        if loss.what != "inexact" or integer
    ]
    if not tests:
        return None
    said = "; ".join(loss.says for loss in found)
    return f"({' OR '.join(tests)})", f"more than {ttype} keeps ({said})"


Semantics = Literal["hyper", "strict"]
SEMANTICS: tuple[Semantics, ...] = ("hyper", "strict")


@dataclass(frozen=True)
class SourceColumns:
    """How source columns that differ from the target's are met, where Tableau is silent.
    ``extra``: a source column the target lacks is ``"refuse"``-d (what Hyper does with a
    column that does not exist; the default) or ``"ignore"``-d. ``missing``: rows inserted
    from a source lacking target columns get NULL there (``"null"``, Hyper's ``INSERT``
    with a column list; the default) or are ``"refuse"``-d. ``partial``: rows updated from a
    source lacking target columns ``"keep"`` those columns as they were (Hyper's ``UPDATE``
    setting the source's columns; the default), have them set to NULL (``"null"``: the
    source's rows taken as whole rows), or the update is ``"refuse"``-d."""

    extra: Literal["refuse", "ignore"] = "refuse"
    missing: Literal["null", "refuse"] = "null"
    partial: Literal["keep", "null", "refuse"] = "keep"

    def __post_init__(self) -> None:
        check_choice(self.extra, ("refuse", "ignore"), "extra_columns", ApplyError)
        check_choice(self.missing, ("null", "refuse"), "missing_columns", ApplyError)
        check_choice(self.partial, ("keep", "null", "refuse"), "partial_update", ApplyError)


def check_semantics(semantics: object) -> Semantics:
    return check_choice(semantics, SEMANTICS, "semantics", ApplyError)


class _Engine:
    def __init__(
        self,
        conn: Connection,
        payload_attached: bool,
        semantics: Semantics,
        seed: int,
        columns: SourceColumns,
    ) -> None:
        self.conn = conn
        self.payload_attached = payload_attached
        self.strict = semantics == "strict"
        self.seed = seed
        self.columns = columns

    def run(self, sql: str) -> int:
        log.debug("hyper: %s", sql)
        return int(self.conn.execute_command(sql) or 0)

    def scalar(self, sql: str) -> Any:
        log.debug("hyper: %s", sql)
        return self.conn.execute_scalar_query(sql)

    def tables(self, action: _Action) -> tuple[_Table, _Table | None]:
        target = _table(self.conn, TARGET_DB, action.target_schema, action.target_table)
        source = None
        if action.source_table is not None:
            if not self.payload_attached:
                raise _Refusal(
                    f"the action reads payload table {action.source_table!r} but "
                    "no payload was given"
                )
            source = _table(self.conn, SOURCE_DB, action.source_schema or "", action.source_table)
        return target, source

    def check_single_match(
        self, sql: _Sql, target: _Table, source: _Table, condition: Condition | bool, where: str
    ) -> None:
        pairs = key_pairs(condition)
        if pairs is not None:
            # Key equality: only duplicated source keys can match a target row twice.
            src_cols = ", ".join(quote_name(s) for _, s in pairs)
            on = " AND ".join(f"t.{quote_name(t)} = d.{quote_name(s)}" for t, s in pairs)
            hit = self.scalar(
                f"SELECT COUNT(*) FROM (SELECT {src_cols} FROM {source.ref} "
                f"GROUP BY {src_cols} HAVING COUNT(*) > 1) d "
                f"JOIN {target.ref} t ON {on}"
            )
        else:
            joined = self.scalar(
                f"SELECT COUNT(*) FROM {target.ref} t JOIN {source.ref} s ON {where}"
            )
            matched = self.scalar(
                f"SELECT COUNT(*) FROM {target.ref} t WHERE EXISTS "
                f"(SELECT 1 FROM {source.ref} s WHERE {where})"
            )
            hit = int(joined) - int(matched)
        if int(hit) > 0:
            raise _Refusal(
                f"target rows of {target.label} are matched by more than one row of source "
                f"table {source.label}; make the source unique on the condition's columns"
            )

    def refuse_losses(self, source: _Table, target: _Table) -> None:
        """Refuse, naming the column and the value, a source value the target column would
        change (narrowed decimals, integers out of range, text too long): the real server's
        behaviour there is unknown, and the data must not change silently."""
        for name, stype in source.columns.items():
            if name not in target.columns:
                continue
            found = _loses(name, stype, target.columns[name])
            if found is None:
                continue
            test, meaning = found
            value = self.scalar(
                f"SELECT (SELECT CAST(s.{quote_name(name)} AS TEXT) FROM {source.ref} AS s "
                f"WHERE {test} LIMIT 1)"
            )
            if value is not None:
                shown = value if len(value) <= 60 else value[:60] + "…"
                raise _Refusal(
                    f"column {name!r}: value {shown} of source table {source.label} "
                    f"({stype}) is {meaning} (target table {target.label}); this batch changed "
                    "nothing. Widen the target column, or round or cut the value in the source"
                )

    def inserted(self, rows: int, source: _Table, target: _Table) -> int:
        """``rows`` inserted from ``source``: refused under ``missing="refuse"`` when the
        source lacks target columns (the batch then rolls back)."""
        lacking = [c for c in target.columns if c not in source.columns]
        if rows and lacking and self.columns.missing == "refuse":
            raise _Refusal(
                f"source table {source.label} lacks column(s) {', '.join(map(repr, lacking))} "
                f"of target table {target.label}: rows inserted must give every column"
            )
        return rows

    def left_out(self, source: _Table, target: _Table) -> list[str]:
        """The target columns an update from ``source`` sets to NULL, lacking them
        (``partial="null"``; none under ``"keep"``); refused under ``partial="refuse"``."""
        lacking = [c for c in target.columns if c not in source.columns]
        if lacking and self.columns.partial == "refuse":
            raise _Refusal(
                f"source table {source.label} lacks column(s) {', '.join(map(repr, lacking))} "
                f"of target table {target.label}: rows updated must give every column"
            )
        return lacking if self.columns.partial == "null" else []

    def update(self, sql: _Sql, target: _Table, source: _Table, condition: Condition | bool) -> int:
        columns = _check_insertable(source, target, self.columns)
        if self.strict:
            self.refuse_losses(source, target)
        where = sql.condition(condition)
        if self.strict:
            self.check_single_match(sql, target, source, condition, where)
        rows = source.ref if self.strict else self.one_per_key(source, condition)
        sets = ", ".join(
            [f"{quote_name(c)} = s.{quote_name(c)}" for c in columns]
            + [f"{quote_name(c)} = NULL" for c in self.left_out(source, target)]
        )
        return self.run(f"UPDATE {target.ref} AS t SET {sets} FROM {rows} AS s WHERE {where}")

    def one_per_key(self, source: _Table, condition: Condition | bool) -> str:
        """The source as Hyper's ``UPDATE ... FROM`` may use it: under a key-equality
        condition, one row per key, chosen by the seed (by the rows' values, ascending or
        descending as the seed says, so the same seed picks the same row and not always
        the first); under any other condition, the source as it is (the row Hyper picks)."""
        pairs = key_pairs(condition)
        if pairs is None:
            return source.ref
        keys = ", ".join(quote_name(s) for _, s in pairs)
        others = [c for c in source.columns if c not in {s for _, s in pairs}] or list(
            source.columns
        )
        direction = "DESC" if self.seed % 2 else "ASC"
        order = ", ".join(f"CAST({quote_name(c)} AS TEXT) {direction} NULLS LAST" for c in others)
        cols = ", ".join(map(quote_name, source.columns))
        return (
            f"(SELECT {cols} FROM (SELECT {cols}, ROW_NUMBER() OVER (PARTITION BY {keys} "
            f"ORDER BY {order}) AS tabhyper_pick FROM {source.ref}) AS ranked "
            "WHERE tabhyper_pick = 1)"
        )

    def apply(self, action: _Action) -> int:
        target, source = self.tables(action)
        if isinstance(action, (Insert, Replace)):
            assert source is not None  # both read a payload table
            return (self.replace if isinstance(action, Replace) else self.insert)(source, target)
        assert action.condition is not None  # the others select rows
        if isinstance(action, Delete):
            return self.delete(_Sql(target, source), target, source, action.condition)
        assert source is not None
        write = self.update if isinstance(action, Update) else self.upsert
        return write(_Sql(target, source), target, source, action.condition)

    def insert(self, source: _Table, target: _Table) -> int:
        cols = ", ".join(map(quote_name, _check_insertable(source, target, self.columns)))
        if self.strict:
            self.refuse_losses(source, target)
        rows = self.run(f"INSERT INTO {target.ref} ({cols}) SELECT {cols} FROM {source.ref}")
        return self.inserted(rows, source, target)

    def replace(self, source: _Table, target: _Table) -> int:
        self.check_replace(source, target)
        cols = ", ".join(map(quote_name, source.columns))
        self.run(f"DELETE FROM {target.ref}")
        return self.run(f"INSERT INTO {target.ref} ({cols}) SELECT {cols} FROM {source.ref}")

    def delete(
        self, sql: _Sql, target: _Table, source: _Table | None, condition: ActionCondition
    ) -> int:
        """A delete by a condition over the target alone, or matched against a source table
        holding only the columns the condition names."""
        where = sql.condition(condition)
        if source is None:
            return self.run(f"DELETE FROM {target.ref} AS t WHERE {where}")
        _, named = condition_columns(condition) if condition is not True else (set(), set())
        extra = [c for c in source.columns if c not in named]
        if extra:
            raise _Refusal(
                f"a delete's source table may hold only the columns its condition names; "
                f"{source.label} also has {', '.join(map(repr, extra))}"
            )
        return self.run(
            f"DELETE FROM {target.ref} AS t WHERE EXISTS "
            f"(SELECT 1 FROM {source.ref} AS s WHERE {where})"
        )

    def upsert(self, sql: _Sql, target: _Table, source: _Table, condition: Condition | bool) -> int:
        """An update of the matched rows, then an insert of the source rows none matched."""
        updated = self.update(sql, target, source, condition)
        written = _check_insertable(source, target, self.columns)
        cols = ", ".join(map(quote_name, written))
        picked = ", ".join(f"s.{quote_name(c)}" for c in written)
        where = sql.condition(condition)
        inserted = self.run(
            f"INSERT INTO {target.ref} ({cols}) SELECT {picked} FROM {source.ref} AS s "
            f"WHERE NOT EXISTS (SELECT 1 FROM {target.ref} AS t WHERE {where})"
        )
        return updated + self.inserted(inserted, source, target)

    @staticmethod
    def check_replace(source: _Table, target: _Table) -> None:
        if set(source.columns) != set(target.columns):
            only_s = sorted(set(source.columns) - set(target.columns))
            only_t = sorted(set(target.columns) - set(source.columns))
            raise _Refusal(
                f"replace needs the same column names in {source.label} and {target.label}; "
                f"only in the source: {only_s or 'none'}, only in the target: {only_t or 'none'}"
            )
        for name, stype in source.columns.items():
            if stype != target.columns[name]:
                raise _Refusal(
                    f"replace needs the same column types; {name!r} is {stype} in "
                    f"{source.label} but {target.columns[name]} in {target.label}"
                )


def _describe(action: _Action) -> str:
    text = f"{action.action} into {action.target_schema}.{action.target_table}"
    if action.source_table:
        text += f" from {action.source_schema}.{action.source_table}"
    return text


def apply(
    batch: BatchLike,
    *,
    target: str | os.PathLike[str],
    payload: str | os.PathLike[str] | PayloadLike | None = None,
    semantics: Semantics = "hyper",
    seed: int = 0,
    source_columns: SourceColumns | None = None,
) -> list[int]:
    """Apply ``batch`` to the ``.hyper`` file ``target`` in one transaction.

    Source tables are read from ``payload`` (a ``.hyper`` path or a single-part
    :class:`~tabhyper_update.Payload`). Returns the rows each action affected. Any error
    leaves ``target`` exactly as it was and raises :class:`ApplyError`. ``semantics``:
    ``"hyper"`` (what Hyper does) or ``"strict"`` (see the module docstring); ``seed``
    chooses which of several source rows a key takes under ``"hyper"``; ``source_columns``:
    how source columns that differ from the target's are met (:class:`SourceColumns`).
    """
    check_semantics(semantics)
    checked = ActionBatch.coerce(batch)
    target_path = Path(target)
    if not target_path.is_file():
        raise ApplyError(f"target file {str(target_path)!r} does not exist")
    payload_path = _payload_path(payload)
    if checked.reads_source and payload_path is None:
        raise ApplyError("the batch reads payload tables but no payload was given")
    try:
        with connect() as conn:
            # Absolute: the shared Hyper process resolves paths against its own directory.
            conn.catalog.attach_database(os.path.abspath(target_path), alias=Name(TARGET_DB))
            if payload_path is not None:
                attach_read_only(conn, payload_path, SOURCE_DB)
            engine = _Engine(
                conn, payload_path is not None, semantics, seed, source_columns or SourceColumns()
            )
            with _transaction(conn):
                counts = [_applied(engine, i, action) for i, action in enumerate(checked.actions)]
    except HyperException as err:
        raise ApplyError(f"cannot open the files: {str(err).splitlines()[0]}") from err
    log.info("applied %d action(s) to %s: %s rows affected", len(counts), target_path.name, counts)
    return counts


@contextlib.contextmanager
def _transaction(conn: Connection) -> Iterator[None]:
    """One transaction: committed when the block ends, rolled back when it raises."""
    conn.execute_command("BEGIN TRANSACTION")
    try:
        yield
        conn.execute_command("COMMIT")
    except BaseException:
        conn.execute_command("ROLLBACK")
        raise


def _applied(engine: _Engine, index: int, action: _Action) -> int:
    """The rows ``action`` (the batch's ``index``-th) affected, a refusal or Hyper's error
    raised as :class:`ApplyError` naming the action."""
    try:
        return engine.apply(action)
    except _Refusal as refusal:
        raise ApplyError(str(refusal), action_index=index, action=_describe(action)) from None
    except HyperException as err:
        reason = str(err).split("\n")[0].strip() or type(err).__name__
        raise ApplyError(reason, action_index=index, action=_describe(action)) from err


def _payload_path(payload: str | os.PathLike[str] | PayloadLike | None) -> Path | None:
    if payload is None:
        return None
    if isinstance(payload, PayloadLike):
        if len(payload.parts) != 1:
            raise ApplyError(
                f"the payload has {len(payload.parts)} parts: apply them one at a "
                "time (each part carries its own actions)"
            )
        return payload.parts[0].path
    path = Path(payload)
    if not path.is_file():
        raise ApplyError(f"payload file {str(path)!r} does not exist")
    return path

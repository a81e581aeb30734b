"""Debezium change events → a change set that :func:`build_payload` reads.

A Debezium event's envelope holds ``before``, ``after``, ``op``, ``source`` and ``ts_ms``. With
the JSON converter's schemas on, each Kafka value wraps it as ``{"schema": …, "payload": …}``.
:class:`Debezium` turns a DataFrame of such events into one row per change:

- ``c`` (create), ``r`` (snapshot read) and ``u`` (update) give the ``after`` row, ``d``
  (delete) the ``before`` row, of which only the key columns are used (a delete's ``before``
  holds only the key unless the table has full replica identity);
- tombstones (a ``null`` value after each delete) and ``m`` (message) events are dropped;
- ``t`` (truncate) is refused by default, naming it, or dropped with ``truncate="ignore"``:
  a truncate carries no key and no order against other partitions' events, so no derived
  update can place it;
- a primary-key change arrives as a delete of the old key and a create of the new one, two
  keys that the change set handles on their own;
- changes are ordered by the source position (``source.lsn`` by default: PostgreSQL), then by
  the event's ``ts_ms``; an event delivered twice (a connector restart) has the same position
  and is counted once.

The rows come out with three more columns in Debezium's own flattened naming: ``__op``, one
``__<position>`` column per position field (``__source_lsn``), and ``__ts_ms``. Malformed JSON
or a value that does not fit ``row_schema`` fails the build, naming Spark's parse error:
nothing is dropped unseen.

>>> orders = Debezium("id BIGINT, name STRING, amount DOUBLE", key="id")  # doctest: +SKIP
>>> build_payload(orders.changes(kafka_df), orders.change_set)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from ..local.spark_versions import require_supported_pyspark, struct_from_ddl
from ..values.changeset import MISSING_OP, ChangeSet
from ..values.errors import ArgumentTypeError, InvalidArgumentError, PayloadError
from ..values.positions import OrderAs
from ..values.spark_sql import sql_name

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

__all__ = ["CONNECTOR_POSITIONS", "SOURCE_FIELDS", "Debezium"]

#: The ``source`` fields read when events arrive as JSON, with their types (PostgreSQL
#: ``lsn`` and ``sequence``; MySQL/MariaDB ``file``, ``pos``, ``row``; SQL Server and Db2
#: ``change_lsn``, ``commit_lsn``, ``event_serial_no``; Oracle ``scn``, ``commit_scn``,
#: ``ssn``; MongoDB ``ord``; and the connectors' common fields).
SOURCE_FIELDS = {
    "lsn": "bigint",
    "txId": "bigint",
    "ts_ms": "bigint",
    "ts_us": "bigint",
    "ts_ns": "bigint",
    "sequence": "string",
    "file": "string",
    "pos": "bigint",
    "row": "int",
    "gtid": "string",
    "change_lsn": "string",
    "commit_lsn": "string",
    "event_serial_no": "bigint",
    "scn": "string",
    "commit_scn": "string",
    "ssn": "bigint",
    "ord": "int",
    "db": "string",
    "schema": "string",
    "table": "string",
}

#: How each ``source`` field orders as a position (``ChangeSet.order_as``; ``None``: it is a
#: number already). Fields not here (``gtid``, ``db``, ``table``, ...) are no position.
POSITION_ORDER: dict[str, OrderAs | None] = {
    "lsn": None,
    "txId": None,
    "ts_ms": None,
    "ts_us": None,
    "ts_ns": None,
    "pos": None,
    "row": None,
    "event_serial_no": None,
    "ssn": None,
    "ord": None,
    "scn": "number",
    "commit_scn": "number",
    "file": "binlog-file",
    "change_lsn": "hex-lsn",
    "commit_lsn": "hex-lsn",
    "sequence": "number-list",
}

#: Each connector's position, in its own order (what ``connector=`` picks).
CONNECTOR_POSITIONS: dict[str, tuple[str, ...]] = {
    "postgresql": ("source.lsn",),
    "mysql": ("source.file", "source.pos", "source.row"),
    "mariadb": ("source.file", "source.pos", "source.row"),
    "sqlserver": ("source.commit_lsn", "source.change_lsn", "source.event_serial_no"),
    "db2": ("source.commit_lsn", "source.change_lsn"),
    "oracle": ("source.scn",),
    "mongodb": ("source.ts_ms", "source.ord"),
}

OP_COLUMN = "__op"
TS_COLUMN = "__ts_ms"
#: The op of the pre-image row an update whose key changed adds (a delete of the old key).
PREIMAGE_OP = "u:before"
_UPSERT_OPS = ("c", "r", "u")
_IGNORED_OPS = ("m",)
_ENVELOPE = ("before", "after", "op", "ts_ms", "source")


class Debezium:
    """How to read Debezium change events for one table.

    ``row_schema``: the table's columns (a Spark ``StructType`` or a DDL string such as
    ``"id BIGINT, name STRING"``), typed as the JSON converter writes them. ``key``: the key
    column(s). ``connector``: the connector that wrote the events (``"postgresql"``, the
    default, ``"mysql"``, ``"mariadb"``, ``"sqlserver"``, ``"db2"``, ``"oracle"`` or
    ``"mongodb"``), which picks the position that orders one key's changes, compared as that
    connector means it (an Oracle SCN or a binlog file's sequence as a number, an LSN part
    by part). ``position``: that position given yourself instead, as ``source.<field>``
    paths or numeric columns of the event DataFrame (e.g. Kafka's ``offset``: Debezium keys
    its messages, so one key's events share a partition); ``ts_ms`` breaks ties. ``table``:
    keep only events whose ``source.table`` is this (a topic carrying several tables).
    ``truncate``: ``"error"`` or ``"ignore"``.
    """

    def __init__(
        self,
        row_schema: StructType | str,
        *,
        key: Sequence[str] | str,
        connector: str | None = None,
        position: Sequence[str] | str | None = None,
        table: str | None = None,
        truncate: Literal["error", "ignore"] = "error",
    ) -> None:
        if not isinstance(row_schema, str) and not hasattr(row_schema, "fields"):
            raise ArgumentTypeError(
                f"Debezium row_schema= takes a StructType or a DDL string such as "
                f"'id BIGINT, name STRING', got {type(row_schema).__name__}"
            )
        if truncate not in ("error", "ignore"):
            raise InvalidArgumentError(
                f"Debezium truncate= is 'error' or 'ignore', got {truncate!r}"
            )
        if table is not None and (not isinstance(table, str) or not table):
            raise ArgumentTypeError(f"Debezium table= takes a table name, got {table!r}")
        if connector is not None and position is not None:
            raise InvalidArgumentError(
                "Debezium takes connector= (its position is the connector's) or position=, not both"
            )
        if connector is not None and connector not in CONNECTOR_POSITIONS:
            raise InvalidArgumentError(
                f"Debezium connector= is one of {', '.join(map(repr, CONNECTOR_POSITIONS))}, "
                f"got {connector!r}; for another, pass position= naming its position fields"
            )
        if position is None:
            position = CONNECTOR_POSITIONS[connector or "postgresql"]
        positions = (position,) if isinstance(position, str) else tuple(position)
        if not positions or not all(isinstance(p, str) and p for p in positions):
            raise ArgumentTypeError(
                f"Debezium position= takes one or more column paths, got {position!r}"
            )
        order_as: dict[str, str] = {}
        for p in positions:
            if not p.startswith("source."):
                continue
            name = p.removeprefix("source.")
            if name not in POSITION_ORDER:
                raise InvalidArgumentError(
                    f"Debezium position {p!r} cannot be ordered: the SDK orders the source "
                    f"fields {', '.join(POSITION_ORDER)} as their connectors mean them (or "
                    "pass connector=)"
                )
            how = POSITION_ORDER[name]
            if how is not None:
                order_as["__" + p.replace(".", "_")] = how
        self.connector = connector
        self.row_schema = row_schema
        self.position = positions
        self.table = table
        self.truncate = truncate
        self.order_columns = (*("__" + p.replace(".", "_") for p in positions), TS_COLUMN)
        ops: dict[str, str] = dict.fromkeys(_UPSERT_OPS, "upsert")
        ops["d"] = "delete"
        ops[PREIMAGE_OP] = "preimage"
        ops.update(dict.fromkeys(_IGNORED_OPS, "ignore"))
        if truncate == "ignore":
            ops["t"] = "ignore"
        # The ChangeSet checks ``key`` (and raises naming it) before the schema is parsed.
        self.change_set = ChangeSet(
            key, op_column=OP_COLUMN, order_by=self.order_columns, op_map=ops, order_as=order_as
        )
        self.key = self.change_set.key

    def for_table(self, table: str) -> Debezium:
        """The same description, keeping only the events of ``source.table`` ``table``."""
        routed = Debezium(
            self.row_schema,
            key=self.key,
            position=self.position,
            table=table,
            truncate=self.truncate,
        )
        routed.connector = self.connector
        return routed

    def __repr__(self) -> str:
        return (
            f"Debezium(key={list(self.key)!r}, connector={self.connector!r}, "
            f"position={list(self.position)!r}, "
            f"table={self.table!r}, truncate={self.truncate!r})"
        )

    # -- schema --------------------------------------------------------------------------
    def _row_type(self, spark: SparkSession) -> StructType:
        from pyspark.sql.types import StructType

        if isinstance(self.row_schema, StructType):
            schema = self.row_schema
        else:
            try:
                schema = struct_from_ddl(self.row_schema, spark)
            except Exception as err:
                raise PayloadError(
                    f"Debezium row_schema {self.row_schema!r} is not a valid schema: "
                    f"{str(err).splitlines()[0]}"
                ) from None
        names = [f.name for f in schema.fields]
        for k in self.key:
            if k not in names:
                raise PayloadError(
                    f"Debezium key column {k!r} is not in row_schema (its columns: "
                    f"{', '.join(map(repr, names))})"
                )
        clash = [n for n in names if n in (OP_COLUMN, *self.order_columns)]
        if clash:
            raise PayloadError(
                f"row_schema column(s) {', '.join(map(repr, clash))} clash with the change "
                "columns Debezium events add; rename them"
            )
        return schema

    def _source_type(self) -> StructType:
        from pyspark.sql.types import StructType, _parse_datatype_string

        fields = {"table"}
        for p in self.position:
            if p.startswith("source."):
                name = p.removeprefix("source.")
                fields.add(name)
        result = StructType()
        for name in SOURCE_FIELDS:
            if name in fields:
                kind: DataType = _parse_datatype_string(SOURCE_FIELDS[name])
                result = result.add(name, kind)
        return result

    def _envelope_type(self, row: StructType) -> StructType:
        from pyspark.sql.types import LongType, StringType, StructType

        return (
            StructType()
            .add("before", row)
            .add("after", row)
            .add("op", StringType())
            .add("ts_ms", LongType())
            .add("source", self._source_type())
        )

    # -- the change rows ---------------------------------------------------------------------
    def changes(self, events: DataFrame) -> DataFrame:
        """One row per change of ``events``: a Kafka-style DataFrame (a ``value`` column of
        JSON text or bytes, with or without the schema wrapper) or already-parsed
        ``before`` / ``after`` / ``op`` / ``source`` / ``ts_ms`` columns (or a ``payload``
        struct holding them). Lazy: nothing runs until the payload is built."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import BinaryType

        require_supported_pyspark()
        row = self._row_type(events.sparkSession)
        columns = events.columns
        extra: dict[str, Column] = {}
        for p in self.position:
            if not p.startswith("source."):
                if p not in columns:
                    raise PayloadError(
                        f"Debezium position {p!r} is neither 'source.<field>' nor a column of "
                        f"the events (their columns: {', '.join(map(repr, columns))})"
                    )
                kind = events.schema[p].dataType.simpleString()
                if not kind.startswith(("tinyint", "smallint", "int", "bigint", "decimal")):
                    raise PayloadError(
                        f"Debezium position {p!r} is {kind}, not a whole number: it cannot be "
                        "ordered as a position (cast it, or use connector=)"
                    )
                extra[p] = F.col(sql_name(p))
        if "value" in columns:
            value = F.col("value")
            if isinstance(events.schema["value"].dataType, BinaryType):
                value = value.cast("string")
            # A tombstone: a null value (Kafka), or an empty or ``null`` line (a file).
            value = F.when(~F.trim(value).isin("", "null"), value)
            tombstone = value.isNull()
            # StructType.add changes the struct in place: the wrapper is a struct of its own.
            wrapped = self._envelope_type(row).add("payload", self._envelope_type(row))
            parsed = F.from_json(value, wrapped, {"mode": "FAILFAST"})
            # The schema wrapper's envelope is in ``payload``; without it, at the top.
            top = F.struct(*[parsed[f].alias(f) for f in _ENVELOPE])
            env: Column = F.when(parsed["payload"].isNotNull(), parsed["payload"]).otherwise(top)
        elif "payload" in columns:
            env = F.col("payload")
            tombstone = env.isNull()
        elif "op" in columns and ("after" in columns or "before" in columns):
            if "source" not in columns and any(p.startswith("source.") for p in self.position):
                raise PayloadError(
                    f"Debezium position {list(self.position)!r} reads the 'source' column, "
                    "which the events lack: pass position= naming one of their columns"
                )
            env = F.struct(*[F.col(c) if c in columns else F.lit(None).alias(c) for c in _ENVELOPE])
            tombstone = env["op"].isNull() & env["before"].isNull() & env["after"].isNull()
        else:
            raise PayloadError(
                "Debezium events need a 'value' column (JSON text or bytes), a 'payload' "
                "struct, or 'op' with 'before' / 'after' columns; the DataFrame has "
                f"{', '.join(map(repr, columns))}"
            )
        return self._rows(events.filter(~tombstone), env, row, extra)

    def _rows(
        self, events: DataFrame, env: Column, row: StructType, extra: dict[str, Column]
    ) -> DataFrame:
        """The change rows of ``events`` (tombstones already dropped)."""
        from pyspark.sql import functions as F

        kept = events.select(
            env.alias("e"), *[c.alias(f"p{i}") for i, c in enumerate(extra.values())]
        )
        # An event that is no tombstone but has no op is not a change event (e.g. a row
        # flattened by Debezium's ExtractNewRecordState): the change set refuses it by name.
        op = F.coalesce(F.col("e.op"), F.lit(MISSING_OP))
        if self.table is not None:
            kept = kept.filter(F.col("e.source.table") == F.lit(self.table))
        # An update that moves its row to another key also yields its pre-image: a delete of
        # the old key at the same position, which the new key's own changes outrank.
        before, after = F.col("e.before"), F.col("e.after")
        same_key = [before[k].eqNullSafe(after[k]) for k in self.key]
        key_kept = same_key[0]
        for same in same_key[1:]:
            key_kept = key_kept & same
        moved = (op == F.lit("u")) & before.isNotNull() & after.isNotNull() & ~key_kept
        images = F.when(moved, F.array(F.lit(False), F.lit(True))).otherwise(F.array(F.lit(False)))
        kept = kept.select("*", F.explode(images).alias("__pre"))
        pre = F.col("__pre")
        is_delete = op == F.lit("d")
        data = [
            F.when(pre | is_delete, before[f.name]).otherwise(after[f.name]).alias(f.name)
            for f in row.fields
        ]
        op = F.when(pre, F.lit(PREIMAGE_OP)).otherwise(op)
        order: list[Column] = []
        extra_names = list(extra)
        for p, name in zip(self.position, self.order_columns[:-1], strict=True):
            if p.startswith("source."):
                order.append(F.col("e.source")[p.removeprefix("source.")].alias(name))
            else:
                order.append(F.col(f"p{extra_names.index(p)}").alias(name))
        out = kept.select(*data, op.alias(OP_COLUMN), *order, F.col("e.ts_ms").alias(TS_COLUMN))
        # The same event delivered twice (a connector restart) counts once: same position,
        # same op, same row. Two events at one position with other rows stay (a tie, refused).
        names = [f.name for f in row.fields]
        content = F.to_json(F.struct(*[F.col(sql_name(n)) for n in names]))
        return (
            out.withColumn("__event_row", content)
            .dropDuplicates([*self.key, OP_COLUMN, *self.order_columns, "__event_row"])
            .drop("__event_row")
        )

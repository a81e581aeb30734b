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

import functools
import operator
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from ..local.spark_versions import require_supported_pyspark, struct_from_ddl
from ..values.changeset import MISSING_OP, PARTIAL_UPDATE_OP, ChangeSet
from ..values.errors import ArgumentTypeError, InvalidArgumentError, PayloadError
from ..values.names import is_name, names_in
from ..values.positions import OrderAs
from ..values.spark_sql import sql_name, sql_text
from ..values.wording import check_choice
from .debezium_schemas import (
    clock_sql,
    encodings_named,
    known_schemas,
    schema_encoding,
    schema_info_type,
)
from .debezium_values import (
    BinaryHandling,
    DecimalHandling,
    Encodings,
    Step,
    TextColumns,
    TimePrecision,
    TimeUnit,
    decoding_steps,
    mongo_unwrapped_sql,
    needs_decoding,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructField, StructType

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
    "collection": "string",
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
#: The op of what is no change of a row (a transaction's BEGIN or END, a heartbeat, a
#: schema change): dropped.
METADATA_OP = "(metadata)"
_UPSERT_OPS = ("c", "r", "u")
_IGNORED_OPS = ("m", METADATA_OP)
_ENVELOPE = ("before", "after", "op", "ts_ms", "source")
#: What ``ExtractNewRecordState`` adds to a flattened row (``add.fields=op,...`` and
#: ``delete.handling.mode=rewrite``): besides these, ``__<field>`` or ``__source_<field>``
#: for each field of ``source`` it adds.
_FLAT_MARKERS = ("__op", "__deleted", "__ts_ms", "__source_ts_ms", "__table", "__source_table")
#: Top-level fields of events that change no row: a transaction's metadata (``status``),
#: a schema change (``ddl``, ``tableChanges``).
_METADATA_FIELDS = ("status", "ddl", "tableChanges", "databaseName")


#: A substring's length that takes the rest of any text.
_WHOLE = 2**31 - 1


class _Read(NamedTuple):
    """Events as read: each one's envelope (``env``: before, after, op, ts_ms, source), which
    are tombstones, the types the row's columns arrive as (``actual``), the schema wrapper's
    field schemas (``meta``, where a column is decoded), a MongoDB message's key and whether
    the encodings of an event's schema were worked out ahead (``__known``)."""

    events: DataFrame
    env: Column
    tombstone: Column
    actual: Mapping[str, DataType]
    meta: Column | None = None
    key_json: Column | None = None
    #: Whether the rows take their encodings from ``__known`` (their schema's, worked out
    #: ahead): a column is decoded and the events' schemas were found ahead.
    known: bool = False


class _Plan(NamedTuple):
    """How a row's columns are made from the values as they arrive: each column's steps
    (``None``: as it is), where the events may carry the schema wrapper the SQL of each
    decoded column's encoding and scale by the event's schema (by column index), and the
    SQL of the text columns' encodings (``clock``: :func:`~.debezium_schemas.clock_sql` or
    a constant; ``None`` where no text column can hold a time of day)."""

    steps: list[list[Step] | None]
    found: dict[int, tuple[str, str]]
    text: TextColumns | None
    clock: str | None


class Debezium:
    """How to read Debezium change events for one table.

    ``row_schema``: the table's columns (a Spark ``StructType`` or a DDL string such as
    ``"id BIGINT, amount DECIMAL(10, 2), created TIMESTAMP"``), typed as they should land:
    values Debezium encodes (decimals as bytes, dates as days, timestamps as milli-, micro- or
    nanoseconds, binary as base64) are decoded into these types
    (:mod:`tabhyper_update.streaming.debezium_values`). ``key``: the key column(s).
    ``connector``: the connector that wrote the events (``"postgresql"``, the default,
    ``"mysql"``, ``"mariadb"``, ``"sqlserver"``, ``"db2"``, ``"oracle"`` or ``"mongodb"``),
    which picks the position that orders one key's changes, compared as that connector means
    it (an Oracle SCN or a binlog file's sequence as a number, an LSN part by part).
    ``position``: that position given yourself instead, as ``source.<field>`` paths or
    numeric columns of the event DataFrame (e.g. Kafka's ``offset``: Debezium keys its
    messages, so one key's events share a partition); ``ts_ms`` breaks ties. ``table``: keep
    only events whose ``source.table`` is this (a topic carrying several tables).
    ``truncate``: ``"error"`` or ``"ignore"``.

    For events whose own schema does not say how a value is encoded (the JSON converter
    with ``schemas.enable=false``, or rows already parsed), the connector's settings:
    ``decimal_handling`` (``decimal.handling.mode``: ``"precise"``, the default,
    ``"string"`` or ``"double"``), ``time_precision`` (``time.precision.mode``: which unit
    an integer timestamp is in; under ``"adaptive"``, the default, it depends on each
    column's precision: name it in ``units``), ``binary_handling``
    (``binary.handling.mode``) and ``units`` (column → ``"millis"``, ``"micros"``,
    ``"nanos"`` or ``"days"``).

    Accepted as events: a ``value`` column of JSON text or bytes (with or without the
    schema wrapper), already-parsed ``before`` / ``after`` / ``op`` columns (or a
    ``payload`` struct holding them, as ``from_avro`` gives them), and rows flattened by
    ``ExtractNewRecordState`` (``__op`` or ``__deleted`` beside the row's columns).
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
        decimal_handling: DecimalHandling = "precise",
        time_precision: TimePrecision | None = None,
        binary_handling: BinaryHandling = "bytes",
        units: Mapping[str, TimeUnit] | None = None,
    ) -> None:
        _check_arguments(row_schema, truncate, table, units)
        self.encodings = Encodings(
            decimal_handling, time_precision, binary_handling, dict(units or {})
        )
        positions, order_as = _positions(connector, position)
        self.connector = connector
        self.row_schema = row_schema
        self.position = positions
        self.table = table
        self.truncate = truncate
        self.order_columns = (*(_position_column(p) for p in positions), TS_COLUMN)
        # The ChangeSet checks ``key`` (and raises naming it) before the schema is parsed.
        self.change_set = ChangeSet(
            key,
            op_column=OP_COLUMN,
            order_by=self.order_columns,
            op_map=_op_map(truncate),
            order_as=order_as,
        )
        self.key = self.change_set.key
        if not isinstance(row_schema, str):
            self._check_units([f.name for f in row_schema.fields], InvalidArgumentError)

    def for_table(self, table: str) -> Debezium:
        """The same description, keeping only the events of ``source.table`` ``table``."""
        settings = self.encodings
        routed = Debezium(
            self.row_schema,
            key=self.key,
            position=self.position,
            table=table,
            truncate=self.truncate,
            decimal_handling=settings.decimal_handling,
            time_precision=settings.time_precision,
            binary_handling=settings.binary_handling,
            units=settings.units,
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
        self._check_units(names, PayloadError)
        clash = [n for n in names if n in (OP_COLUMN, *self.order_columns)]
        if clash:
            raise PayloadError(
                f"row_schema column(s) {', '.join(map(repr, clash))} clash with the change "
                "columns Debezium events add; rename them"
            )
        return schema

    def _check_units(self, names: Sequence[str], error: type[Exception]) -> None:
        """Refuse ``units=`` naming a column ``row_schema`` (its columns: ``names``) lacks."""
        unknown = [c for c in self.encodings.units if c not in names]
        if unknown:
            raise error(
                f"Debezium units= names column(s) {', '.join(map(repr, unknown))} that "
                f"row_schema does not have (its columns: {', '.join(map(repr, names))})"
            )

    @property
    def _mongo(self) -> bool:
        return self.connector == "mongodb"

    def _wire_row(self, row: StructType) -> StructType:
        """``row`` as the events carry it: a column Debezium encodes (and, from MongoDB,
        every column: its documents are extended JSON) as its raw JSON text."""
        from pyspark.sql.types import StringType, StructType

        wire = StructType()
        for f in row.fields:
            as_text = self._mongo or needs_decoding(f.dataType)
            wire = wire.add(f.name, StringType() if as_text else f.dataType, f.nullable)
        return wire

    def _source_type(self) -> StructType:
        from pyspark.sql.types import StructType, _parse_datatype_string

        result = StructType()
        for name in SOURCE_FIELDS:
            if name in self._source_fields():
                kind: DataType = _parse_datatype_string(SOURCE_FIELDS[name])
                result = result.add(name, kind)
        return result

    def _source_fields(self) -> set[str]:
        # MongoDB names a document's collection where the others name a row's table.
        return {"table", "collection"} | {
            p.removeprefix("source.") for p in self.position if p.startswith("source.")
        }

    def _envelope_fields(self, wire: StructType) -> list[StructField]:
        from pyspark.sql.types import LongType, StringType, StructField

        image = StringType() if self._mongo else wire
        return [
            StructField("before", image),
            StructField("after", image),
            StructField("op", StringType()),
            StructField("ts_ms", LongType()),
            StructField("source", self._source_type()),
            StructField("updateDescription", StringType()),
        ]

    def _flat_fields(self, wire: StructType) -> list[StructField]:
        """The columns of a row ``ExtractNewRecordState`` flattened: the row's own, its
        markers, and ``__<field>`` / ``__source_<field>`` for the position's source fields;
        none when a row column's name is one of the envelope's (it could not be told apart)."""
        from pyspark.sql.types import LongType, StringType, StructField, _parse_datatype_string

        if self._mongo or any(f.name in (*_ENVELOPE, "updateDescription") for f in wire.fields):
            return []
        found = list(wire.fields)
        taken = {f.name for f in found}
        wanted: list[tuple[str, DataType]] = [
            ("__op", StringType()),
            ("__deleted", StringType()),
            ("__ts_ms", LongType()),
        ]
        for name in sorted(self._source_fields() | {"ts_ms"}):
            kind = _parse_datatype_string(SOURCE_FIELDS[name])
            wanted += [(f"__{name}", kind), (f"__source_{name}", kind)]
        for name, kind in wanted:
            if name not in taken:
                found.append(StructField(name, kind))
                taken.add(name)
        return found

    # -- the change rows ---------------------------------------------------------------------
    def changes(self, events: DataFrame) -> DataFrame:
        """One row per change of ``events``: a Kafka-style DataFrame (a ``value`` column of
        JSON text or bytes, with or without the schema wrapper), already-parsed ``before`` /
        ``after`` / ``op`` / ``source`` / ``ts_ms`` columns (or a ``payload`` struct holding
        them), or rows flattened by ``ExtractNewRecordState``. Lazy but for one small job
        where the events are JSON text: their first events' schemas read ahead
        (:func:`~.debezium_schemas.known_schemas`; none for a stream); the rest runs when
        the payload is built."""
        require_supported_pyspark(events)
        row = self._row_type(events.sparkSession)
        extra = self._extra_positions(events)
        read = self._read(events, row)
        return self._rows(read.events.filter(~read.tombstone), read, row, extra)

    def _read(self, events: DataFrame, row: StructType) -> _Read:
        """The envelope of each of ``events``, recognised by their columns."""
        from pyspark.sql import functions as F

        columns = events.columns
        if "value" in columns:
            return self._from_json(events, row)
        if "payload" in columns:
            # Parsed already (from_avro): the envelope is the payload.
            env = F.col("payload")
            return _Read(events, env, env.isNull(), _image_types(events.schema["payload"].dataType))
        if "op" in columns and ("after" in columns or "before" in columns):
            return self._from_envelope_columns(events)
        if any(m in columns for m in ("__op", "__deleted")) and self._flat_fields(
            self._wire_row(row)
        ):
            return self._from_flat_columns(events, row)
        raise PayloadError(
            "Debezium events need a 'value' column (JSON text or bytes), a 'payload' "
            "struct, 'op' with 'before' / 'after' columns, or rows flattened by "
            "ExtractNewRecordState ('__op' or '__deleted' beside the row's columns); the "
            f"DataFrame has {', '.join(map(repr, events.columns))}"
        )

    def _from_json(self, events: DataFrame, row: StructType) -> _Read:
        """Events as Kafka gives them: a ``value`` of JSON text or bytes, with or without
        the schema wrapper (whose schema, when a column is decoded, says how)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import BinaryType

        wire = self._wire_row(row)
        top = self._top_type(wire)
        actual = {f.name: f.dataType for f in wire.fields}
        text = F.col("value")
        if isinstance(events.schema["value"].dataType, BinaryType):
            text = text.cast("string")
        # A tombstone: a null value (Kafka), or an empty or ``null`` line (a file).
        value = F.when(~F.trim(text).isin("", "null"), text)
        events = events.filter(value.isNotNull())
        decoding = any(needs_decoding(f.dataType) for f in row.fields)
        plan = self._decoded(row, actual, True) if decoding else _Plan([], {}, None, None)
        known = known_schemas(events, text, plan.found, plan.clock)
        # StructType.add changes its struct in place: the wrapper gets a top type of its own.
        events = _parsed(events, value, known, self._top_type(wire).add("payload", top), decoding)
        flat_fields = self._flat_fields(wire)
        flat = None
        if flat_fields:
            events, flat = self._flattened_json(events, value, flat_fields)
        env = self._envelope_of(F.col("__body"), top, wire, flat, flat_fields)
        key_json = F.col("key").cast("string") if "key" in events.columns and self._mongo else None
        meta = F.col("__schema") if decoding else None
        ahead = bool(plan.found) and known is not None
        return _Read(events, env, F.lit(False), actual, meta, key_json, ahead)

    def _flattened_json(
        self, events: DataFrame, value: Column, flat_fields: Sequence[StructField]
    ) -> tuple[DataFrame, Column]:
        """A flattened row's columns, parsed only where the markers say it is one (NULL for
        any other event)."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import StructType

        # StructType.add changes its struct in place: the wrapper is a struct of its own.
        flat_top = StructType(list(flat_fields))
        flat_wrapped = StructType(list(flat_fields)).add("payload", flat_top)
        body = F.col("__body")
        marked = body["__op"].isNotNull() | body["__deleted"].isNotNull()
        is_flat = body["op"].isNull() & body["before"].isNull() & body["after"].isNull()
        whole = F.from_json(value, flat_wrapped, {"mode": "FAILFAST"})
        events = events.select("*", F.when(is_flat & marked, whole).alias("__flat_parsed"))
        events = events.select("*", _payload_or_top("__flat_parsed", flat_fields).alias("__flat"))
        return events, F.col("__flat")

    def _from_envelope_columns(self, events: DataFrame) -> _Read:
        """Events parsed already into ``op`` / ``before`` / ``after`` (/ ``source`` /
        ``ts_ms``) columns."""
        from pyspark.sql import functions as F

        columns = events.columns
        if "source" not in columns and any(p.startswith("source.") for p in self.position):
            raise PayloadError(
                f"Debezium position {list(self.position)!r} reads the 'source' column, "
                "which the events lack: pass position= naming one of their columns"
            )
        env = F.struct(*[F.col(c) if c in columns else F.lit(None).alias(c) for c in _ENVELOPE])
        tombstone = env["op"].isNull() & env["before"].isNull() & env["after"].isNull()
        return _Read(events, env, tombstone, _image_types(events.schema))

    def _from_flat_columns(self, events: DataFrame, row: StructType) -> _Read:
        """Rows ``ExtractNewRecordState`` flattened, as columns: the row's columns as they
        are, the rest of the envelope absent."""
        from pyspark.sql import functions as F

        columns = events.columns
        missing = [f.name for f in row.fields if f.name not in columns]
        if missing:
            raise PayloadError(
                f"the flattened rows lack row_schema's column(s) "
                f"{', '.join(map(repr, missing))} (their columns: "
                f"{', '.join(map(repr, columns))})"
            )
        present = {f.name: f.dataType for f in events.schema.fields}
        wire = _struct_of([(f.name, present[f.name]) for f in row.fields])
        top = self._top_type(wire)
        flat_fields = self._flat_fields(wire)

        def column(name: str, kind: DataType) -> Column:
            found = F.col(sql_name(name)) if name in present else F.lit(None).cast(kind)
            return found.alias(name)

        events = events.select(
            "*",
            F.struct(*[column(f.name, f.dataType) for f in top.fields]).alias("__body"),
            F.struct(*[column(f.name, f.dataType) for f in flat_fields]).alias("__flat"),
        )
        env = self._envelope_of(F.col("__body"), top, wire, F.col("__flat"), flat_fields)
        actual = {f.name: present[f.name] for f in row.fields}
        return _Read(events, env, F.lit(False), actual)

    def _extra_positions(self, events: DataFrame) -> dict[str, Column]:
        """The position columns that are columns of the events (Kafka's ``offset``)."""
        from pyspark.sql import functions as F

        columns = events.columns
        extra: dict[str, Column] = {}
        for p in self.position:
            if p.startswith("source."):
                continue
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
        return extra

    def _top_type(self, wire: StructType) -> StructType:
        """What a JSON event's top level (or its ``payload``) is parsed as: the envelope, the
        markers of a row ``ExtractNewRecordState`` flattened (its columns are parsed apart,
        only for such rows: a column named like another event's field would not parse), and
        the fields of events that change no row."""
        from pyspark.sql.types import StringType, StructType

        top = StructType()
        for f in self._envelope_fields(wire):
            top = top.add(f)
        if self._flat_fields(wire):
            top = top.add("__op", StringType()).add("__deleted", StringType())
        for name in _METADATA_FIELDS:
            top = top.add(name, StringType())
        return top

    def _envelope_of(
        self,
        body: Column,
        top: StructType,
        wire: StructType,
        flat: Column | None = None,
        flat_fields: Sequence[StructField] = (),
    ) -> Column:
        """The Debezium envelope of ``body`` (a struct of ``top``'s fields): as it is, or
        made from a row ``ExtractNewRecordState`` flattened (``wire``: that row's columns);
        events that change no row get :data:`METADATA_OP`, a MongoDB update that carries
        only what changed :data:`PARTIAL_UPDATE_OP`."""
        from pyspark.sql import functions as F

        names = set(top.names)
        op, before, after = body["op"], body["before"], body["after"]
        ts, source = body["ts_ms"], body["source"]
        no_image = op.isNull() & before.isNull() & after.isNull()
        markers = [body[m].isNotNull() for m in ("__op", "__deleted") if m in names]
        is_flat = no_image & (_any(markers) if markers else F.lit(False))
        if markers and flat is not None:
            made = self._from_flat_row(body, names, wire, flat, flat_fields)
            before, after, op, ts, source = (
                F.when(is_flat, m).otherwise(o)
                for m, o in zip(made, (before, after, op, ts, source), strict=True)
            )
        metadata = no_image & ~is_flat & _changes_no_row(body)
        op = F.when(metadata, F.lit(METADATA_OP)).otherwise(op)
        if "updateDescription" in names:
            partial = (op == "u") & after.isNull() & body["updateDescription"].isNotNull()
            op = F.when(F.coalesce(partial, F.lit(False)), F.lit(PARTIAL_UPDATE_OP)).otherwise(op)
        return F.struct(
            before.alias("before"),
            after.alias("after"),
            op.alias("op"),
            ts.alias("ts_ms"),
            source.alias("source"),
        )

    def _from_flat_row(
        self,
        body: Column,
        names: set[str],
        wire: StructType,
        flat: Column,
        flat_fields: Sequence[StructField],
    ) -> tuple[Column, Column, Column, Column, Column]:
        """The envelope's before, after, op, ts_ms and source of a row
        ``ExtractNewRecordState`` flattened (its markers in ``body``, its columns in
        ``flat``): a deleted row is the before image, any other the after image."""
        from pyspark.sql import functions as F

        flat_names = {f.name for f in flat_fields}
        row = F.struct(*[flat[f.name].alias(f.name) for f in wire.fields])
        marker_op = body["__op"] if "__op" in names else F.lit(None).cast("string")
        deleted = (
            F.coalesce(F.lower(body["__deleted"]) == "true", F.lit(False))
            if "__deleted" in names
            else F.lit(False)
        )
        deleted = deleted | F.coalesce(marker_op == "d", F.lit(False))

        def from_flat(name: str) -> Column:
            options = [flat[n] for n in (f"__{name}", f"__source_{name}") if n in flat_names]
            return F.coalesce(*options) if options else F.lit(None)

        source = F.struct(
            *[from_flat(f.name).cast(f.dataType).alias(f.name) for f in self._source_type().fields]
        )
        return (
            F.when(deleted, row),
            F.when(~deleted, row),
            F.coalesce(marker_op, F.when(deleted, F.lit("d")).otherwise(F.lit("u"))),
            from_flat("ts_ms").cast("long"),
            source,
        )

    def _rows(
        self, events: DataFrame, read: _Read, row: StructType, extra: dict[str, Column]
    ) -> DataFrame:
        """The change rows of ``events`` (tombstones already dropped): each image's values
        decoded into ``row``'s types from the types they arrive as, by the encodings the
        events' schemas name or the connector's settings; an event delivered twice once."""
        from pyspark.sql import functions as F

        meta = read.meta
        plan = self._decoded(row, read.actual, meta is not None)
        found = plan.found
        kept = events.select(
            read.env.alias("e"),
            *([meta.alias("__schema")] if meta is not None else []),
            *([F.col("__known")] if read.known else []),
            *([read.key_json.alias("__key")] if read.key_json is not None else []),
            *[c.alias(f"p{i}") for i, c in enumerate(extra.values())],
        )
        if meta is not None:
            kept = encodings_named(kept, found, plan.clock)
        op = F.coalesce(F.col("e.op"), F.lit(MISSING_OP))
        table = _table_of(kept)
        before, after = self._images(row, op, read.key_json is not None)
        images = self._yielded(op, before, after, table)
        kept = kept.select("*", F.explode(images).alias("__pre"))
        pre = F.col("__pre")
        image = pre | (op == F.lit("d"))  # a delete's row is its before image
        raws = kept.select(
            *[
                F.when(image, before[f.name]).otherwise(after[f.name]).alias(f"__raw{i}")
                for i, f in enumerate(row.fields)
            ],
            F.when(pre, F.lit(PREIMAGE_OP)).otherwise(op).alias(OP_COLUMN),
            *self._order(extra),
            F.col("e.ts_ms").alias(TS_COLUMN),
            table.alias("__table"),
            *[F.col(f"__{part}{i}") for i in found for part in ("enc", "sc")],
            *_clock_column(plan, meta is not None),
        )
        carried = [OP_COLUMN, *self.order_columns]
        if plan.text is None or plan.clock is None:
            return self._deduplicated(_decoded(raws, plan.steps, row, carried), row)
        out = _decoded(raws, plan.steps, row, [*carried, "__clock", "__table"])
        return self._deduplicated(_timed_text(out, plan.text), row)

    def _yielded(self, op: Column, before: Column, after: Column, table: Column) -> Column:
        """The rows an event yields, as an array of whether each is its pre-image: its row;
        and an update that moves its row to another key its pre-image too (a delete of the
        old key at the same position, which the new key's own changes outrank); another
        table's event none."""
        from pyspark.sql import functions as F

        key_kept = _all([before[k].eqNullSafe(after[k]) for k in self.key])
        moved = (op == F.lit("u")) & before.isNotNull() & after.isNotNull() & ~key_kept
        images = F.when(moved, F.array(F.lit(False), F.lit(True))).otherwise(F.array(F.lit(False)))
        if self.table is None:
            return images
        # Not a filter: Spark would push a filter down through every staged column, writing
        # each out again inside it (an event's whole parse, thousands of times over, in one
        # predicate).
        wanted = F.coalesce(table == F.lit(self.table), F.lit(False))
        return F.when(wanted, images).otherwise(F.array().cast("array<boolean>"))

    def _decoded(self, row: StructType, actual: Mapping[str, DataType], meta: bool) -> _Plan:
        """How ``row``'s columns are made from the types they arrive as (``actual``), where
        the events may carry the schema wrapper (``meta``) or not."""
        plans = [self._steps(i, f, actual.get(f.name), meta) for i, f in enumerate(row.fields)]
        found = {
            i: schema_encoding(f, self._static(f), self.encodings)
            for i, (f, plan) in enumerate(zip(row.fields, plans, strict=True))
            if plan is not None and meta and not _is_text(f.dataType)
        }
        texts = [f for f in row.fields if _is_text(f.dataType)]
        text = TextColumns(tuple(f.name for f in texts), tuple(map(self._static, texts)))
        if not texts:
            return _Plan(plans, found, None, None)
        if meta:
            return _Plan(plans, found, text, clock_sql(text))
        return _Plan(plans, found, text, text.static_clock() if text.static_times else None)

    def _images(self, row: StructType, op: Column, keyed: bool) -> tuple[Column, Column]:
        """The event's before and after images, as struct columns of ``e`` (a MongoDB
        document parsed from its extended JSON, a delete's key taken from the message's key
        where it has no pre-image)."""
        from pyspark.sql import functions as F

        before, after = F.col("e.before"), F.col("e.after")
        if not self._mongo:
            return before, after
        # A MongoDB document is extended JSON text: every column read as its raw text.
        wire = self._wire_row(row)
        before = F.from_json(before, wire, {"mode": "FAILFAST"})
        after = F.from_json(after, wire, {"mode": "FAILFAST"})
        if keyed and len(self.key) == 1:
            # Without pre-images a delete's key is only in the message's key.
            key = F.get_json_object(
                F.coalesce(F.get_json_object(F.col("__key"), "$.payload"), F.col("__key")), "$.id"
            )
            only_key = F.struct(
                *[
                    (key if f.name == self.key[0] else F.lit(None).cast("string")).alias(f.name)
                    for f in wire.fields
                ]
            )
            before = F.when(before.isNull() & (op == "d"), only_key).otherwise(before)
        return before, after

    def _order(self, extra: dict[str, Column]) -> list[Column]:
        """The position's columns: ``source`` fields of the envelope ``e``, or columns of
        the events (carried as ``p<i>``, in ``extra``'s order)."""
        from pyspark.sql import functions as F

        names = list(extra)
        return [
            (
                F.col("e.source")[p.removeprefix("source.")]
                if p.startswith("source.")
                else F.col(f"p{names.index(p)}")
            ).alias(name)
            for p, name in zip(self.position, self.order_columns[:-1], strict=True)
        ]

    def _deduplicated(self, out: DataFrame, row: StructType) -> DataFrame:
        """The same event delivered twice (a connector restart) counted once: same position,
        same op, same row. Two events at one position with other rows stay (a tie, refused).
        Columns compared as they are (no text made of each row); a column holding a map or a
        variant, which Spark cannot group by, as its JSON text."""
        from pyspark.sql import functions as F

        as_is = [f.name for f in row.fields if not _holds_map(f.dataType)]
        as_text = [f.name for f in row.fields if _holds_map(f.dataType)]
        compared = list(dict.fromkeys([*self.key, OP_COLUMN, *self.order_columns, *as_is]))
        if not as_text:
            return out.dropDuplicates(compared)
        content = F.to_json(F.struct(*[F.col(sql_name(n)) for n in as_text]))
        return (
            out.withColumn("__event_row", content)
            .dropDuplicates([*compared, "__event_row"])
            .drop("__event_row")
        )

    def _as_text(self, raw: str, arrived: DataType | None, prefix: str) -> tuple[list[Step], str]:
        """Steps making the column ``raw`` (of type ``arrived``) the value's JSON text (a
        MongoDB value without its extended JSON wrappers), and the SQL of that text."""
        kind = type(arrived).__name__ if arrived is not None else "StringType"
        made = {
            "BinaryType": f"base64({raw})",
            "StructType": f"to_json({raw})",
            "ArrayType": f"to_json({raw})",
            "MapType": f"to_json({raw})",
            "StringType": raw,
        }.get(kind, f"CAST({raw} AS STRING)")
        steps: list[Step] = []
        text = raw
        if made != raw:
            steps.append((f"{prefix}text", made))
            text = f"`{prefix}text`"
        if self._mongo:
            # Extended JSON wraps a value ({"$date": {"$numberLong": …}}): taken off twice.
            steps.append((f"{prefix}once", mongo_unwrapped_sql(text)))
            steps.append((f"{prefix}bare", mongo_unwrapped_sql(f"`{prefix}once`")))
            text = f"`{prefix}bare`"
        return steps, text

    def _static(self, column: StructField) -> str:
        """The encoding of ``column``'s values where the event does not name it."""
        static = self.encodings.static(column.name, column.dataType)
        if self._mongo:
            # A BSON date is milliseconds since 1970; a decimal is its text ($numberDecimal).
            static = {"unknown": "millis", "decimal-bytes": "text"}.get(static, static)
        return static

    def _steps(
        self, index: int, column: StructField, arrived: DataType | None, meta: bool
    ) -> list[Step] | None:
        """How column ``column``'s value is made from ``__raw<index>`` (of type ``arrived``):
        the decoding's steps (:func:`~.debezium_values.decoding_steps`), or ``None`` when it
        arrives as it is declared. Where the events may carry the schema wrapper (``meta``),
        the steps read the encoding and the scale it names as ``__enc<index>`` and
        ``__sc<index>`` (:func:`~.debezium_schemas.encodings_named`)."""
        raw = f"__raw{index}"
        declared = column.dataType
        settings = self.encodings
        name = column.name
        if arrived == declared and not self._mongo:
            return None  # as declared (a text column's time of day: _timed_text)
        prefix = f"__d{index}_"
        steps, text = self._as_text(f"`{raw}`", arrived, prefix)
        if _is_text(declared):
            return [*steps, (name, text)]
        encoding, scale = sql_text(self._static(column)), "NULL"
        if meta:
            encoding, scale = f"`__enc{index}`", f"`__sc{index}`"
        return steps + decoding_steps(
            text,
            declared,
            encoding,
            prefix=prefix,
            column=name,
            table="`__table`",
            scale=scale,
            settings=settings,
        )


def _is_text(kind: DataType) -> bool:
    return type(kind).__name__ == "StringType"


def _clock_column(plan: _Plan, meta: bool) -> list[Column]:
    """The text columns' encodings of each event as ``__clock`` (none where no text column
    can hold a time): by the event's schema (``meta``: made by ``encodings_named``), else
    the constant the connector's settings give."""
    from pyspark.sql import functions as F

    if plan.clock is None:
        return []
    return [F.col("__clock") if meta else F.expr(plan.clock).alias("__clock")]


def _timed_text(out: DataFrame, text: TextColumns) -> DataFrame:
    """``out`` with its text columns' times of day decoded where its ``__clock`` names one,
    all in one expression run only for those rows (``__clock`` and ``__table`` dropped)."""
    from pyspark.sql import functions as F

    values = "array(" + ", ".join(map(sql_name, text.names)) + ")"
    decoded = text.decoded_sql(values, "`__clock`", "`__table`", "string")
    tdec = F.expr(f"CASE WHEN `__clock` IS NOT NULL THEN {decoded} END")
    out = out.select("*", tdec.alias("__tdec"))
    at = {name: k for k, name in enumerate(text.names)}

    def column(name: str) -> str:
        if name not in at:
            return sql_name(name)
        timed = f"`__tdec`[{at[name]}]"
        return (
            f"CASE WHEN `__clock` IS NULL THEN {sql_name(name)} ELSE {timed} END "
            f"AS {sql_name(name)}"
        )

    return out.selectExpr(
        *[column(c) for c in out.columns if c not in ("__clock", "__table", "__tdec")]
    )


def _check_arguments(row_schema: object, truncate: object, table: object, units: object) -> None:
    """Refuse a ``Debezium`` argument of the wrong type or value, naming it."""
    if not isinstance(row_schema, str) and not hasattr(row_schema, "fields"):
        raise ArgumentTypeError(
            f"Debezium row_schema= takes a StructType or a DDL string such as "
            f"'id BIGINT, name STRING', got {type(row_schema).__name__}"
        )
    check_choice(truncate, ("error", "ignore"), "Debezium truncate=", InvalidArgumentError)
    if table is not None and not is_name(table):
        raise ArgumentTypeError(f"Debezium table= takes a table name, got {table!r}")
    if units is not None and not isinstance(units, Mapping):
        raise ArgumentTypeError(
            f"Debezium units= takes a mapping of column → unit, got {type(units).__name__}"
        )


def _positions(
    connector: str | None, position: Sequence[str] | str | None
) -> tuple[tuple[str, ...], dict[str, OrderAs]]:
    """The position that orders one key's changes (``connector``'s, or ``position`` as
    given), and how each of its ``source`` fields orders (by its column's name)."""
    positions = _position_fields(connector, position)
    order_as: dict[str, OrderAs] = {}
    for p in positions:
        name = p.removeprefix("source.")
        if name == p:
            continue  # a column of the events: a whole number, checked when they are read
        if name not in POSITION_ORDER:
            raise InvalidArgumentError(
                f"Debezium position {p!r} cannot be ordered: the SDK orders the source "
                f"fields {', '.join(POSITION_ORDER)} as their connectors mean them (or "
                "pass connector=)"
            )
        how = POSITION_ORDER[name]
        if how is not None:
            order_as[_position_column(p)] = how
    return positions, order_as


def _position_fields(
    connector: str | None, position: Sequence[str] | str | None
) -> tuple[str, ...]:
    """The fields of the position, ``connector``'s or ``position`` as given, checked."""
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
    positions = names_in(position)
    if positions is None:
        raise ArgumentTypeError(
            f"Debezium position= takes one or more column paths, got {position!r}"
        )
    return positions


def _position_column(position: str) -> str:
    """The change rows' column of a position field (``source.lsn`` → ``__source_lsn``)."""
    return "__" + position.replace(".", "_")


def _op_map(truncate: str) -> dict[str, str]:
    """What each Debezium op is to the change set (a truncate: refused unless ignored)."""
    ops = dict.fromkeys(_UPSERT_OPS, "upsert") | {"d": "delete", PREIMAGE_OP: "preimage"}
    ops |= dict.fromkeys(_IGNORED_OPS, "ignore")
    if truncate == "ignore":
        ops["t"] = "ignore"
    return ops


def _table_of(kept: DataFrame) -> Column:
    """The event's table: ``source.table`` (MongoDB's ``source.collection``), where the
    events' source has it (NULL where it has neither)."""
    from pyspark.sql import functions as F

    envelope: Any = kept.schema["e"].dataType
    names = getattr(envelope["source"].dataType, "names", ())
    named = [F.col(f"e.source.{n}") for n in ("table", "collection") if n in names]
    return F.coalesce(*named, F.lit(None)).cast("string")


def _all(conditions: Sequence[Column]) -> Column:
    """Every one of ``conditions`` (one at least)."""
    return functools.reduce(operator.and_, conditions)


def _any(conditions: Sequence[Column]) -> Column:
    """Any one of ``conditions`` (one at least)."""
    return functools.reduce(operator.or_, conditions)


def _decoded(
    raws: DataFrame,
    plans: Sequence[list[Step] | None],
    row: StructType,
    carried: Sequence[str],
) -> DataFrame:
    """``row``'s columns made from ``raws``' ``__raw<i>`` by each column's steps (``None``:
    as it is), with the columns ``carried`` as they are (the op and the position's).

    Step by step: a step reads the columns made before it, so no expression is written out
    again inside another (Spark would analyse, and evaluate, each copy). Steps that read none
    of each other are made together: each level is one more pass over every column."""

    # SQL text, not columns: each column built is a few calls into the JVM, each a cost of
    # the planning of every batch of a stream.
    by_level: dict[int, list[str]] = defaultdict(list)
    for plan in plans:
        steps = (plan or [])[:-1]
        for (name, sql), level in zip(steps, _levels(steps), strict=True):
            by_level[level].append(f"{sql} AS {sql_name(name)}")
    staged = raws
    for level in sorted(by_level):
        staged = staged.selectExpr("*", *by_level[level])
    return staged.selectExpr(
        *[
            f"{plan[-1][1] if plan else sql_name(f'__raw{i}')} AS {sql_name(f.name)}"
            for i, (f, plan) in enumerate(zip(row.fields, plans, strict=True))
        ],
        *map(sql_name, carried),
    )


def _changes_no_row(body: Column) -> Column:
    """Whether an event without images is one that changes no row: a transaction's BEGIN or
    END, a schema change, a heartbeat (nothing but its time)."""
    from pyspark.sql import functions as F

    signs = [body["ts_ms"].isNotNull() & body["source"].isNull()]
    signs.append(F.upper(body["status"]).isin("BEGIN", "END"))
    signs += [body[n].isNotNull() for n in _METADATA_FIELDS if n != "status"]
    return _any([F.coalesce(s, F.lit(False)) for s in signs])


def _parsed(
    events: DataFrame, value: Column, known: Column | None, lean: StructType, decoding: bool
) -> DataFrame:
    """``events`` with each event's body (its payload, or the event itself where it has no
    schema wrapper) as ``__body``, parsed from its JSON ``value`` as ``lean`` (the envelope
    under ``payload``), and where a column is ``decoding`` its schema too (``__schema``).

    An event whose schema was found ahead (``known``: :func:`known_schemas`) is parsed
    from its payload on, the schema cut off by its length in bytes, not read; any other
    is parsed whole. Each step is a column of its own: the envelope reads the body many
    times, and an expression read many times would be parsed (and analysed) as often.

    What was parsed whole is dropped once its body and schema are taken: Spark compiles no
    step whose rows hold more than ``spark.sql.codegen.maxFields`` fields (100), and the
    whole parse (the envelope twice over, at the top and under ``payload``, and the schema)
    passes that from a few columns on; each step it reached was then run apart, copying the
    whole parse for each row (measured on 300,000 events with one timestamp to decode: their
    change rows took 1.17 times as long as the same events' with a plain number while the
    parse was carried on, 1.09 since it is dropped)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    top: Any = lean["payload"].dataType
    wrapped = lean
    if decoding:
        # StructType.add changes the struct in place: each wrapper is a struct of its own.
        wrapped = StructType(list(lean.fields)).add("schema", schema_info_type())
    whole = F.from_json(value, wrapped, {"mode": "FAILFAST"})
    body = _payload_or_top("__parsed", top.fields)
    kept = [F.col(sql_name(c)) for c in events.columns]
    schema = [F.col("__parsed.schema").alias("__schema")] if decoding else []
    if known is None:
        parsed = events.select("*", whole.alias("__parsed"))
        return parsed.select(*kept, body.alias("__body"), *schema)
    events = events.select("*", known.alias("__known"))
    kept.append(F.col("__known"))
    ahead = F.col("__known").isNotNull()
    # Bytes, not characters: a position in text is found by walking the text.
    rest = F.col("value").cast("binary").substr(F.col("__known.skip"), F.lit(_WHOLE))
    payload = F.concat(F.lit("{"), rest.cast("string"))
    events = events.select(
        "*",
        F.when(ahead, F.from_json(payload, lean, {"mode": "FAILFAST"})).alias("__lean"),
        F.when(~ahead, whole).alias("__parsed"),
    )
    lean_body = F.when(ahead, F.col("__lean.payload")).otherwise(body)
    return events.select(*kept, lean_body.alias("__body"), *schema)


def _payload_or_top(parsed: str, fields: Sequence[StructField]) -> Column:
    """The body of a parsed event (the column ``parsed``): the schema wrapper's ``payload``,
    else its top level. One SQL expression: built of columns, each field's would be a few
    calls into the JVM, each of them costing a batch's planning (a stream's every batch)."""
    from pyspark.sql import functions as F

    event = sql_name(parsed)
    top = ", ".join(f"{sql_text(f.name)}, {event}.{sql_name(f.name)}" for f in fields)
    return F.expr(
        f"CASE WHEN {event}.payload IS NOT NULL THEN {event}.payload ELSE named_struct({top}) END"
    )


def _image_types(schema: DataType) -> dict[str, DataType]:
    """The types an already-parsed event's columns arrive as (its ``after`` image's, else
    its ``before`` image's)."""
    fields = {f.name: f.dataType for f in getattr(schema, "fields", [])}
    image = fields.get("after") or fields.get("before")
    return {f.name: f.dataType for f in getattr(image, "fields", [])}


def _levels(steps: Sequence[Step]) -> list[int]:
    """Each step's level: 0 for one that reads no other step, else one more than the
    deepest step it reads (by its quoted name)."""
    found: list[int] = []
    for i, (_, sql) in enumerate(steps):
        read = [found[j] for j in range(i) if f"`{steps[j][0]}`" in sql]
        found.append(max(read, default=-1) + 1)
    return found


def _holds_map(kind: DataType) -> bool:
    """Whether a column of type ``kind`` holds a map or a variant (at any depth): Spark
    groups by neither."""
    name = type(kind).__name__
    if name in ("MapType", "VariantType"):
        return True
    if name == "ArrayType":
        return _holds_map(kind.elementType)  # type: ignore[attr-defined]
    if name == "StructType":
        return any(_holds_map(f.dataType) for f in kind.fields)  # type: ignore[attr-defined]
    return False


def _struct_of(fields: Sequence[tuple[str, DataType]]) -> StructType:
    from pyspark.sql.types import StructType

    made = StructType()
    for name, kind in fields:
        made = made.add(name, kind)
    return made

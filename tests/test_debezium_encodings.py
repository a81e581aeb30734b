"""Debezium's events as its connectors write them (``tests/_debezium_events.py``): every
logical type lands as the declared type, exactly, with the JSON converter's schemas on (the
event says how each value is encoded) and off (the connector's settings say it); every
connector's envelope, rows flattened by ``ExtractNewRecordState``, events already typed by
``from_avro``; what is no row change is dropped; a value that cannot be decoded fails naming
the table, the column, its semantic type and the value. Each case is applied through the
fake server and read back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date, datetime, time, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import PayloadError, build_payload
from tabhyper_update.streaming import Debezium
from tabhyper_update.testing.files import make_hyper, read_table

from ._debezium_events import (
    Column,
    binary,
    days,
    decimal_bytes,
    event,
    of_day,
    since_epoch,
    zoned,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from tabhyper_update import TableauClient
    from tabhyper_update.testing import FakeTableauServer

CONNECT = "org.apache.kafka.connect.data"
DBZ = "io.debezium"

AMOUNTS = [Decimal("12.34"), Decimal("-0.01"), Decimal("99999999.99"), Decimal("-12345678.90")]
WHEN = [
    datetime(2024, 5, 1, 9, 0, 0, 123456),
    datetime(1969, 12, 31, 23, 59, 59, 999999),
    datetime(2038, 1, 19, 3, 14, 8, 1),
    datetime(2000, 2, 29, 0, 0),
]
DAYS = [date(2024, 5, 1), date(1969, 12, 31), date(2038, 1, 19), date(2000, 2, 29)]
TIMES = [time(9, 0, 0, 123456), time(0, 0), time(23, 59, 59, 999999), time(12, 30, 1)]
BLOBS = [b"\x00\x01\xff", b"", b"plain", bytes(range(256))[:40]]


def apply_events(
    spark: SparkSession,
    client: TableauClient,
    server: FakeTableauServer,
    lines: Sequence[str | None],
    debezium: Debezium,
) -> list[tuple[Any, ...]]:
    """Build the events' change set, apply it to data source ``Orders``, read it back."""
    events = spark.createDataFrame([(line,) for line in lines], "value string")
    return apply_frame(client, server, events, debezium)


def apply_frame(
    client: TableauClient, server: FakeTableauServer, events: DataFrame, debezium: Debezium
) -> list[tuple[Any, ...]]:
    """:func:`apply_events` for events in a DataFrame of any of the forms Debezium reads."""
    payload = build_payload(debezium.changes(events), debezium.change_set)
    with payload:
        payload.upload("Orders", client=client).apply(target_table="Extract")
    server.wait_idle()
    (luid,) = [d.id for d in server.backend.sources.values() if d.name == "Orders"]
    return sorted(read_table(server.datasource_path(luid), "Extract"))


@pytest.fixture
def target_file(tmp_path: Path) -> Path:
    (tmp_path / "start").mkdir()
    return make_hyper(
        tmp_path / "start" / "orders.hyper",
        {
            "Extract": (
                "id BIGINT NOT NULL, amount NUMERIC(10, 2), day DATE, created TIMESTAMP, "
                "at_zone TIMESTAMPTZ, clock TEXT, blob BYTES",
                [],
            )
        },
    )


ROW = (
    "id BIGINT, amount DECIMAL(10, 2), day DATE, created TIMESTAMP, at_zone TIMESTAMP, "
    "clock STRING, blob BINARY"
)


def columns_for(time_unit: str, binary_mode: str = "bytes") -> list[Column]:
    """The columns as a PostgreSQL connector with default settings writes them
    (``decimal.handling.mode=precise``; ``time.precision.mode=adaptive`` for a
    ``TIMESTAMP(6)`` sends micros, ``(3)`` millis, ``(9)`` nanos: ``time_unit``)."""
    semantic = {
        "millis": f"{DBZ}.time.Timestamp",
        "micros": f"{DBZ}.time.MicroTimestamp",
        "nanos": f"{DBZ}.time.NanoTimestamp",
        "connect": f"{CONNECT}.Timestamp",
    }[time_unit]
    unit = "millis" if time_unit == "connect" else time_unit
    clock = {
        "millis": (f"{DBZ}.time.Time", "int32"),
        "micros": (f"{DBZ}.time.MicroTime", "int64"),
        "nanos": (f"{DBZ}.time.NanoTime", "int64"),
        "connect": (f"{CONNECT}.Time", "int32"),
    }[time_unit]
    return [
        Column("id", "int64"),
        Column(
            "amount",
            "bytes",
            f"{CONNECT}.Decimal",
            {"scale": "2", "connect.decimal.precision": "10"},
            lambda v: decimal_bytes(v, 2),
        ),
        Column(
            "day",
            "int32",
            f"{CONNECT}.Date" if time_unit == "connect" else f"{DBZ}.time.Date",
            encode=days,
        ),
        Column("created", "int64", semantic, encode=lambda v: since_epoch(v, unit)),
        Column("at_zone", "string", f"{DBZ}.time.ZonedTimestamp", encode=zoned),
        Column("clock", clock[1], clock[0], encode=lambda v: of_day(v, unit)),
        Column(
            "blob",
            "bytes" if binary_mode == "bytes" else "string",
            encode=lambda v: binary(v, binary_mode),
        ),
    ]


def values(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "amount": AMOUNTS[i % 4],
        "day": DAYS[i % 4],
        "created": WHEN[i % 4],
        "at_zone": WHEN[(i + 1) % 4].replace(tzinfo=timezone.utc),
        "clock": TIMES[i % 4],
        "blob": BLOBS[i % 4],
    }


def expected(i: int, time_unit: str) -> tuple[Any, ...]:
    """What lands: the values exactly (a timestamp to its microsecond; millis and the
    clock's millis cut where the unit is millis)."""
    v = values(i)
    created = v["created"]
    clock = v["clock"]
    if time_unit in ("millis", "connect"):
        created = created.replace(microsecond=created.microsecond // 1000 * 1000)
        clock = clock.replace(microsecond=clock.microsecond // 1000 * 1000)
    return (
        i,
        v["amount"],
        v["day"],
        created,
        v["at_zone"],
        clock.strftime("%H:%M:%S.%f"),
        v["blob"],
    )


def landed(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Hyper's values as Python's (its own date and time types, bytes)."""
    out = []
    for row in rows:
        out.append(
            tuple(
                v.to_datetime()
                if hasattr(v, "to_datetime")
                else v.to_date()
                if hasattr(v, "to_date")
                else bytes(v)
                if isinstance(v, (bytearray, memoryview))
                else v
                for v in row
            )
        )
    return out


def normal(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Instants compared as instants, wall-clock times as they are."""
    out = []
    for row in rows:
        out.append(
            tuple(
                v.astimezone(timezone.utc)
                if isinstance(v, datetime) and v.tzinfo is not None
                else v
                for v in row
            )
        )
    return out


@pytest.mark.parametrize("schemas", [True, False], ids=["schemas-on", "schemas-off"])
@pytest.mark.parametrize("time_unit", ["micros", "millis", "nanos", "connect"])
def test_every_default_encoding_lands_as_declared_exactly(
    spark: SparkSession,
    client: TableauClient,
    server: FakeTableauServer,
    time_unit: str,
    schemas: bool,
) -> None:
    columns = columns_for(time_unit)
    lines = [event(columns, "c", None, values(i), 10 + i, schemas=schemas) for i in range(4)]
    lines.append(event(columns, "u", values(1), {**values(1), "id": 1}, 20, schemas=schemas))
    precision = {"micros": "microseconds", "nanos": "nanoseconds"}.get(time_unit, "connect")
    unit = "millis" if time_unit == "connect" else time_unit
    # Without the schemas, the connector's settings say what the schema would have said (a
    # number for a STRING column is a time of day only where units= says so).
    settings: dict[str, Any] = (
        {} if schemas else {"time_precision": precision, "units": {"clock": unit}}
    )
    debezium = Debezium(ROW, key="id", **settings)
    got = apply_events(spark, client, server, lines, debezium)
    assert normal(landed(got)) == normal([expected(i, time_unit) for i in range(4)])


@pytest.mark.parametrize("schemas", [True, False], ids=["schemas-on", "schemas-off"])
def test_nanoseconds_past_two_to_the_53_are_cut_to_their_microsecond_exactly(
    spark: SparkSession, schemas: bool
) -> None:
    """A ``NanoTimestamp`` or ``NanoTime`` is cut to its microsecond toward the past, in
    whole numbers: 1,700,000,000,123,455,999 ns is ...123455 µs (through a double it
    rounds up to ...123456), and -1 ns is the microsecond before 1970."""
    columns = [
        Column("id", "int64"),
        Column("created", "int64", f"{DBZ}.time.NanoTimestamp", encode=int),
        Column("clock", "int64", f"{DBZ}.time.NanoTime", encode=int),
    ]
    nanos = [1_700_000_000_123_455_999, -1, 86_399_999_999_999]
    lines = [
        event(
            columns,
            "c",
            None,
            {"id": i, "created": n, "clock": n % 86_400_000_000_000},
            i,
            schemas=schemas,
        )
        for i, n in enumerate(nanos)
    ]
    settings: dict[str, Any] = {} if schemas else {"units": {"created": "nanos", "clock": "nanos"}}
    debezium = Debezium("id BIGINT, created TIMESTAMP, clock STRING", key="id", **settings)
    events = spark.createDataFrame([(line,) for line in lines], "value string")
    with build_payload(debezium.changes(events), debezium.change_set) as payload:
        got = landed(sorted(read_table(payload.parts[0].path, "upserts", order_by="1")))
    epoch = datetime(1970, 1, 1)
    assert [(row[0], row[1], row[2]) for row in got] == [
        (0, datetime(2023, 11, 14, 22, 13, 20, 123455), "22:13:20.123455"),
        (1, datetime(1969, 12, 31, 23, 59, 59, 999999), "23:59:59.999999"),
        (2, epoch.replace(hour=23, minute=59, second=59, microsecond=999999), "23:59:59.999999"),
    ]


def test_adaptive_without_schemas_names_what_to_set(
    spark: SparkSession, client: TableauClient, server: FakeTableauServer
) -> None:
    """An integer for a TIMESTAMP with no schema to say its unit: the error names the
    table, the column and the value, and what to pass."""
    columns = columns_for("micros")
    lines = [event(columns, "c", None, values(0), 10, schemas=False)]
    with pytest.raises(PayloadError) as caught:
        apply_events(spark, client, server, lines, Debezium(ROW, key="id"))
    said = str(caught.value)
    assert "table orders, column created" in said
    assert str(since_epoch(WHEN[0], "micros")) in said
    assert "units={'created'" in said
    assert "time_precision=" in said
    # Named once, for that column, it decodes.
    debezium = Debezium(ROW, key="id", units={"created": "micros", "clock": "micros"})
    got = apply_events(spark, client, server, lines, debezium)
    assert normal(landed(got)) == normal([expected(0, "micros")])


@pytest.mark.parametrize("mode", ["base64", "base64-url-safe", "hex"])
def test_binary_in_each_handling_mode(
    spark: SparkSession, client: TableauClient, server: FakeTableauServer, mode: str
) -> None:
    columns = columns_for("micros", binary_mode=mode)
    lines = [event(columns, "c", None, values(i), 10 + i) for i in range(4)]
    got = apply_events(spark, client, server, lines, Debezium(ROW, key="id", binary_handling=mode))  # type: ignore[arg-type]
    assert [row[6] for row in landed(got)] == [BLOBS[i] for i in range(4)]
    # Text that the default (bytes) cannot tell apart is refused by name, not guessed.
    with pytest.raises(PayloadError, match=r"column blob .*binary_handling"):
        apply_events(spark, client, server, lines, Debezium(ROW, key="id"))


@pytest.mark.parametrize("mode", ["string", "double"])
def test_decimal_handling_string_and_double(
    spark: SparkSession, client: TableauClient, server: FakeTableauServer, mode: str
) -> None:
    columns = columns_for("micros")
    as_number = Column(
        "amount",
        "string" if mode == "string" else "double",
        encode=(str if mode == "string" else float),
    )
    columns[1] = as_number
    lines = [event(columns, "c", None, values(i), 10 + i, schemas=False) for i in range(4)]
    debezium = Debezium(ROW, key="id", decimal_handling=mode, time_precision="microseconds")  # type: ignore[arg-type]
    got = apply_events(spark, client, server, lines, debezium)
    assert [row[1] for row in got] == AMOUNTS
    # The default (precise) reads them as base64 bytes: refused by name, with the setting.
    with pytest.raises(PayloadError, match="decimal_handling"):
        apply_events(
            spark, client, server, lines, Debezium(ROW, key="id", time_precision="microseconds")
        )


CONNECTOR_ROW = "id BIGINT, amount DECIMAL(10, 2), day DATE, created TIMESTAMP"


def connector_columns() -> list[Column]:
    return columns_for("micros")[:4]


@pytest.mark.parametrize(
    "connector", ["postgresql", "mysql", "mariadb", "sqlserver", "oracle", "db2"]
)
def test_every_relational_connectors_envelope_snapshot_and_stream(
    spark: SparkSession, client: TableauClient, server: FakeTableauServer, connector: str
) -> None:
    """A snapshot read ('r'), then creates, an update and a delete, each connector's own
    source block ordering them; heartbeats, transaction metadata and a schema change
    beside them are dropped."""
    columns = connector_columns()
    lines: list[str | None] = [
        event(columns, "r", None, values(0), 1, connector=connector),
        event(columns, "c", None, values(1), 2, connector=connector),
        event(columns, "c", None, values(2), 3, connector=connector),
        event(columns, "u", values(1), {**values(3), "id": 1}, 4, connector=connector),
        event(columns, "d", values(2), None, 5, connector=connector),
        None,  # the tombstone after a delete
        json.dumps({"ts_ms": 1_714_554_009_000}),  # a heartbeat
        json.dumps({"status": "BEGIN", "id": "571:53195829", "event_count": None, "ts_ms": 1}),
        json.dumps(
            {
                "status": "END",
                "id": "571:53195829",
                "event_count": 4,
                "data_collections": [{"data_collection": "shop.orders", "event_count": 4}],
                "ts_ms": 2,
            }
        ),
        json.dumps(
            {
                "source": {"connector": connector, "db": "shop", "table": "orders"},
                "ts_ms": 3,
                "databaseName": "shop",
                "ddl": "ALTER TABLE orders ADD COLUMN note TEXT",
                "tableChanges": [],
            }
        ),
    ]
    target = Debezium(CONNECTOR_ROW, key="id", connector=connector)
    got = apply_events(spark, client, server, lines, target)
    want = [(0, *values(0).values()), (1, *values(3).values())]
    assert [r[:4] for r in landed(got)] == [(w[0], w[2], w[3], w[4]) for w in want]


FLAT_ROW = "id BIGINT, amount DECIMAL(10, 2), created TIMESTAMP"


def flattened(i: int, *, op: str | None, deleted: str | None, lsn: int, schemas: bool) -> str:
    """A row as ``ExtractNewRecordState`` writes it with ``add.fields=op,lsn`` and
    ``delete.handling.mode=rewrite`` (a delete: the row before it, ``__deleted: "true"``)."""
    v = values(i)
    row: dict[str, Any] = {
        "id": i,
        "amount": decimal_bytes(v["amount"], 2),
        "created": since_epoch(v["created"], "micros"),
    }
    if op is not None:
        row["__op"] = op
    row["__lsn"] = lsn
    if deleted is not None:
        row["__deleted"] = deleted
    if not schemas:
        return json.dumps(row)
    fields = [
        Column("id", "int64").schema(),
        Column("amount", "bytes", f"{CONNECT}.Decimal", {"scale": "2"}).schema(),
        Column("created", "int64", f"{DBZ}.time.MicroTimestamp").schema(),
        {"type": "string", "optional": True, "field": "__op"},
        {"type": "int64", "optional": True, "field": "__lsn"},
        {"type": "string", "optional": True, "field": "__deleted"},
    ]
    schema = {"type": "struct", "fields": fields, "optional": False, "name": "pg.shop.orders.Value"}
    return json.dumps({"schema": schema, "payload": row})


@pytest.mark.parametrize("schemas", [True, False], ids=["schemas-on", "schemas-off"])
def test_rows_flattened_by_extract_new_record_state(
    spark: SparkSession, client: TableauClient, server: FakeTableauServer, schemas: bool
) -> None:
    lines = [
        flattened(1, op="c", deleted="false", lsn=10, schemas=schemas),
        flattened(2, op="c", deleted="false", lsn=11, schemas=schemas),
        flattened(2, op="d", deleted="true", lsn=12, schemas=schemas),
        flattened(3, op="r", deleted="false", lsn=13, schemas=schemas),
        flattened(3, op=None, deleted="true", lsn=14, schemas=schemas),  # rewrite, no op
    ]
    settings: dict[str, Any] = {} if schemas else {"time_precision": "microseconds"}
    got = apply_events(spark, client, server, lines, Debezium(FLAT_ROW, key="id", **settings))
    assert [r[:2] for r in landed(got)] == [(1, AMOUNTS[1])]


def test_rows_flattened_by_extract_new_record_state_as_columns(
    spark: SparkSession, client: TableauClient, server: FakeTableauServer
) -> None:
    """The same flattened rows read already into columns (from Avro, or a table they were
    written to): the row's columns typed as declared, the markers and the position beside
    them. What lands is what their JSON lands as."""
    changes: list[tuple[int, str | None, int, str]] = [(1, "c", 10, "false")]
    changes += [(2, "c", 11, "false"), (2, "d", 12, "true")]
    changes += [(3, "r", 13, "false"), (3, None, 14, "true")]  # rewrite mode, no op
    events = spark.createDataFrame(
        [
            (i, values(i)["amount"], values(i)["created"], op, lsn, deleted)
            for i, op, lsn, deleted in changes
        ],
        f"{FLAT_ROW}, __op STRING, __lsn BIGINT, __deleted STRING",
    )
    got = apply_frame(client, server, events, Debezium(FLAT_ROW, key="id"))
    # The target's id, amount and created (its other columns are not in the rows).
    assert [(r[0], r[1], r[3]) for r in landed(got)] == [(1, AMOUNTS[1], WHEN[1])]


def test_mongodb_documents_and_deletes_by_the_message_key(
    spark: SparkSession, client: TableauClient, server: FakeTableauServer
) -> None:
    """MongoDB's ``after`` is the document as extended JSON text; a delete carries its id
    only in the Kafka message's key; an update that carries only what changed
    (``capture.mode=change_streams``) is refused naming the setting."""

    def mongo(op: str, doc: dict[str, Any] | None, n: int, key: int) -> tuple[str, str]:
        payload = {
            "after": None if doc is None else json.dumps(doc),
            "before": None,
            "source": {"connector": "mongodb", "collection": "orders", "ts_ms": 1000 * n, "ord": 1},
            "op": op,
            "ts_ms": 5,
        }
        return json.dumps({"payload": {"id": json.dumps({"$numberLong": str(key)})}}), json.dumps(
            payload
        )

    docs = [
        mongo(
            "r",
            {
                "_id": {"$numberLong": "1"},
                "amount": {"$numberDecimal": "12.34"},
                "created": {"$date": "2024-05-01T09:00:00.123Z"},
            },
            1,
            1,
        ),
        mongo(
            "c",
            {
                "_id": {"$numberLong": "2"},
                "amount": {"$numberDecimal": "-0.01"},
                "created": {"$date": {"$numberLong": "1714554000123"}},
            },
            2,
            2,
        ),
        mongo("d", None, 3, 2),
    ]
    events = spark.createDataFrame(docs, "key string, value string")
    target = Debezium(
        "_id BIGINT, amount DECIMAL(10, 2), created TIMESTAMP", key="_id", connector="mongodb"
    )
    with build_payload(target.changes(events), target.change_set) as payload:
        ups = sorted(read_table(payload.parts[0].path, "upserts"))
        downs = sorted(read_table(payload.parts[0].path, "deletes"))
    assert [(r[0], r[1]) for r in ups] == [(1, Decimal("12.34"))]
    assert str(ups[0][2]) == "2024-05-01 09:00:00.123000"
    assert downs == [(2,)]
    partial = json.dumps(
        {
            "after": None,
            "before": None,
            "updateDescription": {"updatedFields": json.dumps({"amount": 3}), "removedFields": []},
            "source": {"connector": "mongodb", "collection": "orders", "ts_ms": 9000, "ord": 1},
            "op": "u",
        }
    )
    events = spark.createDataFrame([(None, partial)], "key string, value string")
    with pytest.raises(PayloadError, match=r"capture\.mode"):
        build_payload(target.changes(events), target.change_set)


def test_events_already_typed_by_from_avro(spark: SparkSession) -> None:
    """The Avro converter's events after ``from_avro``: a Connect ``Decimal`` and ``Date``
    arrive typed, Debezium's ``MicroTimestamp`` as a long (its unit named once)."""
    from pyspark.sql.types import (
        DateType,
        DecimalType,
        LongType,
        StringType,
        StructType,
    )

    image = (
        StructType()
        .add("id", LongType())
        .add("amount", DecimalType(10, 2))
        .add("day", DateType())
        .add("created", LongType())
    )
    schema = (
        StructType()
        .add("before", image)
        .add("after", image)
        .add("op", StringType())
        .add("source", StructType().add("lsn", LongType()).add("table", StringType()))
        .add("ts_ms", LongType())
    )
    rows = [
        (None, (1, Decimal("12.34"), DAYS[0], since_epoch(WHEN[0], "micros")), "c", (10, "o"), 1),
        (None, (2, Decimal("-0.01"), DAYS[1], since_epoch(WHEN[1], "micros")), "c", (11, "o"), 2),
    ]
    events = spark.createDataFrame(rows, schema)
    target = Debezium(
        "id BIGINT, amount DECIMAL(10, 2), day DATE, created TIMESTAMP",
        key="id",
        units={"created": "micros"},
    )
    with build_payload(target.changes(events), target.change_set) as payload:
        got = sorted(read_table(payload.parts[0].path, "upserts"))
    assert [(r[0], r[1], str(r[2]), str(r[3])) for r in got] == [
        (1, Decimal("12.34"), "2024-05-01", "2024-05-01 09:00:00.123456"),
        (2, Decimal("-0.01"), "1969-12-31", "1969-12-31 23:59:59.999999"),
    ]


@pytest.mark.parametrize("text", ["not!base64", "a", "AQ="])
def test_a_value_that_cannot_be_decoded_names_table_column_type_and_value(
    spark: SparkSession, text: str
) -> None:
    """Text that is no base64: a character base64 lacks, or a length no base64 has (which
    Spark's ``unbase64`` throws on, naming nothing of the event)."""
    columns = connector_columns()
    good = event(columns, "c", None, values(0), 1)
    bad = json.loads(event(columns, "c", None, values(1), 2))
    bad["payload"]["after"]["amount"] = text
    events = spark.createDataFrame([(good,), (json.dumps(bad),)], "value string")
    target = Debezium(CONNECTOR_ROW, key="id")
    with pytest.raises(PayloadError) as caught:
        build_payload(target.changes(events), target.change_set)
    said = str(caught.value)
    for words in ("table orders", "column amount", "decimal-bytes", f"cannot decode {text} "):
        assert words in said, said
    assert "MALFORMED" not in said


@pytest.mark.every_spark  # try_to_binary: Spark's own per version
@pytest.mark.parametrize("mode", ["base64", "base64-url-safe"])
@pytest.mark.parametrize("text", ["a", "AQ=x"])
def test_binary_text_that_is_no_base64_fails_naming_the_column(
    spark: SparkSession, mode: str, text: str
) -> None:
    columns = columns_for("micros", binary_mode=mode)
    bad = json.loads(event(columns, "c", None, values(1), 2))
    bad["payload"]["after"]["blob"] = text
    events = spark.createDataFrame([(json.dumps(bad),)], "value string")
    target = Debezium(ROW, key="id", binary_handling=mode)  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match=rf"column blob .*cannot decode {text} as binary"):
        build_payload(target.changes(events), target.change_set)


def test_a_day_count_sent_as_text_is_read_as_spark_casts_it_and_a_fraction_is_refused(
    spark: SparkSession,
) -> None:
    columns = connector_columns()
    columns[2] = Column("day", "string", encode=str)
    lines = [event(columns, "c", None, values(i), 10 + i, schemas=False) for i in range(3)]
    texts = [" 19844", "+19844 ", "19844"]
    edited = []
    for line, text in zip(lines, texts, strict=True):
        parsed = json.loads(line)
        parsed["after"]["day"] = text
        edited.append(json.dumps(parsed))
    target = Debezium(CONNECTOR_ROW, key="id", time_precision="microseconds")
    events = spark.createDataFrame([(line,) for line in edited], "value string")
    with build_payload(target.changes(events), target.change_set) as payload:
        got = sorted(read_table(payload.parts[0].path, "upserts"))
    assert [str(row[2]) for row in got] == ["2024-05-01"] * 3
    parsed = json.loads(lines[0])
    parsed["after"]["day"] = "19844.5"
    events = spark.createDataFrame([(json.dumps(parsed),)], "value string")
    with pytest.raises(PayloadError) as caught:
        build_payload(target.changes(events), target.change_set)
    said = str(caught.value)
    assert "column day" in said, said
    assert "19844.5" in said, said


LIMIT = "spark.sql.codegen.hugeMethodLimit"
HUGE = "-XX:-DontCompileHugeMethods"


def test_a_build_runs_in_methods_the_jvm_compiles_and_leaves_the_session_as_it_was(
    compiled_code: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Debezium decoding fuses into one method larger than HotSpot compiles (it then ran
    interpreted, 2-3x slower): while a build runs, Spark's limit is the JVM's, and the
    session's own setting is back after it, a failed build's too; a lower one is kept."""
    from tabhyper_update.builder import build

    spark = compiled_code
    seen: list[str] = []
    real = build._stage_change_set

    def staged(*args: Any, **kwargs: Any) -> Any:
        seen.append(str(spark.conf.get(LIMIT)))
        return real(*args, **kwargs)

    monkeypatch.setattr(build, "_stage_change_set", staged)
    columns = connector_columns()
    good = event(columns, "c", None, values(0), 1)
    bad = json.loads(event(columns, "c", None, values(1), 2))
    bad["payload"]["after"]["amount"] = "not!base64"
    target = Debezium(CONNECTOR_ROW, key="id")
    before = str(spark.conf.get(LIMIT))
    assert int(before) > 8000  # Spark's default: 64 KB
    events = spark.createDataFrame([(good,)], "value string")
    with build_payload(target.changes(events), target.change_set) as payload:
        assert read_table(payload.parts[0].path, "upserts")[0][0] == 0
    refused = spark.createDataFrame([(good,), (json.dumps(bad),)], "value string")
    with pytest.raises(PayloadError):
        build_payload(target.changes(refused), target.change_set)
    assert seen == ["8000", "8000"]
    assert spark.conf.get(LIMIT) == before
    try:
        spark.conf.set(LIMIT, "4000")
        with build_payload(target.changes(events), target.change_set):
            pass
        assert seen[-1] == "4000"
        assert spark.conf.get(LIMIT) == "4000"
    finally:
        spark.conf.set(LIMIT, before)


def test_a_session_that_refuses_the_limit_still_builds() -> None:
    from tabhyper_update.builder.staging import jit_sized_code

    class Refusing:
        def get(self, key: str) -> str:
            return "65535"

        def set(self, key: str, value: str) -> None:
            raise RuntimeError(f"[CONFIG_NOT_AVAILABLE] {key} cannot be set")

    class Session:
        conf = Refusing()

    session = Session()
    with jit_sized_code(session), jit_sized_code(session):
        pass  # nothing raised: the session keeps its own limit


@pytest.mark.parametrize(
    ("master", "options", "lowered"),
    [
        ("local[2]", {"spark.driver.extraJavaOptions": HUGE}, False),
        ("local[2]", {"spark.executor.extraJavaOptions": HUGE}, True),
        ("spark://h:7077", {"spark.executor.extraJavaOptions": f"-Xss4m {HUGE}"}, False),
        ("spark://h:7077", {"spark.driver.extraJavaOptions": HUGE}, True),
        ("local[2]", {}, True),
    ],
)
def test_a_session_whose_jvms_compile_any_method_keeps_its_code_fused(
    master: str, options: dict[str, str], lowered: bool
) -> None:
    """Where the JVMs running the tasks (the driver's in local mode, else the executors')
    compile methods of any size, as the SDK's own sessions do, the fused code runs compiled:
    the method limit is left alone and wider rows are fused too; anywhere else the limit is
    lowered while the build runs. Either way the session's values are back after."""
    from tabhyper_update.builder.staging import jit_sized_code

    fields = "spark.sql.codegen.maxFields"

    class Conf:
        def __init__(self) -> None:
            self.values = {"spark.master": master, LIMIT: "65535", fields: "100", **options}

        def get(self, key: str, default: str | None = None) -> str | None:
            return self.values.get(key, default)

        def set(self, key: str, value: str) -> None:
            self.values[key] = value

    class Session:
        conf = Conf()

    session = Session()
    with jit_sized_code(session), jit_sized_code(session):
        during = (session.conf.get(LIMIT), session.conf.get(fields))
    assert during == (("8000", "100") if lowered else ("65535", "1000"))
    assert (session.conf.get(LIMIT), session.conf.get(fields)) == ("65535", "100")


def test_the_sessions_the_sdk_starts_compile_any_method(monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM a session of the SDK's starts compiles methods of any size, with the quick
    compiler alone or both (what it is started with, stopped before it starts)."""
    sql = pytest.importorskip("pyspark.sql")
    from tabhyper_update.local import spark as module

    seen: dict[str, str] = {}

    class Builder:
        def appName(self, name: str) -> Builder:
            return self

        def master(self, master: str) -> Builder:
            return self

        def config(self, key: str, value: str) -> Builder:
            seen[key] = value
            return self

        def getOrCreate(self) -> Any:
            raise RuntimeError("not started")

    monkeypatch.setattr(sql.SparkSession, "getActiveSession", staticmethod(lambda: None))
    monkeypatch.setattr(sql.SparkSession, "builder", Builder())
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    for quick in (False, True):
        started = module.own_spark("t", quick_jit=quick)
        with pytest.raises(RuntimeError, match="not started"), started:
            pass
        options = seen["spark.driver.extraJavaOptions"].split()
        assert HUGE in options
        assert ("-XX:TieredStopAtLevel=1" in options) is quick


def test_a_decimal_with_more_places_than_declared_is_refused_not_rounded(
    spark: SparkSession,
) -> None:
    columns = connector_columns()
    columns[1] = Column(
        "amount", "bytes", f"{CONNECT}.Decimal", {"scale": "4"}, lambda v: decimal_bytes(v, 4)
    )
    lines = [event(columns, "c", None, {**values(0), "amount": Decimal("1.2345")}, 1)]
    events = spark.createDataFrame([(line,) for line in lines], "value string")
    target = Debezium(CONNECTOR_ROW, key="id")
    with pytest.raises(PayloadError, match=r"column amount .*1\.2345|column amount"):
        build_payload(target.changes(events), target.change_set)
    # Declared wide enough, it lands exactly.
    wide = Debezium(CONNECTOR_ROW.replace("DECIMAL(10, 2)", "DECIMAL(12, 4)"), key="id")
    with build_payload(wide.changes(events), wide.change_set) as payload:
        assert read_table(payload.parts[0].path, "upserts")[0][1] == Decimal("1.2345")


def test_variable_scale_decimals_and_38_digits(spark: SparkSession) -> None:
    """``VariableScaleDecimal`` (a NUMERIC without precision) and Connect decimals up to
    DECIMAL(38), negative ones included, exactly."""
    big = [Decimal("12345678901234567890123456789.012345678"), Decimal("-1"), Decimal("0")]
    col = Column(
        "amount", "bytes", f"{CONNECT}.Decimal", {"scale": "9"}, lambda v: decimal_bytes(v, 9)
    )
    var = Column(
        "ratio",
        "struct",
        f"{DBZ}.data.VariableScaleDecimal",
        encode=lambda v: {
            "scale": -v.as_tuple().exponent,
            "value": decimal_bytes(v, -v.as_tuple().exponent),
        },
    )
    columns = [Column("id", "int64"), col, var]
    ratios = [Decimal("0.5"), Decimal("-123.25"), Decimal("7")]
    lines = [
        event(columns, "c", None, {"id": i, "amount": big[i], "ratio": ratios[i]}, i + 1)
        for i in range(3)
    ]
    events = spark.createDataFrame([(line,) for line in lines], "value string")
    target = Debezium("id BIGINT, amount DECIMAL(38, 9), ratio DECIMAL(10, 2)", key="id")
    with build_payload(target.changes(events), target.change_set, database_version=3) as payload:
        got = sorted(read_table(payload.parts[0].path, "upserts"))
    assert [(r[1], r[2]) for r in got] == list(zip(big, ratios, strict=True))


@pytest.mark.parametrize("schemas", [True, False], ids=["schemas-on", "schemas-off"])
def test_the_other_logical_types_land_as_their_values(spark: SparkSession, schemas: bool) -> None:
    """Debezium's ``Year`` (MySQL), ``Json``, ``Uuid`` (PostgreSQL), ``Enum``, ``EnumSet``
    (MySQL ``ENUM`` / ``SET``), ``Bits`` (PostgreSQL ``BIT(n)``: bytes, base64 in JSON) and
    ``ZonedTime`` (``TIME WITH TIME ZONE``: ISO 8601 text in UTC), as "Data type mappings"
    of the MySQL and PostgreSQL connectors shows them: each the value it carries."""
    columns = [
        Column("id", "int64"),
        Column("yr", "int32", f"{DBZ}.time.Year"),
        Column("doc", "string", f"{DBZ}.data.Json"),
        Column("uid", "string", f"{DBZ}.data.Uuid"),
        Column("mood", "string", f"{DBZ}.data.Enum", {"allowed": "calm,busy"}),
        Column("tags", "string", f"{DBZ}.data.EnumSet", {"allowed": "a,b,c"}),
        Column(
            "flags",
            "bytes",
            f"{DBZ}.data.Bits",
            {"length": "12"},
            lambda v: binary(v, "base64"),
        ),
        Column("tz_clock", "string", f"{DBZ}.time.ZonedTime"),
    ]
    rows = [
        {
            "id": 1,
            "yr": 2024,
            "doc": '{"a": [1, 2], "b": null}',
            "uid": "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
            "mood": "calm",
            "tags": "a,c",
            "flags": b"\x05\x0a",
            "tz_clock": "09:00:00.123456Z",
        },
        {
            "id": 2,
            "yr": 1901,
            "doc": "[]",
            "uid": "00000000-0000-0000-0000-000000000000",
            "mood": "busy",
            "tags": "",
            "flags": b"\x00\x00",
            "tz_clock": "23:59:59Z",
        },
    ]
    lines = [event(columns, "c", None, row, 30 + i, schemas=schemas) for i, row in enumerate(rows)]
    events = spark.createDataFrame([(line,) for line in lines], "value string")
    target = Debezium(
        "id BIGINT, yr INT, doc STRING, uid STRING, mood STRING, tags STRING, flags BINARY, "
        "tz_clock STRING",
        key="id",
    )
    with build_payload(target.changes(events), target.change_set) as payload:
        got = sorted(read_table(payload.parts[0].path, "upserts"))
    assert [
        tuple(bytes(v) if isinstance(v, (bytearray, memoryview)) else v for v in r) for r in got
    ] == [tuple(row.values()) for row in rows]


def _laid_out(line: str, layout: str) -> str:
    """An event's value as the converter writes it (``compact``), or as something else
    re-wrote it: ``spaced`` (Python's default separators), ``payload-first`` (the keys in
    the other order), ``payload-parameter`` (a field's parameters holding a key named
    ``payload`` after another, so that the schema's text holds ``,"payload":``); or
    ``non-ascii``: compact, with text outside ASCII in the schema, written as UTF-8 as the
    converter writes it (its length in bytes is not its length in characters)."""
    wrapped = json.loads(line)
    if layout == "non-ascii":
        wrapped["schema"]["name"] = "café.boutique.commandes.Enveloppe"
        return json.dumps(wrapped, separators=(",", ":"), ensure_ascii=False)
    if layout == "spaced":
        return json.dumps(wrapped)
    if layout == "payload-first":
        return json.dumps({"payload": wrapped["payload"], "schema": wrapped["schema"]})
    if layout == "payload-parameter":
        amount = wrapped["schema"]["fields"][1]["fields"][1]
        amount["parameters"] = {**amount["parameters"], "payload": "x"}
    return json.dumps(wrapped, separators=(",", ":"))


@pytest.mark.parametrize(
    "layout",
    ["compact", "non-ascii", "spaced", "payload-first", "payload-parameter", "past-the-sample"],
)
def test_each_event_is_decoded_by_its_own_schema_however_it_is_laid_out(
    spark: SparkSession,
    client: TableauClient,
    server: FakeTableauServer,
    monkeypatch: pytest.MonkeyPatch,
    layout: str,
) -> None:
    """A table whose ``created`` went from ``TIMESTAMP(6)`` to ``TIMESTAMP(3)`` mid-stream:
    its events carry two schemas (microseconds, then milliseconds), and each value lands by
    its own event's. Schemas found in the first events are worked out once and matched by
    their text; an event laid out otherwise, or whose schema comes after the events looked
    at (``past-the-sample``), has its schema parsed; the values are the same either way."""
    from tabhyper_update.streaming import debezium_schemas

    if layout == "past-the-sample":
        monkeypatch.setattr(debezium_schemas, "SAMPLE_EVENTS", 2)
    micros, millis = columns_for("micros"), columns_for("millis")
    lines = [event(micros, "c", None, values(i), 10 + i) for i in range(3)]
    lines += [event(millis, "c", None, values(i), 20 + i) for i in range(3, 6)]
    lines = [line if layout == "past-the-sample" else _laid_out(line, layout) for line in lines]
    debezium = Debezium(ROW, key="id")
    events = spark.createDataFrame([(line,) for line in lines], "value string")
    found = {4: ("'micros'", "CAST(NULL AS INT)")}
    matched = debezium_schemas.known_schemas(events, events["value"], found)
    # Matched ahead only where the text is as the converter writes it.
    assert (matched is not None) == (layout in ("compact", "non-ascii", "past-the-sample"))
    got = apply_events(spark, client, server, lines, debezium)
    want = [expected(i, "micros") for i in range(3)] + [expected(i, "millis") for i in range(3, 6)]
    assert normal(landed(got)) == normal(want)


def test_events_with_nothing_to_decode_are_read_from_their_payload_on(
    spark: SparkSession, client: TableauClient, server: FakeTableauServer
) -> None:
    """Columns declared as they arrive (nothing to decode), schemas on, text outside ASCII
    in the schema and in the values: the schema found in the first events is cut off each
    event's text by its length in bytes, and every value lands as sent."""
    from tabhyper_update.streaming import debezium_schemas

    columns = [Column("id", "int64"), Column("nom", "string"), Column("prix", "double")]
    rows: list[dict[str, Any]] = [
        {"id": i, "nom": f"crème brûlée n°{i} — ☕", "prix": 2.5 * i} for i in range(5)
    ]
    lines = [_laid_out(event(columns, "c", None, row, 30 + row["id"]), "non-ascii") for row in rows]
    events = spark.createDataFrame([(line,) for line in lines], "value string")
    assert debezium_schemas.known_schemas(events, events["value"], {}) is not None
    debezium = Debezium("id BIGINT, nom STRING, prix DOUBLE", key="id")
    with build_payload(debezium.changes(events), debezium.change_set) as payload:
        got = sorted(read_table(payload.parts[0].path, "upserts"))
    assert got == [(r["id"], r["nom"], r["prix"]) for r in rows]


#: A wide table's text columns (what most tables have many of), two of them times of day.
TEXT_COLUMNS = [f"note{k}" for k in range(10)]
WIDE_ROW = (
    "id BIGINT, amount DECIMAL(10, 2), "
    + ", ".join(f"{name} STRING" for name in TEXT_COLUMNS)
    + ", opens STRING, closes STRING"
)


def wide_columns(opens: str) -> list[Column]:
    """A PostgreSQL table with a ``NUMERIC(10, 2)``, ten text columns, a ``TIME(6)``
    (``MicroTime``, or ``NanoTime`` under ``time.precision.mode=nanoseconds``: ``opens``)
    and a ``TIME(0)`` (``Time``, milliseconds), as "Data type mappings" of the PostgreSQL
    connector shows them."""
    semantic = {"micros": "MicroTime", "nanos": "NanoTime"}[opens]
    return [
        Column("id", "int64"),
        Column(
            "amount",
            "bytes",
            f"{CONNECT}.Decimal",
            {"scale": "2", "connect.decimal.precision": "10"},
            lambda v: decimal_bytes(v, 2),
        ),
        *[Column(name, "string") for name in TEXT_COLUMNS],
        Column("opens", "int64", f"{DBZ}.time.{semantic}", encode=lambda v: of_day(v, opens)),
        Column("closes", "int32", f"{DBZ}.time.Time", encode=lambda v: of_day(v, "millis")),
    ]


def wide_values(i: int) -> dict[str, Any]:
    # Text that reads as a number stays text: only a column whose encoding is a time is read.
    notes = {
        name: [f"{k}:{i}", "123456", "", None][(i + k) % 4] for k, name in enumerate(TEXT_COLUMNS)
    }
    return {
        "id": i,
        "amount": AMOUNTS[i % 4],
        **notes,
        "opens": TIMES[i % 4],
        "closes": TIMES[(i + 1) % 4].replace(microsecond=0),
    }


@pytest.mark.every_spark  # one expression over the text columns: Spark's own per version
@pytest.mark.parametrize("layout", ["ahead", "parsed", "changed-past-the-sample", "schemas-off"])
def test_times_of_day_among_a_wide_tables_text_columns_land_as_text(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """Ten text columns and two times of day: each time lands as ``HH:MM:SS.ffffff`` and
    every other text as sent (a text that reads as a number too), whether the events'
    schema was worked out ahead (``ahead``), parsed with each event (``parsed``: laid out
    otherwise than the converter writes it), changed past the events looked at (``opens``
    from micro- to nanoseconds), or absent (``units=`` names the times)."""
    from tabhyper_update.streaming import debezium_schemas

    if layout == "changed-past-the-sample":
        monkeypatch.setattr(debezium_schemas, "SAMPLE_EVENTS", 2)
    lines = []
    for i in range(6):
        opens = "nanos" if layout == "changed-past-the-sample" and i >= 3 else "micros"
        line = event(
            wide_columns(opens), "c", None, wide_values(i), 10 + i, schemas=layout != "schemas-off"
        )
        lines.append(json.dumps(json.loads(line)) if layout == "parsed" else line)
    settings: dict[str, Any] = (
        {"units": {"opens": "micros", "closes": "millis"}} if layout == "schemas-off" else {}
    )
    debezium = Debezium(WIDE_ROW, key="id", **settings)
    events = spark.createDataFrame([(line,) for line in lines], "value string")
    with build_payload(debezium.changes(events), debezium.change_set) as payload:
        got = sorted(read_table(payload.parts[0].path, "upserts", order_by="1"))
    want = []
    for i in range(6):
        v = wide_values(i)
        want.append(
            (
                i,
                v["amount"],
                *[v[name] for name in TEXT_COLUMNS],
                v["opens"].strftime("%H:%M:%S.%f"),
                v["closes"].strftime("%H:%M:%S.%f"),
            )
        )
    assert got == want


@pytest.mark.every_spark
def test_a_time_of_day_that_is_no_whole_number_fails_naming_the_column(
    spark: SparkSession,
) -> None:
    """A value its schema calls a ``MicroTime`` that is no whole number fails the build,
    naming the table, the column, its encoding and the value (never lands as text made of
    nothing)."""
    columns = wide_columns("micros")
    bad = json.loads(event(columns, "c", None, wide_values(1), 2))
    bad["payload"]["after"]["opens"] = "soon"
    lines = [event(columns, "c", None, wide_values(0), 1), json.dumps(bad, separators=(",", ":"))]
    events = spark.createDataFrame([(line,) for line in lines], "value string")
    target = Debezium(WIDE_ROW, key="id")
    with pytest.raises(PayloadError) as caught:
        build_payload(target.changes(events), target.change_set)
    said = str(caught.value)
    for words in ("table orders", "column opens", "time-micros", "soon"):
        assert words in said, said

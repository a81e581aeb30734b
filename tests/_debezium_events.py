"""Debezium change events as its connectors write them, built field by field.

Each builder follows what Debezium's documentation shows for its connector (the pages "Debezium
connector for PostgreSQL / MySQL / MariaDB / SQL Server / Oracle / Db2 / MongoDB", sections
"Data change events" and "Data type mappings"; "New Record State Extraction"; "Transaction
metadata"; Kafka Connect's ``JsonConverter`` with ``schemas.enable`` on and off):

- the envelope ``before`` / ``after`` / ``source`` / ``op`` / ``ts_ms`` (``ts_us`` and ``ts_ns``
  since 2.6), each connector's ``source`` block with its own position fields;
- with schemas on, each value wrapped as ``{"schema": …, "payload": …}``, the schema naming
  each field's Connect type, its semantic type (``name``) and parameters (a decimal's
  ``scale`` and ``connect.decimal.precision``);
- the encodings of "Data type mappings": ``Decimal`` as the base64 of the unscaled value's
  big-endian two's-complement bytes (Java's ``BigInteger.toByteArray``), dates as days,
  times and timestamps by ``time.precision.mode``, ``ZonedTimestamp`` as ISO 8601 text in UTC,
  binary by ``binary.handling.mode``.

Nothing here is copied from a connector: the values are computed from the Python values they
stand for, so a test can compare what lands with what was sent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time, timezone
from decimal import Decimal, localcontext
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

#: Each connector's ``source`` block (the fields its documentation lists), for position ``n``.
SOURCES: dict[str, Any] = {
    "postgresql": lambda n, table: {
        "version": "2.7.0.Final",
        "connector": "postgresql",
        "name": "pg",
        "ts_ms": 1_714_554_000_000 + n,
        "snapshot": "false",
        "db": "shop",
        "sequence": json.dumps([str(24_023_000 + n), str(24_023_100 + n)]),
        "schema": "public",
        "table": table,
        "txId": 500 + n,
        "lsn": 24_023_100 + n,
        "xmin": None,
    },
    "mysql": lambda n, table: {
        "version": "2.7.0.Final",
        "connector": "mysql",
        "name": "my",
        "ts_ms": 1_714_554_000_000 + n,
        "snapshot": "false",
        "db": "shop",
        "sequence": None,
        "table": table,
        "server_id": 223344,
        "gtid": None,
        "file": "mysql-bin.000003",
        "pos": 154 + 100 * n,
        "row": 0,
        "thread": 7,
        "query": None,
    },
    "mariadb": lambda n, table: {
        **SOURCES["mysql"](n, table),
        "connector": "mariadb",
        "file": "mariadb-bin.000012",
    },
    "sqlserver": lambda n, table: {
        "version": "2.7.0.Final",
        "connector": "sqlserver",
        "name": "ss",
        "ts_ms": 1_714_554_000_000 + n,
        "snapshot": "false",
        "db": "shop",
        "sequence": None,
        "schema": "dbo",
        "table": table,
        "change_lsn": f"00000027:{0x758 + n:08x}:0003",
        "commit_lsn": f"00000027:{0x758 + n:08x}:0005",
        "event_serial_no": 1,
    },
    "oracle": lambda n, table: {
        "version": "2.7.0.Final",
        "connector": "oracle",
        "name": "ora",
        "ts_ms": 1_714_554_000_000 + n,
        "snapshot": "false",
        "db": "ORCLPDB1",
        "sequence": None,
        "schema": "SHOP",
        "table": table,
        "txId": "02000a0037030000",
        "scn": str(1_513_734 + n),
        "commit_scn": str(1_513_754 + n),
        "lcr_position": None,
        "rs_id": None,
        "ssn": 0,
        "redo_thread": 1,
    },
    "db2": lambda n, table: {
        "version": "2.7.0.Final",
        "connector": "db2",
        "name": "db2",
        "ts_ms": 1_714_554_000_000 + n,
        "snapshot": "false",
        "db": "SHOP",
        "schema": "DB2INST1",
        "table": table,
        "change_lsn": f"00000000:00000000:{0x1F0E90 + n:016x}",
        "commit_lsn": f"00000000:00000000:{0x1F0E90 + n:016x}",
    },
    "mongodb": lambda n, table: {
        "version": "2.7.0.Final",
        "connector": "mongodb",
        "name": "mongo",
        "ts_ms": 1_714_554_000_000 + 1000 * n,
        "snapshot": "false",
        "db": "shop",
        "sequence": None,
        "rs": "rs0",
        "collection": table,
        "ord": 1,
        "lsid": None,
        "txnNumber": None,
    },
}


# -- encodings -------------------------------------------------------------------------------


def decimal_bytes(value: Decimal, scale: int) -> str:
    """Connect's ``Decimal``: base64 of the unscaled value's minimal two's-complement bytes."""
    with localcontext() as exact:
        exact.prec = 80  # Decimal's default 28 digits would round a DECIMAL(38)
        unscaled = int(value.scaleb(scale))
    length = max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def days(value: date) -> int:
    return (value - date(1970, 1, 1)).days


def since_epoch(value: datetime, unit: str) -> int:
    """A wall-clock time counted as if UTC (Debezium's ``Timestamp`` family)."""
    delta = value.replace(tzinfo=timezone.utc) - EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return {"millis": micros // 1000, "micros": micros, "nanos": micros * 1000 + 789}[unit]


def of_day(value: time, unit: str) -> int:
    micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    return {"millis": micros // 1000, "micros": micros, "nanos": micros * 1000}[unit]


def zoned(value: datetime) -> str:
    """``ZonedTimestamp``: ISO 8601 in UTC, as many fraction digits as it has."""
    text = value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0")
    return text.rstrip(".") + "Z"


def binary(value: bytes, mode: str) -> str:
    if mode in ("bytes", "base64"):
        return base64.b64encode(value).decode()
    if mode == "base64-url-safe":
        return base64.urlsafe_b64encode(value).decode()
    return value.hex()


# -- a column and its field schema -------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One column: its name, Connect type, semantic type and parameters, and how a Python
    value becomes its wire value."""

    name: str
    kind: str
    semantic: str | None = None
    parameters: Mapping[str, str] = field(default_factory=dict)
    encode: Any = None

    def wire(self, value: Any) -> Any:
        if value is None or self.encode is None:
            return value
        return self.encode(value)

    def schema(self) -> dict[str, Any]:
        found: dict[str, Any] = {"type": self.kind, "optional": True, "field": self.name}
        if self.semantic:
            found["name"] = self.semantic
            found["version"] = 1
        if self.parameters:
            found["parameters"] = dict(self.parameters)
        return found


def envelope_schema(columns: Sequence[Column], table: str, connector: str) -> dict[str, Any]:
    value = {
        "type": "struct",
        "fields": [c.schema() for c in columns],
        "optional": True,
        "name": f"{connector}.shop.{table}.Value",
    }
    source = {
        "type": "struct",
        "fields": [
            {"type": "string", "optional": False, "field": "connector"},
            {"type": "int64", "optional": False, "field": "ts_ms"},
        ],
        "optional": False,
        "name": f"io.debezium.connector.{connector}.Source",
        "field": "source",
    }
    return {
        "type": "struct",
        "fields": [
            {**value, "field": "before"},
            {**value, "field": "after"},
            source,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
        "optional": False,
        "name": f"{connector}.shop.{table}.Envelope",
        "version": 2,
    }


def event(
    columns: Sequence[Column],
    op: str,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    n: int,
    *,
    connector: str = "postgresql",
    table: str = "orders",
    schemas: bool = True,
) -> str:
    """One change event's Kafka value as the JSON converter writes it."""

    def image(values: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if values is None:
            return None
        return {c.name: c.wire(values.get(c.name)) for c in columns}

    payload = {
        "before": image(before),
        "after": image(after),
        "source": SOURCES[connector](n, table),
        "op": op,
        "ts_ms": 1_714_554_000_500 + n,
        "ts_us": (1_714_554_000_500 + n) * 1000,
        "ts_ns": (1_714_554_000_500 + n) * 1_000_000,
        "transaction": None,
    }
    # Compact, the schema first: as the converter's Jackson writer lays it out.
    if not schemas:
        return json.dumps(payload, separators=(",", ":"))
    wrapped = {"schema": envelope_schema(columns, table, connector), "payload": payload}
    return json.dumps(wrapped, separators=(",", ":"))

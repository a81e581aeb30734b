"""A Debezium column's value as its connector wrote it, decoded into the type the user
declared in ``row_schema``: exactly (a decimal never passes through a float, microseconds
are kept), in Spark SQL that runs on the executors.

Kafka Connect and Debezium write several of a table's types in an encoding of their own,
which the field's schema names (its *semantic type*):

- ``org.apache.kafka.connect.data.Decimal``: base64 of the unscaled two's-complement
  bytes, the ``scale`` in its schema's parameters → ``DECIMAL(p, s)``;
- ``io.debezium.data.VariableScaleDecimal``: ``{"scale": s, "value": base64}`` → ``DECIMAL``;
- ``decimal.handling.mode`` ``string`` / ``double``: ``"12.34"`` / ``12.34`` → ``DECIMAL``;
- Connect's and Debezium's ``Date``: days since 1970-01-01 → ``DATE``;
- Connect's ``Timestamp`` and Debezium's ``Timestamp``, ``MicroTimestamp``,
  ``NanoTimestamp``: milli-, micro-, nanoseconds since 1970 (nanoseconds cut to the
  microsecond: Spark and Hyper keep no finer) → ``TIMESTAMP``;
- ``io.debezium.time.ZonedTimestamp``, ``IsoDate``, ``IsoTimestamp``: ISO 8601 text →
  ``TIMESTAMP`` / ``DATE``;
- Connect's ``Time`` and Debezium's ``Time``, ``MicroTime``, ``NanoTime``: milli-, micro-,
  nanoseconds since midnight → ``STRING`` (``HH:MM:SS.ffffff``); ``ZonedTime``, ``IsoTime``:
  their text;
- ``io.debezium.data.Bits`` and binary columns: base64 (``binary.handling.mode`` bytes or
  base64), base64-url-safe or hex → ``BINARY``;
- ``Year``, ``Json``, ``Uuid``, ``Enum``, ``EnumSet``, ``Xml``: the value itself → ``INT``
  / ``STRING``.

A timestamp without a zone (``Timestamp``, ``MicroTimestamp``, ``NanoTimestamp``,
``IsoTimestamp``) is the column's wall-clock time counted as if it were UTC: declared
``TIMESTAMP`` it lands as that wall-clock time (the SDK stores instants as their UTC time),
declared ``TIMESTAMP_NTZ`` likewise. A time of day lands as ``HH:MM:SS.ffffff`` text (Spark
has no time type before 4.1; declare it ``BIGINT`` to keep the number).

With the JSON converter's schemas on, each value is decoded by the semantic type its event
names (so millis, micros and nanos are told apart per event, and a schema change between
events is followed). Without them, the declared type decides where the wire form says
enough (a date's day count, any text timestamp, a decimal's ``{"scale", "value"}``), and the
connector's settings, given to :class:`~tabhyper_update.streaming.Debezium` once, decide the
rest: ``decimal_handling`` (default ``"precise"``, Debezium's), ``time_precision`` (which
unit a number for a timestamp is in) and ``binary_handling``. A value that cannot be decoded
fails the build with Spark's ``raise_error``, naming the table, the column, the semantic
type and the value, and what to set when a setting would have told.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..values.errors import InvalidArgumentError
from ..values.spark_sql import sql_text

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

__all__ = [
    "BINARY_HANDLING",
    "DECIMAL_HANDLING",
    "SEMANTIC_TYPES",
    "TIME_PRECISION",
    "Encodings",
    "TextColumns",
    "by_name_sql",
    "decoding_steps",
    "mongo_unwrapped_sql",
    "needs_decoding",
    "schema_encoding_sql",
]

DecimalHandling = Literal["precise", "string", "double"]
TimePrecision = Literal[
    "adaptive", "adaptive_time_microseconds", "connect", "microseconds", "nanoseconds", "isostring"
]
BinaryHandling = Literal["bytes", "base64", "base64-url-safe", "hex"]
TimeUnit = Literal["days", "millis", "micros", "nanos"]

DECIMAL_HANDLING: tuple[str, ...] = ("precise", "string", "double")
TIME_PRECISION: tuple[str, ...] = (
    "adaptive",
    "adaptive_time_microseconds",
    "connect",
    "microseconds",
    "nanoseconds",
    "isostring",
)
BINARY_HANDLING: tuple[str, ...] = ("bytes", "base64", "base64-url-safe", "hex")
UNITS: tuple[str, ...] = ("days", "millis", "micros", "nanos")

#: Each semantic type (a field schema's ``name``) → the encoding it writes.
SEMANTIC_TYPES: dict[str, str] = {
    "org.apache.kafka.connect.data.Decimal": "decimal-bytes",
    "io.debezium.data.VariableScaleDecimal": "variable-decimal",
    "org.apache.kafka.connect.data.Date": "days",
    "io.debezium.time.Date": "days",
    "org.apache.kafka.connect.data.Timestamp": "millis",
    "io.debezium.time.Timestamp": "millis",
    "io.debezium.time.MicroTimestamp": "micros",
    "io.debezium.time.NanoTimestamp": "nanos",
    "io.debezium.time.ZonedTimestamp": "iso",
    "io.debezium.time.IsoDate": "iso",
    "io.debezium.time.IsoTimestamp": "iso",
    "org.apache.kafka.connect.data.Time": "time-millis",
    "io.debezium.time.Time": "time-millis",
    "io.debezium.time.MicroTime": "time-micros",
    "io.debezium.time.NanoTime": "time-nanos",
    "io.debezium.time.ZonedTime": "as-is",
    "io.debezium.time.IsoTime": "as-is",
    "io.debezium.data.Bits": "base64",
    "io.debezium.time.Year": "as-is",
    "io.debezium.data.Json": "as-is",
    "io.debezium.data.Uuid": "as-is",
    "io.debezium.data.Enum": "as-is",
    "io.debezium.data.EnumSet": "as-is",
    "io.debezium.data.Xml": "as-is",
}

#: The declared types whose values are parsed as their raw JSON text and decoded.
_DECODED = ("DecimalType", "DateType", "TimestampType", "TimestampNTZType", "BinaryType")
_EPOCH_NTZ = "TIMESTAMP_NTZ '1970-01-01 00:00:00'"
#: 2^48: the base of the 12-hex-digit chunks a decimal's bytes are read in.
_CHUNK = "281474976710656"


@dataclass(frozen=True)
class Encodings:
    """What the connector's settings say of the values' encodings, for events whose own
    schema does not (the JSON converter's ``schemas.enable=false``, or rows already parsed):
    Debezium's ``decimal.handling.mode``, ``time.precision.mode`` and
    ``binary.handling.mode``, and per column the unit of an integer timestamp
    (``units``: ``"days"``, ``"millis"``, ``"micros"`` or ``"nanos"``)."""

    decimal_handling: DecimalHandling = "precise"
    time_precision: TimePrecision | None = None
    binary_handling: BinaryHandling = "bytes"
    units: Mapping[str, TimeUnit] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for value, allowed, name in (
            (self.decimal_handling, DECIMAL_HANDLING, "decimal_handling"),
            (self.binary_handling, BINARY_HANDLING, "binary_handling"),
        ):
            if value not in allowed:
                raise InvalidArgumentError(
                    f"Debezium {name}= is one of {', '.join(map(repr, allowed))} (the "
                    f"connector's {name.replace('_', '.')}.mode), got {value!r}"
                )
        if self.time_precision is not None and self.time_precision not in TIME_PRECISION:
            raise InvalidArgumentError(
                f"Debezium time_precision= is one of {', '.join(map(repr, TIME_PRECISION))} "
                f"(the connector's time.precision.mode), got {self.time_precision!r}"
            )
        for column, unit in self.units.items():
            if unit not in UNITS:
                raise InvalidArgumentError(
                    f"Debezium units[{column!r}] is one of {', '.join(map(repr, UNITS))}, "
                    f"got {unit!r}"
                )

    def integer_timestamp(self, column: str) -> str | None:
        """The unit of an integer for timestamp column ``column``: named for it, or the one
        ``time_precision`` gives every timestamp (``None``: it depends on the column's
        precision, which only the event's schema says)."""
        if column in self.units:
            return self.units[column]
        return {"connect": "millis", "microseconds": "micros", "nanoseconds": "nanos"}.get(
            self.time_precision or ""
        )

    def static(self, column: str, declared: DataType) -> str:
        """The encoding of ``column``'s values when the event does not name it."""
        kind = type(declared).__name__
        if kind == "DecimalType":
            return "decimal-bytes" if self.decimal_handling == "precise" else "text"
        if kind == "BinaryType":
            return {"bytes": "base64", "base64": "base64"}.get(
                self.binary_handling, self.binary_handling
            )
        if kind == "DateType":
            return self.units.get(column, "days")  # a date is days in every mode
        if kind in ("TimestampType", "TimestampNTZType"):
            return self.integer_timestamp(column) or "unknown"
        if kind == "StringType" and column in self.units:
            # A time of day whose unit is named: its text.
            return f"time-{self.units[column]}"
        return "as-is"


def by_name_sql() -> str:
    """Spark SQL: the constant map of each semantic type to its encoding. One lookup in a
    constant map, not a CASE of every name: the code Spark generates for a long CASE, once
    per column, outgrows what the JVM compiles."""
    pairs = (f"{sql_text(name)}, {sql_text(enc)}" for name, enc in SEMANTIC_TYPES.items())
    return "map(" + ", ".join(pairs) + ")"


def needs_decoding(declared: DataType) -> bool:
    """Whether a column of ``declared`` type is parsed as its raw text and decoded."""
    return type(declared).__name__ in _DECODED


def schema_encoding_sql(
    kind: str, name: str, static: str, declared: DataType, settings: Encodings
) -> str:
    """Spark SQL of a value's encoding from its field's schema (``kind``: its Connect type,
    ``name``: its semantic type, both SQL over the event; NULL where the event has none),
    else ``static``."""
    by_name = by_name_sql()
    declared_kind = type(declared).__name__
    # A field the schema names no semantic type for: its Connect type says the rest.
    if declared_kind == "BinaryType":
        # Text: base64, base64-url-safe or hex, which only binary_handling tells apart.
        text_mode = "unknown" if settings.binary_handling == "bytes" else static
        plain = f"CASE WHEN {kind} = 'bytes' THEN 'base64' ELSE {sql_text(text_mode)} END"
    elif declared_kind == "DecimalType":
        plain = "'text'"  # decimal.handling.mode string (a string) or double (a number)
    else:
        plain = sql_text(static)
    return (
        f"CASE WHEN {kind} IS NULL THEN {sql_text(static)} "
        f"ELSE coalesce(try_element_at({by_name}, {name}), {plain}) END"
    )


#: A step of a column's decoding: the name of a column it makes, and its Spark SQL.
Step = tuple[str, str]


def decoding_steps(
    raw: str,
    declared: DataType,
    encoding: str,
    *,
    prefix: str,
    column: str,
    table: str,
    scale: str = "NULL",
    settings: Encodings,
) -> list[Step]:
    """How the column ``raw`` (a column of the value's raw JSON text) becomes ``declared``:
    columns made one after another (each over the ones before it, so that no expression is
    repeated inside another), the last one named ``column``. ``encoding``: Spark SQL of the
    value's encoding (:data:`SEMANTIC_TYPES`' encodings, ``"text"``, ``"as-is"`` or
    ``"unknown"``); ``scale``: SQL of a precise decimal's scale as its schema states it
    (NULL: the declared scale). A value that cannot be decoded fails the query naming
    ``table`` (SQL), ``column``, the encoding and the value. ``prefix`` names the steps'
    columns."""
    kind = type(declared).__name__
    target = declared.simpleString()
    # A literal or a column is read as it is; any other SQL is a step of its own.
    named = re.fullmatch(r"`[^`]+`|'[^'\\]*'", encoding) is not None
    enc = encoding if named else _q(f"{prefix}enc")
    steps = [] if named else [(f"{prefix}enc", encoding)]
    steps += _value_steps(raw, declared, enc, scale, prefix)
    value = _q(f"{prefix}val")
    hint = _hint(kind, column, settings)
    said = (
        f"concat('Debezium: table ', coalesce({table}, '?'), ', column {column}', ' (', "
        f"coalesce({enc}, '?'), '): cannot decode ', "
        f"left({raw}, 120), ' as {target}', {sql_text(hint)})"
    )
    steps.append(
        (
            column,
            f"CASE WHEN {raw} IS NULL THEN CAST(NULL AS {target}) "
            f"WHEN {value} IS NULL THEN CAST(raise_error({said}) AS {target}) "
            f"ELSE {value} END",
        )
    )
    return steps


#: The declared types whose value may be a whole number of some unit (days, millis, ...).
_COUNTED = ("DateType", "TimestampType", "TimestampNTZType")


def _value_steps(raw: str, declared: DataType, enc: str, scale: str, prefix: str) -> list[Step]:
    """The steps making ``{prefix}val``, the value of ``raw`` as ``declared`` (NULL where it
    cannot be decoded), by the encoding in column ``enc``."""
    kind = type(declared).__name__
    number = _q(f"{prefix}int")
    # The value as a whole number (NULL where it is not one), read once.
    counted = [(f"{prefix}int", _integer(raw))] if kind in _COUNTED else []
    if kind == "DecimalType":
        return _decimal(raw, declared, enc, scale, prefix)
    value = {
        "DateType": lambda: _date(raw, number, enc),
        "TimestampType": lambda: _timestamp(raw, number, enc, ntz=False),
        "TimestampNTZType": lambda: _timestamp(raw, number, enc, ntz=True),
        "BinaryType": lambda: _binary(raw, enc),
    }.get(kind, lambda: f"try_cast({raw} AS {declared.simpleString()})")()
    return [*counted, (f"{prefix}val", value)]


def _integer(raw: str) -> str:
    """Spark SQL: ``raw`` as a BIGINT, NULL where it is no whole number. ISO text (a ``-``
    after its year) is never tried: a try_cast that fails costs a thrown exception (measured:
    50 times a cast that holds), and a column of ISO times would pay it on every value. The
    guard is a character, not a pattern (a regular expression per value cost more than the
    cast itself); any other text that is no number fails the build anyway."""
    return f"CASE WHEN substr({raw}, 5, 1) <> '-' THEN try_cast({raw} AS BIGINT) END"


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


#: What to set, by the declared type of a column whose integer or text could not be
#: decoded (``{column}``, ``{decimal_handling}`` and ``{binary_handling}`` filled in).
_TIME_HINT = (
    " (an integer's unit is in the event's schema, which these events lack: pass "
    "Debezium(..., time_precision='connect' | 'microseconds' | 'nanoseconds') or "
    "units={{'{column}': 'millis' | 'micros' | 'nanos'}}; under time.precision.mode="
    "adaptive a TIMESTAMP(0-3) column sends millis, (4-6) micros, (7-9) nanos)"
)
_HINTS = {
    "DecimalType": (
        " (decimal_handling={decimal_handling!r}: Debezium's decimal.handling.mode "
        "precise sends base64 bytes, string or double a number; pass the connector's "
        "setting as Debezium(..., decimal_handling=...), or turn the JSON converter's "
        "schemas on)"
    ),
    "TimestampType": _TIME_HINT,
    "TimestampNTZType": _TIME_HINT,
    "DateType": _TIME_HINT,
    "BinaryType": (
        " (binary_handling={binary_handling!r}: pass the connector's "
        "binary.handling.mode as Debezium(..., binary_handling=...))"
    ),
}


def _hint(kind: str, column: str, settings: Encodings) -> str:
    """What to set for a column of ``kind`` whose value could not be decoded (:data:`_HINTS`;
    nothing for another kind)."""
    return _HINTS.get(kind, "").format(
        column=column,
        decimal_handling=settings.decimal_handling,
        binary_handling=settings.binary_handling,
    )


def _decimal(raw: str, declared: DataType, enc: str, scale: str, prefix: str) -> list[Step]:
    """A decimal in three passes over the row (few, so that few copies of it are made): its
    bytes as hex digits and its scale, its unscaled digits, its value."""
    precision, declared_scale = declared.precision, declared.scale  # type: ignore[attr-defined]
    target = f"DECIMAL({precision}, {declared_scale})"
    value_scale, hexed, unscaled = _q(f"{prefix}vs"), _q(f"{prefix}hex"), _q(f"{prefix}u")
    b64 = (
        f"(CASE WHEN {enc} = 'variable-decimal' THEN get_json_object({raw}, '$.value') "
        f"WHEN {enc} = 'decimal-bytes' THEN {raw} END)"
    )
    negative = f"(substr({hexed}, 1, 1) >= '8')"
    # Over 8 bytes: the bits as 36 hex digits, read in three chunks. A negative number is
    # -(~bits + 1): its digits inverted read as a non-negative one.
    magnitude = (
        f"lpad(CASE WHEN {negative} THEN translate({hexed}, '0123456789ABCDEF', "
        f"'FEDCBA9876543210') ELSE {hexed} END, 36, '0')"
    )
    chunks = [
        f"CAST(conv(substr({magnitude}, {i}, 12), 16, 10) AS DECIMAL(38, 0))" for i in (1, 13, 25)
    ]
    whole = (
        f"try_add(try_multiply(try_add(try_multiply({chunks[0]}, {_CHUNK}), {chunks[1]}), "
        f"{_CHUNK}), {chunks[2]})"
    )
    # decimal.handling.mode string or double: the number's own text, refused when it has
    # more decimal places than the column keeps.
    places = f"length(regexp_extract({raw}, '\\\\.([0-9]*?)0*$', 1))"
    as_text = (
        f"CASE WHEN {raw} RLIKE '^[-+]?[0-9]*\\\\.?[0-9]+$' AND {places} > {declared_scale} "
        f"THEN NULL ELSE try_cast({raw} AS {target}) END"
    )
    return [
        (
            f"{prefix}hex",
            f"hex(try_to_binary({b64}, 'base64'))",
        ),
        (
            f"{prefix}vs",
            f"CASE WHEN {enc} = 'variable-decimal' THEN "
            f"CAST(get_json_object({raw}, '$.scale') AS INT) "
            f"ELSE coalesce({scale}, {declared_scale}) END",
        ),
        (
            # Up to 8 bytes (a precision up to 18, the usual case): one 64-bit conversion
            # gives the unscaled digits, a negative number's with its sign extended (no pad
            # for a positive one: padding cost more than the conversion).
            f"{prefix}u",
            f"CASE WHEN length({hexed}) <= 16 AND NOT {negative} THEN conv({hexed}, 16, 10) "
            f"WHEN length({hexed}) <= 16 THEN conv(lpad({hexed}, 16, 'F'), 16, -10) "
            f"WHEN length({hexed}) <= 36 THEN CAST(try_multiply(try_add({whole}, "
            f"CASE WHEN {negative} THEN 1 ELSE 0 END), CASE WHEN {negative} THEN -1 ELSE 1 END) "
            "AS STRING) END",
        ),
        (
            f"{prefix}val",
            f"CASE WHEN {enc} IN ('text', 'as-is') THEN {as_text} "
            f"WHEN {unscaled} IS NULL THEN NULL "
            f"WHEN {value_scale} > {declared_scale} AND pmod(CAST({unscaled} AS DECIMAL(38, 0)), "
            f"CAST(concat('1E', {value_scale} - {declared_scale}) AS DECIMAL(38, 0))) <> 0 "
            f"THEN NULL "
            f"ELSE try_cast(concat({unscaled}, 'E-', {value_scale}) AS {target}) "
            "END",
        ),
    ]


def _floor_div(number: str, divisor: int) -> str:
    """Spark SQL: ``number`` (a BIGINT) divided by ``divisor``, rounded toward the past, in
    whole numbers (never through a double, which rounds numbers past 2^53)."""
    return (
        f"({number} div {divisor} - CASE WHEN {number} < 0 AND {number} % {divisor} <> 0 "
        "THEN 1 ELSE 0 END)"
    )


def _micros(number: str, encoding: str) -> str:
    """Microseconds since 1970 of an integer timestamp ``number`` in ``encoding``'s unit."""
    return (
        f"CASE {encoding} WHEN 'millis' THEN try_multiply({number}, 1000) "
        f"WHEN 'micros' THEN {number} "
        # Nanoseconds cut to the microsecond (Spark and Hyper keep no finer), toward the past.
        f"WHEN 'nanos' THEN {_floor_div(number, 1000)} "
        f"WHEN 'days' THEN try_multiply({number}, 86400000000) END"
    )


def _date(raw: str, number: str, encoding: str) -> str:
    micros = _micros(number, encoding)
    return (
        f"CASE WHEN {number} IS NOT NULL AND {encoding} IN ('days', 'unknown', 'as-is') "
        f"THEN date_from_unix_date(try_cast({number} AS INT)) "
        f"WHEN {number} IS NOT NULL THEN "
        f"date_from_unix_date(try_cast({_floor_div(f'({micros})', 86400000000)} AS INT)) "
        # Text: an ISO date, or the date of an ISO timestamp.
        f"WHEN substr({raw}, 5, 1) = '-' THEN try_cast(left({raw}, 10) AS DATE) END"
    )


def _timestamp(raw: str, number: str, encoding: str, *, ntz: bool) -> str:
    micros = _micros(number, encoding)
    # Text: with an offset it is an instant; without one, its wall-clock time as if UTC.
    zoned = f"{raw} RLIKE '(Z|[+-][0-9]{{2}}(:?[0-9]{{2}})?)$'"
    as_utc = f"CASE WHEN {zoned} THEN {raw} ELSE concat({raw}, 'Z') END"
    if ntz:
        from_micros = f"timestampadd(MICROSECOND, {micros}, {_EPOCH_NTZ})"
        # An instant: its UTC wall-clock time (whatever the session's time zone).
        from_text = (
            f"CASE WHEN {zoned} THEN timestampadd(MICROSECOND, "
            f"unix_micros(try_cast({raw} AS TIMESTAMP)), {_EPOCH_NTZ}) "
            f"ELSE try_cast({raw} AS TIMESTAMP_NTZ) END"
        )
    else:
        from_micros = f"timestamp_micros({micros})"
        from_text = f"try_cast({as_utc} AS TIMESTAMP)"
    return (
        f"CASE WHEN {number} IS NOT NULL THEN {from_micros} "
        f"WHEN substr({raw}, 5, 1) = '-' THEN {from_text} END"
    )


def _binary(raw: str, encoding: str) -> str:
    """Spark SQL: the bytes of ``raw`` in a binary.handling.mode ``encoding`` (NULL where
    they are not in it). Base64 is read by ``try_to_binary``: ``unbase64`` throws on text
    of a length no base64 has ("a", "AQ="), and a pattern tried first cost more than the
    decoding (a decimal's bytes: 0.65-0.9 s more per 500,000 values)."""
    url_safe = f"instr({raw}, '+') = 0 AND instr({raw}, '/') = 0"
    return (
        f"CASE {encoding} "
        f"WHEN 'base64' THEN try_to_binary({raw}, 'base64') "
        f"WHEN 'base64-url-safe' THEN CASE WHEN {url_safe} THEN "
        f"try_to_binary(translate({raw}, '-_', '+/'), 'base64') END "
        f"WHEN 'hex' THEN unhex({raw}) END"
    )


#: The encodings of a time of day as a number.
TIMES = ("time-millis", "time-micros", "time-nanos")


@dataclass(frozen=True)
class TextColumns:
    """The text columns of a row (``STRING`` as declared), where a value may be a time of
    day sent as a number (a ``Time``, ``MicroTime`` or ``NanoTime`` by the event's schema,
    or by ``units=``): such a value lands as ``HH:MM:SS.ffffff`` text (hours past 24 kept,
    as MySQL's ``TIME`` has them), any other as it is.

    An event's text columns are decoded together, by one expression (a ``transform`` over
    their values) that runs only for an event whose encodings (its *clock*: each text
    column's encoding, in order; NULL where none is a time) name a time. A table's many
    text columns then cost next to nothing where no time arrives: decoded column by column,
    each one's code, present whether it runs or not, made the fused method of a build of a
    wide table several times larger, and the build up to twice as slow (measured:
    ``benchmarks/debezium_decoding.py --text-columns``). ``statics``: each column's
    encoding where the event names none (``as-is``, or the time ``units=`` gives it)."""

    names: tuple[str, ...]
    statics: tuple[str, ...]

    @property
    def static_times(self) -> bool:
        """Whether ``units=`` makes any of these columns a time of day."""
        return any(e in TIMES for e in self.statics)

    def static_clock(self) -> str:
        """Spark SQL: the clock of an event that names no encoding (NULL: no time)."""
        return _array(self.statics) if self.static_times else "CAST(NULL AS ARRAY<STRING>)"

    def decoded_sql(self, values: str, clock: str, table: str, target: str) -> str:
        """Spark SQL: the text columns' values (``values``: an array of them, in order)
        decoded by ``clock`` (an array of their encodings, or NULL), as an array; a time
        that is no whole number fails the query naming ``table``, the column, its encoding
        and the value. ``target``: the type named in that error."""
        number = "try_cast(x AS BIGINT)"
        enc = f"get({clock}, i)"
        micros = (
            f"CASE {enc} WHEN 'time-millis' THEN try_multiply({number}, 1000) "
            f"WHEN 'time-micros' THEN {number} "
            f"WHEN 'time-nanos' THEN {_floor_div(number, 1000)} END"
        )
        timed = f"transform({values}, (x, i) -> named_struct('x', x, 'e', {enc}, 'us', {micros}))"
        said = (
            f"concat('Debezium: table ', coalesce({table}, '?'), ', column ', "
            f"get({_array(self.names)}, i), ' (', t.e, '): cannot decode ', left(t.x, 120), "
            f"' as {target}')"
        )
        text = (
            "format_string('%02d:%02d:%02d.%06d', CAST(t.us div 3600000000 AS INT), "
            "CAST(t.us div 60000000 % 60 AS INT), CAST(t.us div 1000000 % 60 AS INT), "
            "CAST(t.us % 1000000 AS INT))"
        )
        return (
            f"transform({timed}, (t, i) -> CASE WHEN t.x IS NULL OR NOT coalesce(t.e IN "
            f"{_sql_list(TIMES)}, false) THEN t.x WHEN t.us IS NULL THEN "
            f"CAST(raise_error({said}) AS STRING) ELSE {text} END)"
        )


def _array(values: Sequence[str]) -> str:
    return "array(" + ", ".join(map(sql_text, values)) + ")"


def _sql_list(values: Sequence[str]) -> str:
    return "(" + ", ".join(map(sql_text, values)) + ")"


#: The wrappers MongoDB's extended JSON puts around a value.
_EXTENDED = ("$oid", "$numberLong", "$numberInt", "$numberDouble", "$numberDecimal", "$date")


def mongo_unwrapped_sql(text: str) -> str:
    """Spark SQL: a value of a MongoDB document (extended JSON text) without one wrapper
    (``{"$oid": "…"}`` → its hex, ``{"$numberLong": "…"}`` → the number, ``{"$date": …}``
    → its ISO text, or its ``{"$numberLong": …}`` milliseconds)."""

    found = ", ".join(f"get_json_object({text}, \"$['{key}']\")" for key in _EXTENDED)
    return f"CASE WHEN {text} LIKE '{{\"$%' THEN coalesce({found}) ELSE {text} END"

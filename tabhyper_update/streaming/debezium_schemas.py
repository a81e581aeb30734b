"""What an event's own schema (the JSON converter's schema wrapper) says about how each
column is encoded, worked out once per distinct schema rather than once per event.

With ``schemas.enable`` on, every Kafka value is ``{"schema": …, "payload": …}``, and the
schema (every field's Connect type, semantic name and parameters, for both images, the
source block's fields) is usually several times the size of the payload: parsing it into
arrays for every event cost more than all the rest of the decoding, and even skipping it
token by token cost more than reading the payload. A topic's events share one schema per
table version, so :func:`known_schemas` reads the text of the first events once, ahead of
the build, and works out each decoded column's encoding for the schemas found there. An
event is then matched to its schema by the text it starts with, and only its payload is
parsed (the schema cut off by its length in bytes); an event whose schema is not among
them (or whose text is not laid out as the converter writes it: schema first, no spaces)
is parsed whole, its schema with it, as before. Either way, each event's encodings are
those its own schema names.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..values.spark_sql import sql_name, sql_text
from .debezium_values import TIMES, Encodings, TextColumns, by_name_sql, schema_encoding_sql

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructField, StructType

__all__ = [
    "SAMPLE_EVENTS",
    "clock_sql",
    "encodings_named",
    "known_schemas",
    "schema_encoding",
    "schema_info_type",
]

#: How many of the first events the schemas are looked for in.
SAMPLE_EVENTS = 200
#: At most this many distinct schemas (the most frequent in the sample) are matched by their
#: text, and at most this many characters of schema text in all.
MOST_SCHEMAS = 16
MOST_SCHEMA_TEXT = 1 << 20
#: What follows the schema in the converter's output: the payload's key.
_PAYLOAD_KEY = ',"payload":'

#: Spark SQL over ``__schema`` (the schema wrapper's ``schema``): the ``after`` image's field
#: schemas, the ``before`` image's where there is no ``after``; NULL for a row
#: ExtractNewRecordState flattened (the schema's own fields are its columns). Safe under ANSI
#: mode: a missing field is NULL.
_IMAGE = (
    "coalesce(get(`__schema`.fields, array_position(`__schema`.fields.field, 'after') - 1)"
    ".fields, get(`__schema`.fields, array_position(`__schema`.fields.field, 'before') - 1)"
    ".fields)"
)


def schema_info_type() -> StructType:
    """The part of a schema wrapper's ``schema`` that says how each column is encoded (only
    what is read: a field's parameters other than ``scale`` are skipped, not parsed)."""
    from pyspark.sql.types import ArrayType, StringType, StructType

    column = (
        StructType()
        .add("field", StringType())
        .add("type", StringType())
        .add("name", StringType())
        .add("parameters", StructType().add("scale", StringType()))
    )
    # An envelope's field (an image: its columns in ``fields``), or, in a flattened row's
    # schema, a column itself.
    image = StructType(list(column.fields)).add("fields", ArrayType(column))
    return StructType().add("fields", ArrayType(image))


def schema_encoding(column: StructField, static: str, settings: Encodings) -> tuple[str, str]:
    """Spark SQL of ``column``'s encoding and of the decimal scale the event's schema
    wrapper names (``static`` where it names none), over the image's field schemas
    (``__mimg``) and the schema's own (``__mtop``: a flattened row's).

    The field schema is found by position: no lambda, no map per row."""
    name = column.name
    at_image = _field_index("`__mimg`", name)
    at_top = f"CASE WHEN `__mimg` IS NULL THEN {_field_index('`__mtop`', name)} END"

    def info(part: str) -> str:
        return f"coalesce(get(`__mimg`, {at_image}){part}, get(`__mtop`, {at_top}){part})"

    encoding = schema_encoding_sql(info(".type"), info(".name"), static, column.dataType, settings)
    return encoding, f"CAST({info('.parameters.scale')} AS INT)"


def clock_sql(text: TextColumns) -> str:
    """Spark SQL over the image's field schemas (``__mimg``, ``__mtop``, as for
    :func:`schema_encoding`): the encodings of ``text``'s columns the event's schema names
    (each column's static one where it names none), NULL where none of them is a time of
    day. One expression for every text column, evaluated only for an event whose schema
    was not worked out ahead."""
    names = "array(" + ", ".join(map(sql_text, text.names)) + ")"
    statics = "array(" + ", ".join(map(sql_text, text.statics)) + ")"

    def info(part: str) -> str:
        at_image = "array_position(`__mimg`.field, c) - 1"
        at_top = "CASE WHEN `__mimg` IS NULL THEN array_position(`__mtop`.field, c) - 1 END"
        return f"coalesce(get(`__mimg`, {at_image}){part}, get(`__mtop`, {at_top}){part})"

    named = (
        f"transform({names}, (c, i) -> coalesce(try_element_at({by_name_sql()}, "
        f"{info('.name')}), get({statics}, i)))"
    )
    times = "array(" + ", ".join(map(sql_text, TIMES)) + ")"
    return (
        f"CASE WHEN `__mimg` IS NULL AND `__mtop` IS NULL THEN {text.static_clock()} "
        f"WHEN arrays_overlap({named}, {times}) THEN {named} END"
    )


def encodings_named(
    kept: DataFrame, found: Mapping[int, tuple[str, str]], clock: str | None = None
) -> DataFrame:
    """``kept`` with each decoded column's encoding and scale as the event's schema names
    them (``found``: column index → their SQL) as ``__enc<i>`` and ``__sc<i>``, in place of
    the schema wrapper ``__schema``: worked out once per event, before the event becomes one
    row per image, so that no row carries the whole schema through the decoding's steps.
    With ``clock`` (:func:`clock_sql`), the text columns' encodings too, as ``__clock``.

    Where ``kept`` has ``__known`` (:func:`known_schemas`: the encodings of the event's
    schema, worked out ahead), they are taken from it, and ``__schema`` is read only for an
    event without them."""
    from pyspark.sql import functions as F

    known = "__known" in kept.columns
    ahead: list[Column] = []
    if known:
        # The known encodings read apart in the same step as the schema's fields: a struct
        # carried through a step and read once in the next keeps Spark from putting that next
        # step's code in a method of its own, and the loop's method then outgrows the JIT.
        parts = [f"{part}{i}" for i in found for part in ("enc", "sc")]
        parts += ["clock"] if clock is not None else []
        ahead = [F.expr("`__known` IS NOT NULL AS `__kahead`")] + [
            F.expr(f"`__known`.{sql_name(part)} AS {sql_name('__k' + part)}") for part in parts
        ]
    fields = kept.select(
        "*",
        F.expr(_IMAGE).alias("__mimg"),
        F.expr("`__schema`.fields").alias("__mtop"),
        *ahead,
    )

    def named(name: str, sql: str) -> Column:
        # As SQL: each call into the JVM costs a batch's planning (a stream's every batch).
        if not known:
            return F.expr(f"({sql}) AS {sql_name(name)}")
        ahead = sql_name(f"__k{name.removeprefix('__')}")
        return F.expr(f"CASE WHEN `__kahead` THEN {ahead} ELSE ({sql}) END AS {sql_name(name)}")

    return fields.select(
        *[F.col(c) for c in kept.columns if c not in ("__schema", "__known")],
        *[
            named(f"__{part}{i}", sql)
            for i, pair in found.items()
            for part, sql in zip(("enc", "sc"), pair, strict=True)
        ],
        *([named("__clock", clock)] if clock is not None else []),
    )


def known_schemas(
    events: DataFrame,
    value: Column,
    found: Mapping[int, tuple[str, str]],
    clock: str | None = None,
) -> Column | None:
    """For an event whose schema is one of those the first :data:`SAMPLE_EVENTS` of
    ``events`` carry, a struct of where its payload starts (``skip``: the 1-based byte
    position of its ``"payload":`` key) and its decoded columns' encodings and scales
    (``found``'s, as ``enc<i>`` and ``sc<i>``), with ``clock`` its text columns' encodings
    (:func:`clock_sql`, as ``clock``); NULL for any other event. ``None`` where no
    schema was found (schemas off, a stream). ``value``: each event's JSON text.

    Runs one small Spark job (the first events' schema texts, with the encodings each
    names). A schema is matched by the text it is written as, exactly: an event whose text
    starts with it and the payload's key. The text before an event's first payload key is
    taken as a schema only where it closes as a JSON object holding a ``schema`` object: a
    key so named inside the schema (a parameter) leaves its objects open, so such a text is
    never taken, and a JSON string cannot hold the key unescaped."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    if events.isStreaming:
        return None
    # One small job: the first events' schema texts, each with the encodings it names
    # (worked out by the same SQL as an event's own; a text that is no schema parses as
    # nothing and is not taken).
    wrapper = StructType().add("schema", schema_info_type())
    texts = events.limit(SAMPLE_EVENTS).select(
        F.substring_index(value, _PAYLOAD_KEY, 1).alias("__stext")
    )
    closed = F.concat(F.col("__stext"), F.lit("}"))
    schemas = texts.select(
        "__stext", F.from_json(closed, wrapper, {"mode": "PERMISSIVE"})["schema"].alias("__schema")
    )
    rows = encodings_named(schemas, found, clock).collect()
    sampled = {row["__stext"]: row for row in rows}
    # A CASE of constant structs, not an array indexed by a CASE: under ANSI mode Spark 4
    # failed an event matching none (its NULL index) as out of bounds (-1).
    found_for: Column | None = None
    for schema_text in _schema_texts([row["__stext"] for row in rows]):
        skip = len(schema_text.encode("utf-8")) + 2  # past the schema and the comma
        row = sampled[schema_text]
        # One SQL expression: built of columns, each constant would be a few calls into
        # the JVM, each of them costing a batch's planning (a stream's every batch).
        fields = [("skip", str(skip))] + [
            (f"{part}{i}", _constant(row[f"__{part}{i}"], kind))
            for i in found
            for part, kind in (("enc", "STRING"), ("sc", "INT"))
        ]
        fields += [("clock", _constant_clock(row["__clock"]))] if clock is not None else []
        these = F.expr("named_struct(" + ", ".join(f"'{n}', {v}" for n, v in fields) + ")")
        starts = value.startswith(schema_text + _PAYLOAD_KEY)
        found_for = F.when(starts, these) if found_for is None else found_for.when(starts, these)
    return found_for


def _constant_clock(times: Sequence[str] | None) -> str:
    """Spark SQL: the text columns' encodings a schema found ahead names, as a constant (or
    NULL)."""
    if not times:
        return "CAST(NULL AS ARRAY<STRING>)"
    return "array(" + ", ".join(_constant(t, "STRING") for t in times) + ")"


def _constant(value: object, kind: str) -> str:
    """Spark SQL: ``value`` (as the sample's row gives it: text, a whole number or ``None``)
    as a constant of ``kind``."""
    if value is None:
        return f"CAST(NULL AS {kind})"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"CAST({value} AS {kind})"
    return f"CAST({sql_text(str(value))} AS {kind})"


def _schema_texts(texts: Sequence[str | None]) -> list[str]:
    """The schema texts among ``texts`` (each event's text before its first payload key),
    the most frequent first, at most :data:`MOST_SCHEMAS` of them and
    :data:`MOST_SCHEMA_TEXT` characters in all."""
    chosen: list[str] = []
    size = 0
    for text, _ in Counter(t for t in texts if t).most_common():
        if len(chosen) == MOST_SCHEMAS:
            break
        if _is_schema_text(text) and size + len(text) <= MOST_SCHEMA_TEXT:
            chosen.append(text)
            size += len(text)
    return chosen


def _is_schema_text(text: str) -> bool:
    """Whether ``text`` followed by ``}`` is a JSON object holding a ``schema`` object (the
    text of a schema wrapper up to its payload's key)."""
    try:
        parsed = json.loads(text + "}")
    except ValueError:
        return False
    return isinstance(parsed, dict) and isinstance(parsed.get("schema"), dict)


def _field_index(fields: str, name: str) -> str:
    """Spark SQL: the 0-based index of field ``name`` in the array of field schemas
    ``fields`` (-1 where it is missing: ``get`` gives NULL there)."""
    return f"array_position({fields}.field, {sql_text(name)}) - 1"

"""Debezium change events → change sets: every op, tombstones, key changes, duplicates,
truncates, the schema wrapper on and off, text, bytes and parsed structs; then a streaming
query of Debezium JSON files through the sink."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import PayloadError, PersonalAccessToken, TableauClient, build_payload
from tabhyper_update.streaming import Debezium, TableauSink
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table
from tabhyper_update.values.errors import InvalidArgumentError

from ._streaming import PAT, run_query, write_batch

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ROW = "id BIGINT, name STRING, qty INT"
ORDERS = Debezium(ROW, key="id")


def event(
    op: str,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    lsn: int | None,
    *,
    wrapped: bool = False,
    table: str = "orders",
    ts_ms: int | None = None,
) -> str:
    envelope = {
        "before": before,
        "after": after,
        "op": op,
        "ts_ms": ts_ms if ts_ms is not None else 1_700_000_000_000 + (lsn or 0),
        "source": {"lsn": lsn, "table": table, "db": "shop", "snapshot": "false", "txId": 7},
    }
    if not wrapped:
        return json.dumps(envelope)
    schema = {"type": "struct", "name": "shop.public.orders.Envelope", "fields": []}
    return json.dumps({"schema": schema, "payload": envelope})


def row(i: int, name: str | None, qty: int | None) -> dict[str, Any]:
    return {"id": i, "name": name, "qty": qty}


#: A feed of every op. Expected last state per key (applied to an empty table):
#: 1 updated twice → ('a3', 3); 2 created then deleted → gone; 3 snapshot read → kept;
#: 4 → key changed to 40 (delete + tombstone + create); 5 deleted with only its key.
FEED = [
    ("r", None, row(3, "c", 30), 5),
    ("r", None, row(5, "e", 50), 6),
    ("c", None, row(1, "a", 1), 10),
    ("c", None, row(2, "b", 2), 11),
    ("u", row(1, "a", 1), row(1, "a2", 2), 12),
    ("d", row(2, "b", 2), None, 13),
    ("u", row(1, "a2", 2), row(1, "a3", 3), 14),
    ("c", None, row(4, "d", 4), 15),
    ("d", {"id": 4, "name": None, "qty": None}, None, 16),  # key change: old key goes
    ("c", None, row(40, "d", 4), 16),  # ... and the new key comes, same position
    ("d", {"id": 5, "name": None, "qty": None}, None, 17),  # a delete's before: key only
]


def feed_lines(*, wrapped: bool) -> list[str | None]:
    lines: list[str | None] = []
    for op, before, after, lsn in FEED:
        lines.append(event(op, before, after, lsn, wrapped=wrapped))
        if op == "d":
            lines.append(None)  # the tombstone that follows a delete
    return lines


def tables_of(df: DataFrame, debezium: Debezium = ORDERS) -> dict[str, list[tuple[Any, ...]]]:
    with build_payload(debezium.changes(df), debezium.change_set) as payload:
        out: dict[str, list[tuple[Any, ...]]] = {}
        for part in payload.parts:
            for name in part.tables:
                out[name] = sorted(read_table(part.path, name))
        return out


EXPECTED = {
    "upserts": [(1, "a3", 3), (3, "c", 30), (40, "d", 4)],
    "deletes": [(2,), (4,), (5,)],
}


@pytest.mark.parametrize(
    # On every Spark: the schema wrapper's path (its field schemas read by position).
    "wrapped",
    [False, pytest.param(True, marks=pytest.mark.every_spark)],
    ids=["plain", "schema-wrapper"],
)
@pytest.mark.parametrize("as_bytes", [False, True], ids=["text", "bytes"])
def test_every_op_tombstones_and_a_key_change(
    spark: SparkSession, wrapped: bool, as_bytes: bool
) -> None:
    lines = feed_lines(wrapped=wrapped)
    if as_bytes:
        df = spark.createDataFrame(
            [(None if v is None else bytearray(v.encode()),) for v in lines], "value binary"
        )
    else:
        df = spark.createDataFrame([(v,) for v in lines], "value string")
    assert tables_of(df) == EXPECTED


def test_wrapped_and_plain_events_mix(spark: SparkSession) -> None:
    plain, wrapped = feed_lines(wrapped=False), feed_lines(wrapped=True)
    mixed = [w if i % 2 else p for i, (p, w) in enumerate(zip(plain, wrapped, strict=True))]
    df = spark.createDataFrame([(v,) for v in mixed], "value string")
    assert tables_of(df) == EXPECTED


@pytest.mark.every_spark
def test_parsed_structs(spark: SparkSession) -> None:
    fields = "STRUCT<id: BIGINT, name: STRING, qty: INT>"
    envelope = (
        f"before {fields}, after {fields}, op STRING, ts_ms BIGINT, "
        "source STRUCT<lsn: BIGINT, table: STRING>"
    )
    events = [json.loads(e) for e in feed_lines(wrapped=False) if e is not None]
    parsed = spark.createDataFrame(
        [
            (
                e["before"],
                e["after"],
                e["op"],
                e["ts_ms"],
                {"lsn": e["source"]["lsn"], "table": "orders"},
            )
            for e in events
        ],
        envelope,
    )
    assert tables_of(parsed) == EXPECTED
    # The same envelope inside a ``payload`` struct (the wrapper, parsed).
    nested = parsed.selectExpr("struct(*) AS payload")
    assert tables_of(nested) == EXPECTED


def test_a_duplicated_event_counts_once_and_a_real_tie_is_refused(spark: SparkSession) -> None:
    lines = feed_lines(wrapped=False)
    twice = [*lines, lines[4], lines[6]]  # a connector restart delivers events again
    df = spark.createDataFrame([(v,) for v in twice], "value string")
    assert tables_of(df) == EXPECTED
    clash = [
        event("u", None, row(1, "x", 1), 20),
        event("u", None, row(1, "y", 2), 20),  # same key, same position, other content
    ]
    with pytest.raises(PayloadError, match="share the greatest order_by"):
        tables_of(spark.createDataFrame([(v,) for v in clash], "value string"))


def test_a_duplicated_event_with_a_map_column_counts_once(spark: SparkSession) -> None:
    """Spark groups by no map (nor variant): such a column is compared as its JSON text,
    the others as they are."""
    tagged = Debezium("id BIGINT, tags MAP<STRING, STRING>, qty INT", key="id")
    first = event("u", None, {"id": 1, "tags": {"a": "x"}, "qty": 1}, 20)
    other = event("u", None, {"id": 1, "tags": {"a": "y"}, "qty": 1}, 20)
    again = spark.createDataFrame([(first,), (first,)], "value string")
    assert tagged.changes(again).count() == 1  # delivered twice: one change
    clash = spark.createDataFrame([(first,), (other,)], "value string")
    assert tagged.changes(clash).count() == 2  # other content: a tie, refused when ranked


def test_ordering_is_by_position_then_ts_ms(spark: SparkSession) -> None:
    lines = [
        # Arrival order is not the order: the position decides.
        event("u", None, row(1, "late", 9), 30, ts_ms=1),
        event("u", None, row(1, "early", 8), 29, ts_ms=2),
        # Same position (a snapshot): ts_ms breaks the tie.
        event("r", None, row(2, "first", 1), 5, ts_ms=100),
        event("u", None, row(2, "second", 2), 5, ts_ms=200),
    ]
    df = spark.createDataFrame([(v,) for v in lines], "value string")
    assert tables_of(df) == {"upserts": [(1, "late", 9), (2, "second", 2)]}


# "m_offset": its change column (``__m_offset``) shares a prefix with the reader's own.
@pytest.mark.parametrize("name", ["offset", "m_offset"])
def test_a_callers_position_column(spark: SparkSession, name: str) -> None:
    # Kafka's offset orders one key's events (Debezium keys its messages).
    lines = [
        (event("u", None, row(1, "second", 2), None), 8),
        (event("u", None, row(1, "first", 1), None), 7),
    ]
    df = spark.createDataFrame(lines, f"value string, {name} BIGINT")
    by_offset = Debezium(ROW, key="id", position=name)
    assert tables_of(df, by_offset) == {"upserts": [(1, "second", 2)]}
    assert by_offset.change_set.order_by == (f"__{name}", "__ts_ms")


def test_truncate_is_refused_by_default_and_dropped_by_option(spark: SparkSession) -> None:
    lines = [
        event("c", None, row(1, "a", 1), 10),
        json.dumps({"before": None, "after": None, "op": "t", "ts_ms": 1, "source": {"lsn": 11}}),
        event("c", None, row(2, "b", 2), 12),
    ]
    df = spark.createDataFrame([(v,) for v in lines], "value string")
    with pytest.raises(PayloadError, match=r"Debezium truncate \(op 't'\).*truncate='ignore'"):
        tables_of(df)
    ignoring = Debezium(ROW, key="id", truncate="ignore")
    assert tables_of(df, ignoring) == {"upserts": [(1, "a", 1), (2, "b", 2)]}


def test_messages_are_dropped_and_a_table_filter_keeps_one_table(spark: SparkSession) -> None:
    lines = [
        event("c", None, row(1, "a", 1), 10),
        json.dumps({"op": "m", "ts_ms": 1, "source": {"lsn": 11}, "message": {"prefix": "x"}}),
        event("c", None, row(2, "other", 2), 12, table="customers"),
    ]
    df = spark.createDataFrame([(v,) for v in lines], "value string")
    assert tables_of(df, Debezium(ROW, key="id", table="orders")) == {"upserts": [(1, "a", 1)]}


def test_malformed_events_fail_the_build_naming_the_parse_error(spark: SparkSession) -> None:
    bad = spark.createDataFrame(
        [(event("c", None, row(1, "a", 1), 1),), ("{oops",)], "value string"
    )
    with pytest.raises(PayloadError, match=r"(?i)malformed"):
        tables_of(bad)
    wrong_type = spark.createDataFrame(
        [(event("c", None, {"id": "not a number", "name": "a", "qty": 1}, 1),)], "value string"
    )
    with pytest.raises(PayloadError, match=r"(?i)malformed|parse"):
        tables_of(wrong_type)


def test_a_delete_without_its_key_is_refused(spark: SparkSession) -> None:
    # A table without a primary key: a delete has no ``before`` to find the row by.
    df = spark.createDataFrame([(event("d", None, None, 3),)], "value string")
    with pytest.raises(PayloadError, match="key column 'id' is NULL"):
        tables_of(df)


def test_bad_descriptions_are_refused_before_any_spark_job(spark: SparkSession) -> None:
    with pytest.raises(PayloadError, match="key column 'nope' is not in row_schema"):
        Debezium(ROW, key="nope").changes(spark.createDataFrame([("x",)], "value string"))
    # A position the SDK cannot order is refused when the description is made.
    with pytest.raises(InvalidArgumentError, match=r"'source\.nope' cannot be ordered"):
        Debezium(ROW, key="id", position="source.nope")
    with pytest.raises(InvalidArgumentError, match=r"'source\.gtid' cannot be ordered"):
        Debezium(ROW, key="id", position="source.gtid")
    with pytest.raises(InvalidArgumentError, match="connector= is one of"):
        Debezium(ROW, key="id", connector="cassandra")
    with pytest.raises(InvalidArgumentError, match="not both"):
        Debezium(ROW, key="id", connector="mysql", position="source.pos")
    with pytest.raises(PayloadError, match="need a 'value' column"):
        ORDERS.changes(spark.createDataFrame([(1,)], "x INT"))
    with pytest.raises(ValueError, match="truncate="):
        Debezium(ROW, key="id", truncate="delete")  # type: ignore[arg-type]
    with pytest.raises(PayloadError, match="clash"):
        Debezium("id BIGINT, __op STRING", key="id").changes(
            spark.createDataFrame([("x",)], "value string")
        )


@pytest.fixture
def orders_server(tmp_path: Path) -> Iterator[tuple[FakeTableauServer, TableauClient]]:
    with FakeTableauServer(pats=dict([PAT]), directory=tmp_path / "server") as server:
        start = make_hyper(
            tmp_path / "start.hyper",
            {"Orders": ("id BIGINT NOT NULL, name TEXT, qty INTEGER", ["(5, 'e', 50)"])},
        )
        server.add_datasource("Shop", start)
        with TableauClient(server.url, "", PersonalAccessToken(*PAT)) as client:
            yield server, client


@pytest.mark.every_spark
def test_a_stream_of_debezium_json_files_through_the_sink(
    spark: SparkSession, tmp_path: Path, orders_server: tuple[FakeTableauServer, TableauClient]
) -> None:
    server, client = orders_server
    lines = feed_lines(wrapped=True)
    half = len(lines) // 2
    source = tmp_path / "events"
    write_batch(source, 0, [v or "null" for v in lines[:half]])
    write_batch(source, 1, [v or "null" for v in lines[half:]])
    sink = TableauSink(
        "Shop", ORDERS, client=client, target_table="Orders", state_dir=tmp_path / "state"
    )
    run_query(spark, source, tmp_path / "checkpoint", sink, text=True)
    (ds,) = server.backend.sources.values()
    assert sorted(read_table(server.datasource_path(ds.id), "Orders")) == EXPECTED["upserts"]
    assert server.backend.jobs_run[ds.id] == 2


def test_an_event_without_an_op_is_refused_not_dropped(spark: SparkSession) -> None:
    # A row flattened by ExtractNewRecordState without the position its add.fields would
    # add: refused naming what it lacks, never read as a tombstone.
    flattened = json.dumps({"id": 1, "name": "a", "qty": 1, "__deleted": "false"})
    df = spark.createDataFrame([(flattened,), (None,)], "value string")
    with pytest.raises(PayloadError, match=r"has no position.*add\.fields"):
        tables_of(df)
    # An object that is neither an envelope nor a flattened row: no op.
    stray = json.dumps({"id": 1, "name": "a", "qty": 1})
    with pytest.raises(PayloadError, match="event without an 'op'"):
        tables_of(spark.createDataFrame([(stray,)], "value string"))
    # Parsed columns: an event with a row but no op is refused too; all-null is a tombstone.
    parsed = spark.createDataFrame(
        [(None, {"id": 1, "name": "a", "qty": 1}, None, 1), (None, None, None, 2)],
        "before STRUCT<id: BIGINT, name: STRING, qty: INT>, "
        "after STRUCT<id: BIGINT, name: STRING, qty: INT>, op STRING, seq BIGINT",
    )
    by_seq = Debezium(ROW, key="id", position="seq")
    with pytest.raises(PayloadError, match="event without an 'op'"):
        tables_of(parsed, by_seq)
    assert tables_of(parsed.where("seq = 2"), by_seq) == {}


def source_event(
    op: str,
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    source: Mapping[str, Any],
    ts_ms: int = 1_700_000_000_000,
) -> str:
    envelope = {"before": before, "after": after, "op": op, "ts_ms": ts_ms, "source": source}
    return json.dumps(envelope)


def values(spark: SparkSession, lines: list[str]) -> DataFrame:
    return spark.createDataFrame([(line,) for line in lines], "value string")


def test_an_update_that_moves_its_key_deletes_the_old_key(spark: SparkSession) -> None:
    lines = [
        event("c", None, row(1, "a", 1), 10),
        # One update moves key 1 to 2: the pre-image's key goes, the post-image's comes.
        event("u", row(1, "a", 1), row(2, "a", 1), 11),
        # Key 7 moves to 8 and back to 7 within the batch: 7 stays, 8 goes.
        event("u", row(7, "g", 7), row(8, "g", 7), 12),
        event("u", row(8, "g", 7), row(7, "g2", 8), 13),
        # An update that keeps its key gives no delete.
        event("u", row(5, "e", 5), row(5, "e2", 6), 14),
    ]
    assert tables_of(values(spark, lines)) == {
        "upserts": [(2, "a", 1), (5, "e2", 6), (7, "g2", 8)],
        "deletes": [(1,), (8,)],
    }


def test_an_update_without_a_before_image_cannot_move_a_key(spark: SparkSession) -> None:
    # Without full replica identity an update has no `before`: only its new key is known.
    lines = [event("u", None, row(2, "b", 2), 11)]
    assert tables_of(values(spark, lines)) == {"upserts": [(2, "b", 2)]}


def test_oracle_scn_orders_as_a_number(spark: SparkSession) -> None:
    oracle = Debezium(ROW, key="id", connector="oracle")
    lines = [
        source_event("u", None, row(1, "older", 1), {"scn": "999", "table": "orders"}),
        source_event("u", None, row(1, "newer", 2), {"scn": "1000", "table": "orders"}),
    ]
    assert tables_of(values(spark, lines), oracle) == {"upserts": [(1, "newer", 2)]}
    # Given as a position path, the same.
    by_path = Debezium(ROW, key="id", position="source.scn")
    assert tables_of(values(spark, lines), by_path) == {"upserts": [(1, "newer", 2)]}


def test_mysql_binlog_rollover_orders_by_the_file_sequence(spark: SparkSession) -> None:
    mysql = Debezium(ROW, key="id", connector="mysql")

    def at(file: str, pos: int, r: int = 0) -> dict[str, Any]:
        return {"file": file, "pos": pos, "row": r, "table": "orders"}

    lines = [
        source_event("c", None, row(1, "before rollover", 1), at("mysql-bin.999999", 900)),
        source_event("u", None, row(1, "after rollover", 2), at("mysql-bin.1000000", 4)),
        # Two rows of one binlog event: the row number orders them.
        source_event("u", None, row(2, "row 0", 1), at("mysql-bin.1000000", 10, 0)),
        source_event("u", None, row(2, "row 1", 2), at("mysql-bin.1000000", 10, 1)),
    ]
    assert tables_of(values(spark, lines), mysql) == {
        "upserts": [(1, "after rollover", 2), (2, "row 1", 2)]
    }


def test_sql_server_lsn_orders_part_by_part(spark: SparkSession) -> None:
    sqlserver = Debezium(ROW, key="id", connector="sqlserver")

    def at(commit: str, change: str, serial: int = 1) -> dict[str, Any]:
        return {
            "commit_lsn": commit,
            "change_lsn": change,
            "event_serial_no": serial,
            "table": "orders",
        }

    lines = [
        source_event(
            "u", None, row(1, "new", 2), at("0000002e:00000000:0001", "0000002e:00000000:0001")
        ),
        source_event(
            "u", None, row(1, "old", 1), at("0000002d:00000c58:00a2", "0000002d:00000c58:00a2")
        ),
        source_event(
            "u", None, row(2, "first", 1), at("0000002d:00000c58:0005", "0000002d:00000c58:0003")
        ),
        source_event(
            "u", None, row(2, "second", 2), at("0000002d:00000c58:0005", "0000002d:00000c58:0010")
        ),
    ]
    assert tables_of(values(spark, lines), sqlserver) == {
        "upserts": [(1, "new", 2), (2, "second", 2)]
    }


def test_a_position_that_cannot_be_read_is_an_error_never_a_text_comparison(
    spark: SparkSession,
) -> None:
    # MySQL events read with the default (PostgreSQL) position: they have no lsn.
    mysql_events = [
        source_event("c", None, row(1, "a", 1), {"file": "mysql-bin.000001", "pos": 4}),
    ]
    with pytest.raises(PayloadError, match=r"has no position.*connector='mysql'"):
        tables_of(values(spark, mysql_events))
    # An SCN that is no number.
    bad_scn = [source_event("c", None, row(1, "a", 1), {"scn": "12ab"})]
    with pytest.raises(PayloadError, match=r"has no position.*'__source_scn'"):
        tables_of(values(spark, bad_scn), Debezium(ROW, key="id", connector="oracle"))
    # A text column of the events as the position.
    offsets = spark.createDataFrame(
        [(event("c", None, row(1, "a", 1), 1), "17")], "value string, offset string"
    )
    with pytest.raises(PayloadError, match="'offset' is string, not a whole number"):
        Debezium(ROW, key="id", position="offset").changes(offsets)

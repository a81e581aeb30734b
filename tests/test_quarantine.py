"""A quarantine (``on_bad_rows="quarantine"``): the changes the target would refuse or change
are set aside with their reason, written once, counted, and the rest applies; a key whose
last change is set aside keeps the value it had."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import ChangeSet, build_payload
from tabhyper_update.errors import PayloadError, SchemaDriftError
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper, read_table
from tabhyper_update.types import BuildOptions
from tabhyper_update.update.status import describe_status, status

from ._util import PAT, client_for

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TARGET = "id BIGINT NOT NULL, name VARCHAR(5) NOT NULL, qty INTEGER, amount NUMERIC(6,2)"
START = ["(1, 'a', 1, 1.00)", "(2, 'b', 2, 2.00)", "(3, 'c', 3, 3.00)"]
CHANGES = "id long, name string, qty long, amount string, op string, seq long"
#: (id, name, qty, amount, op, seq): one good change of key 2 before its bad one, and one
#: change per reason; keys 1 and 7 are fine.
ROWS: list[tuple[Any, ...]] = [
    (1, "a1", 10, "1.5", "U", 5),
    (2, "b-ok", 20, "2", "U", 4),
    (2, None, 20, "2", "U", 6),
    (3, "c", 3_000_000_000, "3", "U", 7),
    (4, "toolong", 4, "4", "I", 8),
    (5, "e", 5, "12345.6", "I", 9),
    (6, "f", 6, "1.234", "I", 10),
    (None, "n", 1, "1", "I", 11),
    (7, "g", 7, "7", "I", 12),
]
SET_ASIDE = [
    (None, "null_key", "id"),
    (2, "null_into_not_null", "name"),
    (3, "out_of_range", "qty"),
    (4, "too_long", "name"),
    (5, "too_many_digits", "amount"),
    (6, "rounded", "amount"),
]


def changes(spark: SparkSession, rows: list[tuple[Any, ...]] = ROWS) -> DataFrame:
    return spark.createDataFrame(rows, CHANGES).selectExpr(
        "id", "name", "qty", "CAST(amount AS DECIMAL(12, 4)) AS amount", "op", "seq"
    )


def options(folder: Any) -> BuildOptions:
    return BuildOptions(on_bad_rows="quarantine", quarantine=folder, target_columns=TARGET)


def set_aside(spark: SparkSession, folder: Path) -> list[tuple[Any, ...]]:
    found = spark.read.parquet(str(folder)).collect()
    return sorted(
        ((r["id"], r["_quarantine_reason"], r["_quarantine_column"]) for r in found), key=repr
    )


def test_each_reason_is_set_aside_once_and_the_rest_applies(
    spark: SparkSession, tmp_path: Path
) -> None:
    start = make_hyper(tmp_path / "start.hyper", {"Extract": (TARGET, START)})
    folder = tmp_path / "quarantine"
    spec = ChangeSet("id", op_column="op", order_by="seq")
    with FakeTableauServer(pats=dict([PAT])) as server:
        luid = server.add_datasource("Orders", start)
        for state in ("state", "state", "another"):  # a re-run, then a run the server repeats
            if state == "another":
                server.forget_jobs()
            with (
                build_payload(changes(spark), spec, **options(folder)) as payload,
                client_for(server) as client,
            ):
                result = client.update_datasource("Orders", payload, state_dir=tmp_path / state)
            report = payload.quarantined
            assert report is not None
            assert report.rows == 6
            assert report.reasons == {reason: 1 for _, reason, _ in SET_ASIDE}
            # The keys that keep their value; the NULL key is no key.
            assert report.keys == ((2,), (3,), (4,), (5,), (6,))
            assert result.metrics()["quarantined"] == report.as_dict()
        got = sorted(read_table(server.datasource_path(luid), "Extract"))
    # Keys 2 and 3 keep the values they had: key 2's older, valid change is not applied in
    # place of its last one; keys 1 and 7 changed.
    assert [(r[0], r[1], r[2], float(r[3])) for r in got] == [
        (1, "a1", 10, 1.5),
        (2, "b", 2, 2.0),
        (3, "c", 3, 3.0),
        (7, "g", 7, 7.0),
    ]
    # What the state folder says of it (`tabhyper-update status`).
    shown = describe_status(status(tmp_path / "state"))
    assert f"6 changes set aside in {folder}" in shown
    # Three builds of the same positions: the rows are written once.
    assert report is not None
    assert [p.name for p in folder.iterdir()] == [f"_quarantine_batch={report.batch}"]
    assert set_aside(spark, folder) == sorted(SET_ASIDE, key=repr)


def test_a_function_receives_the_rows_whole_with_their_batch(spark: SparkSession) -> None:
    received: list[tuple[list[Any], str]] = []

    def keep(rows: DataFrame, batch: str) -> None:
        received.append((rows.orderBy("seq").collect(), batch))

    spec = ChangeSet("id", op_column="op", order_by="seq")
    with build_payload(changes(spark), spec, **options(keep)) as payload:
        assert payload.quarantined is not None
        assert payload.quarantined.written_to == "callback"
    ((rows, batch),) = received
    assert batch == payload.quarantined.batch
    assert [r["seq"] for r in rows] == [6, 7, 8, 9, 10, 11]
    assert {r["_quarantine_batch"] for r in rows} == {batch}
    # Whole rows, as the source gave them: fixed, they are a change set again.
    assert rows[2]["name"] == "toolong"
    assert rows[2]["op"] == "I"


def test_fixed_rows_apply_as_a_change_set(spark: SparkSession, tmp_path: Path) -> None:
    start = make_hyper(tmp_path / "start.hyper", {"Extract": (TARGET, START)})
    folder = tmp_path / "quarantine"
    spec = ChangeSet("id", op_column="op", order_by="seq")
    with FakeTableauServer(pats=dict([PAT])) as server:
        luid = server.add_datasource("Orders", start)
        with client_for(server) as client:
            with build_payload(changes(spark), spec, **options(folder)) as payload:
                client.update_datasource("Orders", payload, state_dir=tmp_path / "s")
            # A person fixes them: names cut, the NULL name and key filled, the rest kept.
            kept = spark.read.parquet(str(folder)).drop(
                "_quarantine_reason", "_quarantine_column", "_quarantine_batch"
            )
            fixed = kept.selectExpr(
                "coalesce(id, 8) AS id",
                "substr(coalesce(name, 'b2'), 1, 5) AS name",
                "CASE WHEN qty > 2147483647 THEN 0 ELSE qty END AS qty",
                "CAST(round(amount, 2) AS DECIMAL(12, 4)) AS amount",
                "op",
                "seq",
            ).where("amount < 10000")
            with build_payload(fixed, spec, **options(folder)) as again:
                assert again.quarantined is None
                client.update_datasource("Orders", again, state_dir=tmp_path / "s")
        ids = [r[0] for r in sorted(read_table(server.datasource_path(luid), "Extract"))]
    assert ids == [1, 2, 3, 4, 6, 7, 8]


def test_a_narrowing_checked_row_by_row_needs_no_allow_narrowing(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The data source's exact types are known (the SDK published it): a DECIMAL(12,4)
    change set into NUMERIC(6,2) is refused, unless every row was checked against that
    type and those it would change set aside."""
    first = spark.createDataFrame([(1, "a", 1, "1.00")], "id long, name string, qty int, a string")
    snapshot = first.selectExpr("id", "name", "qty", "CAST(a AS DECIMAL(6, 2)) AS amount")
    spec = ChangeSet("id", op_column="op", order_by="seq")
    good = [(1, "a1", 10, "1.5", "U", 5), (6, "f", 6, "1.234", "I", 10)]
    state = tmp_path / "state"
    with FakeTableauServer(pats=dict([PAT])) as server, client_for(server) as client:
        with build_payload(snapshot, max_payload_mb=None) as published:
            ref = client.publish(published, "Orders", project="Default", state_dir=state)
        with (
            build_payload(changes(spark, good), spec) as plain,
            pytest.raises(SchemaDriftError, match="amount"),
        ):
            client.update_datasource("Orders", plain, state_dir=state)
        target = "id BIGINT, name TEXT, qty INTEGER, amount NUMERIC(6,2)"
        checked = BuildOptions(
            on_bad_rows="quarantine", quarantine=tmp_path / "q", target_columns=target
        )
        with build_payload(changes(spark, good), spec, **checked) as payload:
            client.update_datasource("Orders", payload, state_dir=state)
        got = sorted(read_table(server.datasource_path(ref.id), "Extract"))
    assert [(r[0], float(r[3])) for r in got] == [(1, 1.5)]


def test_what_a_quarantine_cannot_do_is_refused_before_any_job(spark: SparkSession) -> None:
    df = changes(spark)
    spec = ChangeSet("id", op_column="op", order_by="seq")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"on_bad_rows": "quarantine"}, "needs quarantine="),
        ({"quarantine": "/nowhere"}, "used with on_bad_rows='quarantine'"),
        ({"on_bad_rows": "skip"}, "must be 'fail' or 'quarantine'"),
        ({**options("q"), "target_columns": "id"}, "cannot read 'id'"),
        ({**options("q"), "target_columns": 5}, "target_columns takes"),
        ({**options("q"), "quarantine": 5}, "quarantine takes a folder"),
        ({**options("q"), "target_columns": "id BIGINT, name INTEGER"}, "column 'name'"),
    ]
    for given, said in cases:
        with pytest.raises(PayloadError, match=said):
            build_payload(df, spec, **given)
    with pytest.raises(PayloadError, match="plain table"):
        build_payload(df, **options("q"))
    with pytest.raises(PayloadError, match="history mode"):
        build_payload(
            df, ChangeSet("id", op_column="op", order_by="seq", history=True), **options("q")
        )


def test_the_command_line_sets_aside_and_says_so(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tabhyper_update.cli import main

    folder, source = tmp_path / "quarantine", tmp_path / "changes"
    changes(spark).write.parquet(str(source))
    build = ["build", "--input", str(source), "--key", "id", "--op-column", "op"]
    build += ["--order-by", "seq", "--output-dir", str(tmp_path / "payload")]
    build += ["--quarantine", str(folder), "--target-columns", TARGET, "--json"]
    assert main(build) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["quarantined"]["rows"] == 6
    assert said["quarantined"]["keys"] == [[2], [3], [4], [5], [6]]
    assert said["parts"][0]["tables"] == {"upserts": 2}
    assert set_aside(spark, folder) == sorted(SET_ASIDE, key=repr)
    # The payload `apply` loads later carries the report and the columns it checked.
    from tabhyper_update import Payload

    loaded = Payload.load(tmp_path / "payload")
    assert loaded.quarantined is not None
    assert loaded.quarantined.as_dict() == said["quarantined"]
    assert loaded.checked_types == {
        "upserts": {
            "id": "BIGINT",
            "name": "VARCHAR(5)",
            "qty": "INTEGER",
            "amount": "NUMERIC(6,2)",
        }
    }
    # A quarantine's flags are checked before Spark starts: a type missing, a target's
    # columns without a quarantine to set rows aside in.
    assert main([*build[:-3], "--target-columns", "id"]) == 2
    assert "cannot read 'id'" in capsys.readouterr().err
    assert main([*build[:-5], "--target-columns", TARGET]) == 2
    assert "--target-columns is used with" in capsys.readouterr().err


def test_a_sink_sets_aside_each_batch_s_bad_changes_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    from tabhyper_update import TableauSink

    start = make_hyper(tmp_path / "start.hyper", {"Extract": (TARGET, START)})
    folder = tmp_path / "quarantine"
    spec = ChangeSet("id", op_column="op", order_by="seq")
    with FakeTableauServer(pats=dict([PAT])) as server, client_for(server) as client:
        luid = server.add_datasource("Orders", start)
        sink = TableauSink(
            "Orders",
            spec,
            client=client,
            build=options(folder),
            state_dir=tmp_path / "s",
            sink_id="orders",
        )
        sink(changes(spark), 0)
        sink(changes(spark), 0)  # the batch replayed after a restart
        got = sorted(read_table(server.datasource_path(luid), "Extract"))
    assert [r[0] for r in got] == [1, 2, 3, 7]
    assert len(list(folder.iterdir())) == 1
    assert set_aside(spark, folder) == sorted(SET_ASIDE, key=repr)


def test_thousands_set_aside_are_named_by_their_rows(spark: SparkSession, tmp_path: Path) -> None:
    """The batch's name is a sum of the rows' hashes, which overflows a long long before a
    thousand rows: it is summed exactly, the same for the same rows, another for others."""
    df = spark.range(5000).selectExpr(
        "id",
        "CASE WHEN id % 5 = 0 THEN NULL ELSE 'n' END AS name",
        "id AS qty",
        "CAST(1 AS DECIMAL(12, 4)) AS amount",
        "'U' AS op",
        "id AS seq",
    )
    spec = ChangeSet("id", op_column="op", order_by="seq")
    names = []
    for rows in (df, df, df.where("id < 4000")):
        with build_payload(rows, spec, **options(tmp_path / "q")) as payload:
            assert payload.quarantined is not None
            names.append((payload.quarantined.rows, payload.quarantined.batch))
    assert names[0] == names[1]
    assert names[0][0] == 1000
    assert names[2][0] == 800
    assert names[2][1] != names[0][1]
    assert len(list((tmp_path / "q").iterdir())) == 2


def test_the_target_s_columns_are_the_ones_the_schema_check_learns(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The quarantine's target_columns from the server: the data source's file where the
    probe found its types exact (its NOT NULL unknown there), refused where only the
    service's coarse types are known."""
    from tabhyper_update.errors import ConfigurationError

    start = make_hyper(tmp_path / "start.hyper", {"Extract": (TARGET, START)})
    state = tmp_path / "state"
    with FakeTableauServer(pats=dict([PAT])) as server, client_for(server) as client:
        server.add_datasource("Orders", start)
        with pytest.raises(ConfigurationError, match="download_types"):
            client.target_columns("Orders", state_dir=state)
        server.remember_probe(state)
        columns = client.target_columns("Orders", state_dir=state)
        assert columns == {
            "Extract": '"id" BIGINT, "name" VARCHAR(5), "qty" INTEGER, "amount" NUMERIC(6,2)'
        }
        with build_payload(
            changes(spark),
            ChangeSet("id", op_column="op", order_by="seq"),
            on_bad_rows="quarantine",
            quarantine=tmp_path / "q",
            target_columns=columns["Extract"],
        ) as payload:
            assert payload.quarantined is not None
            # Every reason but the NOT NULL one, which the file does not record.
            assert set(payload.quarantined.reasons) == {r for _, r, _ in SET_ASIDE} - {
                "null_into_not_null"
            }


def test_a_delta_table_takes_each_set_of_rows_once(spark: SparkSession, tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    table = tmp_path / "quarantine_delta"
    spec = ChangeSet("id", op_column="op", order_by="seq")
    delta: BuildOptions = {**options(table), "quarantine_format": "delta"}
    for _ in range(2):  # the same positions built again: written once
        with build_payload(changes(spark), spec, **delta) as payload:
            assert payload.quarantined is not None
            assert payload.quarantined.written_to == str(table)
    rows = deltalake.DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    found = sorted(
        ((r["id"], r["_quarantine_reason"], r["_quarantine_column"]) for r in rows), key=repr
    )
    assert found == sorted(SET_ASIDE, key=repr)
    report = payload.quarantined
    assert {r["_quarantine_batch"] for r in rows} == {report.batch if report else None}
    # Other rows are another batch, appended beside.
    with build_payload(changes(spark, ROWS[:3]), spec, **delta) as other:
        assert other.quarantined is not None
    assert len(deltalake.DeltaTable(str(table)).to_pyarrow_table()) == 7
    with pytest.raises(PayloadError, match="a function writes the rows its own way"):
        build_payload(changes(spark), spec, **{**delta, "quarantine": print})  # type: ignore[arg-type]


def test_a_change_set_wholly_set_aside_says_so_rather_than_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    start = make_hyper(tmp_path / "start.hyper", {"Extract": (TARGET, START)})
    spec = ChangeSet("id", op_column="op", order_by="seq")
    with FakeTableauServer(pats=dict([PAT])) as server, client_for(server) as client:
        luid = server.add_datasource("Orders", start)
        with build_payload(changes(spark, ROWS[2:4]), spec, **options(tmp_path / "q")) as payload:
            assert payload.is_empty
            result = client.update_datasource("Orders", payload, state_dir=tmp_path / "s")
        assert server.counts["initiate"] == server.counts["update"] == 0
        assert sorted(read_table(server.datasource_path(luid), "Extract"))[1][1] == "b"
    assert result.quarantined is not None
    assert result.metrics()["quarantined"]["rows"] == 2
    assert result.metrics()["quarantined"]["keys"] == [[2], [3]]

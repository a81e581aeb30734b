"""All or nothing is decided before the first part: the target's columns are learned from
the server (the SDK's record of what it published, the columns given, or the VizQL Data
Service) and every part's tables are checked against them before any request that changes
data."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pytest

from tabhyper_update import ChangeSet, Insert, Upsert, build_payload, keys_match
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper
from tabhyper_update.update.schema import compare_types
from tabhyper_update.values.errors import (
    InvalidArgumentError,
    JobFailedError,
    SchemaDriftError,
)

from ._util import PAT, client_for, read_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TARGET = "id BIGINT NOT NULL, amount NUMERIC(12, 2), name TEXT"
DDL = "id long, amount decimal(12,2), name string"


def many_changes(spark: SparkSession, rows: int, *, extra: bool) -> DataFrame:
    tier = ["CAST(id % 3 AS STRING) AS tier"] if extra else []
    return spark.range(rows).selectExpr(
        "id",
        "CAST(id AS DECIMAL(12, 2)) AS amount",
        "sha2(CAST(id AS STRING), 256) AS name",
        "'U' AS op",
        "CAST(1 AS BIGINT) AS seq",
        *tier,
    )


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeTableauServer]:
    start = make_hyper(tmp_path / "start.hyper", {"Extract": (TARGET, ["(1, 1.00, 'a')"])})
    server = FakeTableauServer(pats={PAT[0]: PAT[1]})
    server.start()
    server.add_datasource("Orders", start)
    yield server
    server.stop()


def rows_of(server: FakeTableauServer) -> list[tuple[object, ...]]:
    (luid,) = server.backend.sources
    return read_rows(server.datasource_path(luid), "Extract")


@pytest.mark.parametrize("published_by_the_sdk", [True, False])
def test_a_column_the_data_source_lacks_fails_before_the_first_part(
    spark: SparkSession,
    tmp_path: Path,
    fake: FakeTableauServer,
    published_by_the_sdk: bool,
) -> None:
    state = tmp_path / "state"
    with client_for(fake) as client:
        if published_by_the_sdk:
            snapshot = spark.createDataFrame([(1, None, "a")], DDL)
            client.publish(
                build_payload(snapshot, max_payload_mb=None),
                "Fresh",
                state_dir=state,
            )
            target = "Fresh"
        else:
            target = "Orders"  # added behind the SDK's back: learned from read-metadata
        payload = build_payload(
            many_changes(spark, 20_000, extra=True),
            ChangeSet("id", op_column="op", order_by="seq"),
            max_payload_mb=0.4,
        )
        assert len(payload.parts) > 2
        before = {k: fake.counts[k] for k in ("initiate", "update")}
        with pytest.raises(SchemaDriftError) as caught:
            client.update_datasource(target, payload, state_dir=state, progress=False)
    assert caught.value.columns == {"Extract": ["tier"]}
    assert "No update was sent" in str(caught.value)
    origin = "recorded when it published" if published_by_the_sdk else "read-metadata"
    assert origin in str(caught.value)
    assert {k: fake.counts[k] for k in before} == before  # no upload, no update


def test_a_narrower_decimal_is_refused_unless_named_and_then_applied_when_it_fits(
    spark: SparkSession, tmp_path: Path, fake: FakeTableauServer
) -> None:
    state = tmp_path / "state"
    with client_for(fake) as client:
        client.publish(
            build_payload(
                spark.createDataFrame(
                    [(1, None, "a")], "id long, amount decimal(12,2), name string"
                ),
                max_payload_mb=None,
            ),
            "Money",
            state_dir=state,
        )
        wide = spark.createDataFrame([(7, "1.2300", "b")], "id long, amount string, name string")
        wide = wide.selectExpr("id", "CAST(amount AS DECIMAL(12, 4)) AS amount", "name")
        insert = [Insert(source_table="Extract", target_table="Extract")]
        with pytest.raises(SchemaDriftError, match=r"'amount': NUMERIC\(12,4\) into NUMERIC"):
            client.update_datasource(
                "Money", build_payload(wide), actions=insert, state_dir=state, progress=False
            )
        assert fake.counts["update"] == 0
        result = client.update_datasource(
            "Money",
            build_payload(wide),
            actions=insert,
            state_dir=state,
            progress=False,
            allow_narrowing=["amount"],
        )
    assert result.done
    assert fake.counts["update"] == 1


def test_declared_types_are_the_exact_ones_the_service_cannot_tell(
    spark: SparkSession, tmp_path: Path, fake: FakeTableauServer
) -> None:
    """Through the VizQL Data Service a NUMERIC(12,2) is a REAL, which takes a DECIMAL(12,4)
    without a word (and the fake rounds it, as Hyper does); declared with the reference, the
    column's exact type refuses the narrowing and the NULLs into NOT NULL before anything is
    sent, naming the column."""
    state = tmp_path / "state"
    wide = spark.createDataFrame([(7, "1.2345", "b")], "id long, amount string, name string")
    wide = wide.selectExpr("id", "CAST(amount AS DECIMAL(12, 4)) AS amount", "name")
    insert = [Insert(source_table="Extract", target_table="Extract")]
    with client_for(fake) as client:
        declared = client.datasource("Orders", columns={"Extract": TARGET})
        assert declared.columns == {"Extract": ("id", "amount", "name")}
        with pytest.raises(SchemaDriftError, match=r"'amount': NUMERIC\(12,4\) into NUMERIC"):
            client.update_datasource(declared, build_payload(wide), actions=insert, state_dir=state)
        nulls = client.datasource(
            "Orders",
            columns={
                "Extract": {"id": "BIGINT", "amount": "NUMERIC(12,4)", "name": "TEXT NOT NULL"}
            },
        )
        blank = wide.selectExpr("id", "amount", "CAST(NULL AS STRING) AS name")
        with pytest.raises(SchemaDriftError, match="'name': NULL in the payload, NOT NULL"):
            client.update_datasource(nulls, build_payload(blank), actions=insert, state_dir=state)
        assert fake.counts["initiate"] == fake.counts["update"] == 0
        # Unread declarations are refused by name.
        with pytest.raises(InvalidArgumentError, match=r"columns\['Extract'\]: cannot read 'id'"):
            client.datasource("Orders", columns={"Extract": "id, amount NUMERIC(12,2)"})
        # Without a declaration the service's REAL takes it, and the value is rounded.
        client.update_datasource("Orders", build_payload(wide), actions=insert, state_dir=state)
    assert (7, Decimal("1.23"), "b") in rows_of(fake)


def test_a_job_failed_on_an_overflow_names_the_column_it_can_only_be_in(
    spark: SparkSession, tmp_path: Path, fake: FakeTableauServer
) -> None:
    """Hyper's "numeric overflow" names no column; with the exact types known (declared
    here), the error names the columns a value can be too large for."""
    declared = "id BIGINT NOT NULL, amount NUMERIC(12, 2), name TEXT"
    big = spark.createDataFrame(
        [(7, "1000000000000.00", "b")], "id long, amount string, name string"
    )
    big = big.selectExpr("id", "CAST(amount AS DECIMAL(18, 2)) AS amount", "name")
    insert = [Insert(source_table="Extract", target_table="Extract")]
    with client_for(fake) as client:
        ref = client.datasource("Orders", columns={"Extract": declared})
        with pytest.raises(JobFailedError) as caught:
            client.update_datasource(
                ref,
                build_payload(big),
                actions=insert,
                state_dir=tmp_path / "state",
                allow_narrowing=["amount"],
            )
    assert caught.value.overflow_columns == {"amount": "NUMERIC(18,2) into NUMERIC(12, 2)"}
    assert "can only be in 'amount' (NUMERIC(18,2) into NUMERIC(12, 2))" in str(caught.value)
    assert rows_of(fake) == [(1, Decimal("1.00"), "a")]


def test_a_dry_run_refuses_exactly_what_the_run_refuses(
    spark: SparkSession, tmp_path: Path, fake: FakeTableauServer
) -> None:
    """``plan()`` and ``apply()`` check the update through one function: the narrowing, and
    every option the run refuses, are refused by the dry run with the same words."""
    from tabhyper_update import TabHyperError

    state = tmp_path / "state"
    with client_for(fake) as client:
        client.publish(
            build_payload(
                spark.createDataFrame([(1, None)], "id long, amount decimal(12,2)"),
                max_payload_mb=None,
            ),
            "Money",
            state_dir=state,
        )
        wide = spark.createDataFrame([(7, "1.2300")], "id long, amount string")
        wide = wide.selectExpr("id", "CAST(amount AS DECIMAL(12, 4)) AS amount")
        insert = [Insert(source_table="Extract", target_table="Extract")]
        bound = build_payload(wide).upload("Money", client=client, state_dir=state)
        refused: list[dict[str, object]] = [
            {},  # the narrowing itself
            {"allow_narrowing": "amount"},  # a text, not a list of names
            {"allow_narrowing": [3]},
            {"on_schema_change": "rewrite"},
            {"request_id": "x" * 500},
            {"verify": -2},
        ]
        for options in refused:
            with pytest.raises(TabHyperError) as by_run:
                bound.apply(insert, **options)  # type: ignore[arg-type]
            with pytest.raises(TabHyperError) as by_plan:
                bound.plan(insert, **options)  # type: ignore[arg-type]
            assert type(by_plan.value) is type(by_run.value), options
            assert str(by_plan.value) == str(by_run.value), options
        assert fake.counts["update"] == 0
        plan = bound.plan(insert, allow_narrowing=("amount",))
        assert [p.rows for p in plan.parts] == [{"Extract": 1}]


def test_nulls_into_a_not_null_column_fail_before_the_first_part(
    spark: SparkSession, tmp_path: Path, fake: FakeTableauServer
) -> None:
    state = tmp_path / "state"
    ddl = "id long NOT NULL, amount decimal(12,2), name string"
    source = make_hyper(
        tmp_path / "strict.hyper", {"Extract": ("id BIGINT NOT NULL, name TEXT NOT NULL", [])}
    )
    with client_for(fake) as client:
        client.publish(source, "Strict", state_dir=state)
        payload = build_payload(spark.createDataFrame([(5, None, None)], ddl).drop("amount"))
        upsert = [
            Upsert(source_table="Extract", target_table="Extract", condition=keys_match("id"))
        ]
        with pytest.raises(SchemaDriftError, match="'name': NULL in the payload, NOT NULL"):
            client.update_datasource(
                "Strict", payload, actions=upsert, state_dir=state, progress=False
            )
    assert fake.counts["update"] == 0


def test_without_the_service_the_update_goes_on_and_says_it_could_not_check(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    start = make_hyper(tmp_path / "start.hyper", {"Extract": (TARGET, ["(1, 1.00, 'a')"])})
    with FakeTableauServer(pats={PAT[0]: PAT[1]}, data_service="absent") as server:
        server.add_datasource("Old", start)
        with client_for(server) as client, caplog.at_level(logging.WARNING, "tabhyper_update"):
            for key in (2, 3):  # a sink's batches: the service is asked once
                client.update_datasource(
                    "Old",
                    build_payload(spark.createDataFrame([(key, "b")], "id long, name string")),
                    actions=[Insert(source_table="Extract", target_table="Extract")],
                    state_dir=tmp_path / "state",
                    progress=False,
                )
        assert [r[0] for r in rows_of(server)] == [1, 2, 3]
        assert server.counts["read_metadata"] == 1
    assert caplog.text.count("could not be learned before the update") == 1


@pytest.mark.parametrize(
    ("payload", "target", "expected"),
    [
        ("NUMERIC(12,4)", "NUMERIC(12,2)", "narrows"),
        ("NUMERIC(18,2)", "NUMERIC(12,2)", "narrows"),
        ("NUMERIC(10,2)", "NUMERIC(12,2)", None),
        ("BIGINT", "INTEGER", "narrows"),
        ("INTEGER", "BIGINT", None),
        ("BIGINT", "NUMERIC(12,2)", "narrows"),
        ("INTEGER", "NUMERIC(18,2)", None),
        ("TEXT", "VARCHAR(5)", "narrows"),
        ("VARCHAR(5)", "TEXT", None),
        ("BIGINT", "DOUBLE PRECISION", "narrows"),
        ("TEXT", "BIGINT", "differs"),
        ("DATE", "TIMESTAMP", "differs"),
        ("TIMESTAMP", "TIMESTAMP", None),
    ],
)
def test_what_narrows_and_what_differs(payload: str, target: str, expected: str | None) -> None:
    found = compare_types(payload, target)
    assert (found[0] if found else None) == expected


@pytest.mark.parametrize("download_types", ["exact", "coarse", "refuse"])
def test_a_data_source_s_file_tells_its_exact_types_where_the_probe_found_them(
    spark: SparkSession, tmp_path: Path, download_types: Literal["exact", "coarse", "refuse"]
) -> None:
    """Download Data Source without its extract: read for the schema only where the probe
    found the file's types exact; elsewhere the service's coarse types answer (and the fake
    rounds the value, as Hyper does)."""
    start = make_hyper(tmp_path / "start.hyper", {"Extract": (TARGET, ["(1, 1.00, 'a')"])})
    state = tmp_path / "state"
    wide = spark.createDataFrame([(7, "1.2345", "b")], "id long, amount string, name string")
    wide = wide.selectExpr("id", "CAST(amount AS DECIMAL(12, 4)) AS amount", "name")
    insert = [Insert(source_table="Extract", target_table="Extract")]
    with FakeTableauServer(pats=dict([PAT]), download_types=download_types) as server:
        server.add_datasource("Orders", start)
        assert server.remember_probe(state).download_types == FOUND[download_types]
        with client_for(server) as client:
            if download_types == "exact":
                with pytest.raises(SchemaDriftError, match="Download Data Source") as caught:
                    client.update_datasource(
                        "Orders", build_payload(wide), actions=insert, state_dir=state
                    )
                assert "'amount': NUMERIC(12,4) into NUMERIC(12,2)" in str(caught.value)
                assert server.counts["update"] == 0
            else:
                client.update_datasource(
                    "Orders", build_payload(wide), actions=insert, state_dir=state
                )
                assert server.counts["update"] == 1
        assert server.counts["download"] == (1 if download_types == "exact" else 0)


FOUND = {"exact": "exact", "coarse": "coarse", "refuse": "refused"}


def test_a_data_source_s_file_is_read_whole_or_not_at_all() -> None:
    import io
    import zipfile

    from tabhyper_update.errors import TransportError
    from tabhyper_update.rest.downloads import columns_in_file

    tds = (
        b"<datasource><connection><metadata-records>"
        b"<metadata-record class='column'><remote-name>id</remote-name>"
        b"<parent-name>[Extract]</parent-name><remote-type>20</remote-type></metadata-record>"
        b"<metadata-record class='column'><remote-name>amount</remote-name>"
        b"<parent-name>[Extract]</parent-name><remote-type>131</remote-type>"
        b"<precision>12</precision><scale>2</scale></metadata-record>"
        b"<metadata-record class='column'><remote-name>code</remote-name>"
        b"<parent-name>[Extract]</parent-name><remote-type>129</remote-type>"
        b"<width>8</width></metadata-record>"
        b"<metadata-record class='column'><remote-name>kind</remote-name>"
        b"<parent-name>[Extract]</parent-name><local-type>real</local-type></metadata-record>"
        b"<metadata-record class='capability'><remote-name>x</remote-name></metadata-record>"
        b"</metadata-records></connection></datasource>"
    )
    expected = {
        "Extract": {"id": "BIGINT", "amount": "NUMERIC(12,2)", "code": "VARCHAR(8)", "kind": None}
    }
    assert columns_in_file(tds) == expected
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as out:
        out.writestr("Orders.tds", tds)
    assert columns_in_file(packed.getvalue()) == expected
    with pytest.raises(TransportError, match="could not be read"):
        columns_in_file(b"<datasource><unclosed></datasource>")

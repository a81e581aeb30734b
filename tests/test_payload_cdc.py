"""Change sets: each convention, last change wins per key, derived actions, clear errors."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from tabhyper_update import ChangeSet, Payload, PayloadError, build_payload
from tabhyper_update.values.errors import ArgumentTypeError

from ._util import read_columns, read_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def tables(payload: Any) -> dict[str, list[tuple[Any, ...]]]:
    (part,) = payload.parts
    return {name: read_rows(part.path, name) for name in part.tables}


@pytest.mark.every_spark
def test_delta_change_data_feed(spark: SparkSession) -> None:
    ts = datetime(2024, 5, 1)
    rows = [
        # key 1: inserted, updated twice, deleted -> delete
        (1, "a", "insert", 1, ts),
        (1, "a", "update_preimage", 2, ts),
        (1, "b", "update_postimage", 2, ts),
        (1, "b", "update_preimage", 3, ts),
        (1, "c", "update_postimage", 3, ts),
        (1, "c", "delete", 4, ts),
        # key 2: deleted, then inserted again -> upsert with the new values
        (2, "old", "delete", 1, ts),
        (2, "new", "insert", 5, ts),
        # key 3: updated -> upsert with the post-image
        (3, "before", "update_preimage", 7, ts),
        (3, "after", "update_postimage", 7, ts),
        # key 4: inserted
        (4, "x", "insert", 2, ts),
    ]
    df = spark.createDataFrame(
        rows,
        "id long, v string, _change_type string, _commit_version long, _commit_timestamp timestamp",
    )
    with build_payload(
        df, ChangeSet("id", op_column="_change_type", order_by="_commit_version")
    ) as payload:
        assert tables(payload) == {
            "upserts": [(2, "new"), (3, "after"), (4, "x")],
            "deletes": [(1,)],
        }
        # Change-feed metadata stays out of the payload.
        assert payload.tables["upserts"].column_names == ["id", "v"]
        assert json.loads(payload.derived_actions().to_json()) == {
            "actions": [
                {
                    "action": "delete",
                    "target-schema": "Extract",
                    "target-table": "Extract",
                    "source-schema": "Extract",
                    "source-table": "deletes",
                    "condition": {"op": "eq", "target-col": "id", "source-col": "id"},
                },
                {
                    "action": "upsert",
                    "target-schema": "Extract",
                    "target-table": "Extract",
                    "source-schema": "Extract",
                    "source-table": "upserts",
                    "condition": {"op": "eq", "target-col": "id", "source-col": "id"},
                },
            ]
        }
        payload.validate(payload.derived_actions())


def test_delta_defaults_order_by_to_commit_version(spark: SparkSession) -> None:
    df = spark.createDataFrame(
        [(1, "a", "insert", 1), (1, "b", "update_postimage", 2)],
        "id int, v string, _change_type string, _commit_version long",
    )
    with build_payload(df, ChangeSet("id")) as payload:
        assert tables(payload) == {"upserts": [(1, "b")]}


def test_debezium_on_composite_key(spark: SparkSession) -> None:
    rows = [
        ("eu", 1, "snap", "r", 100),
        ("eu", 1, "upd", "u", 200),
        ("eu", 2, "created", "c", 150),
        ("eu", 2, None, "d", 300),
        ("us", 1, "created", "c", 100),
    ]
    df = spark.createDataFrame(rows, "region string, id int, v string, op string, ts_ms long")
    with build_payload(
        df, ChangeSet(["region", "id"], op_column="op", order_by="ts_ms")
    ) as payload:
        assert tables(payload) == {
            "upserts": [("eu", 1, "upd"), ("us", 1, "created")],
            "deletes": [("eu", 2)],
        }
        # The delete table holds the key columns only.
        assert [c[0] for c in read_columns(payload.parts[0].path, "deletes")] == ["region", "id"]
        actions = payload.derived_actions(target_table="Orders")
        assert actions.actions[0].to_dict()["condition"] == {
            "op": "and",
            "args": [
                {"op": "eq", "target-col": "region", "source-col": "region"},
                {"op": "eq", "target-col": "id", "source-col": "id"},
            ],
        }
        assert actions.actions[1].target_table == "Orders"


def test_plain_iud_with_only_upserts_derives_only_an_upsert(spark: SparkSession) -> None:
    df = spark.createDataFrame(
        [(1, "I", 1), (2, "U", 1), (1, "U", 2)], "id int, op string, seq int"
    )
    with build_payload(df, ChangeSet("id", op_column="op", order_by="seq")) as payload:
        assert tables(payload) == {"upserts": [(1,), (2,)]}
        assert [a.action for a in payload.derived_actions().actions] == ["upsert"]


def test_user_op_map_and_kept_columns(spark: SparkSession) -> None:
    df = spark.createDataFrame(
        [(1, "NEW", 1), (2, "GONE", 1), (3, "NOISE", 1)], "id int, kind string, seq int"
    )
    with build_payload(
        df,
        ChangeSet(
            "id",
            op_column="kind",
            order_by="seq",
            keep_columns=["seq"],
            op_map={"NEW": "insert", "GONE": "delete", "NOISE": "ignore"},
        ),
    ) as p:
        assert tables(p) == {"upserts": [(1, 1)], "deletes": [(2,)]}


@pytest.mark.parametrize("escaped", ["false", "true"])
def test_op_values_mean_themselves_under_either_literal_escaping(
    spark: SparkSession, escaped: str
) -> None:
    # Plain values go to Spark as quoted text, the others as their bytes: either way an op
    # value matches exactly itself, whatever the parser does with backslashes.
    ops = {"I": "upsert", "it's": "upsert", "a\\b": "delete", "a\\\\b": "ignore"}
    ops |= {"über": "delete", "x-y.z:1": "upsert", "%_": "upsert", "": "delete"}
    rows = [(i, op, 1) for i, op in enumerate(ops)]
    df = spark.createDataFrame(rows, "id int, op string, seq int")
    before = spark.conf.get("spark.sql.parser.escapedStringLiterals") or "false"
    spark.conf.set("spark.sql.parser.escapedStringLiterals", escaped)
    try:
        with build_payload(df, ChangeSet("id", op_column="op", order_by="seq", op_map=ops)) as p:
            found = tables(p)
    finally:
        spark.conf.set("spark.sql.parser.escapedStringLiterals", before)
    meaning = list(ops.values())
    assert found["upserts"] == [(i,) for i, m in enumerate(meaning) if m == "upsert"]
    assert found["deletes"] == [(i,) for i, m in enumerate(meaning) if m == "delete"]


def test_empty_change_set_is_a_clear_no_op(spark: SparkSession, tmp_path: Path) -> None:
    # Every change ignored (a Debezium heartbeat-like op): nothing to send.
    df = spark.createDataFrame(
        [(1, "noise", 1)], "id int, _change_type string, _commit_version long"
    )
    payload = build_payload(
        df,
        ChangeSet("id", op_map={"insert": "upsert", "noise": "ignore"}),
        output_dir=tmp_path / "out",
    )
    assert payload.is_empty
    assert payload.parts == []
    with pytest.raises(PayloadError, match="an empty change set has no actions"):
        payload.derived_actions()
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        (
            [(None, "I", 1), (2, "I", 1)],
            r"key column 'id' is NULL in the change set, e.g. the row with key \(id=None\)",
        ),
        (
            [(1, "I", 1), (1, "X", 0), (2, "Z", 1)],
            r"op column 'op' holds the unknown value '[XZ]', e.g. for key \(id=[12]\) \(2 "
            "offending rows",
        ),
        (
            [(1, "I", 5), (1, "U", 5), (2, "I", 1)],
            r"several changes for key \(id=1\) share the greatest order_by value",
        ),
    ],
    ids=["null-key", "unknown-op", "tie"],
)
def test_change_set_errors_name_the_column_and_a_key(
    spark: SparkSession, rows: list[tuple[Any, ...]], words: str, tmp_path: Path
) -> None:
    df = spark.createDataFrame(rows, "id int, op string, seq int")
    with pytest.raises(PayloadError, match=words):
        build_payload(
            df,
            ChangeSet("id", op_column="op", order_by="seq"),
            staging_dir=tmp_path / "stage",
            output_dir=tmp_path / "out",
        )
    # Nothing is left behind on failure.
    assert list((tmp_path / "stage").iterdir()) == []
    assert list((tmp_path / "out").iterdir()) == []


def test_unknown_op_hidden_behind_a_later_change_is_still_caught(spark: SparkSession) -> None:
    df = spark.createDataFrame([(1, "BOGUS", 1), (1, "U", 9)], "id int, op string, seq int")
    with pytest.raises(PayloadError, match="unknown value 'BOGUS'"):
        build_payload(df, ChangeSet("id", op_column="op", order_by="seq"))


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"key": "nope", "op_column": "op", "order_by": "seq"}, "key column 'nope' is not in"),
        ({"key": "id", "op_column": "nope", "order_by": "seq"}, "op column 'nope' is not in"),
        ({"key": "id", "op_column": "op", "order_by": "nope"}, "order_by column 'nope' is not in"),
        ({"key": "id", "op_column": "op"}, "order_by= is required"),
        ({"key": [], "op_column": "op", "order_by": "seq"}, "at least one column"),
        ({"key": ["id", "id"], "op_column": "op", "order_by": "seq"}, "names a column twice"),
        (
            {"key": "id", "op_column": "op", "order_by": "seq", "op_map": {"I": "merge"}},
            r"op_map\['I'\] is 'merge'",
        ),
        (
            {
                "key": "id",
                "order_by": "seq",
                "op_column": "op",
                "upsert_table": "t",
                "delete_table": "t",
            },
            "must differ",
        ),
    ],
)
def test_bad_change_set_options_fail_before_any_spark_job(
    spark: SparkSession, kwargs: dict[str, Any], words: str, tmp_path: Path
) -> None:
    df = spark.createDataFrame([(1, "I", 1)], "id int, op string, seq int")
    with pytest.raises(PayloadError, match=words):
        build_payload(df, ChangeSet(**kwargs), staging_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda df: build_payload(df, cast(Any, {"key": "id"})), "second argument is a ChangeSet"),
        (
            lambda df: ChangeSet(cast(Any, 3)),
            "or a list of column names, got 3",
        ),
        (
            lambda df: ChangeSet("id", order_by=cast(Any, [1])),
            "order_by= takes a column name",
        ),
        (lambda df: ChangeSet("id", op_map=cast(Any, ["I"])), "op_map= takes a mapping"),
    ],
)
def test_a_change_set_of_the_wrong_shape_is_named(
    spark: SparkSession, call: Any, words: str
) -> None:
    df = spark.createDataFrame([(1, "I", 1)], "id int, op string, seq int")
    with pytest.raises(ArgumentTypeError, match=words):
        call(df)


def test_a_change_set_describes_itself_and_round_trips(tmp_path: Path, spark: SparkSession) -> None:
    spec = ChangeSet(
        ["region", "id"], op_column="op", order_by="seq", op_map={"X": "delete", "I": "upsert"}
    )
    assert spec.key == ("region", "id")
    assert spec.order_by == ("seq",)
    assert ChangeSet.from_dict(spec.to_dict()) == spec
    assert ChangeSet(["region", "id"], op_column="op", order_by="seq") != spec  # op_map counts
    assert "region" in repr(spec)
    # The manifest keeps it, so a payload applied later derives the same actions.
    df = spark.createDataFrame(
        [("eu", 1, "X", 1), ("eu", 2, "I", 1)], "region string, id int, op string, seq int"
    )
    payload = build_payload(df, spec, output_dir=tmp_path / "out", keep_files=True)
    loaded = Payload.load(payload.save_manifest(tmp_path / "kept"))
    assert loaded.change_set == spec
    assert loaded.derived_actions(target_table="Orders") == payload.derived_actions(
        target_table="Orders"
    )


def test_op_column_is_detected_for_debezium(spark: SparkSession) -> None:
    df = spark.createDataFrame([(1, "c", 1)], "id int, op string, ts_ms long")
    with build_payload(df, ChangeSet("id", order_by="ts_ms")) as payload:
        assert tables(payload) == {"upserts": [(1,)]}


@pytest.mark.every_spark
def test_content_digest_is_stable_across_rebuilds_and_layouts(spark: SparkSession) -> None:
    df = spark.range(5000).selectExpr("id", "CAST(id AS STRING) AS v", "'U' AS op", "1 AS seq")

    def digest(frame: Any) -> str:
        with build_payload(frame, ChangeSet("id", op_column="op", order_by="seq")) as payload:
            return payload.parts[0].content_digest

    first = digest(df)
    assert digest(df.repartition(3)) == first  # another layout, the same content
    assert digest(df.filter("id != 7")) != first
    assert digest(df.selectExpr("id", "CONCAT(v, '!') AS v", "op", "seq")) != first


CDF = "id long, v string, _change_type string, _commit_version long"


def test_delta_updates_that_move_keys_delete_the_old_keys(spark: SparkSession) -> None:
    rows = [
        (1, "a", "insert", 0),
        (2, "b", "insert", 0),
        (3, "c", "insert", 0),
        # UPDATE t SET id = id + 1 (one commit): pre-images 1, 2, 3; post-images 2, 3, 4.
        (1, "a", "update_preimage", 1),
        (2, "b", "update_preimage", 1),
        (3, "c", "update_preimage", 1),
        (2, "a", "update_postimage", 1),
        (3, "b", "update_postimage", 1),
        (4, "c", "update_postimage", 1),
        # UPDATE t SET id = 20 WHERE id = 10 (10 came in an earlier slice).
        (10, "x", "update_preimage", 2),
        (20, "x", "update_postimage", 2),
    ]
    df = spark.createDataFrame(rows, CDF)
    with build_payload(df, ChangeSet("id")) as payload:
        assert tables(payload) == {
            "upserts": [(2, "a"), (3, "b"), (4, "c"), (20, "x")],
            "deletes": [(1,), (10,)],
        }


def test_text_positions_are_refused_unless_their_order_is_said(spark: SparkSession) -> None:
    df = spark.createDataFrame(
        [(1, "old", "U", "999"), (1, "new", "U", "1000")], "id int, v string, op string, seq string"
    )
    with pytest.raises(PayloadError, match=r"order_by column 'seq' is text.*order_as="):
        build_payload(df, ChangeSet("id", op_column="op", order_by="seq"))
    with build_payload(
        df, ChangeSet("id", op_column="op", order_by="seq", order_as={"seq": "number"})
    ) as payload:
        assert tables(payload) == {"upserts": [(1, "new")]}
    # The caller may say text order is meant: then '999' is the greater.
    with build_payload(
        df, ChangeSet("id", op_column="op", order_by="seq", order_as={"seq": "text"})
    ) as payload:
        assert tables(payload) == {"upserts": [(1, "old")]}
    with pytest.raises(PayloadError, match="order_as names 'other'"):
        ChangeSet("id", op_column="op", order_by="seq", order_as={"other": "number"})
    with pytest.raises(PayloadError, match=r"order_as\['seq'\] is 'roman'"):
        ChangeSet("id", op_column="op", order_by="seq", order_as={"seq": "roman"})


def test_a_change_without_a_position_is_an_error(spark: SparkSession) -> None:
    df = spark.createDataFrame(
        [(1, "a", "U", None), (1, "b", "U", 5)], "id int, v string, op string, seq long"
    )
    with pytest.raises(PayloadError, match=r"key \(id=1\), op 'U', has no position"):
        build_payload(df, ChangeSet("id", op_column="op", order_by="seq"))
    # A number written as text that is none.
    text = spark.createDataFrame([(1, "a", "U", "12x")], "id int, v string, op string, seq string")
    with pytest.raises(PayloadError, match="does not read as the position"):
        build_payload(
            text, ChangeSet("id", op_column="op", order_by="seq", order_as={"seq": "number"})
        )
    # A NULL in a later order_by column only ranks lowest (a tie-breaker).
    tie_break = spark.createDataFrame(
        [(1, "a", "U", 5, None), (1, "b", "U", 5, 1)],
        "id int, v string, op string, seq long, n int",
    )
    with build_payload(
        tie_break, ChangeSet("id", op_column="op", order_by=["seq", "n"])
    ) as payload:
        assert tables(payload) == {"upserts": [(1, "b")]}

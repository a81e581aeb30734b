"""The local engine: every action, operator and constant type, refusals, atomicity, injection."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from tabhyper_update import Delete, Insert, Replace, Update, Upsert, keys_match, source, target
from tabhyper_update.local.engine import SourceColumns, apply
from tabhyper_update.local.hyper import quote_name
from tabhyper_update.testing.files import make_hyper
from tabhyper_update.values.actions import ActionBatch
from tabhyper_update.values.conditions import Comparison
from tabhyper_update.values.errors import ApplyError

from ._util import read_rows

ORDERS = "id INT NOT NULL, name TEXT, amount DOUBLE PRECISION, ts TIMESTAMP, day DATE, ok BOOL"
ORDER_ROWS = [
    "(1, 'apple', 1.5, TIMESTAMP '2024-01-01 00:00:00', DATE '2024-01-01', TRUE)",
    "(2, 'banana', 2.5, TIMESTAMP '2024-06-01 12:00:00', DATE '2024-06-01', FALSE)",
    "(3, 'cherry pie', NULL, NULL, NULL, NULL)",
    "(4, NULL, 4.0, TIMESTAMP '2023-12-31 23:59:59', DATE '2023-12-31', TRUE)",
]


@pytest.fixture
def orders(tmp_path: Path) -> Path:
    return make_hyper(tmp_path / "target.hyper", {"Orders": (ORDERS, ORDER_ROWS)})


def ids(path: Path, table: str = "Orders") -> list[int]:
    return [r[0] for r in read_rows(path, table)]


def payload(tmp_path: Path, tables: dict[str, tuple[str, list[str]]]) -> Path:
    return make_hyper(tmp_path / "payload.hyper", tables)


# -- each action ---------------------------------------------------------------------------------


def test_insert_fills_missing_columns_with_null(orders: Path, tmp_path: Path) -> None:
    p = payload(tmp_path, {"new": ("id INT, name TEXT", ["(10, 'kiwi')", "(11, 'lime')"])})
    assert apply([Insert(target_table="Orders", source_table="new")], target=orders, payload=p) == [
        2
    ]
    rows = read_rows(orders, "Orders")
    assert rows[-2:] == [(10, "kiwi", None, None, None, None), (11, "lime", None, None, None, None)]


def test_update_sets_source_columns_on_matching_rows(orders: Path, tmp_path: Path) -> None:
    p = payload(
        tmp_path,
        {"chg": ("id INT, amount DOUBLE PRECISION", ["(1, 10.0)", "(3, 30.0)", "(99, 0.0)"])},
    )
    apply(
        [Update(target_table="Orders", source_table="chg", condition=keys_match("id"))],
        target=orders,
        payload=p,
    )
    assert [(r[0], r[2]) for r in read_rows(orders, "Orders")] == [
        (1, 10.0),
        (2, 2.5),
        (3, 30.0),
        (4, 4.0),
    ]


@pytest.mark.parametrize("partial", ["keep", "null", "refuse"])
@pytest.mark.parametrize("action", [Update, Upsert])
def test_an_update_from_a_source_lacking_columns_as_each_server_meets_it(
    orders: Path, tmp_path: Path, partial: str, action: type[Update] | type[Upsert]
) -> None:
    """Rows updated from a source that holds the key and one column: the others kept as
    they were (Hyper's ``UPDATE``), set to NULL, or the batch refused and nothing changed."""
    before = read_rows(orders, "Orders")
    p = payload(tmp_path, {"chg": ("id INT, name TEXT", ["(1, 'apricot')"])})
    batch = [action(target_table="Orders", source_table="chg", condition=keys_match("id"))]
    columns = SourceColumns(partial=partial)  # type: ignore[arg-type]
    if partial == "refuse":
        with pytest.raises(ApplyError, match=r"lacks column\(s\) 'amount', 'ts', 'day', 'ok'"):
            apply(batch, target=orders, payload=p, source_columns=columns)
        assert read_rows(orders, "Orders") == before
        return
    apply(batch, target=orders, payload=p, source_columns=columns)
    kept = before[0][2:] if partial == "keep" else (None, None, None, None)
    assert read_rows(orders, "Orders") == [(1, "apricot", *kept), *before[1:]]


def test_delete_by_source_keys(orders: Path, tmp_path: Path) -> None:
    p = payload(tmp_path, {"gone": ("id INT", ["(2)", "(4)", "(77)"])})
    assert apply(
        [Delete(target_table="Orders", source_table="gone", condition=keys_match("id"))],
        target=orders,
        payload=p,
    ) == [2]
    assert ids(orders) == [1, 3]


def test_delete_by_constant_needs_no_payload(orders: Path) -> None:
    apply([Delete(target_table="Orders", condition=target("amount") > 2)], target=orders)
    assert ids(orders) == [1, 3]  # NULL amount never matches


def test_replace(orders: Path, tmp_path: Path) -> None:
    p = payload(tmp_path, {"all": (ORDERS.replace(" NOT NULL", ""), [ORDER_ROWS[2]])})
    apply([Replace(target_table="Orders", source_table="all")], target=orders, payload=p)
    assert ids(orders) == [3]


def test_upsert_updates_then_inserts(orders: Path, tmp_path: Path) -> None:
    p = payload(tmp_path, {"up": ("id INT, name TEXT", ["(2, 'BANANA')", "(5, 'date')"])})
    assert apply(
        [Upsert(target_table="Orders", source_table="up", condition=keys_match("id"))],
        target=orders,
        payload=p,
    ) == [2]
    assert [(r[0], r[1]) for r in read_rows(orders, "Orders")] == [
        (1, "apple"),
        (2, "BANANA"),
        (3, "cherry pie"),
        (4, None),
        (5, "date"),
    ]


def test_cdc_delete_then_upsert_on_a_composite_key(tmp_path: Path) -> None:
    target_db = make_hyper(
        tmp_path / "t.hyper",
        {
            "Extract": (
                "region TEXT, id INT, v TEXT",
                ["('eu', 1, 'a')", "('eu', 2, 'b')", "('us', 1, 'c')"],
            )
        },
    )
    p = payload(
        tmp_path,
        {
            "deletes": ("region TEXT, id INT", ["('eu', 2)"]),
            "upserts": ("region TEXT, id INT, v TEXT", ["('us', 1, 'C')", "('us', 2, 'new')"]),
        },
    )
    key = keys_match("region", "id")
    apply(
        [
            Delete(target_table="Extract", source_table="deletes", condition=key),
            Upsert(target_table="Extract", source_table="upserts", condition=key),
        ],
        target=target_db,
        payload=p,
    )
    assert read_rows(target_db, "Extract", order_by="1, 2") == [
        ("eu", 1, "a"),
        ("us", 1, "C"),
        ("us", 2, "new"),
    ]


# -- every operator and constant type ------------------------------------------------------------

UTC = timezone.utc


@pytest.mark.parametrize(
    ("condition", "deleted"),
    [
        (target("id") == 2, [2]),
        (target("id") != 2, [1, 3, 4]),
        (target("id") > 2, [3, 4]),
        (target("id") < 2, [1]),
        (target("id") >= 3, [3, 4]),
        (target("id") <= 1, [1]),
        (target("amount") == 2.5, [2]),
        (target("amount") < 2, [1]),
        (target("name") == "apple", [1]),
        (target("name") != "apple", [2, 3]),  # NULL name matches neither
        (target("name").contains("an"), [2]),
        (target("name").contains("pie"), [3]),
        (target("name").contains("%"), []),  # no LIKE wildcards
        (target("ok") == True, [1, 4]),
        (target("ok") == False, [2]),
        (target("name").is_(None), [4]),
        (target("amount").is_null(type="double"), [3]),
        (target("name").is_("banana"), [2]),
        (target("ts") < datetime(2024, 1, 1, tzinfo=UTC), [4]),
        (target("ts") <= datetime(2024, 1, 1, tzinfo=UTC), [1, 4]),
        # An instant with an offset: 2024-01-01 01:00+01:00 is midnight UTC.
        (target("ts") == datetime(2024, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))), [1]),
        (target("ts") > datetime(2024, 3, 1), [2]),  # naive = UTC
        (target("day") < date(2024, 1, 1), [4]),
        (target("day") >= datetime(2024, 6, 1, tzinfo=UTC), [2]),
        ((target("id") == 1) | (target("id") == 3), [1, 3]),
        ((target("id") > 1) & (target("ok") == True), [4]),
        (((target("id") > 1) & (target("id") < 4)) | target("name").is_(None), [2, 3, 4]),
    ],
)
def test_delete_by_each_operator_and_constant(
    orders: Path, condition: Any, deleted: list[int]
) -> None:
    apply([Delete(target_table="Orders", condition=condition)], target=orders)
    assert ids(orders) == [i for i in [1, 2, 3, 4] if i not in deleted]


def test_constants_from_json_case_insensitive_boolean_and_offsets(orders: Path) -> None:
    batch = ActionBatch.from_dict(
        {
            "actions": [
                {
                    "action": "delete",
                    "target-table": "Orders",
                    "condition": {
                        "op": "or",
                        "args": [
                            {
                                "op": "eq",
                                "target-col": "ok",
                                "const": {"type": "boolean", "v": "FALSE"},
                            },
                            {
                                "op": "eq",
                                "target-col": "ts",
                                "const": {"type": "datetime", "v": "2023-12-31T18:59:59-0500"},
                            },
                        ],
                    },
                }
            ]
        }
    )
    apply(batch, target=orders)
    assert ids(orders) == [1, 3]


@pytest.mark.parametrize(
    ("op", "expected"),
    [("eq", [1]), ("neq", [1, 2, 3]), ("is", [1, 4]), ("gt", [2, 3]), ("lte", [1, 2])],
)
def test_source_column_comparisons_with_nulls(tmp_path: Path, op: str, expected: list[int]) -> None:
    t = make_hyper(
        tmp_path / "t.hyper",
        {"T": ("id INT, v INT", ["(1, 10)", "(2, 20)", "(3, 30)", "(4, NULL)"])},
    )
    p = payload(tmp_path, {"S": ("v INT", ["(10)", "(25)", "(NULL)"])})
    apply(
        [
            Delete(
                target_table="T",
                source_table="S",
                condition=Comparison(op=op, target_col="v", source_col="v"),
            )
        ],
        target=t,
        payload=p,
    )
    assert ids(t, "T") == [i for i in [1, 2, 3, 4] if i not in expected]


def test_source_column_against_constant(orders: Path, tmp_path: Path) -> None:
    p = payload(tmp_path, {"gone": ("id INT, flag BOOL", ["(1, TRUE)", "(2, FALSE)"])})
    apply(
        [
            Delete(
                target_table="Orders",
                source_table="gone",
                condition=(target("id") == source("id")) & (source("flag") == True),
            )
        ],
        target=orders,
        payload=p,
    )
    assert ids(orders) == [2, 3, 4]


def test_every_row_condition(orders: Path) -> None:
    apply([Delete(target_table="Orders", condition=True)], target=orders)
    assert ids(orders) == []


# -- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tables", "action", "words"),
    [
        (
            {"new": ("id INT, colour TEXT", ["(9, 'red')"])},
            Insert(target_table="Orders", source_table="new"),
            "source column(s) 'colour' of Extract.new do not exist in target table Extract.Orders",
        ),
        (
            {"all": ("id INT, name TEXT", ["(1, 'x')"])},
            Replace(target_table="Orders", source_table="all"),
            "replace needs the same column names",
        ),
        (
            {"all": (ORDERS.replace("id INT", "id BIGINT"), [])},
            Replace(target_table="Orders", source_table="all"),
            "'id' is BIG_INT in Extract.all but INT in Extract.Orders",
        ),
        (
            {"gone": ("id INT, name TEXT", ["(1, 'x')"])},
            Delete(target_table="Orders", source_table="gone", condition=keys_match("id")),
            "may hold only the columns its condition names; Extract.gone also has 'name'",
        ),
        (
            {"dup": ("id INT, name TEXT", ["(2, 'x')", "(2, 'y')"])},
            Update(target_table="Orders", source_table="dup", condition=keys_match("id")),
            "matched by more than one row of source table Extract.dup",
        ),
        (
            {"dup": ("id INT, amount DOUBLE PRECISION", ["(1, 5)", "(2, 6)"])},
            Upsert(
                target_table="Orders",
                source_table="dup",
                condition=target("amount") < source("amount"),
            ),
            "matched by more than one row",
        ),
        (
            {"bad": ("id TEXT", ["('1')"])},
            Insert(target_table="Orders", source_table="bad"),
            "column 'id' is TEXT in source table Extract.bad but INT in target table",
        ),
        (
            {"bad": ("id TEXT", ["('1')"])},
            Delete(target_table="Orders", source_table="bad", condition=keys_match("id")),
            "cannot compare INT with TEXT",
        ),
        (
            {"new": ("id INT", ["(1)"])},
            Insert(target_table="Missing", source_table="new"),
            "Specified table does not exist: Extract.Missing (errorCode=410012)",
        ),
        (
            {"new": ("id INT", ["(1)"])},
            Insert(target_table="Orders", source_table="nope"),
            "Specified table does not exist: Extract.nope (errorCode=410012)",
        ),
        (
            {"new": ("id INT", ["(1)"])},
            Update(target_table="Orders", source_table="new", condition=keys_match("nope")),
            "target table Extract.Orders has no column 'nope'",
        ),
    ],
)
def test_refusals_name_the_action_and_reason_and_change_nothing(
    orders: Path, tmp_path: Path, tables: Any, action: Any, words: str
) -> None:
    before = read_rows(orders, "Orders")
    p = payload(tmp_path, tables)
    # A row matched twice is refused under strict semantics only (Hyper uses one of them:
    # see test_semantics.py); every other refusal holds under both.
    semantics: Any = "strict" if "matched by more than one row" in words else "hyper"
    with pytest.raises(ApplyError) as caught:
        apply(
            [Delete(target_table="Orders", condition=target("id") == 1), action],
            target=orders,
            payload=p,
            semantics=semantics,
        )
    assert caught.value.action_index == 1
    assert str(caught.value).startswith("action 1 (")
    assert words in str(caught.value)
    assert read_rows(orders, "Orders") == before  # the first action was rolled back


def test_a_failing_third_action_leaves_the_target_unchanged(orders: Path, tmp_path: Path) -> None:
    before = read_rows(orders, "Orders")
    p = payload(
        tmp_path, {"new": ("id INT, name TEXT", ["(7, 'x')"]), "nulls": ("id INT", ["(NULL)"])}
    )
    with pytest.raises(ApplyError, match="action 2") as caught:
        apply(
            [
                Insert(target_table="Orders", source_table="new"),
                Delete(target_table="Orders", condition=target("id") == 1),
                Insert(target_table="Orders", source_table="nulls"),
            ],  # NULL into NOT NULL
            target=orders,
            payload=p,
        )
    assert caught.value.action_index == 2
    assert read_rows(orders, "Orders") == before


def test_missing_files_and_payload(orders: Path, tmp_path: Path) -> None:
    with pytest.raises(ApplyError, match="does not exist"):
        apply([Delete(target_table="Orders", condition=True)], target=tmp_path / "none.hyper")
    with pytest.raises(ApplyError, match="no payload was given"):
        apply([Insert(target_table="Orders", source_table="x")], target=orders)


# -- injection -------------------------------------------------------------------------------------


def test_hostile_names_and_values_cannot_change_the_sql(tmp_path: Path) -> None:
    table = 'Orders"; DROP TABLE "Extract"."Orders"; --'
    column = "na'me\"; --"
    t = make_hyper(
        tmp_path / "t.hyper",
        {table: (f"id INT, {quote_name(column)} TEXT", ["(1, 'x')", "(2, 'it''s; DROP --')"])},
    )
    apply([Delete(target_table=table, condition=target(column) == "it's; DROP --")], target=t)
    assert read_rows(t, table) == [(1, "x")]
    apply([Delete(target_table=table, condition=target(column).contains("'; --"))], target=t)
    assert read_rows(t, table) == [(1, "x")]
    p = payload(tmp_path, {"x'); DROP": (f"id INT, {quote_name(column)} TEXT", ["(3, 'y''--')"])})
    apply([Insert(target_table=table, source_table="x'); DROP")], target=t, payload=p)
    assert read_rows(t, table) == [(1, "x"), (3, "y'--")]


def test_const_json_values_are_not_sql(orders: Path) -> None:
    batch = ActionBatch.from_dict(
        {
            "actions": [
                {
                    "action": "delete",
                    "target-table": "Orders",
                    "condition": {
                        "op": "eq",
                        "target-col": "name",
                        "const": {"type": "string", "v": "x' OR '1'='1"},
                    },
                }
            ]
        }
    )
    apply(batch, target=orders)
    assert ids(orders) == [1, 2, 3, 4]


def test_relative_paths_name_files_in_the_callers_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shared Hyper process started elsewhere: relative paths must still mean the
    # caller's working directory, as the README's troubleshooting recipe uses them.
    read_rows(make_hyper(tmp_path / "warm.hyper", {"T": ("id INT", [])}), "T")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    make_hyper("copy.hyper", {"T": ("id INT", ["(1)"])})
    make_hyper("payload.hyper", {"new": ("id INT", ["(2)"])})
    apply(
        [Insert(target_table="T", source_table="new")],
        target="copy.hyper",
        payload="payload.hyper",
    )
    assert read_rows("copy.hyper", "T") == [(1,), (2,)]
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["copy.hyper", "payload.hyper"]


# -- what the strict engine refuses rather than change a value ------------------------------------

NARROW = "id INT NOT NULL, amount NUMERIC(12, 2), code VARCHAR(5), small SMALLINT"


@pytest.mark.parametrize(
    ("source_columns", "row", "words"),
    [
        ("id INT, amount NUMERIC(12, 4)", "(9, 1.2345)", "column 'amount': value 1.2345"),
        ("id INT, amount NUMERIC(18, 2)", "(9, 123456789012.50)", "value 123456789012.50"),
        ("id BIGINT, amount NUMERIC(12, 2)", "(3000000000, 1.00)", "column 'id': value 3000000000"),
        ("id INT, code TEXT", "(9, 'abcdefgh')", "column 'code': value abcdefgh"),
        ("id INT, small INT", "(9, 70000)", "column 'small': value 70000"),
    ],
)
@pytest.mark.parametrize("how", ["insert", "upsert"])
def test_a_value_the_target_column_would_change_is_refused_naming_column_and_value(
    tmp_path: Path, source_columns: str, row: str, words: str, how: str
) -> None:
    target_file = make_hyper(tmp_path / "t.hyper", {"Orders": (NARROW, ["(1, 1.50, 'ab', 7)"])})
    before = read_rows(target_file, "Orders")
    p = payload(tmp_path, {"new": (source_columns, [row])})
    action: Any = (
        Insert(target_table="Orders", source_table="new")
        if how == "insert"
        else Upsert(target_table="Orders", source_table="new", condition=keys_match("id"))
    )
    with pytest.raises(ApplyError, match="this batch changed nothing") as caught:
        apply([action], target=target_file, payload=p, semantics="strict")
    assert words in str(caught.value)
    assert read_rows(target_file, "Orders") == before


@pytest.mark.parametrize(
    ("source_columns", "row"),
    [
        ("id INT, amount NUMERIC(12, 4)", "(9, 1.2300)"),  # more scale, same value
        ("id BIGINT, amount NUMERIC(10, 1)", "(9, 12.5)"),  # in range, fewer digits
        ("id INT, code VARCHAR(20)", "(9, 'abcde')"),  # fits
        ("id INT, small BIGINT", "(9, 32767)"),
    ],
)
def test_a_wider_type_whose_values_fit_is_applied_unchanged(
    tmp_path: Path, source_columns: str, row: str
) -> None:
    target_file = make_hyper(tmp_path / "t.hyper", {"Orders": (NARROW, ["(1, 1.50, 'ab', 7)"])})
    p = payload(tmp_path, {"new": (source_columns, [row])})
    apply([Insert(target_table="Orders", source_table="new")], target=target_file, payload=p)
    assert ids(target_file) == [1, 9]


def test_a_file_the_sdk_only_reads_is_opened_for_reading_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A payload file may be the caller's own: the SDK reads it as the main database would
    # be read (unqualified names, the catalog), and Hyper refuses to write into it.
    from tableauhyperapi import HyperException
    from tableauhyperapi.hyperexception import ContextId

    from tabhyper_update import Payload
    from tabhyper_update.local import hyper

    file = make_hyper(
        tmp_path / "mine.hyper", {"Extract": ("id BIGINT, v TEXT", ["(1, 'a')", "(2, 'b')"])}
    )
    before = file.read_bytes()
    with hyper.connect(file, read_only=True) as conn:
        assert conn.execute_scalar_query('SELECT COUNT(*) FROM "Extract"."Extract"') == 2
        (schema,) = [s for s in conn.catalog.get_schema_names() if s.name.unescaped == "Extract"]
        assert [str(t.name.unescaped) for t in conn.catalog.get_table_names(schema)] == ["Extract"]
        with pytest.raises(HyperException, match="read-only"):
            conn.execute_command('INSERT INTO "Extract"."Extract" VALUES (3, \'c\')')
    payload = Payload.from_hyper(file)
    assert payload.parts[0].tables["Extract"].row_count == 2
    target = make_hyper(tmp_path / "target.hyper", {"Extract": ("id BIGINT, v TEXT", [])})
    apply(
        ActionBatch(actions=[Insert(source_table="Extract", target_table="Extract")]),
        target=target,
        payload=file,
    )
    assert sorted(read_rows(target, "Extract")) == [(1, "a"), (2, "b")]
    assert file.read_bytes() == before

    # A Hyper that does not know the option: the file is attached as before, and the
    # answer is remembered for the process.
    class OldHyper:
        def __init__(self) -> None:
            self.sent: list[str] = []

        def execute_command(self, sql: str) -> None:
            self.sent.append(sql)
            if "access_mode" in sql:
                raise HyperException(
                    ContextId(0), 'unsupported database attach option "access_mode"'
                )

    monkeypatch.setattr(hyper, "_read_only_attach", None)
    old = OldHyper()
    hyper.attach_read_only(old, file, "src")
    hyper.attach_read_only(old, file, "src2")
    assert [s.endswith("WITH (access_mode = 'readonly')") for s in old.sent] == [True, False, False]
    # Any other failure (a missing file) is raised, never hidden by the fallback.
    monkeypatch.setattr(hyper, "_read_only_attach", None)
    with hyper.connect() as conn, pytest.raises(HyperException):
        hyper.attach_read_only(conn, tmp_path / "missing.hyper", "src")

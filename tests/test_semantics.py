"""Batches applied as Hyper documents them (the default of the local engine and the fake) and
strictly (a setting): where they differ, and what the SDK refuses so that no outcome depends
on which of two rows Hyper picks."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tabhyper_update import Insert, Payload, Update, Upsert, keys_match
from tabhyper_update.errors import ApplyError, InvalidActionBatchError
from tabhyper_update.local.engine import SourceColumns, apply
from tabhyper_update.testing import FakeTableauServer, make_hyper, read_table

from ._util import PAT, client_for

NARROW = "id INT NOT NULL, amount NUMERIC(12, 2), code VARCHAR(3), small SMALLINT"


def target(tmp_path: Path) -> Path:
    return make_hyper(tmp_path / "t.hyper", {"T": (NARROW, ["(1, 1.50, 'ab', 7)"])})


def source(tmp_path: Path, columns: str, rows: list[str]) -> Path:
    return make_hyper(tmp_path / "p.hyper", {"S": (columns, rows)})


INSERT = [Insert(target_table="T", source_table="S")]


def test_hyper_rounds_a_decimal_and_cuts_a_text_where_strict_refuses(tmp_path: Path) -> None:
    p = source(tmp_path, "id INT, amount NUMERIC(12, 4), code TEXT", ["(2, 1.2345, 'abcdef')"])
    t = target(tmp_path)
    with pytest.raises(ApplyError, match=r"column 'amount': value 1\.2345"):
        apply(INSERT, target=t, payload=p, semantics="strict")
    apply(INSERT, target=t, payload=p)
    rows = read_table(t, "T", schema="Extract")
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (1, Decimal("1.50"), "ab"),
        (2, Decimal("1.23"), "abc"),
    ]


@pytest.mark.parametrize("semantics", ["hyper", "strict"])
@pytest.mark.parametrize(
    ("columns", "row", "words"),
    [
        ("id INT, small INT", "(2, 70000)", "overflow|70000"),
        ("id INT, amount NUMERIC(18, 2)", "(2, 123456789012.50)", "overflow|123456789012"),
        ("id INT, code TEXT", "(NULL, 'a')", "non-NULL value required"),
    ],
)
def test_overflow_and_null_into_not_null_fail_under_both(
    tmp_path: Path, semantics: Any, columns: str, row: str, words: str
) -> None:
    t = target(tmp_path)
    with pytest.raises(ApplyError, match=words):
        apply(INSERT, target=t, payload=source(tmp_path, columns, [row]), semantics=semantics)
    assert len(read_table(t, "T", schema="Extract")) == 1  # nothing applied


@pytest.mark.parametrize("action", [Update, Upsert])
def test_a_source_column_the_target_lacks_is_refused_unless_a_server_ignores_it(
    tmp_path: Path, action: Any
) -> None:
    batch = [action(target_table="T", source_table="S", condition=keys_match("id"))]
    p = source(tmp_path, "id INT, code TEXT, stray TEXT", ["(1, 'xy', 's')", "(2, 'z', 's')"])
    t = target(tmp_path)
    with pytest.raises(ApplyError, match=r"source column\(s\) 'stray' of .* do not exist"):
        apply(batch, target=t, payload=p)
    assert read_table(t, "T", schema="Extract") == [(1, Decimal("1.50"), "ab", 7)]
    apply(batch, target=t, payload=p, source_columns=SourceColumns(extra="ignore"))
    want: list[tuple[Any, ...]] = [(1, Decimal("1.50"), "xy", 7)]
    if action is Upsert:
        want.append((2, None, "z", None))
    assert sorted(read_table(t, "T", schema="Extract")) == want


@pytest.mark.parametrize("action", [Insert, Upsert])
def test_rows_inserted_lacking_target_columns_get_null_unless_a_server_refuses_them(
    tmp_path: Path, action: Any
) -> None:
    batch = [
        action(target_table="T", source_table="S", condition=keys_match("id"))
        if action is Upsert
        else action(target_table="T", source_table="S")
    ]
    p = source(tmp_path, "id INT, code TEXT", ["(2, 'new')"])
    t = target(tmp_path)
    with pytest.raises(ApplyError, match=r"lacks column\(s\) 'amount', 'small'"):
        apply(batch, target=t, payload=p, source_columns=SourceColumns(missing="refuse"))
    assert len(read_table(t, "T", schema="Extract")) == 1  # nothing applied
    apply(batch, target=t, payload=p)
    assert sorted(read_table(t, "T", schema="Extract"))[1] == (2, None, "new", None)
    # Rows that insert nothing (an update, an upsert matching every row): a source of fewer
    # columns sets those it has, under both.
    for matched in (Update, Upsert):
        t2 = make_hyper(tmp_path / "t2.hyper", {"T": (NARROW, ["(2, 1.50, 'ab', 7)"])})
        batch = [matched(target_table="T", source_table="S", condition=keys_match("id"))]
        apply(batch, target=t2, payload=p, source_columns=SourceColumns(missing="refuse"))
        assert read_table(t2, "T", schema="Extract") == [(2, Decimal("1.50"), "new", 7)]


def _doubled(tmp_path: Path, name: str) -> Path:
    return make_hyper(
        tmp_path / name,
        {"S": ("id INT, code TEXT", ["(1, 'x')", "(1, 'y')", "(1, 'z')", "(5, 'w')"])},
    )


def test_a_key_matched_twice_takes_one_row_chosen_by_the_seed(tmp_path: Path) -> None:
    """Under Hyper's semantics the batch succeeds with one of the rows: the same one for the
    same seed, and not the first for every seed (no test can rely on which)."""
    batch = [Upsert(target_table="T", source_table="S", condition=keys_match("id"))]
    chosen = {}
    for seed in (0, 1, 2, 3):
        t = make_hyper(tmp_path / f"t{seed}.hyper", {"T": ("id INT, code TEXT", ["(1, 'a')"])})
        apply(batch, target=t, payload=_doubled(tmp_path, f"p{seed}.hyper"), seed=seed)
        rows = read_table(t, "T", schema="Extract")
        assert rows[0][0] == 1
        assert rows[0][1] in ("x", "y", "z")
        chosen[seed] = rows[0][1]
    assert chosen[0] == chosen[2]
    assert chosen[1] == chosen[3]
    assert len(set(chosen.values())) == 2
    t = make_hyper(tmp_path / "ts.hyper", {"T": ("id INT, code TEXT", ["(1, 'a')"])})
    with pytest.raises(ApplyError, match="matched by more than one row"):
        apply(batch, target=t, payload=_doubled(tmp_path, "ps.hyper"), semantics="strict")


@pytest.mark.parametrize("action", [Update, Upsert])
def test_a_batch_over_duplicate_keys_is_refused_before_the_upload(
    tmp_path: Path, action: Any
) -> None:
    batch = [action(target_table="Extract", source_table="S", condition=keys_match("id"))]
    payload = Payload.from_hyper(
        make_hyper(
            tmp_path / "dup.hyper",
            {"S": ("id INT, code TEXT", ["(1, 'x')", "(1, 'y')", "(2, 'q')", "(2, 'r')"])},
        )
    )
    start = make_hyper(tmp_path / "start.hyper", {"Extract": ("id INT, code TEXT", [])})
    with FakeTableauServer(pats=dict([PAT]), directory=tmp_path / "srv") as server:
        server.add_datasource("Orders", start)
        with client_for(server) as client:
            with pytest.raises(InvalidActionBatchError) as caught:
                client.update_datasource("Orders", payload, actions=batch, state_dir=tmp_path)
            assert server.counts["append"] == 0
            assert server.counts["update"] == 0
    text = str(caught.value)
    assert "payload table 'S' holds 2 key(s) more than once on 'id'" in text
    assert "e.g. 1, 2" in text or "e.g. 2, 1" in text


def test_unique_keys_and_derived_change_sets_pass_the_check(tmp_path: Path) -> None:
    path = make_hyper(
        tmp_path / "unique.hyper", {"S": ("id BIGINT, v TEXT", ["(1, 'a')", "(2, 'b')"])}
    )
    batch = [Upsert(target_table="Extract", source_table="S", condition=keys_match("id"))]
    assert Payload.from_hyper(path).validate(batch).actions[0].action == "upsert"


def test_the_sdks_own_change_sets_hold_each_key_once(spark: Any) -> None:
    from tabhyper_update import ChangeSet, build_payload
    from tabhyper_update.payload.manifest import duplicated_keys

    rows = [(k % 7, f"v{i}", "D" if i % 5 == 0 else "U", i) for i, k in enumerate(range(60))]
    df = spark.createDataFrame(rows, "id long, v string, op string, seq long")
    with build_payload(df, ChangeSet("id", op_column="op", order_by="seq", guard=True)) as p:
        for part in p.parts:
            for table in part.tables:
                assert duplicated_keys(part.path, p.schema, table, ["id"]) == (0, [])
        assert p.validate(p.derived_actions())  # the check passes its own actions


@pytest.mark.parametrize("replay", ["original", "new_job", "refuse"])
def test_a_repeated_request_id_applies_nothing_twice_and_says_so(
    tmp_path: Path, replay: str
) -> None:
    """Whatever a server answers a repeated RequestID with (the original job, a new job that
    applies nothing, a 409 naming the duplicate), an insert sent again from a fresh state
    folder (another machine, a minute later) adds nothing and is reported as deduplicated.
    (Job times have whole seconds: an original job answered within the clock-skew allowance
    of its creation cannot be told from a new one by its time; it is followed all the same,
    so nothing is applied twice.)"""
    start = make_hyper(tmp_path / "start.hyper", {"Extract": ("id INT, code TEXT", [])})
    rows_file = make_hyper(
        tmp_path / "rows.hyper", {"Extract": ("id INT, code TEXT", ["(1, 'a')"])}
    )
    insert = [Insert(target_table="Extract", source_table="Extract")]
    with FakeTableauServer(pats=dict([PAT]), directory=tmp_path / "srv", replay=replay) as srv:
        luid = srv.add_datasource("Orders", start)
        results = []
        with client_for(srv) as client:
            for machine in ("a", "b"):
                srv.age_jobs(60)
                results.append(
                    client.update_datasource(
                        "Orders",
                        Payload.from_hyper(rows_file),
                        actions=insert,
                        request_id="orders-2026-11-26",
                        state_dir=tmp_path / machine,
                    )
                )
        srv.wait_idle()
        assert read_table(srv.datasource_path(luid), "Extract") == [(1, "a")]
    assert not results[0].deduplicated
    assert results[1].deduplicated


def test_a_connected_app_asks_for_each_calls_scope_and_a_403_names_the_missing_one(
    tmp_path: Path,
) -> None:
    from tabhyper_update import ConnectedAppJWT, TableauClient
    from tabhyper_update.errors import ApiError
    from tabhyper_update.rest.scopes import DEFAULT_JWT_SCOPES

    from ._util import CONNECTED_APP

    start = make_hyper(tmp_path / "start.hyper", {"Extract": ("id INT, code TEXT", [])})
    rows = make_hyper(tmp_path / "rows.hyper", {"Extract": ("id INT, code TEXT", ["(1, 'a')"])})
    insert = [Insert(target_table="Extract", source_table="Extract")]
    app = {k: CONNECTED_APP[k] for k in ("client_id", "secret_id", "secret_value")}
    assert "tableau:hyper_data:update" in DEFAULT_JWT_SCOPES  # as Tableau's clients name it
    with FakeTableauServer(connected_app=CONNECTED_APP, directory=tmp_path / "srv") as srv:
        luid = srv.add_datasource("Orders", start)
        lacking = tuple(s for s in DEFAULT_JWT_SCOPES if s != "tableau:hyper_data:update")
        auth = ConnectedAppJWT(**app, username="ana", scopes=lacking)
        with TableauClient(srv.url, "", auth) as client, pytest.raises(ApiError) as caught:
            client.update_datasource(
                "Orders", Payload.from_hyper(rows), actions=insert, state_dir=tmp_path / "a"
            )
        assert caught.value.status == 403
        assert "needs the connected-app scope 'tableau:hyper_data:update'" in str(caught.value)
        assert "add it to ConnectedAppJWT(scopes=...)" in str(caught.value)
        with TableauClient(srv.url, "", ConnectedAppJWT(**app, username="ana")) as client:
            client.update_datasource(
                "Orders", Payload.from_hyper(rows), actions=insert, state_dir=tmp_path / "b"
            )
        srv.wait_idle()
        assert read_table(srv.datasource_path(luid), "Extract") == [(1, "a")]

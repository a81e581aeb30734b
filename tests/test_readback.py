"""Reading back what the data source holds (VizQL Data Service, answered by the fake with
Hyper): an update's touched keys, a whole data source reconciled with its source, drift
planted behind the SDK's back in every way a table can drift, and repairs."""

from __future__ import annotations

import json
import random
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import ChangeSet, DriftError, Insert, build_payload, reconcile, repair
from tabhyper_update.cli import main
from tabhyper_update.local.hyper import connect
from tabhyper_update.readback.compare import Tolerance, canonical, same
from tabhyper_update.readback.dataservice import DataService, calculation, dimension, measure
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.values.errors import DataServiceError, InvalidArgumentError

from ._util import PAT, client_for, read_rows, use_environment

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from tabhyper_update import TableauClient

ORDERS = '"Extract"."Extract"'


def _sql(server: FakeTableauServer, *statements: str) -> None:
    """Change the data source's file behind the SDK's back."""
    luid = server.backend.find_datasources({"name": "Orders"})[0].id
    with connect(server.datasource_path(luid)) as conn:
        for statement in statements:
            conn.execute_command(statement)


def _changes(spark: SparkSession, rows: list[tuple[Any, ...]]) -> DataFrame:
    return spark.createDataFrame(rows, "id long, name string, qty int, op string, seq long")


def _orders_id(server: FakeTableauServer) -> str:
    return server.backend.find_datasources({"name": "Orders"})[0].id


# -- checking an update -----------------------------------------------------------------------


def test_verify_reads_back_every_touched_key(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    changes = _changes(spark, [(2, "B", 21, "U", 1), (3, None, None, "D", 1), (4, "d", 40, "I", 1)])
    payload = build_payload(changes, ChangeSet("id", op_column="op", order_by="seq"))
    result = client.update_datasource("Orders", payload, verify=True)
    report = result.readback
    assert report is not None
    assert report.ok, report
    assert (report.checked, report.total) == (3, 3)
    assert report.cost["requests"] == 2  # fields, then every touched key in one query
    assert report.cost["bytes_received"] > 0

    # Someone else edits the data source: the same result, read again, says how.
    _sql(
        server,
        f"UPDATE {ORDERS} SET name = 'zz' WHERE id = 4",
        f"INSERT INTO {ORDERS} VALUES (2, 'B', 21)",
        f"INSERT INTO {ORDERS} VALUES (3, 'back', 1)",
    )
    again = result.verify()
    assert again.counts() == {"missing": 0, "extra": 1, "changed": 1, "duplicated": 1}
    changed = again.drift[[d.kind for d in again.drift].index("changed")]
    assert changed.key == (4,)
    assert changed.columns == ("name",)
    assert changed.expected is not None
    assert changed.expected["name"] == "d"
    _sql(server, f"DELETE FROM {ORDERS} WHERE id = 4")
    assert result.verify().counts()["missing"] == 1


def test_verify_raises_drift_after_the_update_is_applied(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    # A server that applies an older file: the job succeeds, the data is not what was sent.
    payload = build_payload(
        _changes(spark, [(1, "new", 11, "U", 1)]), ChangeSet("id", op_column="op", order_by="seq")
    )
    original = server.backend.submit_update

    def stale(source: Any, conn: Any, rid: str, batch: Any, upload: Any) -> Any:
        # The job runs with a file whose row holds another value.
        with connect(upload) as c:
            c.execute_command('UPDATE "Extract"."upserts" SET name = \'old\'')
        return original(source, conn, rid, batch, upload)

    server.backend.submit_update = stale  # type: ignore[method-assign,assignment]
    with pytest.raises(DriftError) as caught:
        client.update_datasource("Orders", payload, verify=True)
    assert "the update was applied" in str(caught.value)
    assert caught.value.report.counts()["changed"] == 1
    rows = read_rows(server.datasource_path(_orders_id(server)), "Extract")
    assert [r[1] for r in rows if r[0] == 1] == ["old"]


def test_a_sample_states_its_confidence(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    rows = [(i, f"n{i}", i, "I", 1) for i in range(10, 60)]
    payload = build_payload(_changes(spark, rows), ChangeSet("id", op_column="op", order_by="seq"))
    result = client.update_datasource("Orders", payload, verify=10)
    report = result.readback
    assert report is not None
    assert report.ok
    assert report.total == 50
    assert 10 <= report.checked <= 11
    assert report.confidence is not None
    assert "95% confidence" in report.confidence


def test_verify_in_batches_of_keys(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    rows = [(i, f"n{i}", i, "I", 1) for i in range(10, 35)]
    payload = build_payload(_changes(spark, rows), ChangeSet("id", op_column="op", order_by="seq"))
    result = client.update_datasource("Orders", payload, wait=False, verify=True)
    result.wait()
    report = result.verify(keys_per_request=10)
    assert report.ok
    assert report.cost["requests"] == 1 + 3


def test_verify_is_refused_before_anything_is_sent(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    plain = build_payload(spark.createDataFrame([(9, "x", 1)], "id long, name string, qty int"))
    insert = [Insert(source_table="Extract", target_table="Extract")]
    with pytest.raises(InvalidArgumentError, match="reconcile the data source"):
        client.update_datasource("Orders", plain, actions=insert, verify=True)
    changes = _changes(spark, [(7, "g", 70, "I", 1)])
    payload = build_payload(changes, ChangeSet("id", op_column="op", order_by="seq"))
    with pytest.raises(InvalidArgumentError, match="verify must be"):
        client.update_datasource("Orders", payload, verify="yes")  # type: ignore[arg-type]
    multi = build_payload(
        {"Extract": changes}, {"Extract": ChangeSet("id", op_column="op", order_by="seq")}
    )
    with pytest.raises(InvalidArgumentError, match="one ChangeSet"):
        client.update_datasource("Orders", multi, verify=True)
    assert server.counts["update"] == 0
    assert server.counts["initiate"] == 0


@pytest.mark.parametrize(
    ("mode", "words"), [("absent", "2025.1"), ("denied", "API Access permission")]
)
def test_no_data_service_fails_the_check_not_the_update(
    spark: SparkSession, tmp_path: Path, target_file: Path, mode: str, words: str
) -> None:
    with FakeTableauServer(pats=dict([PAT]), data_service=mode) as fake:
        luid = fake.add_datasource("Orders", target_file)
        changes = _changes(spark, [(7, "g", 70, "I", 1)])
        payload = build_payload(changes, ChangeSet("id", op_column="op", order_by="seq"))
        with client_for(fake) as client, pytest.raises(DataServiceError) as caught:
            client.update_datasource("Orders", payload, verify=True)
        assert words in str(caught.value)
        assert "the update itself was applied" in str(caught.value)
        rows = read_rows(fake.datasource_path(luid), "Extract")
        assert [r[:3] for r in rows if r[0] == 7] == [(7, "g", 70)]


def test_the_fake_refuses_what_it_does_not_understand(
    server: FakeTableauServer, client: TableauClient
) -> None:
    service = DataService(client, _orders_id(server))
    with pytest.raises(DataServiceError, match="MEDIAN") as caught:
        service.query([calculation("m", "MEDIAN([qty])")])
    assert caught.value.status == 400
    assert "refused the query" in str(caught.value)
    with pytest.raises(DataServiceError, match="no field for column 'nope'"):
        service.field("nope")
    rows = service.query([dimension("name", "n"), measure("qty", "SUM", "s")])
    assert len(rows) == 89
    assert rows[0]["n"] == "n0"
    assert sum(r["s"] for r in rows) == sum(i % 50 for i in range(N_ROWS))


# -- values compared as the source means them ------------------------------------------------------


def test_values_are_compared_as_their_type_means_them() -> None:
    utc_8 = canonical(datetime(2024, 1, 1, 8), "DATETIME")
    assert same(canonical("2024-01-01T10:00:00+02:00", "DATETIME"), utc_8, "DATETIME")
    assert same(canonical("2024-01-01 08:00:00.000000Z", "DATETIME"), utc_8, "DATETIME")
    aware = datetime(2024, 1, 1, 3, tzinfo=timezone(timedelta(hours=-5)))
    assert same(canonical(aware, "DATETIME"), utc_8, "DATETIME")
    assert not same(canonical("2024-01-01T08:00:01", "DATETIME"), utc_8, "DATETIME")
    assert same(
        canonical("2024-01-01T08:00:01", "DATETIME"), utc_8, "DATETIME", Tolerance(seconds=1)
    )
    assert same(canonical(Decimal("1.10"), "REAL"), canonical(1.1, "REAL"), "REAL")
    assert not same(canonical(Decimal("1.10"), "REAL"), canonical(1.1001, "REAL"), "REAL")
    # A decimal is exact: a cent off among hundreds of millions is a difference whatever the
    # tolerance (which governs reals and timestamps only).
    loose = Tolerance(relative=1e-6)
    big = canonical(Decimal("123456789.01"), "REAL")
    assert not same(big, canonical(123456789.02, "REAL"), "REAL", loose)
    assert same(big, canonical(123456789.01, "REAL"), "REAL", loose)
    assert same(canonical("NaN", "REAL"), canonical(float("nan"), "REAL"), "REAL")
    assert same(None, None, "STRING")
    assert not same(None, "", "STRING")
    assert not same(canonical(0, "INTEGER"), None, "INTEGER")
    assert canonical("2024-02-03", "DATE") == canonical(datetime(2024, 2, 3, 5), "DATE")
    with pytest.raises(InvalidArgumentError, match="relative"):
        Tolerance(relative=-1)


# -- reconciling a whole data source --------------------------------------------------------------

N_ROWS = 3000


@pytest.fixture
def target_file(tmp_path: Path) -> Path:
    """Orders with one row per id in [0, N_ROWS): text, real, decimal, timestamp, boolean."""
    from tabhyper_update.testing.files import make_hyper

    (tmp_path / "start").mkdir()
    path = make_hyper(
        tmp_path / "start" / "orders.hyper",
        {
            "Extract": (
                "id BIGINT NOT NULL, name TEXT, qty INTEGER, amount DOUBLE PRECISION, "
                "price NUMERIC(12,2), at TIMESTAMP, ok BOOL",
                [],
            )
        },
    )
    with connect(path) as conn:
        conn.execute_command(
            f"INSERT INTO {ORDERS} SELECT i, 'n' || (i % 89), CAST(i % 50 AS INTEGER), "
            "i * 0.25, CAST(i % 1000 AS NUMERIC(12,2)) / 8, "
            "TIMESTAMP '2024-01-01 00:00:00' + i * INTERVAL '1 minute', i % 3 = 0 "
            f"FROM generate_series(0, {N_ROWS - 1}) AS s(i)"
        )
    return path


def _source(spark: SparkSession) -> DataFrame:
    """What Orders should hold, computed by Spark (not read from the file)."""
    return spark.range(N_ROWS).selectExpr(
        "id",
        "concat('n', id % 89) AS name",
        "CAST(id % 50 AS INT) AS qty",
        "CAST(id * 0.25 AS DOUBLE) AS amount",
        "CAST(CAST(id % 1000 AS DECIMAL(12,2)) / 8 AS DECIMAL(12,2)) AS price",
        "timestamp_seconds(1704067200 + id * 60) AS at",
        "id % 3 = 0 AS ok",
    )


#: Drift planted by SQL on the file, and what reconcile must name: (kind, key, columns).
PLANTED = [
    (f"DELETE FROM {ORDERS} WHERE id = 17", ("missing", (17,), ())),
    (
        f"INSERT INTO {ORDERS} SELECT id + 5000, name, qty, amount, price, at, ok "
        f"FROM {ORDERS} WHERE id = 4",
        ("extra", (5004,), ()),
    ),
    (f"UPDATE {ORDERS} SET qty = qty + 1 WHERE id = 1200", ("changed", (1200,), ("qty",))),
    (f"UPDATE {ORDERS} SET name = NULL WHERE id = 2222", ("changed", (2222,), ("name",))),
    (f"UPDATE {ORDERS} SET amount = 1.5 WHERE id = 999", ("changed", (999,), ("amount",))),
    (f"UPDATE {ORDERS} SET price = price + 0.01 WHERE id = 450", ("changed", (450,), ("price",))),
    (
        f"UPDATE {ORDERS} SET at = at + INTERVAL '1 second' WHERE id = 2998",
        ("changed", (2998,), ("at",)),
    ),
    (f"UPDATE {ORDERS} SET ok = NOT ok WHERE id = 1501", ("changed", (1501,), ("ok",))),
    (f"INSERT INTO {ORDERS} SELECT * FROM {ORDERS} WHERE id = 42", ("duplicated", (42,), ())),
]


def _found(report: Any) -> set[tuple[str, tuple[Any, ...], tuple[str, ...]]]:
    return {(d.kind, d.key, d.columns) for d in report.drift}


def test_a_clean_data_source_reconciles_in_two_requests(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    report = reconcile(_source(spark), "Orders", key="id", client=client)
    assert report.ok, report
    assert report.rows == {"source": N_ROWS, "datasource": N_ROWS}
    assert report.cost["requests"] == 2  # fields, then one aggregate query


@pytest.mark.parametrize(
    ("statement", "expected"), PLANTED, ids=[p[1][0] + str(p[1][1][0]) for p in PLANTED]
)
def test_each_kind_of_drift_is_found(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    statement: str,
    expected: tuple[str, tuple[Any, ...], tuple[str, ...]],
) -> None:
    _sql(server, statement)
    report = reconcile(_source(spark), "Orders", key="id", client=client, leaf_rows=100, fan_out=8)
    assert _found(report) == {expected}
    assert not report.unresolved


@pytest.mark.every_spark
def test_all_drift_at_once_is_found_then_repaired_once(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    _sql(server, *[s for s, _ in PLANTED])
    source = _source(spark)
    report = reconcile(source, "Orders", key="id", client=client, leaf_rows=100, fan_out=8)
    assert _found(report) == {e for _, e in PLANTED}
    assert report.cost["requests"] < 12

    result = repair(report, source, client=client, state_dir=tmp_path / "state")
    assert not result.deduplicated
    assert reconcile(source, "Orders", key="id", client=client).ok
    # The same report again is the same update: the server does not apply it twice (another
    # machine, without this one's record: the server answers with the first job).
    runs = sum(server.jobs_run.values())
    again = repair(report, source, client=client, state_dir=tmp_path / "state2")
    assert again.parts[0].job_id == result.parts[0].job_id
    assert sum(server.jobs_run.values()) == runs
    rows = read_rows(server.datasource_path(_orders_id(server)), "Extract")
    assert len(rows) == N_ROWS


def test_random_drift_is_found_exactly(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    rng = random.Random(7)
    keys = rng.sample(range(N_ROWS), 40)
    expected: set[tuple[str, tuple[int, ...], tuple[str, ...]]] = set()
    statements = []
    for i, key in enumerate(keys):
        kind = ("missing", "changed", "duplicated", "extra")[i % 4]
        if kind == "missing":
            statements.append(f"DELETE FROM {ORDERS} WHERE id = {key}")
            expected.add(("missing", (key,), ()))
        elif kind == "changed":
            statements.append(f"UPDATE {ORDERS} SET qty = -1 WHERE id = {key}")
            expected.add(("changed", (key,), ("qty",)))
        elif kind == "duplicated":
            statements.append(f"INSERT INTO {ORDERS} SELECT * FROM {ORDERS} WHERE id = {key}")
            expected.add(("duplicated", (key,), ()))
        else:
            statements.append(
                f"INSERT INTO {ORDERS} SELECT id + 100000, name, qty, amount, price, at, ok "
                f"FROM {ORDERS} WHERE id = {key}"
            )
            expected.add(("extra", (key + 100000,), ()))
    _sql(server, *statements)
    report = reconcile(_source(spark), "Orders", key="id", client=client, leaf_rows=50, fan_out=4)
    assert _found(report) == expected


def test_a_difference_within_the_tolerance_is_not_drift(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    # The timestamp sums differ, so the range is narrowed down; its rows match within the
    # tolerance, which explains the range: neither drift nor unresolved.
    _sql(server, f"UPDATE {ORDERS} SET at = at + INTERVAL '1 second' WHERE id = 2998")
    source = _source(spark)
    report = reconcile(
        source, "Orders", key="id", client=client, leaf_rows=100, tolerance=Tolerance(seconds=5)
    )
    assert report.ok, report
    assert report.cost["requests"] > 2  # it did look closer
    assert _found(reconcile(source, "Orders", key="id", client=client, leaf_rows=100)) == {
        ("changed", (2998,), ("at",))
    }


def test_rows_whose_key_is_null_are_reported_not_named(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    source = _source(spark)
    with_null = source.unionByName(
        source.where("id = 3")
        .selectExpr("NULL AS id", "name", "qty", "amount", "price", "at", "ok")
        .selectExpr("CAST(id AS BIGINT) AS id", "name", "qty", "amount", "price", "at", "ok")
    )
    _sql(server, f"DELETE FROM {ORDERS} WHERE id = 8")
    report = reconcile(with_null, "Orders", key="id", client=client, leaf_rows=100)
    assert not report.ok
    assert _found(report) == {("missing", (8,), ())}
    assert any("is NULL" in u for u in report.unresolved)


def test_text_keys_and_a_session_time_zone(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    # A text key is cut by its first characters; timestamps are instants whatever the
    # session's time zone.
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        source = _source(spark).selectExpr("concat('K', lpad(id, 5, '0')) AS k", "name", "at")
        with connect(server.datasource_path(_orders_id(server))) as conn:
            conn.execute_command(f"ALTER TABLE {ORDERS} ADD COLUMN k TEXT")
            conn.execute_command(f"UPDATE {ORDERS} SET k = 'K' || LPAD(CAST(id AS TEXT), 5, '0')")
            conn.execute_command(f"UPDATE {ORDERS} SET name = 'x' WHERE id = 77")
        report = reconcile(source, "Orders", key="k", client=client, leaf_rows=100)
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    assert _found(report) == {("changed", ("K00077",), ("name",))}


@pytest.mark.parametrize("key", ["id", "k"])
def test_few_small_differing_ranges_holding_many_rows_are_cut_once_more(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    monkeypatch: pytest.MonkeyPatch,
    key: str,
) -> None:
    """Six drifted rows, each in a small range of its own: comparing those ranges row by row
    would take more rows than one request holds, so they are cut once more and far fewer
    rows come back (integer and text keys alike); the same drift is found either way."""
    import importlib

    module = importlib.import_module("tabhyper_update.readback.reconcile")

    drifted = [17, 640, 1111, 1800, 2345, 2990]
    _sql(
        server,
        f"ALTER TABLE {ORDERS} ADD COLUMN k TEXT",
        f"UPDATE {ORDERS} SET k = 'K' || LPAD(CAST(id AS TEXT), 5, '0')",
        f"UPDATE {ORDERS} SET qty = -1 WHERE id IN ({', '.join(map(str, drifted))})",
    )
    source = _source(spark).selectExpr("id", "concat('K', lpad(id, 5, '0')) AS k", "qty")
    monkeypatch.setattr(module, "ROWS_PER_REQUEST", 300)
    found = {}
    for rule, sparse in ((True, module.SPARSE_BUCKETS), (False, 0)):
        monkeypatch.setattr(module, "SPARSE_BUCKETS", sparse)
        report = reconcile(source, "Orders", key=key, client=client, leaf_rows=400, fan_out=4)
        assert {d.key[0] for d in report.drift} == {
            i if key == "id" else f"K{i:05d}" for i in drifted
        }
        assert report.unresolved == []
        found[rule] = report.cost
    with_rule, without = found[True], found[False]
    assert with_rule["bytes_received"] * 2 < without["bytes_received"], (with_rule, without)
    assert with_rule["queries"] <= without["queries"]


#: Text keys whose characters a formula or a SQL literal could mistake: quotes, backslashes,
#: an escape sequence written out, brackets, a backtick, non-ASCII.
ODD_PREFIXES = ["it's-", "back\\slash-", "\\u0041-", "[x]]-", "tick`-", "ü😀-", "a''b-"]


def test_odd_text_keys_and_an_odd_key_name_are_cut_exactly(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    column = "odd `key]"
    cases = " ".join(
        f"WHEN {i} THEN '{p.replace(chr(39), chr(39) * 2)}'" for i, p in enumerate(ODD_PREFIXES)
    )
    _sql(
        server,
        f'ALTER TABLE {ORDERS} ADD COLUMN "{column}" TEXT',
        f'UPDATE {ORDERS} SET "{column}" = (CASE id % {len(ODD_PREFIXES)} {cases} END) '
        "|| CAST(id AS TEXT)",
        f"UPDATE {ORDERS} SET name = 'x' WHERE id IN (77, 1234)",
    )
    keys = spark.createDataFrame(
        [(i, ODD_PREFIXES[i % len(ODD_PREFIXES)] + str(i)) for i in range(N_ROWS)],
        "id long, k string",
    )
    source = _source(spark).join(keys, "id").selectExpr("k AS `odd ``key]`", "name", "qty")
    report = reconcile(source, "Orders", key=column, client=client, leaf_rows=50)
    assert _found(report) == {
        ("changed", (ODD_PREFIXES[77 % len(ODD_PREFIXES)] + "77",), ("name",)),
        ("changed", (ODD_PREFIXES[1234 % len(ODD_PREFIXES)] + "1234",), ("name",)),
    }
    assert report.unresolved == []


def test_reconcile_refuses_bad_arguments_before_asking(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient
) -> None:
    source = _source(spark)
    with pytest.raises(InvalidArgumentError, match="'nope'"):
        reconcile(source, "Orders", key="nope", client=client)
    with pytest.raises(InvalidArgumentError, match="fan_out"):
        reconcile(source, "Orders", key="id", client=client, fan_out=1)
    assert server.counts["query_datasource"] == 0
    doubled = source.unionByName(source.where("id = 5"))
    _sql(server, f"DELETE FROM {ORDERS} WHERE id = 6")
    with pytest.raises(InvalidArgumentError, match="unique in the source"):
        reconcile(doubled, "Orders", key="id", client=client, leaf_rows=100)


# -- the command ----------------------------------------------------------------------------------


def test_cli_verify_exit_codes(
    spark: SparkSession,
    server: FakeTableauServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = tmp_path / "source"
    _source(spark).write.parquet(str(folder))
    use_environment(monkeypatch, server, tmp_path / "state", "Orders")
    args = ["verify", "Orders", "--key", "id", "--input", str(folder), "--json"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    _sql(server, f"DELETE FROM {ORDERS} WHERE id = 10")
    assert main(args) == 6
    out = json.loads(capsys.readouterr().out)
    assert out["counts"]["missing"] == 1
    assert out["drift"][0]["key"] == [10]
    # A budget too small to pin the drift down: it says what it left, and exits 7.
    assert main([*args, "--budget", "1"]) == 7
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False
    assert "budget of 1 queries" in out["stopped"]
    assert main([*args, "--repair"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"]
    assert out["repaired"]["counts"]["missing"] == 1
    assert main(["verify", "Orders", "--key", "id"]) == 2  # no source given


def test_one_decimal_changed_by_a_cent_unit_among_large_amounts_is_found_exactly(
    spark: SparkSession, tmp_path: Path
) -> None:
    """DECIMAL(18,2) amounts up to 2e8 over 20,000 rows, one changed by +1.00: a sum of
    reals would hide it in its rounding allowance; exact sums find it."""
    from tabhyper_update.testing.files import make_hyper

    rows = 20_000
    path = make_hyper(
        tmp_path / "money.hyper", {"Extract": ("id BIGINT NOT NULL, amount NUMERIC(18,2)", [])}
    )
    with connect(path) as conn:
        conn.execute_command(
            f"INSERT INTO {ORDERS} SELECT i, CAST((i * 9973) % 200000000 AS NUMERIC(18,2)) "
            f"+ CAST(i % 100 AS NUMERIC(18,2)) / 100 FROM generate_series(0, {rows - 1}) AS s(i)"
        )
        conn.execute_command(f"UPDATE {ORDERS} SET amount = amount + 1 WHERE id = 12345")
    source = spark.range(rows).selectExpr(
        "id",
        "CAST(CAST((id * 9973) % 200000000 AS DECIMAL(18,2)) + "
        "CAST(id % 100 AS DECIMAL(18,2)) / 100 AS DECIMAL(18,2)) AS amount",
    )
    with FakeTableauServer(pats=dict([PAT])) as fake:
        fake.add_datasource("Money", path)
        with client_for(fake) as money:
            report = reconcile(source, "Money", key="id", client=money)
    assert {(d.kind, d.key, d.columns) for d in report.drift} == {
        ("changed", (12345,), ("amount",))
    }
    assert report.cost["requests"] <= 10


KEYS_ROWS = 20_000
EVERY_SPARK = pytest.mark.every_spark


@pytest.fixture(scope="module")
def keyed_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20,000 rows keyed four ways (integer, text with one shared prefix, date, a composite
    key whose first column has two values), one of them changed behind the SDK's back."""
    from tabhyper_update.testing.files import make_hyper

    path = make_hyper(
        tmp_path_factory.mktemp("keys") / "keyed.hyper",
        {
            "Extract": (
                "region TEXT NOT NULL, id BIGINT NOT NULL, code TEXT NOT NULL, "
                "day DATE NOT NULL, at TIMESTAMP NOT NULL, amount NUMERIC(18,2) NOT NULL, "
                "v BIGINT",
                [],
            )
        },
    )
    with connect(path) as conn:
        conn.execute_command(
            f"INSERT INTO {ORDERS} SELECT CASE WHEN i % 2 = 0 THEN 'eu' ELSE 'us' END, i, "
            "'key-' || i, DATE '2000-01-01' + i, "
            "TIMESTAMP '2020-01-01 00:00:00' + i * INTERVAL '1.5 seconds', "
            "CAST(i * 1.25 AS NUMERIC(18,2)), i * 3 "
            f"FROM generate_series(0, {KEYS_ROWS - 1}) AS s(i)"
        )
        conn.execute_command(f"UPDATE {ORDERS} SET v = v + 1 WHERE id = 13579")
    return path


@pytest.mark.parametrize(
    ("key", "drifted"),
    [
        ("id", (13579,)),
        ("code", ("key-13579",)),
        ("day", (date(2000, 1, 1) + timedelta(days=13579),)),
        # On every Spark: a time zone's and a decimal's reading differ between releases.
        pytest.param("at", (1_577_836_800_000_000 + 13579 * 1_500_000,), marks=EVERY_SPARK),
        ("amount", (Decimal("16973.75"),)),
        (["region", "id"], ("us", 13579)),
        pytest.param(["region", "amount"], ("us", Decimal("16973.75")), marks=EVERY_SPARK),
    ],
    ids=["integer", "text", "date", "timestamp", "decimal", "text-first-composite", "decimals"],
)
def test_one_drifted_row_in_20000_is_found_in_few_queries_whatever_the_key(
    spark: SparkSession, keyed_file: Path, key: Any, drifted: tuple[Any, ...]
) -> None:
    source = spark.range(KEYS_ROWS).selectExpr(
        "CASE WHEN id % 2 = 0 THEN 'eu' ELSE 'us' END AS region",
        "id",
        "concat('key-', id) AS code",
        "date_add(DATE '2000-01-01', CAST(id AS INT)) AS day",
        "timestamp_micros(1577836800000000 + id * 1500000) AS at",
        "CAST(id * 1.25 AS DECIMAL(18,2)) AS amount",
        "id * 3 AS v",
    )
    with FakeTableauServer(pats=dict([PAT])) as fake:
        fake.add_datasource("Keyed", keyed_file)
        with client_for(fake) as keyed:
            report = reconcile(source, "Keyed", key=key, client=keyed)
    assert {(d.kind, d.key, d.columns) for d in report.drift} == {("changed", drifted, ("v",))}
    assert not report.unresolved
    assert report.cost["requests"] <= 10, report.cost


def test_spark_buckets_and_bucket_membership_agree_with_the_bounds_for_every_choice(
    spark: SparkSession,
) -> None:
    """Spark's bucket of a key, and whether it is in a set of buckets (searched by the ends
    of the ranges they make), are what the bounds say, for random bounds (the last one
    repeated, as padding makes them) and choices over a composite key of text and integers,
    NULLs included."""
    from tabhyper_update.readback.buckets import RangeBuckets
    from tabhyper_update.readback.dataservice import FieldInfo

    rng = random.Random(52)
    fields = {"r": FieldInfo("r", "r", "STRING"), "n": FieldInfo("n", "n", "INTEGER")}
    rows: list[tuple[str | None, int | None]] = [
        (rng.choice(["a", "b", "b'c", "ü"]), rng.randrange(-50, 50)) for _ in range(400)
    ]
    rows += [(None, 1), ("a", None)]
    frame = spark.createDataFrame(rows, "r string, n long").cache()
    for trial in range(6):
        buckets = RangeBuckets(["r", "n"], fields, 8, {"r": "string", "n": "bigint"})
        keys = sorted({k for k in rows if None not in k})
        buckets.bounds[1] = sorted(rng.sample(keys, rng.randint(1, 12)))
        # Padded as plan() pads them: the last bound again, its copies empty buckets.
        buckets.bounds[1] += buckets.bounds[1][-1:] * rng.randint(0, 3)
        count = len(buckets.bounds[1]) + 1
        chosen = sorted(rng.sample(range(count), rng.randint(1, count)))
        found = frame.select(
            "r", "n", buckets.spark(1).alias("b"), buckets.spark_in(1, chosen).alias("in")
        ).collect()
        for r, n, b, inside in found:
            if r is None or n is None:
                assert (b, inside) == (None, None)
                continue
            assert b == buckets.of((r, n), 1), (trial, r, n)
            assert bool(inside) == (b in chosen), (trial, r, n, chosen)
    frame.unpersist()


def test_what_verify_reads_back_spans_every_part_of_a_split_payload(spark: SparkSession) -> None:
    import hashlib

    from tabhyper_update.readback.check import expected_changes

    rows = 20_000
    changes = spark.range(rows).selectExpr(
        "id",
        "sha2(CAST(id AS STRING), 256) AS name",
        "CASE WHEN id % 7 = 0 THEN 'D' ELSE 'U' END AS op",
        "CAST(1 AS BIGINT) AS seq",
    )
    cs = ChangeSet("id", op_column="op", order_by="seq")
    with build_payload(changes, cs, max_payload_mb=0.5) as payload:
        assert len(payload.parts) > 1
        every = expected_changes(payload)
        sampled = expected_changes(payload, 100)
    model = {i: hashlib.sha256(str(i).encode()).hexdigest() for i in range(rows) if i % 7}
    at = {c: every.columns.index(c) for c in ("id", "name")}
    assert {r[at["id"]]: r[at["name"]] for r in every.upserts} == model
    assert len(every.upserts) == len(model)
    assert sorted(every.deletes) == [(i,) for i in range(0, rows, 7)]
    assert every.touched == rows
    # A sample: about that many keys in all, drawn from every part, each as the payload has it.
    assert 100 <= sampled.checked <= 100 + 2 * len(payload.parts)  # rounded up per table
    assert all(model[r[at["id"]]] == r[at["name"]] for r in sampled.upserts)
    assert all(k % 7 == 0 for (k,) in sampled.deletes)

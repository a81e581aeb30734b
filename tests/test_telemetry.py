"""What an update did, as data: ``result.metrics()``, one structured log line, and
OpenTelemetry spans and metrics (read with the OpenTelemetry SDK's in-memory exporters)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import ChangeSet, TableauClient, TableauSink, __version__, build_payload
from tabhyper_update.local.telemetry import SCHEMA_URL
from tabhyper_update.testing import FakeTableauServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

otel_sdk = pytest.importorskip("opentelemetry.sdk")

BY_ID = ChangeSet("id", op_column="op", order_by="seq")
DDL = "id long, name string, qty int, op string, seq long"
CHANGES = [(4, "d", 40, "U", 1), (1, None, None, "D", 1), (5, "e", 50, "U", 1)]


@pytest.fixture(scope="module")
def exporters() -> tuple[Any, Any]:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(tracer)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return spans, reader


def test_an_update_yields_its_figures_a_log_line_spans_and_metrics(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    tmp_path: Path,
    exporters: tuple[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    spans, reader = exporters
    spans.clear()
    frame = spark.createDataFrame(CHANGES, DDL)
    with caplog.at_level(logging.INFO, logger="tabhyper_update.metrics"):
        result = (
            build_payload(frame, BY_ID)
            .upload("Orders", client=client, state_dir=tmp_path, progress=False)
            .apply(verify=True, position=17, committed_at=1_700_000_000.0)
        )
    figures = result.metrics()
    assert figures["rows"] == {"delete": 1, "upsert": 2}
    assert figures["parts"] == 1
    assert figures["applied_parts"] == 1
    assert figures["bytes"] > 0
    assert {"build", "upload", "submit", "wait"} <= set(figures["seconds"])
    assert figures["jobs"] == [result.parts[0].job_id]
    assert figures["server_seconds"] is not None
    assert figures["position"] == 17
    assert figures["lag_seconds"] > 0  # committed long ago
    json.dumps(figures)  # plain values
    # One structured line per update.
    (line,) = [r.getMessage() for r in caplog.records if r.name == "tabhyper_update.metrics"]
    logged = json.loads(line)
    assert logged["event"] == "update"
    assert logged["rows"] == figures["rows"]
    # The span tree: build on its own; the first part's upload, made by upload(); the update
    # holding its jobs' waits and the read-back.
    names = {s.name: s for s in spans.get_finished_spans()}
    assert {
        "tabhyper_update.build",
        "tabhyper_update.update",
        "tabhyper_update.upload",
        "tabhyper_update.wait",
        "tabhyper_update.readback",
    } <= set(names)
    update = names["tabhyper_update.update"]
    for child in ("wait", "readback"):
        assert names[f"tabhyper_update.{child}"].parent.span_id == update.context.span_id
    assert update.attributes["tabhyper_update.datasource"] == "Orders"
    # Nothing secret in any attribute.
    texts = [str(dict(s.attributes or {})) for s in spans.get_finished_spans()]
    for secret in server.secrets_seen:
        assert not any(secret in t for t in texts)
    # Metrics: rows by action, bytes, duration and lag.
    data = reader.get_metrics_data()
    found: dict[str, Any] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                found[m.name] = m
    rows = {
        p.attributes["tabhyper_update.action"]: p.value
        for p in found["tabhyper_update.rows"].data.data_points
    }
    assert rows["upsert"] >= 2
    assert rows["delete"] >= 1
    assert {
        "tabhyper_update.uploaded",
        "tabhyper_update.update.duration",
        "tabhyper_update.lag",
        "http.client.request.duration",
    } <= set(found)
    # Units as units, never in a name; the scope carries the SDK's version and schema URL.
    assert found["tabhyper_update.uploaded"].unit == "By"
    assert found["http.client.request.duration"].unit == "s"
    scopes = [sm.scope for rm in data.resource_metrics for sm in rm.scope_metrics]
    ours = [sc for sc in scopes if sc.name == "tabhyper_update"]
    assert ours[0].version == __version__
    assert ours[0].schema_url == SCHEMA_URL
    # One HTTP client span per attempt, by the semantic conventions, under the update.
    http = [s for s in spans.get_finished_spans() if "http.request.method" in s.attributes]
    patch = [s for s in http if s.attributes["http.request.method"] == "PATCH"]
    assert len(patch) == 1
    assert patch[0].attributes["http.response.status_code"] == 202
    assert patch[0].attributes["server.address"] == "127.0.0.1"
    assert "?" not in patch[0].attributes["url.full"]
    assert patch[0].parent.span_id == update.context.span_id


def test_a_sink_batch_carries_its_position_and_its_line_the_sink_and_batch(
    spark: SparkSession,
    client: TableauClient,
    tmp_path: Path,
    exporters: tuple[Any, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = TableauSink("Orders", BY_ID, client=client, state_dir=tmp_path, sink_id="feed")
    with caplog.at_level(logging.INFO, logger="tabhyper_update.metrics"):
        sink(spark.createDataFrame(CHANGES, DDL), 3)
    # The line names the sink and the batch: what finds the batch in Spark's UI and the
    # checkpoint.
    (line,) = [r.getMessage() for r in caplog.records if r.name == "tabhyper_update.metrics"]
    logged = json.loads(line)
    assert (logged["sink_id"], logged["batch_id"], logged["position"]) == ("feed", 3, {"seq": 1})
    assert sink.last_result is not None
    figures = sink.last_result.metrics()
    # Where the batch ends in its source: the change set's last order_by value.
    assert figures["position"] == {"seq": 1}
    assert figures["rows"] == {"delete": 1, "upsert": 2}


def test_a_replay_adds_nothing_to_the_counters_and_says_so(
    spark: SparkSession,
    server: FakeTableauServer,
    client: TableauClient,
    tmp_path: Path,
    exporters: tuple[Any, Any],
) -> None:
    _, reader = exporters

    def counted() -> tuple[dict[tuple[Any, ...], int], dict[tuple[Any, ...], int]]:
        rows: dict[tuple[Any, ...], int] = {}
        sent: dict[tuple[Any, ...], int] = {}
        for rm in reader.get_metrics_data().resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    into = {"tabhyper_update.rows": rows, "tabhyper_update.uploaded": sent}
                    if m.name in into:
                        for point in m.data.data_points:
                            key = tuple(sorted(point.attributes.items()))
                            into[m.name][key] = point.value
        return rows, sent

    frame = spark.createDataFrame(CHANGES, DDL)
    first = client.update_datasource("Orders", build_payload(frame, BY_ID), state_dir=tmp_path)
    rows_before, sent_before = counted()
    again = client.update_datasource("Orders", build_payload(frame, BY_ID), state_dir=tmp_path)
    rows_after, sent_after = counted()
    assert first.metrics()["bytes"] > 0
    assert again.deduplicated
    assert again.metrics()["bytes"] == 0  # nothing was uploaded
    assert again.metrics()["rows"] == {}
    assert sum(rows_after.values()) == sum(rows_before.values())
    assert sum(sent_after.values()) == sum(sent_before.values())
    assert any(("tabhyper_update.deduplicated", True) in key for key in sent_after)


def test_without_opentelemetry_nothing_is_traced(monkeypatch: pytest.MonkeyPatch) -> None:
    from tabhyper_update.local import telemetry

    monkeypatch.setattr(telemetry, "enabled", lambda: False)
    with telemetry.span("update", datasource="Orders") as current:
        assert current is None
    telemetry.record(rows={"upsert": 1}, size_bytes=1, seconds=0.1, lag=None, datasource="x")


@pytest.mark.parametrize("target_file", [None])
def test_a_users_own_table_named_like_the_sdks_bookkeeping_is_counted(
    server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    """Rows inserted into the user's ``trade_positions`` are the user's rows: the SDK's own
    positions record is known from where it was made, never from a table's name."""
    from tabhyper_update import Insert, Payload
    from tabhyper_update.testing.files import make_hyper

    (tmp_path / "start").mkdir()
    ddl = "id BIGINT NOT NULL, qty INTEGER"
    start = make_hyper(tmp_path / "start" / "trades.hyper", {"trade_positions": (ddl, [])})
    server.add_datasource("Trades", start, project="Default")
    rows = make_hyper(tmp_path / "rows.hyper", {"new": (ddl, ["(1, 10)", "(2, 20)", "(3, 30)"])})
    result = (
        Payload.from_hyper(rows)
        .upload("Trades", client=client, state_dir=tmp_path / "state", progress=False)
        .apply([Insert(source_table="new", target_table="trade_positions")])
    )
    assert result.metrics()["rows"] == {"insert": 3}


def test_a_guarded_change_sets_positions_record_is_not_counted_as_rows(
    spark: SparkSession, server: FakeTableauServer, client: TableauClient, tmp_path: Path
) -> None:
    from tabhyper_update.testing.files import make_hyper, read_table

    start = make_hyper(
        tmp_path / "guarded.hyper",
        {
            "Extract": ("id BIGINT NOT NULL, name TEXT, qty INTEGER", ["(1, 'a', 10)"]),
            "Extract_positions": (
                "id BIGINT NOT NULL, seq BIGINT, guarded BOOLEAN NOT NULL",
                ["(1, 0, TRUE)"],
            ),
        },
    )
    luid = server.add_datasource("Guarded", start, project="Default")
    server.remember_probe(tmp_path / "probed")  # the guard is sent only where probed
    guarded = ChangeSet("id", op_column="op", order_by="seq", guard=True)
    result = client.update_datasource(
        "Guarded",
        build_payload(spark.createDataFrame(CHANGES, DDL), guarded),
        state_dir=tmp_path / "state",
        progress=False,
    )
    server.wait_idle()
    # Three keys' positions recorded, none of them counted as the user's rows.
    assert len(read_table(server.datasource_path(luid), "Extract_positions")) == 3
    assert result.metrics()["rows"] == {"delete": 1, "upsert": 2}


def test_changes_set_aside_are_counted_once(
    spark: SparkSession,
    client: TableauClient,
    tmp_path: Path,
    exporters: tuple[Any, Any],
) -> None:
    _, reader = exporters

    def counted() -> int:
        found = [
            p.value
            for rm in reader.get_metrics_data().resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == "tabhyper_update.quarantined"
            for p in m.data.data_points
        ]
        return sum(found)

    before = counted() if reader.get_metrics_data() else 0
    frame = spark.createDataFrame([(4, None, 40, "U", 1), (5, "e", 50, "U", 1)], DDL)
    options: dict[str, Any] = {
        "on_bad_rows": "quarantine",
        "quarantine": tmp_path / "q",
        "target_columns": "id BIGINT NOT NULL, name TEXT NOT NULL, qty INTEGER",
    }
    for _ in range(2):  # the second run is deduplicated: nothing more is counted
        result = (
            build_payload(frame, BY_ID, **options)
            .upload("Orders", client=client, state_dir=tmp_path, progress=False)
            .apply()
        )
        assert result.metrics()["quarantined"]["rows"] == 1
    assert counted() - before == 1

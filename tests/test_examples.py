"""Every example runs against the fake server and leaves the table it promises."""

from __future__ import annotations

import importlib
import sys
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: Run on every pyspark CI installs (see pyproject's markers).
pytestmark = pytest.mark.every_spark


@pytest.fixture
def example(compiled_code: SparkSession, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An example's ``main``, run as a user runs it (Spark generating code as by default)."""
    monkeypatch.delenv("TABLEAU_SERVER_URL", raising=False)
    monkeypatch.syspath_prepend(str(EXAMPLES))

    def load(name: str) -> ModuleType:
        sys.modules.pop(name, None)
        return importlib.import_module(name)

    return load


def test_single_table_append(example: Any) -> None:
    assert example("single_table_append").main() == [
        (1, "Oslo"),
        (2, "Lima"),
        (3, "Pune"),
        (4, "Quito"),
    ]


def test_multi_table_append(example: Any) -> None:
    assert example("multi_table_append").main() == {
        "Orders": [(1, 9.5), (2, 20.0), (3, 30.5)],
        "Returns": [(1, "damaged")],
    }


def test_star_schema_refresh(example: Any) -> None:
    assert example("star_schema_refresh").main() == {
        "Customers": [(1, "Ada L."), (2, "Bo"), (3, "Cy")],
        "Products": [(10, "Pen"), (11, "Ink")],
        "Sales": [(1, 10, 2), (2, 10, 1), (3, 11, 5)],
    }


def test_windowed_extract(example: Any) -> None:
    assert example("windowed_extract").main() == [
        (datetime(2024, 1, 3), 3),
        (datetime(2024, 1, 4), 4),
        (datetime(2024, 1, 5, 6), 5),
    ]


def test_cdc_composite_key(example: Any) -> None:
    rows = example("cdc_composite_key").main()
    assert sorted(rows) == [("eu", 1, "shipped"), ("us", 1, "again"), ("us", 2, "paid")]


def test_delete_by_constant(example: Any) -> None:
    assert example("delete_by_constant").main() == [("a", "Lamp"), ("c", "Desk")]


def test_every_example_is_tested() -> None:
    scripts = {p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_")}
    tested = {name.removeprefix("test_") for name in globals() if name.startswith("test_")}
    assert scripts <= tested, scripts - tested


def test_bootstrap_then_cdc(example: Any) -> None:
    assert example("bootstrap_then_cdc").main() == [
        (1, "shipped", 10.0),
        (3, "new", 30.0),
        (4, "paid", 40.0),
    ]


def test_streaming_cdc(example: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert example("streaming_cdc").main() == [(1, "shipped", 10.0), (3, "paid", 30.0)]
    runs = [line for line in capsys.readouterr().out.splitlines() if line.startswith("run ")]
    # Two batches applied by the first run; the second run found nothing new, and says so.
    assert runs == [
        "run 1: 2 batch(es): 2 applied",
        "run 2: nothing new (the checkpoint had every event)",
    ]


def test_scheduled_delta_job(example: Any) -> None:
    pytest.importorskip("deltalake")
    module = example("scheduled_delta_job")
    ran = module.main()
    # Order 1 shipped, order 2 deleted, order 3 inserted: one update of the whole feed.
    assert ran["first"]["rows"] == {"delete": 1, "upsert": 2}
    assert ran["again"] == {"versions": None}  # nothing new: nothing sent
    assert ran["nightly"] == 0
    # Someone changes the published data behind the job's back: the nightly check exits 6.
    edited = module.main(
        edit_behind='UPDATE "Extract"."Extract" SET amount = 99 WHERE order_id = 3'
    )
    assert edited["nightly"] == 6


def test_streaming_with_metrics(example: Any) -> None:
    figures = example("streaming_with_metrics").main()
    assert [f["position"] for f in figures] == [{"seq": 2}, {"seq": 4}]
    assert figures[0]["rows"] == {"upsert": 2}
    assert figures[1]["rows"] == {"delete": 1, "upsert": 1}
    assert all(f["event"] == "update" and f["jobs"] and f["bytes"] > 0 for f in figures)

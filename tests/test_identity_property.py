"""Random sequences of CDC slices, applied run by run, equal the source after every run.

The slices hold flips back to earlier values, deletes, re-inserts, NULLs that move between
columns and several changes of one key; some runs replay an earlier slice (with its record,
or from another machine without it). After each run the published table must equal the
source's state, and the server must have run each distinct slice exactly once.
``TABHYPER_PROPERTY_EXAMPLES`` raises the number of sequences (default 6);
``TABHYPER_PROPERTY_COUNT=FILE`` appends each sequence's number of runs to FILE.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tabhyper_update import PersonalAccessToken, TableauClient
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper
from tabhyper_update.values.policies import PollPolicy, RetryPolicy

from ._util import read_rows
from .test_identity import cdc

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Row = tuple[Any, Any]
VALUES = st.sampled_from(["x", "y", "", None])
EXAMPLES = int(os.environ.get("TABHYPER_PROPERTY_EXAMPLES", "6"))


@st.composite
def slices(draw: st.DrawFn) -> list[list[tuple[str, int, str, Any, Any]]]:
    """Runs: ("new", seq, key, op, a, b) slices, or ("replay", index) of an earlier one."""
    runs: list[Any] = []
    fresh = 0
    for _ in range(draw(st.integers(2, 5))):
        if fresh and draw(st.integers(0, 4)) == 0:
            runs.append(("replay", draw(st.integers(0, fresh - 1)), draw(st.booleans())))
            continue
        changes = draw(
            st.lists(
                st.tuples(st.integers(1, 4), st.sampled_from("IUD"), VALUES, VALUES),
                min_size=1,
                max_size=6,
            )
        )
        runs.append(("new", changes))
        fresh += 1
    return runs


def apply_model(state: dict[int, Row], changes: list[tuple[Any, ...]]) -> None:
    for key, op, a, b, _seq in sorted(changes, key=lambda c: c[-1]):
        if op == "D":
            state.pop(key, None)
        else:
            state[key] = (a, b)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(runs=slices())
def test_cdc_runs_equal_the_source_after_every_run(
    spark: SparkSession, tmp_path_factory: Any, runs: list[Any]
) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    table = ("id BIGINT NOT NULL, a TEXT, b TEXT", ["(1, 'x', NULL)"])
    start = make_hyper(tmp / "t.hyper", {"Extract": table})
    model: dict[int, Row] = {1: ("x", None)}
    applied: list[list[tuple[Any, ...]]] = []
    seq = 0
    with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
        luid = server.add_datasource("Orders", start)
        with TableauClient(
            server.url,
            "",
            PersonalAccessToken("ci", "pat-secret"),
            retry=RetryPolicy(initial_wait=0.01),
            poll=PollPolicy(initial=0.01, maximum=0.05),
        ) as client:
            for n, run in enumerate(runs):
                if run[0] == "new":
                    changes = []
                    for key, op, a, b in run[1]:
                        seq += 1  # a position in the feed: unique and growing
                        changes.append((key, op, a, b, seq))
                    applied.append(changes)
                    apply_model(model, changes)
                    state_dir = tmp / "state"
                else:
                    _, index, same_machine = run
                    changes = applied[index]
                    state_dir = tmp / "state" if same_machine else tmp / f"elsewhere-{n}"
                rows = [(k, a, b, op, s) for k, op, a, b, s in changes]
                cdc(spark, rows).upload(
                    "Orders", client=client, progress=False, state_dir=state_dir
                ).apply()
                server.wait_idle()
                got = read_rows(server.datasource_path(luid), "Extract")
                assert got == sorted((k, *v) for k, v in model.items()), (n, runs)
        assert server.jobs_run[luid] == len(applied)  # each distinct slice exactly once
    if os.environ.get("TABHYPER_PROPERTY_COUNT"):
        with open(os.environ["TABHYPER_PROPERTY_COUNT"], "a") as tally:
            tally.write(f"{len(runs)}\n")

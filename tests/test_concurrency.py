"""Concurrent updates of one data source, and two jobs sharing one personal access token."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tabhyper_update import (
    ChangeSet,
    Insert,
    NotFoundError,
    Payload,
    PersonalAccessToken,
    TableauClient,
    build_payload,
)
from tabhyper_update.rest import session as rest_session
from tabhyper_update.rest.session import SESSION_RECOVERIES
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper
from tabhyper_update.values.errors import AuthenticationError
from tabhyper_update.values.policies import RetryPolicy

from ._util import read_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_two_processes_update_one_datasource_and_nothing_is_lost(
    spark: SparkSession, tmp_path: Path
) -> None:
    start = make_hyper(
        tmp_path / "t.hyper", {"Extract": ("id BIGINT NOT NULL, v TEXT", ["(0, 'start')"])}
    )
    dirs = []
    for name, ids in (("a", range(1, 501)), ("b", range(1001, 1501))):
        df = spark.createDataFrame(
            [(i, f"{name}{i}", "I", 1) for i in ids], "id long, v string, op string, seq long"
        )
        payload = build_payload(
            df,
            ChangeSet("id", op_column="op", order_by="seq"),
            output_dir=tmp_path / f"out-{name}",
            keep_files=True,
        )
        dirs.append(payload.save_manifest(tmp_path / f"payload-{name}").parent)
    with FakeTableauServer(pats={"job-a": "secret-a", "job-b": "secret-b"}) as server:
        luid = server.add_datasource("Orders", start)
        procs = []
        for name, directory in zip("ab", dirs, strict=True):
            env = {
                **os.environ,
                "TABLEAU_SERVER_URL": server.url,
                "TABLEAU_SITE": "",
                "TABLEAU_PAT_NAME": f"job-{name}",
                "TABLEAU_PAT_SECRET": f"secret-{name}",
                "XDG_STATE_HOME": str(tmp_path / f"state-{name}"),
            }
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tabhyper_update",
                        "apply",
                        "--payload",
                        str(directory),
                        "--datasource",
                        "Orders",
                        "--wait",
                        "--timeout",
                        "120",
                    ],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        for proc in procs:
            _, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err
        rows = read_rows(server.datasource_path(luid), "Extract")
        assert server.jobs_run[luid] == 2
    assert [r[0] for r in rows] == [0, *range(1, 501), *range(1001, 1501)]


@pytest.fixture
def shared_pat_server(tmp_path: Path) -> FakeTableauServer:
    return FakeTableauServer(pats={"shared": "one-secret"})


def test_a_shared_pat_storm_ends_in_an_error_that_says_so(
    shared_pat_server: FakeTableauServer,
) -> None:
    with shared_pat_server as server:
        client = TableauClient(server.url, "", PersonalAccessToken("shared", "one-secret"))
        # Another job signs in with the same PAT right after each of ours: a few times in a
        # row is recovered (signing in again each time)...
        server.inject("job", expire_token=True, times=SESSION_RECOVERIES)
        with pytest.raises(NotFoundError):
            client.job("any")  # the call went through: there is no such job
        # ...once more than that ends in an error that says why.
        server.inject("job", expire_token=True, times=SESSION_RECOVERIES + 1)
        with pytest.raises(AuthenticationError, match="same personal access token"):
            client.job("any")


def test_two_processes_sharing_a_pat_fail_only_with_that_error(
    shared_pat_server: FakeTableauServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two threads whose clients share nothing, as two processes' clients cannot.
    monkeypatch.setattr(rest_session, "shared_token", lambda *a: None)
    errors: list[BaseException] = []
    deadline = time.monotonic() + 20

    def hammer() -> None:
        client = TableauClient(
            server.url,
            "",
            PersonalAccessToken("shared", "one-secret"),
            retry=RetryPolicy(max_attempts=2, initial_wait=0.01),
        )
        for _ in range(150):
            if time.monotonic() > deadline:
                return
            try:
                client.job("no-such-job")
            except NotFoundError:
                pass  # the request itself went through: the job does not exist
            except Exception as err:  # recorded: only the shared-PAT error is expected
                errors.append(err)

    with shared_pat_server as server:
        threads = [threading.Thread(target=hammer) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert server.counts["signin"] > 2  # the two clients kept signing each other out
    for err in errors:
        assert isinstance(err, AuthenticationError), err
        assert "same personal access token" in str(err)


@pytest.mark.parametrize(
    ("threads", "updates"),
    [(4, 3), pytest.param(16, 10, marks=pytest.mark.slow)],
)
def test_clients_of_one_pat_in_one_process_share_its_session(
    tmp_path: Path, threads: int, updates: int
) -> None:
    """Threads with a client each, one PAT, updates each to a data source of their own
    (sixteen threads of ten updates under ``-m slow``): every data source exact, one sign-in
    between them (none signs another out)."""
    start = make_hyper(tmp_path / "start.hyper", {"Extract": ("id BIGINT, v TEXT", [])})
    errors: list[BaseException] = []
    with FakeTableauServer(pats={"shared": "one-secret"}, directory=tmp_path / "srv") as server:
        luids = [server.add_datasource(f"DS{i}", start) for i in range(threads)]

        def work(i: int) -> None:
            try:
                with TableauClient(
                    server.url, "", PersonalAccessToken("shared", "one-secret")
                ) as client:
                    for n in range(updates):
                        rows = make_hyper(
                            tmp_path / f"rows-{i}-{n}.hyper",
                            {"Extract": ("id BIGINT, v TEXT", [f"({n}, 't{i}')"])},
                        )
                        client.update_datasource(
                            f"DS{i}",
                            Payload.from_hyper(rows),
                            actions=[Insert(source_table="Extract", target_table="Extract")],
                            state_dir=tmp_path / f"state-{i}",
                            progress=False,
                        )
            except BaseException as err:
                errors.append(err)

        running = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for t in running:
            t.start()
        for t in running:
            t.join(timeout=240)
        assert errors == []
        for i, luid in enumerate(luids):
            got = sorted(read_rows(server.datasource_path(luid), "Extract"))
            assert got == [(n, f"t{i}") for n in range(updates)]
        assert server.counts["signin"] == 1
        assert server.counts["signout"] == 1  # by the last client to close

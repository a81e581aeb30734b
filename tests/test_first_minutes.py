"""What a new user meets on the wrong path: a misspelt data source gets the near names, a
refused sign-in its own exit code (test_cli.py), an empty build nothing to update."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tabhyper_update.errors import ConnectionFailedError, NotFoundError
from tabhyper_update.testing import FakeTableauServer, make_hyper
from tabhyper_update.types import RetryPolicy

from ._util import client_for


def test_a_misspelt_data_source_suggests_the_near_names(tmp_path: Path) -> None:
    start = make_hyper(tmp_path / "start.hyper", {"Extract": ("id BIGINT", [])})
    with FakeTableauServer(pats={"ci": "pat-secret"}, directory=tmp_path / "srv") as server:
        for name in ("Orders", "Order lines", "Returns"):
            server.add_datasource(name, start)
        with client_for(server) as client:
            with pytest.raises(NotFoundError, match=r"did you mean 'Orders'") as caught:
                client.datasource("Ordres")
            assert "Returns" not in str(caught.value)
            with pytest.raises(NotFoundError) as far:
                client.datasource("Inventory")
            assert "did you mean" not in str(far.value)


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_connection_failures_say_which_and_what_to_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import socket

    from tabhyper_update import PersonalAccessToken, TableauClient
    from tabhyper_update.errors import (
        ConnectionFailedError,
        TlsVerificationError,
        UnknownHostError,
    )
    from tabhyper_update.values.policies import RetryPolicy

    pat = PersonalAccessToken("ci", "pat-secret")
    quick = RetryPolicy(initial_wait=0.01, max_total_seconds=5)
    # Refused: nothing listens on the port.
    port = _closed_port()
    with (
        caplog.at_level(logging.WARNING, logger="tabhyper_update"),
        TableauClient(f"http://127.0.0.1:{port}", "", pat) as client,
        pytest.raises(ConnectionFailedError) as refused,
    ):
        client.sign_in()
    assert f"connection refused by 127.0.0.1:{port}" in str(refused.value)
    assert "TABLEAU_SERVER_URL" in str(refused.value)
    # Nothing listens on this machine's address: said at once, never retried (with the
    # default policy that was four warnings and about 9 s before the answer).
    assert refused.value.refused_locally
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]
    # https:// against a server that speaks http.
    with FakeTableauServer(pats={"ci": "pat-secret"}, directory=tmp_path / "srv") as server:
        https = server.url.replace("http://", "https://")
        with (
            TableauClient(https, "", pat, retry=quick) as client,
            pytest.raises(TlsVerificationError, match="does not speak TLS"),
        ):
            client.sign_in()
    # An unknown host: said so, and looked up once (no retry can fix a typo). The lookup
    # is answered here, never by a resolver.
    looked_up: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: str, *args: object, **kwargs: object) -> object:
        if host == "tableau.example.invalid":
            looked_up.append(host)
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with (
        TableauClient("https://tableau.example.invalid", "", pat) as client,
        pytest.raises(UnknownHostError, match=r"'tableau\.example\.invalid' does not resolve"),
    ):
        client.sign_in()
    assert looked_up == ["tableau.example.invalid"]


def test_a_url_pasted_from_the_browser_names_the_server_and_its_site(tmp_path: Path) -> None:
    from tabhyper_update import PersonalAccessToken, TableauClient
    from tabhyper_update.errors import ConfigurationError

    pat = PersonalAccessToken("ci", "pat-secret")
    with FakeTableauServer(pats={"ci": "pat-secret"}, site="mysite", directory=tmp_path) as srv:
        pasted = f"{srv.url}/#/site/mysite/datasources"
        with TableauClient(pasted, "", pat) as client:
            assert client.site == "mysite"
            client.sign_in()  # on the server's own URL, site mysite
        with pytest.raises(ConfigurationError, match="names site 'mysite'"):
            TableauClient(pasted, "other", pat)


def test_ctrl_c_in_apply_says_what_stays_and_that_the_same_command_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tabhyper_update import TableauClient
    from tabhyper_update.cli import main

    def stopped(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(TableauClient, "update_datasource", stopped)
    monkeypatch.setenv("TABLEAU_SERVER_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("TABLEAU_PAT_NAME", "ci")
    monkeypatch.setenv("TABLEAU_PAT_SECRET", "pat-secret")
    payload = make_hyper(tmp_path / "p.hyper", {"Extract": ("id BIGINT", ["(1)"])})
    batch = tmp_path / "batch.json"
    batch.write_text(
        '{"actions": [{"action": "insert", "source-table": "Extract", "target-table": "Extract"}]}'
    )
    code = main(
        [
            "apply",
            "--payload",
            str(payload),
            "--actions",
            str(batch),
            "--datasource",
            "Orders",
            "--state-dir",
            str(tmp_path / "state"),
        ]
    )
    assert code == 130
    said = capsys.readouterr().err
    assert "apply interrupted" in said
    assert "running the same command again resumes" in said


def test_build_checks_paths_and_change_set_columns_before_starting_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tabhyper_update.cli import main
    from tabhyper_update.local import spark as local_spark_module

    def no_spark(*args: object, **kwargs: object) -> None:
        raise AssertionError("Spark was started before the input was checked")

    monkeypatch.setattr(local_spark_module, "own_spark", no_spark)
    out = tmp_path / "out"
    assert main(["build", "--input", str(tmp_path / "nope.parquet"), "--output-dir", str(out)]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    changes = tmp_path / "changes.csv"
    changes.write_text("id,v,op\n1,a,U\n")
    code = main(
        [
            "build",
            "--input",
            str(changes),
            "--format",
            "csv",
            "--key",
            "id",
            "--op-column",
            "op",
            "--output-dir",
            str(out),
        ]
    )
    assert code == 2
    assert "--order-by is required to pick the last change per key" in capsys.readouterr().err
    assert not out.exists()


def test_tests_against_the_fake_keep_records_out_of_the_users_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tabhyper_update import Insert, Payload

    home_state = tmp_path / "xdg"
    monkeypatch.setenv("XDG_STATE_HOME", str(home_state))
    start = make_hyper(tmp_path / "start.hyper", {"Extract": ("id BIGINT", [])})
    rows = make_hyper(tmp_path / "rows.hyper", {"Extract": ("id BIGINT", ["(1)"])})
    with FakeTableauServer(pats={"ci": "pat-secret"}, directory=tmp_path / "srv") as server:
        server.add_datasource("Orders", start)
        with client_for(server) as client:
            client.update_datasource(
                "Orders",
                Payload.from_hyper(rows),
                actions=[Insert(source_table="Extract", target_table="Extract")],
                request_id="first",  # a position: its record stays
            )
        assert list((tmp_path / "srv" / "client-state" / "records").glob("*.json"))
    assert not home_state.exists()


def test_an_answer_lost_mid_way_is_not_blamed_on_the_url(tmp_path: Path) -> None:
    """A connection that broke after the server was reached says so (and that the request
    may have been acted on), not "check the server URL"."""
    start = make_hyper(tmp_path / "s.hyper", {"Extract": ("id BIGINT", ["(1)"])})
    with FakeTableauServer(pats={"ci": "pat-secret"}) as server:
        server.add_datasource("Orders", start)
        server.inject("datasource", drop="after", times=10)  # every answer lost
        with client_for(server, retry=RetryPolicy(max_attempts=2, initial_wait=0.01)) as client:
            ref = client.datasource("Orders")  # the listing answers; the GET by id does not
            with pytest.raises(ConnectionFailedError) as caught:
                client.request("GET", f"datasources/{ref.id}", retry=True)
    message = str(caught.value)
    assert "broke before the answer was complete" in message
    assert "whether the server acted on the request is not known" in message
    assert "check the server URL" not in message


def test_a_target_table_the_data_source_lacks_is_refused_before_the_upload(
    tmp_path: Path,
) -> None:
    from tabhyper_update import Insert, Payload
    from tabhyper_update.errors import PayloadError

    snapshot = make_hyper(tmp_path / "o.hyper", {"Extract": ("id BIGINT, v TEXT", ["(1, 'a')"])})
    rows = make_hyper(tmp_path / "r.hyper", {"Extract": ("id BIGINT, v TEXT", ["(2, 'b')"])})
    with FakeTableauServer(pats={"ci": "pat-secret"}) as server, client_for(server) as client:
        # Published by the SDK: its tables are known by name.
        client.publish(snapshot, "Orders", state_dir=tmp_path / "state")
        with pytest.raises(PayloadError) as caught:
            client.update_datasource(
                "Orders",
                Payload.from_hyper(rows),
                actions=[Insert(source_table="Extract", target_table="Orderz")],
                state_dir=tmp_path / "state",
            )
        assert server.counts["initiate"] == 0  # the publish went in one request; no upload
        assert server.counts["update"] == 0
    assert "no table 'Orderz'" in str(caught.value)
    assert "'Extract'" in str(caught.value)

"""What a new user meets on the wrong path: a misspelt data source gets the near names, a
refused sign-in its own exit code (test_cli.py), an empty build nothing to update."""

from __future__ import annotations

from pathlib import Path

import pytest

from tabhyper_update.errors import NotFoundError
from tabhyper_update.testing import FakeTableauServer, make_hyper

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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
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
        TableauClient(f"http://127.0.0.1:{port}", "", pat, retry=quick) as client,
        pytest.raises(ConnectionFailedError) as refused,
    ):
        client.sign_in()
    assert f"connection refused by 127.0.0.1:{port}" in str(refused.value)
    assert "TABLEAU_SERVER_URL" in str(refused.value)
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

"""No secret (PAT secret, password, session token, JWT) in logs, reprs, errors, records or
command output, across the flows: success, faults, expiry, failures, crashes, the CLI."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import (
    ConnectedAppJWT,
    Insert,
    PersonalAccessToken,
    TableauClient,
    UsernamePassword,
    build_payload,
)
from tabhyper_update.cli import main
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper
from tabhyper_update.values.policies import PollPolicy, RetryPolicy

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PAT_SECRET = "pat-s3cret-Xy7"
PASSWORD = "pa55w0rd-Qz"
APP_SECRET = "app-s3cret-Lm"


@pytest.fixture
def target_file(tmp_path: Path) -> Path:
    return make_hyper(tmp_path / "t.hyper", {"Extract": ("id BIGINT, v TEXT", ["(1, 'a')"])})


@pytest.fixture
def server_options() -> dict[str, Any]:
    # Secrets no other text could hold by chance: any of them found in output is a leak.
    return {
        "pats": {"ci": PAT_SECRET},
        "users": {"ana": PASSWORD},
        "connected_app": {"client_id": "cid", "secret_id": "kid", "secret_value": APP_SECRET},
    }


def test_no_secret_leaks_anywhere(
    spark: SparkSession,
    server: FakeTableauServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG)
    texts: list[str] = []
    state = tmp_path / "state"
    df = spark.createDataFrame([(2, "b")], "id long, v string")
    insert = [Insert(target_table="Extract", source_table="Extract")]
    fast: dict[str, Any] = {
        "retry": RetryPolicy(initial_wait=0.01, max_attempts=3),
        "poll": PollPolicy(initial=0.01, maximum=0.05),
    }
    auths: list[Any] = [
        PersonalAccessToken("ci", PAT_SECRET),
        UsernamePassword("ana", PASSWORD),
        ConnectedAppJWT(client_id="cid", secret_id="kid", secret_value=APP_SECRET, username="ana"),
    ]
    for auth in auths:
        texts += [repr(auth), str(auth), str(auth.model_dump()), auth.model_dump_json()]
        # Faults on the way: an expired session, a 503, a dropped answer to the update.
        server.inject("datasources", expire_token=True)
        server.inject("initiate", status=503)
        server.inject("update", drop="after")
        with TableauClient(server.url, "", auth, **fast) as client:
            payload = build_payload(df)
            uploaded = payload.upload("Orders", client=client, progress=False, state_dir=state)
            result = uploaded.apply(insert)
            texts += [repr(client), repr(payload), repr(uploaded), repr(result)]
            result.wait(timeout=30)
            texts += [repr(j) for j in result.jobs]
    failures: list[Any] = [
        lambda: TableauClient(
            server.url, "", PersonalAccessToken("ci", "wrong-" + PAT_SECRET), **fast
        ).sign_in(),
        lambda: TableauClient(
            server.url, "", UsernamePassword("ana", PASSWORD + "x"), **fast
        ).sign_in(),
        lambda: (
            build_payload(df)
            .upload(
                "Orders",
                client=TableauClient(server.url, "", PersonalAccessToken("ci", PAT_SECRET), **fast),
                progress=False,
                state_dir=state,
            )
            .apply([Insert(target_table="Nope", source_table="Extract")])
            .wait()
        ),
    ]
    for fail in failures:
        with pytest.raises(Exception) as caught:
            fail()
        texts += [str(caught.value), repr(caught.value)]
    # A shared-PAT storm ends in an error whose text is scanned too.
    server.inject("job", expire_token=True, times=2)
    with TableauClient(server.url, "", PersonalAccessToken("ci", PAT_SECRET), **fast) as c:
        with pytest.raises(Exception) as caught:
            c.job("whatever")
        texts += [str(caught.value)]
    # The command line, with its JSON output.
    for key, value in {
        "TABLEAU_SERVER_URL": server.url,
        "TABLEAU_PAT_NAME": "ci",
        "TABLEAU_PAT_SECRET": PAT_SECRET,
        "TABLEAU_SITE": "",
    }.items():
        monkeypatch.setenv(key, value)
    batch = tmp_path / "b.json"
    batch.write_text(
        json.dumps(
            {"actions": [{"action": "delete", "target-table": "Extract", "condition": True}]}
        )
    )
    assert (
        main(
            [
                "apply",
                "--actions",
                str(batch),
                "--datasource",
                "Orders",
                "--wait",
                "--json",
                "--state-dir",
                str(state),
            ]
        )
        == 0
    )
    out = capsys.readouterr()
    texts += [out.out, out.err]
    texts += [p.read_text() for p in state.glob("*.json")] if state.exists() else []
    texts += [r.getMessage() for r in caplog.records]
    texts += [str(r.args) for r in caplog.records]
    joined = "\n".join(texts)
    secrets = {PAT_SECRET, PASSWORD, APP_SECRET} | server.secrets_seen
    assert len(server.secrets_seen) >= 6  # tokens and JWTs really were issued and sent
    assert "signed in" in joined  # logs were captured
    leaks = [s for s in secrets if s in joined]
    assert leaks == []


def fragments(secret: str, size: int = 4) -> set[str]:
    """Every piece of ``secret`` of ``size`` characters."""
    return {secret[i : i + size] for i in range(len(secret) - size + 1)}


@pytest.mark.parametrize("at", [150, 155, 158, 160])
def test_a_page_echoing_a_secret_near_the_cut_leaves_no_fragment(at: int) -> None:
    """A proxy's HTML page that echoes the PAT secret where the message cuts the page
    short: the page is scrubbed whole, then cut, so no piece of the secret is left."""
    secret = "Zq8XwK3vP9mLr2Tb"
    with FakeTableauServer(pats={"ci": secret}, serve=True) as fake:
        client = TableauClient(
            fake.url,
            "",
            PersonalAccessToken("ci", secret),
            retry=RetryPolicy(max_attempts=1),
        )
        client.sign_in()
        head = "<html><body><p>"
        page = head + "x" * (at - len(head)) + secret + " rejected by the gateway</p></body></html>"
        fake.inject("projects", status=200, body=page.encode(), content_type="text/html")
        with pytest.raises(Exception) as caught:
            client.datasource("Orders", project="Sales")
        client.close()
    text = f"{caught.value} {caught.value!r}"
    assert "not JSON or XML" in text
    assert not {f for f in fragments(secret) if f in text}

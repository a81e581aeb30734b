"""The probe (``client.probe`` / ``tabhyper-update probe``): it tells every fake profile apart
under both semantics from the canary's rows, remembers what it found, removes its canary, and
the SDK sends a guarded change set only where a probe found the guard working."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest

from tabhyper_update import ChangeSet, ConnectedAppJWT, TableauClient, build_payload
from tabhyper_update.cli import main
from tabhyper_update.errors import ConfigurationError
from tabhyper_update.rest.scopes import DEFAULT_JWT_SCOPES
from tabhyper_update.testing import FakeTableauServer, make_hyper
from tabhyper_update.types import PollPolicy
from tabhyper_update.values.probes import PROBE_CASES, ProbeResult

from ._util import CONNECTED_APP, PAT, client_for, read_rows, use_environment

CASES = (*PROBE_CASES, "read_back")


def findings(found: ProbeResult) -> dict[str, Any]:
    return {k: getattr(found, k) for k in CASES}


def probed(server: FakeTableauServer, state: Path, **options: Any) -> ProbeResult:
    # Polls that back off as a real client's do: on a loaded machine the fake's jobs take
    # longer, and polls every 0.05 s would spend the probe's bound of 200 requests on them.
    with client_for(server, poll=PollPolicy(initial=0.01, maximum=1.0, timeout=60)) as client:
        found = client.probe(project="Default", state_dir=state, **options)
    server.wait_idle()
    return found


@pytest.mark.parametrize("semantics", ["hyper", "strict"])
@pytest.mark.parametrize("profile", ["ideal", "strict", "server-2021.4", "server-2025.1", "cloud"])
def test_the_probe_tells_every_profile_apart(profile: str, semantics: str, tmp_path: Path) -> None:
    with FakeTableauServer(profile=profile, semantics=semantics, pats=dict([PAT])) as server:
        found = probed(server, tmp_path)
        assert findings(found) == findings(server.expected_probe())
        assert server.backend.sources == {}, "the canary was left behind"
        assert 0 < found.requests <= 200
        assert found.requests == sum(server.counts.values()) - server.counts["signout"]
    kept = json.loads(next((tmp_path / "records").glob("probe-*.json")).read_text())
    assert findings(ProbeResult.from_dict(kept)) == findings(found)
    assert PAT[1] not in json.dumps(kept)


@pytest.mark.parametrize("replay", ["new_job", "refuse"])
def test_the_probe_tells_how_a_repeated_request_id_is_answered(replay: str, tmp_path: Path) -> None:
    with FakeTableauServer(replay=replay, pats=dict([PAT])) as server:
        found = probed(server, tmp_path)
    assert found.replay == {"new_job": "new_job", "refuse": "refused"}[replay]


@pytest.mark.parametrize("profile", ["ideal", "server-2021.4"])
def test_the_probe_tells_how_source_columns_unlike_the_targets_are_met(
    profile: str, tmp_path: Path
) -> None:
    # The reverse of every fake's default (a stray column refused, missing ones NULL), read
    # back through the service and, without one, by follow-up updates.
    with FakeTableauServer(
        profile=profile, extra_columns="ignore", missing_columns="refuse", pats=dict([PAT])
    ) as server:
        found = probed(server, tmp_path)
        assert findings(found) == findings(server.expected_probe())
    assert (found.extra_columns, found.missing_columns) == ("ignored", "refused")
    assert found.requests <= 200


@pytest.mark.parametrize("partial", ["null", "refuse"])
@pytest.mark.parametrize("profile", ["ideal", "server-2021.4"])
def test_the_probe_tells_how_a_partial_update_is_met(
    profile: str, partial: Literal["null", "refuse"], tmp_path: Path
) -> None:
    """Rows updated from a source lacking target columns: kept on every fake by default
    (Hyper's ``UPDATE``), and told apart where a server sets them to NULL or refuses, through
    the service and by follow-up updates; every other case measures the same as before."""
    with FakeTableauServer(profile=profile, partial_update=partial, pats=dict([PAT])) as server:
        found = probed(server, tmp_path)
        assert findings(found) == findings(server.expected_probe())
    assert found.partial_update == {"null": "null", "refuse": "refused"}[partial]
    assert found.read_back == ("data_service" if profile == "ideal" else "not_null")
    assert found.requests <= 200


def test_a_fake_answers_as_the_probed_server_did(tmp_path: Path) -> None:
    with FakeTableauServer(
        profile="server-2021.4",
        semantics="strict",
        replay="new_job",
        extra_columns="ignore",
        pats=dict([PAT]),
    ) as server:
        first = probed(server, tmp_path / "a")
    saved = tmp_path / "probe.json"
    saved.write_text(json.dumps(first.as_dict()))
    with FakeTableauServer(profile=str(saved), pats=dict([PAT])) as server:
        again = probed(server, tmp_path / "b")
        assert server.backend.uploads.max_upload_mb == 100  # the probe did not measure a cap
    assert findings(again) == findings(first)
    assert first.extra_columns == "ignored"
    assert again.api_version == first.api_version == "3.14"


def test_a_probe_the_fake_cannot_answer_as_is_refused_naming_it(tmp_path: Path) -> None:
    with FakeTableauServer(pats=dict([PAT])) as server:
        odd = server.expected_probe()
    odd.not_null, odd.replay = "not_enforced", "applied_again"
    saved = tmp_path / "odd.json"
    saved.write_text(json.dumps(odd.as_dict()))
    with pytest.raises(ValueError, match=r"not_null='not_enforced'.*replay='applied_again'"):
        FakeTableauServer(profile=str(saved), pats=dict([PAT]))


def test_the_probe_finds_the_update_cap_with_a_bounded_upload(tmp_path: Path) -> None:
    with FakeTableauServer(profile="server-2021.4", pats=dict([PAT])) as server:
        found = probed(server, tmp_path, cap=True)
        assert server.backend.sources == {}
    assert found.cap_mb == 10
    assert found.requests <= 200


def test_a_connected_app_lacking_the_update_scope_is_named(tmp_path: Path) -> None:
    app = {k: CONNECTED_APP[k] for k in ("client_id", "secret_id", "secret_value")}
    lacking = tuple(s for s in DEFAULT_JWT_SCOPES if s != "tableau:hyper_data:update")
    with FakeTableauServer(connected_app=CONNECTED_APP) as server:
        auth = ConnectedAppJWT(**app, username="ana", scopes=lacking)
        with TableauClient(server.url, "", auth) as client:
            found = client.probe(project="Default", state_dir=tmp_path)
        assert server.backend.sources == {}
    assert {s["scope"] for s in found.scopes or []} == {"tableau:hyper_data:update"}
    assert found.guard == "unknown"
    assert found.not_null == "unknown"
    assert CONNECTED_APP["secret_value"] not in json.dumps(found.as_dict())


def test_keep_leaves_the_canary_and_nothing_else_is_touched(tmp_path: Path) -> None:
    start = make_hyper(tmp_path / "s.hyper", {"Extract": ("id BIGINT", ["(1)"])})
    with FakeTableauServer(pats=dict([PAT])) as server:
        luid = server.add_datasource("Orders", start)
        found = probed(server, tmp_path / "state", keep=True)
        names = {d.name for d in server.backend.sources.values()}
        assert names == {"Orders", found.canary}
        assert read_rows(server.datasource_path(luid), "Extract") == [(1,)]


def test_a_guarded_change_set_is_sent_only_where_a_probe_vouched(
    spark: Any, tmp_path: Path
) -> None:
    start = make_hyper(
        tmp_path / "start.hyper",
        {
            "Extract": ("id BIGINT NOT NULL, v TEXT", []),
            "Extract_positions": ("id BIGINT NOT NULL, seq BIGINT, guarded BOOLEAN NOT NULL", []),
        },
    )
    df = spark.createDataFrame([(1, "a", "U", 3)], "id long, v string, op string, seq long")
    with FakeTableauServer(pats=dict([PAT])) as server:
        luid = server.add_datasource("Orders", start)
        with client_for(server) as client:
            payload = build_payload(df, ChangeSet("id", op_column="op", order_by="seq", guard=True))
            with pytest.raises(ConfigurationError) as caught:
                client.update_datasource("Orders", payload, state_dir=tmp_path / "s")
            assert server.counts["initiate"] == server.counts["update"] == 0
            assert "tabhyper-update probe --project NAME" in str(caught.value)
            client.probe(project="Default", state_dir=tmp_path / "s")
            client.update_datasource("Orders", payload, state_dir=tmp_path / "s")
        assert read_rows(server.datasource_path(luid), "Extract") == [(1, "a")]
        assert read_rows(server.datasource_path(luid), "Extract_positions") == [(1, 3, True)]


def test_the_probe_command_prints_one_json_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeTableauServer(profile="server-2025.1", pats=dict([PAT])) as server:
        use_environment(monkeypatch, server, tmp_path / "xdg", "unused")
        code = main(["probe", "--project", "Default", "--state-dir", str(tmp_path), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads(out)
    assert data["data_service"] == "2025.1"
    assert data["guard"] == "works"
    assert data["requests"] <= 200
    assert data["cap_mb"] is None
    assert PAT[1] not in out
    # Without --json: one line per case, each as the JSON says.
    with FakeTableauServer(profile="server-2025.1", pats=dict([PAT])) as server:
        use_environment(monkeypatch, server, tmp_path / "xdg", "unused")
        assert main(["probe", "--project", "Default", "--state-dir", str(tmp_path)]) == 0
    shown = capsys.readouterr().out
    for case in ("multi_match", "extra_columns", "missing_columns", "parallel_upload"):
        assert f"  {case:<15} {data[case]}\n" in shown
    assert PAT[1] not in shown

"""The tabhyper-update command: --version, validate, schema."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tabhyper_update import __version__, cli
from tabhyper_update.cli import main, schema_text
from tabhyper_update.cli.exit_codes import EXIT_AUTH, MEANINGS
from tabhyper_update.testing import FakeTableauServer

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "batches" / "cdc_composite_key.json"


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_validate_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EXAMPLE)]) == 0
    assert capsys.readouterr().out.strip() == "OK"


def test_validate_prints_each_problem_with_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "actions": [
                    {"action": "insert", "target-table": "T"},
                    {
                        "action": "update",
                        "target-table": "T",
                        "source-table": "S",
                        "condition": {
                            "op": "eq",
                            "target-col": "a",
                            "const": {"type": "integer", "v": "x"},
                        },
                    },
                ]
            }
        )
    )
    assert main(["validate", str(bad)]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [
        "$.actions[0]: insert reads a payload table: 'source-table' is required",
        "$.actions[1].condition.const: integer constant must be a whole number, got 'x'",
    ]


def test_validate_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["validate", "--json", str(bad)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False
    assert out["problems"][0]["path"] == "$"


def test_validate_checks_the_wire_format_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    action = {
        "action": "delete",
        "target_table": "T",
        "condition": {"op": "eq", "target_col": "a", "const": {"type": "integer", "v": 1}},
    }
    lenient = tmp_path / "snake.json"
    lenient.write_text(json.dumps([action]))
    assert main(["validate", str(lenient)]) == 1
    assert "not a bare list" in capsys.readouterr().out
    lenient.write_text(json.dumps({"actions": [action]}))
    assert main(["validate", str(lenient)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "$.actions[0].condition.target_col: 'target_col' is not a wire name: write 'target-col'",
        "$.actions[0].target_table: 'target_table' is not a wire name: write 'target-table'",
    ]


def test_demo_without_pyspark_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark now fails
    assert main(["demo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "pip install -e '.[spark]'" in err


def test_help_lists_exit_codes_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for code, meaning in MEANINGS.items():
        assert f"{code} {' '.join(meaning.split())}" in out
    # Declared once: the command's docstring points to the table instead of repeating it.
    assert "exit_codes.py" in (cli.__doc__ or "")
    assert "4 not found" not in " ".join((cli.__doc__ or "").split())
    with pytest.raises(SystemExit):
        main(["build", "--help"])
    assert "(default: 100)" in capsys.readouterr().out


def test_validate_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "/nonexistent/batch.json"]) == 2
    assert "cannot read" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["validate"])
    assert stop.value.code == 2
    with pytest.raises(SystemExit) as stop:
        main(["frobnicate"])
    assert stop.value.code == 2
    assert main([]) == 2


def test_schema_prints_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert capsys.readouterr().out == schema_text()
    out = tmp_path / "s.json"
    assert main(["schema", "-o", str(out)]) == 0
    assert main(["schema", "--check", str(out)]) == 0
    out.write_text("{}")
    assert main(["schema", "--check", str(out)]) == 1


def test_installed_console_script_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tabhyper_update", "validate", str(EXAMPLE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "OK"


def test_a_refused_sign_in_has_its_own_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeTableauServer(pats={"ci": "right-secret"}, directory=tmp_path / "srv") as server:
        monkeypatch.setenv("TABLEAU_SERVER_URL", server.url)
        monkeypatch.setenv("TABLEAU_SITE", "")
        monkeypatch.setenv("TABLEAU_PAT_NAME", "ci")
        monkeypatch.setenv("TABLEAU_PAT_SECRET", "wrong-secret")
        code = main(["job", "status", "some-job", "--json"])
    assert code == EXIT_AUTH != 3  # 3 (server or network) is what a scheduler retries
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["class"] == "AuthenticationError"
    assert "wrong-secret" not in error["message"]


def test_serve_local_prints_what_to_export_listens_on_the_port_and_rows_shows_its_sample(
    tmp_path: Path,
) -> None:
    import os
    import shlex
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = str(Path(sys.executable).parent / "tabhyper-update")
    proc = subprocess.Popen(
        [
            command,
            "serve-local",
            "--port",
            str(port),
            "--duration",
            "60",
            "--directory",
            str(tmp_path / "fake"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        exports: dict[str, str] = {}
        deadline = time.monotonic() + 30
        while len(exports) < 4 and time.monotonic() < deadline:
            line = proc.stdout.readline().strip()
            if line.startswith("export "):
                name, _, value = shlex.split(line[len("export ") :])[0].partition("=")
                exports[name] = value
        assert exports["TABLEAU_SERVER_URL"] == f"http://127.0.0.1:{port}"
        env = {**os.environ, **exports}
        done = subprocess.run(
            [command, "job", "status", "no-such-job"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 4, done.stderr  # signed in with what it printed; no job
        # Without --datasource it serves a sample data source, and `rows` shows it.
        shown = subprocess.run(
            [command, "rows", "Orders"], env=env, capture_output=True, text=True, timeout=60
        )
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines() == [
            "Extract: 3 row(s)",
            "  id | name | qty",
            "  1 | apples | 10",
            "  2 | pears | 20",
            "  3 | plums | 30",
        ]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_an_empty_build_is_an_empty_payload_that_apply_reports_as_nothing_to_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tabhyper_update import ChangeSet, Payload
    from tabhyper_update.testing import make_hyper

    # What `build` writes for an empty change set (a manifest without parts).
    folder = tmp_path / "payload"
    folder.mkdir()
    Payload([], change_set=ChangeSet("id", op_column="op", order_by="seq")).save_manifest(folder)
    start = make_hyper(tmp_path / "start.hyper", {"Extract": ("id BIGINT, v TEXT", [])})
    with FakeTableauServer(pats={"ci": "pat-secret"}, directory=tmp_path / "srv") as server:
        server.add_datasource("Orders", start)
        monkeypatch.setenv("TABLEAU_SERVER_URL", server.url)
        monkeypatch.setenv("TABLEAU_PAT_NAME", "ci")
        monkeypatch.setenv("TABLEAU_PAT_SECRET", "pat-secret")
        code = main(
            [
                "apply",
                "--payload",
                str(folder),
                "--datasource",
                "Orders",
                "--state-dir",
                str(tmp_path / "state"),
                "--json",
            ]
        )
        assert server.counts["update"] == 0
    assert code == 0
    assert json.loads(capsys.readouterr().out)["empty"] is True


def test_advice_is_given_in_the_commands_own_terms() -> None:
    from tabhyper_update.cli.failures import as_flags

    sdk = (
        "GET https://x/api: TLS verification failed (self-signed); if the server uses a "
        "private certificate authority, set TABLEAU_VERIFY_TLS to its CA bundle's path (or "
        "pass verify='/path/to/ca-bundle.pem'); only for a test server, "
        "TABLEAU_VERIFY_TLS=false; check the server URL (TABLEAU_SERVER_URL, or the server= "
        "you passed)"
    )
    said = as_flags(sdk)
    assert "verify=" not in said
    assert "server=" not in said
    assert "only for a test server, --insecure" in said
    assert "(TABLEAU_SERVER_URL, or --server)" in said
    assert "set TABLEAU_VERIFY_TLS to its CA bundle's path;" in said


def test_a_program_calling_the_command_keeps_its_own_logging(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # A script that runs `tabhyper-update ... -q` through main() and then uses the SDK itself
    # still sees the SDK's warnings: the command's quiet level and its stderr handler end
    # with the command.
    sdk = logging.getLogger("tabhyper_update")
    level, handlers = sdk.level, list(sdk.handlers)
    assert main(["validate", "-q", str(EXAMPLE)]) == 0
    assert main(["validate", "-vv", str(EXAMPLE)]) == 0
    assert (sdk.level, sdk.handlers) == (level, handlers)
    with caplog.at_level(logging.WARNING):
        logging.getLogger("tabhyper_update.rest").warning("after the command")
    assert "after the command" in caplog.text
    assert "after the command" not in capsys.readouterr().err


def test_counts_in_messages_agree_with_their_number() -> None:
    """ "1 row", never "1 rows"; thousands grouped."""
    from tabhyper_update.update.results import PlannedPart, UpdatePlan
    from tabhyper_update.values.actions import ActionBatch
    from tabhyper_update.values.wording import counted

    assert [counted(n, "row") for n in (0, 1, 2, 12_345)] == [
        "0 rows",
        "1 row",
        "2 rows",
        "12,345 rows",
    ]
    batch = ActionBatch.from_json(
        '{"actions": [{"action": "insert", "target-schema": "Extract", "target-table": '
        '"Extract", "source-schema": "Extract", "source-table": "upserts"}]}'
    )
    plan = UpdatePlan(
        "Orders",
        "luid",
        [PlannedPart(1, "part-0001.hyper", 100, {"upserts": 1, "deletes": 2}, batch)],
        None,
    )
    assert "upserts 1 row, deletes 2 rows" in str(plan)


def test_the_sdks_advice_is_written_as_commands() -> None:
    """A job waited on past its deadline, or a payload without actions: the command line
    says what to run or which flag to give, not which Python call or keyword."""
    from tabhyper_update.cli.failures import as_flags
    from tabhyper_update.errors import InvalidArgumentError, JobTimeoutError
    from tabhyper_update.update.targets import derived_target

    said = as_flags(str(JobTimeoutError("0a1b-2c", 30.0)))
    assert "tabhyper-update job wait 0a1b-2c" in said
    assert "wait()" not in said

    class Plain:
        def __init__(self) -> None:
            self.is_cdc = False
            self.parts = [object()]

    with pytest.raises(InvalidArgumentError) as caught:
        derived_target(Plain(), None, None, None)  # type: ignore[arg-type]
    said = as_flags(str(caught.value))
    assert "pass --actions" in said
    assert "actions=" not in said
    assert "give the folder, not one of its part files" in said

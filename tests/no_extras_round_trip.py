"""The round trip that needs no extra: a ``.hyper`` file applied to a data source on the
built-in fake server through the chain, ``client.update_datasource``, ``client.publish`` and
the ``tabhyper-update apply`` / ``status`` / ``state`` commands.

Run as a script (``python tests/no_extras_round_trip.py``) in an environment with the
package installed and no extra; CI runs it in a bare install, and ``test_no_extras.py`` runs
it in a subprocess that cannot import ``pyspark`` or ``opentelemetry``. ``--block NAME``
(repeatable) makes ``NAME`` and its submodules unimportable first. Prints ``OK: ...`` and
exits 0 when every data source ends as expected; anything else exits non-zero.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.abc
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any


class _Blocked(importlib.abc.MetaPathFinder):
    """Makes the named top-level packages unimportable, as if they were not installed."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = set(names)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def _block(names: Sequence[str]) -> None:
    if not names:
        return
    for loaded in list(sys.modules):
        if loaded.split(".")[0] in names:
            del sys.modules[loaded]
    sys.meta_path.insert(0, _Blocked(names))
    # Child processes (the command line) block the same names through sitecustomize.
    site = Path(tempfile.mkdtemp(prefix="no-extras-site-"))
    atexit.register(shutil.rmtree, site, ignore_errors=True)
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from no_extras_round_trip import _Blocked\n"
        f"sys.meta_path.insert(0, _Blocked({sorted(names)!r}))\n"
    )
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    )


def _run(command: str, call: list[str], env: dict[str, str], *, parse: bool = True) -> Any:
    """The command's JSON answer (or its output), or ``None`` after saying why it failed."""
    done = subprocess.run([command, *call], env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        print(
            f"FAILED: tabhyper-update {call[0]} exited {done.returncode}:\n"
            f"{done.stdout}{done.stderr}",
            file=sys.stderr,
        )
        return None
    return json.loads(done.stdout) if parse else done.stdout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block", action="append", default=[], help="make NAME unimportable")
    args = parser.parse_args(argv)
    _block(args.block)

    from tabhyper_update import Insert, Payload, PersonalAccessToken, TableauClient, Upsert
    from tabhyper_update.testing import FakeTableauServer
    from tabhyper_update.testing.files import make_hyper, read_table
    from tabhyper_update.values.conditions import keys_match

    for name in ("pyspark", "opentelemetry"):
        if name in args.block and name in sys.modules:
            print(f"FAILED: {name} was imported though blocked", file=sys.stderr)
            return 1

    command = str(Path(sys.executable).parent / "tabhyper-update")
    work = Path(tempfile.mkdtemp(prefix="no-extras-"))
    atexit.register(shutil.rmtree, work, ignore_errors=True)  # also when a step fails
    start = make_hyper(work / "start.hyper", {"Extract": ("id BIGINT, v TEXT", ["(1, 'a')"])})
    new = make_hyper(work / "new.hyper", {"Extract": ("id BIGINT, v TEXT", ["(2, 'b')"])})
    changed = make_hyper(
        work / "changed.hyper", {"Extract": ("id BIGINT, v TEXT", ["(1, 'A')", "(3, 'c')"])}
    )
    state = work / "state"
    pat = PersonalAccessToken("ci", "ci-secret")
    with FakeTableauServer(pats={"ci": "ci-secret"}, directory=work / "server") as server:
        with TableauClient(server.url, "", pat) as client:
            # publish of an existing .hyper
            ref = client.publish(start, "Orders", project="Default", state_dir=state)
            # the chain
            Payload.from_hyper(new).upload("Orders", client=client, state_dir=state).apply(
                [Insert(source_table="Extract", target_table="Extract")]
            )
            # client.update_datasource
            client.update_datasource(
                "Orders",
                Payload.from_hyper(changed),
                actions=[
                    Upsert(
                        source_table="Extract",
                        target_table="Extract",
                        condition=keys_match("id"),
                    )
                ],
                state_dir=state,
            )
        # the command line: apply, then status, state and job
        more = make_hyper(work / "more.hyper", {"Extract": ("id BIGINT, v TEXT", ["(4, 'd')"])})
        batch = work / "actions.json"
        batch.write_text(
            json.dumps(
                {
                    "actions": [
                        {"action": "insert", "source-table": "Extract", "target-table": "Extract"}
                    ]
                }
            )
        )
        env = {
            **os.environ,
            "TABLEAU_SERVER_URL": server.url,
            "TABLEAU_SITE": "",
            "TABLEAU_PAT_NAME": "ci",
            "TABLEAU_PAT_SECRET": "ci-secret",
            "XDG_STATE_HOME": str(work / "xdg-state"),  # nothing in the user's own folder
        }
        json_calls = [
            [
                "apply",
                "--payload",
                str(more),
                "--actions",
                str(batch),
                "--datasource",
                "Orders",
                "--state-dir",
                str(state),
                "--json",
            ],
            ["status", "--state-dir", str(state), "--json"],
            ["state", "list", "--state-dir", str(state), "--json"],
        ]
        answers = [_run(command, call, env) for call in json_calls]
        if None in answers:
            return 1
        job = answers[0]["jobs"][0]["job_id"]
        other = make_hyper(work / "other.hyper", {"Extract": ("id BIGINT", ["(1)"])})
        plain_calls = [
            ["job", "status", job],
            [
                "publish",
                str(other),
                "--name",
                "Other",
                "--project",
                "Default",
            ],
            [
                "serve-local",
                "--duration",
                "0.5",
                "--directory",
                str(work / "local"),
                "--datasource",
                f"Local={other}",
            ],
        ]
        if any(_run(command, call, env, parse=False) is None for call in plain_calls):
            return 1
        if "Other" not in {ds.name for ds in server.backend.sources.values()}:
            print("FAILED: tabhyper-update publish left no data source 'Other'", file=sys.stderr)
            return 1
        rows = read_table(server.datasource_path(ref.id), "Extract")
    shutil.rmtree(work, ignore_errors=True)
    expected = [(1, "A"), (2, "b"), (3, "c"), (4, "d")]
    if rows != expected:
        print(f"FAILED: the data source holds {rows}, not {expected}", file=sys.stderr)
        return 1
    for name in args.block:
        if name in sys.modules:
            print(f"FAILED: {name} was imported though blocked", file=sys.stderr)
            return 1
    print(
        "OK: publish, the chain, update_datasource and the command line applied "
        f"{len(expected)} rows without extras"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The versions CI runs: the lowest ``pyproject.toml`` claims, as pins CI installs; the check
that an environment holds exactly them; and the check of the install page's table of the
oldest and newest releases CI runs against what an environment holds.

    python3 .ci/versions.py pins spark otel                 # name==floor, one per line
    python3 .ci/versions.py check-floors PYTHON spark otel  # PYTHON's env holds exactly those
    python3 .ci/versions.py check-tested oldest PYTHON      # ... the page's oldest column
    python3 .ci/versions.py check-tested newest PYTHON [--python-only | --no-python]
    python3 .ci/versions.py oldest-python                   # the oldest Python claimed

The floors are read from ``[project] dependencies`` and the named extras, so CI and the
package cannot drift apart: every requirement there must state its floor (``>=X``), written
in full (``2.11.0``, not ``2.11``), so that the pin and the installed version read alike.
The table is the one after the ``tested-versions`` marker in
``docs/getting-started/install.md``; a release CI runs that the page does not name fails CI
until the page says it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    raise SystemExit("run this with Python 3.11 or newer (tomllib)") from None

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)$")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def floors(extras: list[str]) -> dict[str, str]:
    """Each direct requirement of the package and of ``extras``: its name → its floor."""
    project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        if extra not in optional:
            raise SystemExit(f"pyproject.toml has no extra {extra!r}")
        wanted += optional[extra]
    found: dict[str, str] = {}
    for requirement in wanted:
        match = _REQUIREMENT.match(requirement)
        if match is None:
            raise SystemExit(f"cannot read requirement {requirement!r}")
        name, _, spec = match.groups()
        if _normal(name) == "tabhyper-update":
            continue
        lowest = [s.strip()[2:] for s in spec.split(",") if s.strip().startswith(">=")]
        if not lowest:
            raise SystemExit(f"requirement {requirement!r} states no floor (>=X)")
        if not re.fullmatch(r"\d+\.\d+\.\d+", lowest[0]):
            raise SystemExit(f"requirement {requirement!r}: write its floor in full (X.Y.Z)")
        found[_normal(name)] = lowest[0]
    return found


def installed(python: str) -> dict[str, str]:
    out = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {_normal(p["name"]): p["version"] for p in json.loads(out.stdout)}


def oldest_python() -> str:
    text = Path("pyproject.toml").read_text()
    minors = sorted(
        int(m) for m in re.findall(r'"Programming Language :: Python :: 3\.(\d+)"', text)
    )
    return f"3.{minors[0]}"


PAGE = Path("docs/getting-started/install.md")
MARKER = "<!-- tested-versions"


def tested() -> dict[str, tuple[str, str]]:
    """The install page's table: dependency → (oldest, newest) CI runs."""
    lines = PAGE.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(MARKER)), None)
    if start is None:
        raise SystemExit(f"{PAGE} has no {MARKER!r} table")
    rows: dict[str, tuple[str, str]] = {}
    for line in lines[start + 3 :]:
        if not line.startswith("|"):
            break
        name, oldest, newest = (cell.strip() for cell in line.strip("|").split("|"))
        rows[name] = (oldest, newest)
    return rows


def python_of(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def check_tested(which: str, python: str, only: str | None) -> int:
    column = {"oldest": 0, "newest": 1}[which]
    have = installed(python)
    wrong = []
    for name, versions in tested().items():
        if (only == "python" and name != "Python") or (only == "packages" and name == "Python"):
            continue
        found = python_of(python) if name == "Python" else have.get(_normal(name), "-")
        print(f"  {name:<16} the page's {which} {versions[column]:<12} found {found}")
        if found != versions[column]:
            wrong.append(name)
    if wrong:
        print(f"{PAGE}'s table says otherwise for {', '.join(wrong)}: update it")
        return 1
    return 0


def main(argv: list[str]) -> int:
    command, *rest = argv
    if command == "pins":
        for name, floor in sorted(floors(rest).items()):
            print(f"{name}=={floor}")
        return 0
    if command == "check-floors":
        python, *extras = rest
        have = installed(python)
        wanted = floors(extras)
        for name, floor in sorted(wanted.items()):
            print(f"  {name:<20} floor {floor:<12} installed {have.get(name, '-')}")
        wrong = sorted(name for name, floor in wanted.items() if have.get(name) != floor)
        if wrong:
            print(f"not at their floors: {', '.join(wrong)}")
            return 1
        return 0
    if command == "check-tested":
        which, python, *flags = rest
        only = (
            {"--python-only": "python", "--no-python": "packages"}.get(flags[0]) if flags else None
        )
        return check_tested(which, python, only)
    if command == "oldest-python":
        print(oldest_python())
        return 0
    raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Print the interpreters CI runs the README's first command with besides the ``python3`` on
the PATH: the oldest and the newest Python this machine has among those the package claims
(its ``Programming Language :: Python :: 3.X`` classifiers), leaving out the PATH's own
version. One path per line; none when the machine has no other claimed Python."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path


def claimed() -> list[tuple[int, int]]:
    text = Path("pyproject.toml").read_text()
    found = {
        (3, int(minor))
        for minor in re.findall(r'"Programming Language :: Python :: 3\.(\d+)"', text)
    }
    if not found:
        raise SystemExit("pyproject.toml claims no Python 3.X version in its classifiers")
    return sorted(found)


def version_of(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys, venv; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return None
    if out.returncode != 0:
        return None
    major, minor = out.stdout.split()
    return int(major), int(minor)


def candidates(version: tuple[int, int]) -> list[str]:
    name = f"python{version[0]}.{version[1]}"
    found = [p for p in [shutil.which(name)] if p]
    pyenv_root = os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")
    found += sorted(
        str(p) for p in Path(pyenv_root).glob(f"versions/{version[0]}.{version[1]}.*/bin/{name}")
    )
    return found


def main() -> None:
    own = version_of("python3")
    have: dict[tuple[int, int], str] = {}
    for version in claimed():
        if version == own:
            continue
        for python in candidates(version):
            if version_of(python) == version:
                have[version] = python
                break
    chosen = sorted(have)
    for version in sorted({chosen[0], chosen[-1]}) if chosen else []:
        print(have[version])


if __name__ == "__main__":
    main()

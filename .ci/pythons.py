"""Print an interpreter CI runs with: ``oldest``, the oldest Python the package claims (its
``Programming Language :: Python :: 3.X`` classifiers), which CI must have (the lowest
versions run there); ``newest``, the newest claimed Python this machine has, unless it is
the ``python3`` on the PATH (then nothing is printed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
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


def main(which: str) -> None:
    own = version_of("python3")
    have: dict[tuple[int, int], str] = {}
    for version in claimed():
        for python in candidates(version) or (["python3"] if version == own else []):
            if version_of(python) == version:
                have[version] = python
                break
    if which == "oldest":
        oldest = claimed()[0]
        if oldest not in have:
            raise SystemExit(f"CI needs Python {oldest[0]}.{oldest[1]}, the oldest claimed")
        print(have[oldest])
    elif which == "newest":
        newest = max(have)
        if newest != own:
            print(have[newest])
    else:
        raise SystemExit("pythons.py oldest|newest")


if __name__ == "__main__":
    main(sys.argv[1])

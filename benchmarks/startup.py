"""Start-up: ``import tabhyper_update`` and ``tabhyper-update --help`` against
``import tableauserverclient``, each in a fresh interpreter, interleaved, in one run.

    python benchmarks/startup.py                 # this checkout
    python benchmarks/startup.py --root OTHER    # another checkout of the project, same run
    python benchmarks/startup.py --runs 30

Prints the median wall time of each and its ratio to ``import tableauserverclient``, and the
number of the package's modules each loads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

COUNT = (
    "import sys; {stmt}; "
    "print(sum(1 for m in sys.modules if m == 'tabhyper_update' "
    "or m.startswith('tabhyper_update.')))"
)
HELP = (
    "import sys; sys.argv = ['tabhyper-update', '--help']\n"
    "from tabhyper_update.cli import console_main\n"
    "try:\n    console_main()\nexcept SystemExit:\n    pass\n"
)


def timed(code: str, root: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="")
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, stdout=subprocess.DEVNULL, cwd=root
    )
    return time.perf_counter() - started


def loaded(stmt: str, root: Path) -> int:
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run(
        [sys.executable, "-c", COUNT.format(stmt=stmt)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=root,
    ).stdout
    return int(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--root", type=Path, action="append", default=None)
    args = parser.parse_args()
    roots: list[Path] = args.root or [HERE]
    cases: dict[str, tuple[str, Path]] = {
        "import tableauserverclient": ("import tableauserverclient", HERE)
    }
    for root in roots:
        tag = "" if len(roots) == 1 else f" [{root.name}]"
        cases[f"import tabhyper_update{tag}"] = ("import tabhyper_update", root)
        cases[f"tabhyper-update --help{tag}"] = (HELP, root)
    for code, root in cases.values():  # warm the file cache and byte code once
        timed(code, root)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, (code, root) in cases.items():
            times[name].append(timed(code, root))
    base = statistics.median(times["import tableauserverclient"])
    print(f"{'case':45} {'median s':>9} {'ratio':>6}  modules of the package loaded")
    for name, samples in times.items():
        med = statistics.median(samples)
        code, root = cases[name]
        if name.startswith("import tabhyper_update"):
            mods = str(loaded("import tabhyper_update", root))
        elif name.startswith("tabhyper-update"):
            mods = str(
                loaded(
                    "sys.argv = ['x', '--help']\nfrom tabhyper_update.cli import build_parser\n"
                    "build_parser()",
                    root,
                )
            )
        else:
            mods = "-"
        print(f"{name:45} {med:9.3f} {med / base:6.2f}  {mods}")


if __name__ == "__main__":
    main()

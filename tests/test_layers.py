"""The layers are folders, and imports run one way: down.

Read from the source (nothing is imported): every import, at module level, inside a
function or under ``TYPE_CHECKING``, goes to a folder of the same layer or one below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tabhyper_update

PACKAGE = Path(tabhyper_update.__file__).parent

#: Bottom to top. Modules directly in the package (the facade, repair, the demo) stand
#: above the folders they compose, the command line above them.
LAYERS = {
    "(version)": -1,
    "values": 0,
    "local": 1,
    "rest": 2,
    "readback": 3,
    "update": 4,
    "payload": 5,
    "builder": 6,
    "streaming": 7,
    "testing": 7,
    "(top)": 8,
    "cli": 9,
    "(entry)": 10,
}
MAX_TOP_MODULES = 12


def layer_of(module: str) -> str:
    """``tabhyper_update.rest.session`` -> ``rest``; a module directly in the package, or
    the package itself, -> ``(top)``; ``_version`` is below everything, ``__main__`` above."""
    if module.split(".")[1:2] == ["_version"]:
        return "(version)"
    if module.split(".")[1:2] == ["__main__"]:
        return "(entry)"
    parts = module.split(".")[1:]
    if len(parts) >= 1 and (PACKAGE / parts[0]).is_dir():
        return parts[0]
    return "(top)"


def imports_of(path: Path) -> set[str]:
    """The package's modules (and package.attribute names) that ``path`` imports."""
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    package = parts if is_package else parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names}
    return {m for m in found if m == "tabhyper_update" or m.startswith("tabhyper_update.")}


def test_no_import_runs_up_a_layer() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        here = layer_of(".".join(rel.parts))
        for target in imports_of(path):
            there = layer_of(target)
            if target == "tabhyper_update":
                continue  # the package's own lazy names
            if LAYERS[there] > LAYERS[here]:
                upward.append(f"{rel}: {target} ({here} -> {there})")
    assert upward == []


def test_every_folder_is_a_known_layer_and_the_top_is_small() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders <= set(LAYERS)
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top) <= MAX_TOP_MODULES, top

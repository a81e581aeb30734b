"""Print one of the two commands the README's "The two commands" section gives a new user:
``first`` (install and run the demo) or ``second`` (run the test suite). CI runs exactly
what this prints, so the README and CI cannot drift apart; a README without the section or
its two one-line ``bash`` blocks fails CI here."""

from __future__ import annotations

import re
import sys
from pathlib import Path

SECTION = "## The two commands"


def commands(readme: str) -> list[str]:
    start = readme.find(SECTION)
    if start < 0:
        raise SystemExit(f"README.md has no {SECTION!r} section")
    end = readme.find("\n## ", start + len(SECTION))
    body = readme[start : end if end >= 0 else len(readme)]
    blocks = re.findall(r"^```bash\n(.*?)^```", body, flags=re.S | re.M)
    found = [block.strip() for block in blocks]
    if len(found) != 2 or any(not c or "\n" in c for c in found):
        raise SystemExit(f"README.md's {SECTION!r} must hold two one-line bash blocks")
    return found


if __name__ == "__main__":
    which = {"first": 0, "second": 1}[sys.argv[1]]
    print(commands(Path(sys.argv[2] if len(sys.argv) > 2 else "README.md").read_text())[which])

"""Progress bars: on a terminal by default (``progress=None``), never in logs or pipes."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["bar", "show_progress"]


def show_progress(progress: bool | None) -> bool:
    """Whether to draw bars: ``progress`` when given, else whether stderr is a terminal."""
    return sys.stderr.isatty() if progress is None else progress


@contextmanager
def bar(enabled: bool, **kwargs: Any) -> Iterator[Any]:
    """A tqdm bar on stderr (``None`` when not ``enabled``), removed when done."""
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    # A pseudo-terminal may report no size (0 x 0): tqdm then takes itself for off-screen
    # and draws nothing. The fallback size (80 x 24) keeps the bar.
    size = shutil.get_terminal_size()
    kwargs.setdefault("ncols", size.columns)
    kwargs.setdefault("nrows", size.lines)
    shown = tqdm(file=sys.stderr, leave=False, **kwargs)
    try:
        yield shown
    finally:
        shown.close()

"""The SDK's own JSON files (update records, sink claims and progress, payload manifests):
read never through a link, written whole or not at all, readable by their owner only.

One writer for all of them: a temporary file beside the target (created exclusively,
``0o600``, never through a link), filled, then moved over the target in one step, or, for a
file that must not exist yet, linked in (so a reader never sees it half-written and two
writers cannot both create it). Everything happens relative to the folder opened once, so a
link swapped in for a file after a check is never written through.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import uuid
from pathlib import Path
from typing import Any

__all__ = ["read_json", "write_json"]

#: What ``link`` fails with on a file system that has no hard links.
_NO_LINKS = frozenset({errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK})


def read_json(path: Path) -> Any:
    """The JSON document in file ``path``, never read through a symbolic link.

    Raises :class:`FileNotFoundError` when there is none, another :class:`OSError` when it
    cannot be opened (a link: ``ELOOP``), :class:`ValueError` when it is not JSON."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, encoding="utf-8") as f:
        return json.load(f)


def write_json(
    path: Path,
    doc: Any,
    *,
    only_new: bool = False,
    folder_not_a_link: bool = False,
    indent: int | None = None,
) -> bool:
    """Write ``doc`` as the JSON file ``path``, whole or not at all, owner-only.

    ``only_new``: only if no file ``path`` exists (``False`` then, and nothing written).
    ``folder_not_a_link``: refuse (``OSError``, ``ELOOP`` or ``ENOTDIR``) when ``path``'s
    folder is itself a symbolic link. Raises :class:`OSError` when it cannot be written;
    leaves no temporary file behind either way."""
    flags = os.O_RDONLY | os.O_DIRECTORY | (os.O_NOFOLLOW if folder_not_a_link else 0)
    folder = os.open(path.parent, flags)
    tmp = f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder
        )
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=indent, ensure_ascii=False)
            if only_new:
                try:
                    os.link(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
                except FileExistsError:
                    return False
                except OSError as err:
                    if err.errno not in _NO_LINKS:
                        raise
                    return _create(folder, path.name, doc, indent)
            else:
                os.replace(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=folder)
    finally:
        os.close(folder)


def _create(folder: int, name: str, doc: Any, indent: int | None) -> bool:
    """Without hard links: the file created in place, exclusively (a reader may then see
    it before it is filled, for the moment of one write)."""
    try:
        fd = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=folder
        )
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=indent, ensure_ascii=False))
    return True

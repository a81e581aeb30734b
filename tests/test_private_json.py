"""The SDK's own JSON files: whole or not at all, owner-only, never through a link."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from tabhyper_update.local.private_json import read_json, write_json


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_file_is_written_owner_only_and_read_back_with_nothing_else_left(
    tmp_path: Path,
) -> None:
    path = tmp_path / "record.json"
    assert write_json(path, {"a": 1, "name": "Übersicht"}, indent=2)
    assert read_json(path) == {"a": 1, "name": "Übersicht"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert write_json(path, {"a": 2})
    assert read_json(path) == {"a": 2}
    assert _left(tmp_path) == ["record.json"]


def test_a_file_that_cannot_be_written_keeps_the_old_one_and_leaves_no_temporary(
    tmp_path: Path,
) -> None:
    path = tmp_path / "record.json"
    write_json(path, {"a": 1})
    with pytest.raises(TypeError):
        write_json(path, {"a": object()})
    assert read_json(path) == {"a": 1}
    assert _left(tmp_path) == ["record.json"]


def test_only_new_never_overwrites_and_one_of_two_racing_writers_wins(tmp_path: Path) -> None:
    path = tmp_path / "claim.json"
    assert write_json(path, {"epoch": 1}, only_new=True)
    assert not write_json(path, {"epoch": 2}, only_new=True)
    assert read_json(path) == {"epoch": 1}

    raced = tmp_path / "raced.json"
    start = threading.Barrier(8)
    won: list[int] = []

    def claim(i: int) -> None:
        start.wait()
        if write_json(raced, {"by": i}, only_new=True):
            won.append(i)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(won) == 1
    assert read_json(raced) == {"by": won[0]}
    assert _left(tmp_path) == ["claim.json", "raced.json"]


def test_a_link_is_never_read_through_and_writing_replaces_the_link_not_its_target(
    tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"theirs": true}')
    path = tmp_path / "record.json"
    path.symlink_to(elsewhere)
    with pytest.raises(OSError):
        read_json(path)
    write_json(path, {"ours": True})
    assert not path.is_symlink()
    assert read_json(path) == {"ours": True}
    assert elsewhere.read_text() == '{"theirs": true}'


def test_a_folder_that_is_a_link_is_refused_where_asked(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    linked = tmp_path / "linked"
    linked.symlink_to(real, target_is_directory=True)
    with pytest.raises(OSError):
        write_json(linked / "record.json", {"a": 1}, folder_not_a_link=True)
    assert os.listdir(real) == []
    # A folder the user named (an output folder) may be a link.
    assert write_json(linked / "manifest.json", {"a": 1})
    assert read_json(real / "manifest.json") == {"a": 1}

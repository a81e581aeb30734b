"""Update records expire: finished ones older than the retention go, the rest stay, and a
streaming sink's frequent updates do not reread the folder each time."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from pathlib import Path

import pytest

from tabhyper_update.local.folders import check_folder
from tabhyper_update.update import state as state_module
from tabhyper_update.update.state import (
    RECORD_RETENTION_SECONDS,
    PartState,
    StateStore,
    UpdateRecord,
)


def record(name: str, *, applied: bool) -> UpdateRecord:
    return UpdateRecord(
        key=hashlib.sha256(name.encode()).hexdigest(),
        kind="position",
        identity=name,
        label=name,
        datasource_id="ds",
        connection_id=None,
        parts=[
            PartState(
                index=0,
                buckets=None,
                digest="",
                request_id=name,
                status="applied" if applied else "submitted",
            )
        ],
    )


def save_aged(store: StateStore, rec: UpdateRecord, age: float) -> None:
    store.save(rec)
    then = time.time() - age
    rec.updated_at = then
    path = store.records_dir / f"{rec.key}.json"
    # Rewrite with the old time inside and on the file, as an old record would be.
    path.write_text(json.dumps(rec.to_json()), encoding="utf-8")
    os.utime(path, (then, then))


def test_sweep_removes_only_finished_records_past_the_retention(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    old = RECORD_RETENTION_SECONDS + 3600
    expired = record("expired", applied=True)
    unfinished = record("unfinished", applied=False)
    recent = record("recent", applied=True)
    for rec, age in ((expired, old), (unfinished, old), (recent, 60)):
        save_aged(store, rec, age)
    assert store.sweep() == 1
    assert {r.label for r in store.records()} == {"unfinished", "recent"}


def test_sweeps_are_spaced_per_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = StateStore(tmp_path)
    old = RECORD_RETENTION_SECONDS + 3600
    store.sweep()
    save_aged(store, record("expired", applied=True), old)
    assert store.sweep_if_due() == 0  # swept a moment ago: not again yet
    assert len(store.records()) == 1
    monkeypatch.setattr(state_module, "SWEEP_INTERVAL_SECONDS", 0.0)
    assert store.sweep_if_due() == 1
    assert store.records() == []


@pytest.mark.parametrize("mask", [0o002, 0o000, 0o022])
def test_the_default_state_folder_is_owner_only_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mask: int
) -> None:
    base = tmp_path / "xdg" / "state"  # neither exists yet
    monkeypatch.setenv("XDG_STATE_HOME", str(base))
    old = os.umask(mask)
    try:
        store = StateStore()
        store.save(record("a", applied=False))
    finally:
        os.umask(old)
    made = [tmp_path / "xdg", base, base / "tabhyper-update", base / "tabhyper-update" / "records"]
    assert {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in made} == {
        str(p.relative_to(tmp_path)): "0o700" for p in made
    }


def test_a_folder_argument_the_sdk_creates_is_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        made = check_folder(tmp_path / "out", "output_dir")
    finally:
        os.umask(old)
    assert made is not None
    assert stat.S_IMODE(made.stat().st_mode) == 0o700

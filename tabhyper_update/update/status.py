"""What the state folder knows, for people and schedulers (``tabhyper-update status``): per
data source the last update applied and what is unfinished, and each streaming sink's
progress. It reads files only: no sign-in, no request."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .state import StateStore, UpdateRecord

__all__ = ["describe_status", "status"]


def _when(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _update(record: UpdateRecord) -> dict[str, Any]:
    applied = [p for p in record.parts if p.status == "applied"]
    return {
        "label": record.label,
        "identity": record.identity,
        "parts": len(record.parts),
        "applied": len(applied),
        "statuses": [p.status for p in record.parts],
        "jobs": [p.job_id for p in record.parts if p.job_id],
        "when": _when(record.updated_at),
    }


def _sinks(folder: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.json")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue  # a claim or a file being written: not a progress record
        if not isinstance(data, dict) or "last_batch" not in data:
            continue
        data["updated_at"] = _when(data.get("updated_at"))
        found.append(data)
    return found


def status(state_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Per data source the last update applied (its position or label, jobs, when) and the
    updates unfinished (in flight, or interrupted: a re-run resumes them), and each sink's
    progress, as plain JSON values."""
    store = StateStore(state_dir)
    by_source: dict[str, dict[str, Any]] = {}
    for record in sorted(store.records(), key=lambda r: r.updated_at):
        entry = by_source.setdefault(
            record.datasource_id,
            {"datasource_id": record.datasource_id, "last_applied": None, "unfinished": []},
        )
        if record.finished:
            entry["last_applied"] = _update(record)
        else:
            entry["unfinished"].append(_update(record))
    return {
        "directory": str(store.directory),
        "datasources": list(by_source.values()),
        "sinks": _sinks(store.directory / "sinks"),
    }


def describe_status(found: dict[str, Any]) -> str:
    """:func:`status` as lines for a person."""
    lines: list[str] = []
    for ds in found["datasources"]:
        last = ds["last_applied"]
        lines.append(
            f"data source {ds['datasource_id']}: "
            + (
                f"last applied {last['label']} at {last['when']} (jobs {', '.join(last['jobs'])})"
                if last
                else "nothing applied on record"
            )
        )
        for u in ds["unfinished"]:
            lines.append(
                f"  unfinished: {u['label']}, {u['applied']}/{u['parts']} part(s) applied "
                f"({', '.join(u['statuses'])}), last touched {u['when']}: a re-run resumes it"
            )
    for sink in found["sinks"]:
        counts = sink.get("counts") or {}
        shown = ", ".join(f"{n} {k}" for k, n in counts.items())
        line = (
            f"sink {sink.get('sink_id')}: batch {sink.get('last_batch')} "
            f"{sink.get('last_kind')} at {sink.get('updated_at')} ({shown})"
        )
        error = sink.get("error")
        if error:
            line += f"; failed: {error.get('message') if isinstance(error, dict) else error}"
        lines.append(line)
    return "\n".join(lines) or f"nothing recorded in {found['directory']}"

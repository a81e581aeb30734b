"""What the state folder knows, for people and schedulers (``tabhyper-update status``): per
data source (its name beside its LUID) the last update applied, its position, jobs and time,
and what is unfinished; each streaming sink's last batch; and every file it could not read,
with the reason (a symbolic link, a truncated or foreign file, another owner's file). It
reads files only: no sign-in, no request, nothing changed."""

from __future__ import annotations

import json
import os
import re
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..local.private_json import read_json
from ..values.wording import counted
from .state import StateStore, UpdateRecord

_RECORD = re.compile(r"^[0-9a-f]{64}\.json$")

__all__ = ["describe_status", "status"]


def _when(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _update(record: UpdateRecord) -> dict[str, Any]:
    applied = [p for p in record.parts if p.status == "applied"]
    return {
        "label": record.label,
        "position": record.position,
        "identity": record.identity,
        "parts": len(record.parts),
        "applied": len(applied),
        "statuses": [p.status for p in record.parts],
        "jobs": [p.job_id for p in record.parts if p.job_id],
        "when": _when(record.updated_at),
        "quarantined": record.quarantined,
    }


def _read_json(path: Path, problems: list[dict[str, str]]) -> Any:
    """A JSON file of the SDK's, or ``None`` after noting why it could not be read."""

    def problem(reason: str) -> None:
        problems.append({"path": str(path), "reason": reason})

    try:
        info = os.lstat(path)
    except OSError as err:
        problem(f"cannot be read: {err.strerror}")
        return None
    if stat.S_ISLNK(info.st_mode):
        problem("a symbolic link: the SDK keeps its records only as files it wrote; not read")
        return None
    if not stat.S_ISREG(info.st_mode):
        problem("not a file; not read")
        return None
    if info.st_uid != os.getuid():
        problem(f"owned by another user (uid {info.st_uid}); not read")
        return None
    try:
        return read_json(path)
    except OSError as err:
        problem(f"cannot be read: {err.strerror}")
    except ValueError as err:
        problem(f"not complete JSON (truncated?): {err}")
    return None


def _folder_ok(folder: Path, problems: list[dict[str, str]]) -> bool:
    if folder.is_symlink():
        problems.append(
            {
                "path": str(folder),
                "reason": "a symbolic link: the SDK keeps its records only in a folder it "
                "made itself; nothing in it was read",
            }
        )
        return False
    return folder.is_dir()


def _records(store: StateStore, problems: list[dict[str, str]]) -> list[UpdateRecord]:
    folder = store.records_dir
    found: list[UpdateRecord] = []
    if not _folder_ok(folder, problems):
        return found
    for path in sorted(folder.iterdir()):
        if not _RECORD.match(path.name):
            continue  # the columns the SDK published, files being written
        data = _read_json(path, problems)
        if data is None:
            continue
        try:
            found.append(UpdateRecord.from_json(data))
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as err:
            problems.append(
                {"path": str(path), "reason": f"not an update record of this version ({err})"}
            )
    return found


def _sinks(folder: Path, problems: list[dict[str, str]]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if not _folder_ok(folder, problems):
        return found
    for path in sorted(folder.glob("*.json")):
        if path.name.endswith(".claim.json"):
            continue  # which query owns the sink id, not its progress
        data = _read_json(path, problems)
        if data is None:
            continue
        if not isinstance(data, dict) or "last_batch" not in data:
            problems.append({"path": str(path), "reason": "not a sink's progress record"})
            continue
        data["updated_at"] = _when(data.get("updated_at"))
        found.append(data)
    return found


def status(state_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Per data source (its name and LUID) the last update applied (its position or label,
    jobs, when) and the updates unfinished (in flight, or interrupted: a re-run resumes
    them), each sink's progress, and the files that could not be read and why, as plain JSON
    values."""
    store = StateStore(state_dir)
    problems: list[dict[str, str]] = []
    by_source: dict[str, dict[str, Any]] = {}
    for record in sorted(_records(store, problems), key=lambda r: r.updated_at):
        entry = by_source.setdefault(
            record.datasource_id,
            {
                "datasource_id": record.datasource_id,
                "datasource": record.datasource_name,
                "last_applied": None,
                "unfinished": [],
            },
        )
        entry["datasource"] = record.datasource_name or entry["datasource"]
        if record.finished:
            entry["last_applied"] = _update(record)
        else:
            entry["unfinished"].append(_update(record))
    return {
        "directory": str(store.directory),
        "datasources": list(by_source.values()),
        "sinks": _sinks(store.directory / "sinks", problems),
        "problems": problems,
    }


def describe_status(found: dict[str, Any]) -> str:
    """:func:`status` as lines for a person."""
    lines = [line for ds in found["datasources"] for line in _datasource_lines(ds)]
    lines += list(map(_sink_line, found["sinks"]))
    lines += [f"could not read {p['path']}: {p['reason']}" for p in found["problems"]]
    return "\n".join(lines) or f"nothing recorded in {found['directory']}"


def _datasource_lines(ds: dict[str, Any]) -> list[str]:
    """A data source's record for a person: its last update applied, then each unfinished
    one."""
    last = ds["last_applied"]
    name = (
        f"{ds['datasource']!r} ({ds['datasource_id']})" if ds["datasource"] else ds["datasource_id"]
    )
    said = "nothing applied on record"
    if last:
        at = f", position {json.dumps(last['position'])}" if last["position"] else ""
        kept = last.get("quarantined")
        if kept:
            at += f"; {counted(kept['rows'], 'change')} set aside in {kept['written_to']}"
        said = (
            f"last applied {last['label']}{at} at {last['when']} (jobs {', '.join(last['jobs'])})"
        )
    return [f"data source {name}: {said}"] + [
        f"  unfinished: {u['label']}, {u['applied']}/{u['parts']} part(s) applied "
        f"({', '.join(u['statuses'])}), last touched {u['when']}: a re-run resumes it"
        for u in ds["unfinished"]
    ]


def _sink_line(sink: dict[str, Any]) -> str:
    """A sink's progress record for a person: its last batch, what it counted, its failure."""
    shown = ", ".join(f"{n} {k}" for k, n in (sink.get("counts") or {}).items())
    line = (
        f"sink {sink.get('sink_id')}: batch {sink.get('last_batch')} "
        f"{sink.get('last_kind')} at {sink.get('updated_at')} ({shown})"
    )
    error = sink.get("error")
    if error:
        line += f"; failed: {error.get('message') if isinstance(error, dict) else error}"
    return line

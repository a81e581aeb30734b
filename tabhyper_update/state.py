"""Resume records: what a CDC job has submitted, so that a re-run after a crash waits on the
job already submitted instead of submitting again.

One small JSON file per update part, named by its RequestID, in a private directory:
``$XDG_STATE_HOME/tabhyper-update`` (``~/.local/state/tabhyper-update`` when unset), or the
``state_dir=`` given to :meth:`Payload.upload`. A record is removed once its update has
finished; delete the directory (or ``tabhyper-update state clear``) to forget everything.
Records hold ids only (RequestID, upload session, job, data source) and never a secret.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["PartRecord", "StateStore", "default_state_dir"]


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tabhyper-update"


@dataclass
class PartRecord:
    request_id: str
    datasource_id: str
    connection_id: str | None
    part: int
    content_digest: str
    upload_session_id: str | None = None
    job_id: str | None = None


class StateStore:
    """Records in one directory, written atomically, readable by the owner only."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_state_dir()

    def _path(self, request_id: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in request_id)
        return self.directory / f"{safe}.json"

    def load(self, request_id: str) -> PartRecord | None:
        path = self._path(request_id)
        try:
            data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return PartRecord(**data)
        except FileNotFoundError:
            return None
        except (ValueError, TypeError):
            # A torn or foreign file is no reason to stop a job: forget it.
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return None

    def save(self, record: PartRecord) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.directory, 0o700)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".record-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(asdict(record), f)
            os.chmod(tmp, 0o600)
            os.replace(tmp, self._path(record.request_id))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def remove(self, request_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(request_id).unlink()

    def records(self) -> list[PartRecord]:
        if not self.directory.is_dir():
            return []
        found = []
        for path in sorted(self.directory.glob("*.json")):
            record = self.load(path.stem)
            if record is not None:
                found.append(record)
        return found

    def clear(self) -> int:
        """Remove every record; returns how many there were."""
        records = self.records()
        for record in records:
            self.remove(record.request_id)
        return len(records)

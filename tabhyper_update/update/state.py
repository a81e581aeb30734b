"""Update records: what a run submitted, so that a re-run resumes it instead of submitting
again, and a replayed change set is recognised without uploading or submitting it again.

One JSON file per update (all of its parts), written before the first request goes out, in
a ``records`` folder the SDK creates and owns inside the state directory (a link in its place
is refused, and no record file is ever read or written through a link):
``$XDG_STATE_HOME/tabhyper-update`` (``~/.local/state/tabhyper-update`` when unset), or the
``state_dir=`` given to :meth:`Payload.upload`. The file is named by the SHA-256 of the
update's key, so distinct request ids never share a record. Files are ``0600`` in a ``0700``
folder; the SDK never changes the mode of a folder it did not create, and never deletes a
file it did not write. Records hold ids only (RequestIDs, upload sessions, jobs, the data
source) and never a secret.

What a record holds and how long it lives is the identity rule of
:mod:`tabhyper_update.update.identity`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..local.folders import check_folder, make_private
from ..local.private_json import read_json, write_json
from ..values.errors import ConfigurationError
from ..values.probes import ProbeResult, probe_key
from ..values.redaction import get_logger

__all__ = [
    "RECORD_RETENTION_SECONDS",
    "PartState",
    "StateStore",
    "UpdateRecord",
    "default_state_dir",
]

log = get_logger("tabhyper_update")

#: Finished records of change sets and explicit request ids are kept this long, so that a
#: replayed slice is recognised locally (the server's own memory is said to be 24 hours).
RECORD_RETENTION_SECONDS = 7 * 24 * 3600
#: How often one process sweeps a state folder of expired records.
SWEEP_INTERVAL_SECONDS = 600.0
_SWEPT: dict[str, float] = {}
_KEY = re.compile(r"[0-9a-f]{64}")
_FORMAT = 2

PartStatus = Literal["pending", "sending", "submitted", "applied"]
RecordKind = Literal["position", "run"]


def _schema_name(datasource_id: str) -> str:
    return f"schema-{hashlib.sha256(datasource_id.encode()).hexdigest()}.json"


#: Folders that stand in for the default state folder while a test helper runs (the last one
#: pushed wins): see :func:`temporary_default_state_dir`.
_stand_ins: list[Path] = []


def default_state_dir() -> Path:
    """Where update records live when no ``state_dir`` is given:
    ``$XDG_STATE_HOME/tabhyper-update`` (``~/.local/state/tabhyper-update``), or, while a
    test helper runs (the fake server), a temporary folder of its own."""
    if _stand_ins:
        return _stand_ins[-1]
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tabhyper-update"


@contextlib.contextmanager
def temporary_default_state_dir(folder: Path) -> Iterator[Path]:
    """Within the block, ``folder`` stands in for the default state folder of this process
    (a ``state_dir`` given explicitly still wins): tests of a CDC job against the fake keep
    their records out of the user's real state folder."""
    _stand_ins.append(folder)
    try:
        yield folder
    finally:
        _stand_ins.remove(folder)


@dataclass
class PartState:
    """One part of an update: its plan (buckets, digest) and how far it got."""

    index: int
    buckets: tuple[int, int] | None
    digest: str
    request_id: str
    attempt: int = 0
    #: pending → sending (the request may be on its way) → submitted (job known) → applied
    status: PartStatus = "pending"
    upload_session_id: str | None = None
    job_id: str | None = None
    #: When this RequestID was first sent (epoch seconds): a job created well before that
    #: was created by an earlier request, i.e. the server deduplicated.
    sent_at: float | None = None
    #: Every job the server answered for this part, failed attempts included.
    jobs_seen: list[str] = field(default_factory=list)


@dataclass
class UpdateRecord:
    """One update (all its parts), named by a SHA-256 of what identifies it (see
    :mod:`tabhyper_update.update.identity`)."""

    key: str
    #: "position": the identity is a position in the source (a change set, or the caller's
    #: request_id), kept when finished; "run": a plain payload's run, removed when finished.
    kind: RecordKind
    #: The base of the part RequestIDs.
    identity: str
    #: What a person reading ``tabhyper-update state list`` needs to recognise it.
    label: str
    datasource_id: str
    connection_id: str | None
    parts: list[PartState]
    #: Whether ``identity`` is the caller's own ``request_id``.
    explicit_id: bool = False
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    #: The data source's name when it was looked up, and where in the source the update's
    #: changes end (``apply(position=...)``, a sink's batch), for ``tabhyper-update status``.
    datasource_name: str | None = None
    position: Any = None
    #: What happened to the update that its parts do not say (an upload replaced, ...).
    notes: list[str] = field(default_factory=list)
    #: What the build set aside (``on_bad_rows="quarantine"``: rows, reasons, where), for
    #: ``tabhyper-update status``.
    quarantined: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return all(p.status == "applied" for p in self.parts)

    @property
    def started(self) -> bool:
        """Whether any part may have reached the server."""
        return any(p.status != "pending" or p.jobs_seen for p in self.parts)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["format"] = _FORMAT
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> UpdateRecord:
        if data.get("format") != _FORMAT:
            raise ValueError(f"record format {data.get('format')!r}")
        parts = []
        for p in data["parts"]:
            buckets = p.get("buckets")
            parts.append(
                PartState(
                    index=int(p["index"]),
                    buckets=(int(buckets[0]), int(buckets[1])) if buckets else None,
                    digest=str(p["digest"]),
                    request_id=str(p["request_id"]),
                    attempt=int(p.get("attempt", 0)),
                    status=p.get("status", "pending"),
                    upload_session_id=p.get("upload_session_id"),
                    job_id=p.get("job_id"),
                    sent_at=p.get("sent_at"),
                    jobs_seen=list(map(str, p.get("jobs_seen", []))),
                )
            )
        return cls(
            key=str(data["key"]),
            kind=data["kind"],
            identity=str(data["identity"]),
            label=str(data.get("label", "")),
            datasource_id=str(data["datasource_id"]),
            connection_id=data.get("connection_id"),
            parts=parts,
            explicit_id=bool(data.get("explicit_id", False)),
            created_at=float(data.get("created_at", 0)),
            updated_at=float(data.get("updated_at", 0)),
            datasource_name=data.get("datasource_name"),
            position=data.get("position"),
            notes=list(map(str, data.get("notes") or [])),
            quarantined=data.get("quarantined"),
        )


#: Probes run or read in this process, by (server, site): a probe vouches for its server
#: whichever state folder the next update keeps its records in.
_PROBES: dict[tuple[str, str], ProbeResult] = {}


def _probe_of(server: str, site: str) -> tuple[str, str]:
    return server.rstrip("/").lower(), site


class StateStore:
    """Update records in ``<directory>/records``, written atomically, owner-only."""

    RECORDS = "records"

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        #: Whether the folder is the caller's (checked as a folder argument) or the default.
        self._given = directory is not None
        self.directory = Path(directory) if directory is not None else default_state_dir()
        self._ready = False

    @property
    def records_dir(self) -> Path:
        return self.directory / self.RECORDS

    def _path(self, key: str) -> Path:
        if not _KEY.fullmatch(key):
            raise ValueError(f"a record key is a SHA-256 hex digest, got {key!r}")
        return self.records_dir / f"{key}.json"

    def _read(self, path: Path) -> UpdateRecord | None:
        try:
            # Never through a link: a record is a file the SDK wrote in its own folder.
            return UpdateRecord.from_json(read_json(path))
        except FileNotFoundError:
            return None
        except OSError as err:
            log.warning("ignoring %s: not a record file of this SDK (%s)", path, err.strerror)
            return None
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as err:
            # Written atomically by us, so this is not ours (or not of this version): leave
            # it alone and say so.
            log.warning("ignoring %s: not an update record of this version (%s)", path, err)
            return None

    def load(self, key: str) -> UpdateRecord | None:
        return self._read(self._path(key))

    def save(self, record: UpdateRecord) -> None:
        record.updated_at = time.time()
        self._write(self._path(record.key).name, record.to_json())

    def save_schema(self, datasource_id: str, tables: Mapping[str, Any]) -> None:
        """Keep the columns (name, Hyper type, nullability) of each table of a data source
        the SDK published, for the updates after it (:mod:`.schema`)."""
        self.write_json(
            _schema_name(datasource_id),
            {"format": _FORMAT, "datasource": datasource_id, "tables": dict(tables)},
        )

    def schema(self, datasource_id: str) -> dict[str, Any] | None:
        """The tables recorded by :meth:`save_schema` for the data source, if any."""
        data = self.read_json(_schema_name(datasource_id))
        if data is None or data.get("datasource") != datasource_id:
            return None
        tables = data.get("tables")
        return tables if isinstance(tables, dict) else None

    def remember_probe(self, found: ProbeResult) -> None:
        """Keep a probe's result for its server and site (here and for this process)."""
        self.write_json(probe_key(found.server, found.site), found.as_dict())
        _PROBES[_probe_of(found.server, found.site)] = found

    def probe(self, server: str, site: str) -> ProbeResult | None:
        """The last probe of ``server`` and ``site``: run in this process, else kept here."""
        known = _PROBES.get(_probe_of(server, site))
        if known is not None:
            return known
        data = self.read_json(probe_key(server, site))
        if data is None:
            return None
        try:
            found = ProbeResult.from_dict(data)
        except (ValueError, TypeError) as err:
            log.warning("ignoring the remembered probe of %s: %s", server, err)
            return None
        _PROBES[_probe_of(server, site)] = found
        return found

    def write_json(self, name: str, data: dict[str, Any]) -> None:
        """Keep ``data`` as ``name`` (``probe-<digest>.json``, say) beside the records."""
        if not re.fullmatch(r"[a-z]+-[0-9a-f]{64}\.json", name):
            raise ValueError(f"not a name of a file the SDK keeps: {name!r}")
        self._write(name, data)

    def read_json(self, name: str) -> dict[str, Any] | None:
        """What :meth:`write_json` kept as ``name``, if it is there and readable."""
        path = self.records_dir / name
        try:
            data = read_json(path)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            log.warning("ignoring %s: not a file of this SDK (%s)", path, err)
            return None
        return data if isinstance(data, dict) else None

    def _write(self, name: str, data: dict[str, Any]) -> None:
        """Write ``data`` as the JSON file ``name`` of the records folder, atomically."""
        self._ensure_dirs()
        path = self.records_dir / name
        try:
            try:
                write_json(path, data, folder_not_a_link=True)
            except FileNotFoundError:
                self._ready = False  # removed since it was made: made again
                self._ensure_dirs()
                write_json(path, data, folder_not_a_link=True)
        except OSError as err:
            raise self._unwritable(err) from None

    def _unwritable(self, err: OSError) -> ConfigurationError:
        if err.errno == errno.ELOOP or (
            err.errno == errno.ENOTDIR and self.records_dir.is_symlink()
        ):
            return self._linked(self.records_dir)
        return ConfigurationError(
            f"cannot write an update record in {str(self.records_dir)!r}: {err.strerror or err}"
        )

    @staticmethod
    def _linked(folder: Path) -> ConfigurationError:
        return ConfigurationError(
            f"state_dir: {str(folder)!r} is a symbolic link; the SDK keeps its update records "
            "only in a folder it made itself. Remove the link (the SDK makes the folder "
            "again) or pass another state_dir="
        )

    def check(self) -> None:
        """Refuse, before anything is sent, a state directory that cannot hold records."""
        if self._given:
            check_folder(self.directory, "state_dir", create=False)
        elif self.directory.exists() and not self.directory.is_dir():
            raise ConfigurationError(
                f"state_dir: {str(self.directory)!r} is not a folder, so update records cannot "
                "be kept there"
            )
        records = self.records_dir
        if records.is_symlink():
            raise self._linked(records)
        if records.exists() and not records.is_dir():
            raise ConfigurationError(
                f"state_dir: {str(records)!r} is not a folder, so update records cannot be "
                "kept there"
            )

    def _ensure_dirs(self) -> None:
        # Create what is missing, owner-only; never change the mode of an existing folder.
        # Checked once per store: every save then opens the records folder without following
        # a link, so a link swapped in later is still refused there.
        if self._ready:
            return
        self.check()
        try:
            if self._given:
                check_folder(self.directory, "state_dir")
            elif not self.directory.exists():
                make_private(self.directory)
            if not self.records_dir.exists():
                make_private(self.records_dir)
        except OSError as err:
            raise ConfigurationError(
                f"state_dir: cannot create {str(self.records_dir)!r}: {err.strerror or err}"
            ) from None
        self.check()
        self._ready = True

    def remove(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def _files(self) -> list[Path]:
        if not self.records_dir.is_dir() or self.records_dir.is_symlink():
            return []
        return sorted(
            p
            for p in self.records_dir.iterdir()
            if p.suffix == ".json" and _KEY.fullmatch(p.stem) and not p.is_symlink()
        )

    def job_succeeded(self, job_id: str) -> list[UpdateRecord]:
        """Record the part whose job ``job_id`` is as applied (what a re-run of its update
        would find and record); the records that changed. A run's record (``kind="run"``)
        that is then finished is removed, as its run would remove it."""
        changed = []
        for record in self.records():
            parts = [p for p in record.parts if p.job_id == job_id and p.status == "submitted"]
            if not parts:
                continue
            for part in parts:
                part.status = "applied"
            record.updated_at = time.time()
            if record.finished and record.kind == "run":
                self.remove(record.key)
            else:
                self.save(record)
            changed.append(record)
        return changed

    def records(self) -> list[UpdateRecord]:
        """Every readable record (reads only: nothing is changed or removed)."""
        found = []
        for path in self._files():
            record = self._read(path)
            if record is not None:
                found.append(record)
        return found

    def clear(self) -> int:
        """Remove every record of this SDK; returns how many there were."""
        records = self.records()
        for record in records:
            self.remove(record.key)
        return len(records)

    def sweep(self, retention: float = RECORD_RETENTION_SECONDS) -> int:
        """Remove finished records older than ``retention`` seconds; returns how many.

        Only files not written since the cutoff are read (a record's file is rewritten on
        every change), so a folder of many recent records costs a listing, not a parse."""
        cutoff = time.time() - retention
        removed = 0
        for path in self._files():
            try:
                if path.stat().st_mtime >= cutoff:
                    continue
            except FileNotFoundError:
                continue
            record = self._read(path)
            if record is not None and record.finished and record.updated_at < cutoff:
                self.remove(record.key)
                removed += 1
        _SWEPT[str(self.directory)] = time.monotonic()
        return removed

    def sweep_if_due(self) -> int:
        """:meth:`sweep`, at most every :data:`SWEEP_INTERVAL_SECONDS` per folder and process
        (a streaming sink updates every few seconds)."""
        last = _SWEPT.get(str(self.directory))
        if last is not None and time.monotonic() - last < SWEEP_INTERVAL_SECONDS:
            return 0
        return self.sweep()

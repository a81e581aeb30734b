"""What a probe of a server found (:mod:`tabhyper_update.update.probe`), as data: kept per
server and site in the state folder, printed by ``tabhyper-update probe --json``, and read by
the fake server (``FakeTableauServer(profile="<probe JSON>")``) to answer as that server did.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["PROBE_CASES", "PROBE_FORMAT", "ProbeResult", "probe_key"]

#: What a probe's JSON says it is.
PROBE_FORMAT = "tabhyper-probe/1"
#: The cases a probe measures on every server, in the order it shows them.
PROBE_CASES = (
    "multi_match",
    "not_null",
    "narrowing",
    "extra_columns",
    "missing_columns",
    "partial_update",
    "download_types",
    "replay",
    "guard",
    "data_service",
    "parallel_upload",
)


@dataclass
class ProbeResult:
    """What a probe found on one server and site (see the module docstring)."""

    server: str
    site: str
    multi_match: str
    not_null: str
    narrowing: str
    replay: str
    guard: str
    data_service: str
    #: How the canary's rows were read: "data_service", or "not_null" (follow-up updates
    #: that fail where a row holds a value), or "answers" (neither was possible).
    read_back: str
    requests: int
    canary: str
    #: The REST API version the probe spoke.
    api_version: str | None = None
    kept: bool = False
    scopes: list[dict[str, str]] | None = None
    cap_mb: float | None = None
    #: How an upload's blocks can go: "sequence" (at once, with ``sequenceID``), "refused"
    #: (the parameter refused: one after another) or "ignored" (taken but not honoured: one
    #: after another, never at once).
    parallel_upload: str | None = None
    #: An update whose source holds a column the target lacks: "refused" or "ignored" (the
    #: other columns applied). None: not probed (a probe from before this case).
    extra_columns: str | None = None
    #: Rows inserted from a source lacking target columns: "null" (those columns NULL) or
    #: "refused". None: not probed.
    missing_columns: str | None = None
    #: Rows updated from a source lacking target columns: "kept" (those columns as they
    #: were: what closing a history version or flagging a deletion without resending the
    #: row needs), "null" (set to NULL) or "refused". None: not probed.
    partial_update: str | None = None
    #: A data source downloaded without its extract (Tableau's "Download Data Source"): its
    #: columns' types "exact" (type, precision, scale and width, as the canary's), "coarse"
    #: or "refused". The SDK reads a data source's exact types this way only where "exact".
    #: None: not probed.
    download_types: str | None = None
    probed_at: float = field(default_factory=time.time)
    #: What the server said where it refused an update, case by case (scrubbed).
    notes: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"format": PROBE_FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeResult:
        if data.get("format") != PROBE_FORMAT:
            raise ValueError(f"not a probe result of this SDK (format {data.get('format')!r})")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ProbeResult:
        """A probe result written as JSON (``tabhyper-update probe --json > FILE``)."""
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    def guard_works(self) -> bool:
        return self.guard == "works"


def probe_key(server: str, site: str) -> str:
    """The name a probe's result is kept under in the state folder."""
    digest = hashlib.sha256(f"{server.rstrip('/').lower()}\x1f{site}".encode()).hexdigest()
    return f"probe-{digest}.json"

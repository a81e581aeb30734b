"""What reading a published data source back found: :class:`DriftReport`, made by checking
an update (``apply(verify=True)``, ``result.verify()``) or reconciling a data source with
its source (:func:`tabhyper_update.readback.reconcile.reconcile`), with one
:class:`KeyDrift` per key that differs.

Kinds of drift, per key: ``missing`` (the source has it, the data source not), ``extra``
(the data source has it, the source not, or an update deleted it and it is still there),
``changed`` (one row each side, some columns differ: ``columns`` names them),
``duplicated`` (the data source holds the key more than once). A difference seen in the
aggregates that the narrowing could not pin to keys is listed in ``unresolved``: the
report is not ``ok`` then either.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KINDS", "DriftReport", "KeyDrift"]

KINDS = ("missing", "extra", "changed", "duplicated")


@dataclass(frozen=True)
class KeyDrift:
    """One key that differs: its kind, the key's values, the columns that differ (for
    ``changed``), the row expected (``None`` for ``extra``) and the rows found."""

    kind: str
    key: tuple[Any, ...]
    columns: tuple[str, ...] = ()
    expected: dict[str, Any] | None = None
    found: tuple[dict[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "key": list(self.key),
            "columns": list(self.columns),
            "expected": self.expected,
            "found": list(self.found),
        }


@dataclass
class DriftReport:
    """What a read-back found (see the module docstring).

    ``scope`` is ``"update"`` (the keys an update touched) or ``"reconcile"`` (a whole data
    source against its source). ``checked`` keys (update) or source rows (reconcile) were
    compared, of ``total``; a sample says what its result means in ``confidence``.
    ``cost`` holds the requests, bytes and seconds it took. ``id`` names this report: a
    repair made from it carries it as its identity, so it is applied once.
    """

    scope: str
    datasource: str
    datasource_id: str
    key: tuple[str, ...]
    checked: int = 0
    total: int = 0
    drift: list[KeyDrift] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    confidence: str | None = None
    cost: dict[str, Any] = field(default_factory=dict)
    #: Rows each side (reconcile), when known.
    rows: dict[str, int] = field(default_factory=dict)
    #: Keys (or key ranges) left unread when the read-back stopped, and why it stopped (the
    #: query budget or the site's quota spent).
    unchecked: int = 0
    stopped: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def ok(self) -> bool:
        """True when everything was read back and nothing differs."""
        return not self.drift and not self.unresolved and self.stopped is None

    def counts(self) -> dict[str, int]:
        """Keys per kind of drift (every kind listed)."""
        found = Counter(d.kind for d in self.drift)
        return {kind: found.get(kind, 0) for kind in KINDS}

    def keys(self, *kinds: str) -> list[tuple[Any, ...]]:
        """The differing keys (of ``kinds``, or all)."""
        return [d.key for d in self.drift if not kinds or d.kind in kinds]

    def sample(self, per_kind: int = 5) -> dict[str, list[KeyDrift]]:
        """Up to ``per_kind`` differing keys of each kind."""
        shown: dict[str, list[KeyDrift]] = {kind: [] for kind in KINDS}
        for d in self.drift:
            if len(shown[d.kind]) < per_kind:
                shown[d.kind].append(d)
        return shown

    def as_dict(self, per_kind: int | None = None) -> dict[str, Any]:
        """The report as plain JSON values (every differing key, or ``per_kind`` of each)."""
        listed = (
            self.drift
            if per_kind is None
            else [d for ds in self.sample(per_kind).values() for d in ds]
        )
        return {
            "id": self.id,
            "ok": self.ok,
            "scope": self.scope,
            "datasource": self.datasource,
            "datasource_id": self.datasource_id,
            "key": list(self.key),
            "checked": self.checked,
            "total": self.total,
            "rows": dict(self.rows),
            "counts": self.counts(),
            "unresolved": list(self.unresolved),
            "unchecked": self.unchecked,
            "stopped": self.stopped,
            "confidence": self.confidence,
            "cost": dict(self.cost),
            "drift": [d.as_dict() for d in listed],
        }

    def to_json(self, per_kind: int | None = None) -> str:
        return json.dumps(self.as_dict(per_kind), default=str, sort_keys=True)

    def __str__(self) -> str:
        what = (
            f"{self.checked} of {self.total} touched keys"
            if self.scope == "update"
            else f"{self.checked} source rows"
        )
        head = f"{self.datasource or self.datasource_id}: {what} read back"
        if not self.drift and not self.unresolved:
            text = f"{head}, no drift" + (" in what was read" if self.stopped else "")
        else:
            text = f"{head}: DRIFT, {self._drift_said()}"
        if self.stopped is not None:
            text += (
                f"; NOT CHECKED: {self.unchecked} left unread, the read-back stopped "
                f"({self.stopped})"
            )
        if self.confidence:
            text += f" ({self.confidence})"
        return text

    def _drift_said(self) -> str:
        """The drift found: how many keys of each kind, a few of each, and the first
        differences not pinned to keys."""
        counts = ", ".join(f"{n} {kind}" for kind, n in self.counts().items() if n)
        said = [counts or "not pinned to keys"]
        said += [
            f"{kind} e.g. {', '.join(map(_show_key, items))}"
            for kind, items in self.sample(3).items()
            if items
        ]
        if self.unresolved:
            said.append("unresolved: " + "; ".join(self.unresolved[:3]))
        return "; ".join(said)


def _show_key(d: KeyDrift) -> str:
    key = d.key[0] if len(d.key) == 1 else d.key
    return f"{key!r} ({', '.join(d.columns)})" if d.columns else repr(key)

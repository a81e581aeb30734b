"""What a build set aside (``on_bad_rows="quarantine"``): the changes the target would refuse,
counted by reason, with the keys whose last change they were and where they were written."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KEYS_LISTED", "QuarantineReport"]

#: At most this many keys are listed in a report (all are in the quarantined rows).
KEYS_LISTED = 1000


@dataclass(frozen=True)
class QuarantineReport:
    """The rows a build set aside: how many (``rows``), per reason (``reasons``: e.g.
    ``null_into_not_null``, ``out_of_range``), the keys whose last change they were
    (``keys``, the first :data:`KEYS_LISTED`; those keys keep their previous value in the
    data source), the batch's name among the quarantined rows (``batch``: the same rows
    make the same name, so a re-run writes them once) and where they went (``written_to``:
    a folder, or ``"callback"``)."""

    rows: int
    reasons: dict[str, int] = field(default_factory=dict)
    keys: tuple[tuple[Any, ...], ...] = ()
    batch: str = ""
    written_to: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "reasons": dict(self.reasons),
            "keys": list(map(list, self.keys)),
            "batch": self.batch,
            "written_to": self.written_to,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> QuarantineReport:
        """A report as :meth:`as_dict` wrote it (a payload's manifest)."""
        return cls(
            int(doc["rows"]),
            {str(k): int(v) for k, v in (doc.get("reasons") or {}).items()},
            tuple(map(tuple, doc.get("keys") or ())),
            str(doc.get("batch") or ""),
            str(doc.get("written_to") or ""),
        )

    @classmethod
    def total(cls, reports: list[QuarantineReport]) -> QuarantineReport | None:
        """Several change sets' reports as one (None for none)."""
        if not reports:
            return None
        reasons: Counter[str] = Counter()
        for r in reports:
            reasons.update(r.reasons)
        return cls(
            sum(r.rows for r in reports),
            dict(reasons),
            tuple(k for r in reports for k in r.keys)[:KEYS_LISTED],
            ",".join(r.batch for r in reports),
            ",".join(sorted({r.written_to for r in reports})),
        )

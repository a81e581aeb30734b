"""Parts over the server's update cap (:class:`OversizeSplitter`): split by key where they
stand, before they are sent once the cap is known, or when the server refuses one (413); the
split is remembered in the update's record so that a re-run rebuilds the same sub-parts (the
splitting itself is :mod:`.resplit`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from ..rest.session import RestSession
from ..values.errors import ApiError
from ..values.redaction import get_logger
from .identity import planned, split_in_record
from .resplit import expand, parts_needed, split_part, splittable, stated_cap
from .state import StateStore, UpdateRecord
from .units import Unit

__all__ = ["OversizeSplitter"]

log = get_logger("tabhyper_update")
MB = 1024 * 1024


class OversizeSplitter:
    """What an update does with parts over the server's cap (see the module docstring):
    sub-parts are written into ``folder()``, the SDK's own."""

    def __init__(self, client: RestSession, state: StateStore, folder: Callable[[], Path]) -> None:
        self.client = client
        self.state = state
        self.folder = folder

    def as_recorded(
        self, units: list[Unit], record: UpdateRecord, keys: Mapping[str, tuple[str, ...]] | None
    ) -> list[Unit]:
        """``units`` as ``record`` names them: the parts an earlier run split (the server had
        refused them as too large) split again the same way."""
        digests = [p.digest for p in record.parts]
        ours = [(u.part.buckets, u.part.content_digest) for u in units if u.part is not None]
        if not any("#" in d for d in digests) or planned(record) != ours:
            return units
        made = expand(units, digests, keys, self.folder())
        return [Unit(part, batch) for part, batch in made]

    def refused(
        self,
        record: UpdateRecord,
        units: list[Unit],
        index: int,
        keys: Mapping[str, tuple[str, ...]] | None,
        err: ApiError,
    ) -> None:
        """The server refused part ``index`` as over its update cap (nothing of it was
        applied): remember a smaller cap and split the part, or say why it cannot be."""
        part = units[index].part
        assert part is not None
        cap = stated_cap(err, part.size_bytes) or part.size_bytes // 2
        cap = min(cap, self.client.update_cap_bytes or cap)
        if keys is None or not splittable(part, record.parts[index].digest, cap):
            why = (
                "its actions are neither a change set's nor inserts only, so its rows cannot "
                "be split apart"
                if keys is None
                else f"it cannot be split under the cap ({cap / MB:.2f} MB): it was split "
                "three times already, holds one row, or the cap is below the smallest file"
            )
            err.step = f"update request of part {index + 1}"
            err.consequence = (
                f"the server refused the part as larger than its update cap "
                f"({part.size_bytes / MB:.1f} MB) and nothing of it was applied; {why}. "
                "Build the payload with a smaller max_payload_mb, or raise the server's "
                "cap (api.server.update_uploaded_file.max_size_in_mb)"
            )
            raise err
        self.client.update_cap_bytes = cap
        k = parts_needed(part.size_bytes, cap)
        log.warning(
            "the server refused part %d/%d (%.1f MB) as larger than its update cap; nothing "
            "of it was applied: splitting it in %d and sending those instead (parts over "
            "%.1f MB are split before they are sent from now on)",
            index + 1,
            len(record.parts),
            part.size_bytes / MB,
            k,
            cap / MB,
        )
        self.split(record, units, index, keys, k)

    def split(
        self,
        record: UpdateRecord,
        units: list[Unit],
        index: int,
        keys: Mapping[str, tuple[str, ...]],
        k: int,
    ) -> None:
        """Part ``index`` as ``k`` sub-parts, in the record (saved) and in ``units``."""
        part, batch = units[index]
        assert part is not None
        subs = split_part(part, keys, k, record.parts[index].digest, self.folder())
        split_in_record(record, index, k)
        self.state.save(record)
        units[index : index + 1] = [Unit(sub, batch) for sub in subs]

"""One writer per sink id: the streaming query that first runs a sink id owns it.

A claim is a small file in the state folder (``sinks/<sink id>.claim.json``): the owning
query's id (which Spark keeps in the checkpoint, so a restarted query is the same owner) and
an *epoch*. A second query that runs the same sink id is refused before its first batch is
sent, unless it declares that it replaces the first (``TableauSink(..., reset=True)``, for a
checkpoint that was replaced): it then owns the sink id in a new epoch, and its batches'
RequestIDs carry the epoch, so that its batch 0 is never taken for the old query's batch 0
however equal their rows. A query that restarts from its checkpoint is the same owner; a new
query at batch 0 is a stream started over (a full refresh), told apart and met as
``on_full_refresh`` says (refused, or the data source's tables replaced from the batch).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..local.folders import make_private, refuse_symlink
from ..local.private_json import read_json, write_json
from ..values.errors import ConfigurationError

__all__ = ["Claim", "claim_sink"]


@dataclass(frozen=True)
class Claim:
    """Who owns a sink id: the query's id (None when Spark does not tell it) and the epoch."""

    sink_id: str
    query_id: str | None
    epoch: int
    claimed_at: float


def _read(path: Path) -> Claim | None:
    try:
        data = read_json(path)
        return Claim(
            str(data["sink_id"]),
            None if data.get("query_id") is None else str(data["query_id"]),
            int(data["epoch"]),
            float(data.get("claimed_at") or 0.0),
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigurationError(
            f"the sink's claim {str(path)!r} cannot be read ({err}): remove it if no query "
            "runs this sink id"
        ) from None


def _write(path: Path, claim: Claim, *, fresh: bool) -> bool:
    """Write the claim (atomically); with ``fresh``, only when none exists (False then)."""
    return write_json(path, asdict(claim), only_new=fresh)


def claim_sink(
    folder: Path,
    sink_id: str,
    query_id: str | None,
    *,
    reset: bool,
    batch_id: int | None = None,
    refresh: Callable[[], None] | None = None,
) -> Claim:
    """The claim of ``sink_id`` for the query ``query_id``: the existing one when it is that
    query's (or either side's query is unknown), a new epoch when ``reset``, else an error
    naming both queries.

    Another query at batch 0 is a stream started over (a declarative pipeline's full
    refresh gives its flow a new checkpoint): with ``refresh``, that is called first (it
    replaces the data source's tables from the batch) and the claim moves to the new query
    in a new epoch only once it returned, so that a crash between the two refreshes again.
    Without it the error says so and what to pass."""
    make_private(folder)
    refuse_symlink(folder, "state_dir")
    path = folder / f"{sink_id}.claim.json"
    for _ in range(3):
        existing = _read(path)
        if existing is None:
            claim = Claim(sink_id, query_id, 0, time.time())
            if _write(path, claim, fresh=True):
                return claim
            continue  # another query claimed it meanwhile: read that claim
        if query_id is None or existing.query_id in (None, query_id):
            if query_id is not None and existing.query_id is None:
                existing = Claim(sink_id, query_id, existing.epoch, existing.claimed_at)
                _write(path, existing, fresh=False)
            return existing
        return _taken_over(path, sink_id, existing, query_id, reset, batch_id == 0, refresh)
    raise ConfigurationError(f"sink id {sink_id!r} could not be claimed: its claim keeps changing")


def _taken_over(
    path: Path,
    sink_id: str,
    existing: Claim,
    query_id: str,
    reset: bool,
    starts_over: bool,
    refresh: Callable[[], None] | None,
) -> Claim:
    """The claim moved from the query holding it (``existing``) to query ``query_id``, in
    a new epoch: with ``reset``, or for a stream that ``starts_over`` (at batch 0) where
    ``refresh`` is given (called first); else an error naming both queries and what to
    pass."""
    if reset or (starts_over and refresh is not None):
        if refresh is not None and not reset:
            refresh()
        claim = Claim(sink_id, query_id, existing.epoch + 1, time.time())
        _write(path, claim, fresh=False)
        return claim
    if starts_over:
        raise ConfigurationError(
            f"sink id {sink_id!r} belongs to streaming query {existing.query_id}, and "
            f"query {query_id} starts over at batch 0: a stream run again from the start "
            "with a new checkpoint (a declarative pipeline's full refresh), so its first "
            "batch was not sent. To replace the data source's tables from the refreshed "
            "stream, pass TableauSink(..., on_full_refresh='replace'); to apply its "
            "batches over what the data source holds, reset=True once"
        )
    raise ConfigurationError(
        f"sink id {sink_id!r} belongs to streaming query {existing.query_id} (claimed "
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(existing.claimed_at))} UTC); "
        f"this query is {query_id}, so its first batch was not sent. Give each query its "
        "own sink_id, or, when this query replaces that one (its checkpoint was "
        "replaced), pass TableauSink(..., reset=True) once"
    )

"""``on_schema_change=Republish(snapshot)``: when the source's schema no longer fits the
published data source, publish the source's snapshot over it (its new columns and types
included), then go on from the snapshot's position.

The data source is replaced in one publish (``overwrite``): it is never empty or half old.
The snapshot must hold every change up to the update that found the new schema (read the
source table at or after that update's position): that update is then not sent, its
changes being in the snapshot, and the feed goes on with the next one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rest.refs import DataSourceRef
from ..rest.session import RestSession
from ..update.publish import publish
from ..values.errors import ArgumentTypeError
from ..values.redaction import get_logger
from .build import build_payload
from .options import BuildOptions, check_build_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Republish"]

log = get_logger("tabhyper_update")


@dataclass(frozen=True)
class Republish:
    """Republish from ``snapshot`` (a DataFrame, or a function returning one, called when
    the schema changed) with the data source's table name ``table`` [``Extract``], built
    with ``build`` (:class:`~.options.BuildOptions`; one file unless it says otherwise)."""

    snapshot: DataFrame | Callable[[], DataFrame]
    table: str = "Extract"
    build: BuildOptions = field(default_factory=lambda: BuildOptions())

    def __post_init__(self) -> None:
        if not callable(self.snapshot) and not hasattr(self.snapshot, "schema"):
            raise ArgumentTypeError(
                f"Republish takes a DataFrame or a function returning one, got {self.snapshot!r}",
                argument="snapshot",
            )
        check_build_options(self.build, "Republish(build=...)")

    def republish(
        self, client: RestSession, target: DataSourceRef, state_dir: Path
    ) -> DataSourceRef:
        frame: Any = self.snapshot() if callable(self.snapshot) else self.snapshot
        named = target if target.name else client.datasource(target.id)
        log.warning(
            "the source's schema changed: publishing its snapshot over data source %r",
            target.label,
        )
        options: BuildOptions = {"max_payload_mb": None, **self.build}
        with build_payload(frame, table=self.table, **options) as payload:
            return publish(
                client,
                payload,
                named.name or named.id,
                mode="overwrite",
                project=named.project_id or named.project,
                state_dir=state_dir,
            )

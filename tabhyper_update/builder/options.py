"""How a payload is built, declared once (:class:`BuildOptions`): ``build_payload`` takes
them as keywords, and the sink, :class:`~tabhyper_update.Republish` and the command line
take them whole and pass them on::

    options = BuildOptions(max_payload_mb=50, staging="driver")
    build_payload(df, changes, **options)
    TableauSink("Orders", changes, build=options)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, cast

from typing_extensions import TypedDict

from ..local.folders import check_folder
from ..payload.model import DEFAULT_MAX_PAYLOAD_MB
from ..update.options import check_options
from ..values.actions import DEFAULT_SCHEMA
from ..values.errors import ArgumentTypeError, PayloadArgumentError
from ..values.narrowing import DeclaredColumn
from ..values.wording import check_choice
from .hyper_parts import NO_CAP
from .hyper_types import DEFAULT_DATABASE_VERSION, SUPPORTED_DATABASE_VERSIONS
from .quarantine import (
    QuarantineDestination,
    check_delta_writer,
    check_destination,
    target_columns,
)
from .staging import StagingMode, check_staging

__all__ = ["BuildOptions", "BuildSettings", "check_build_options"]

_MB = 1024 * 1024


class BuildOptions(TypedDict, total=False):
    """How the tables are written.

    ``schema``: the payload's schema [``Extract``]. ``database_version``: Hyper's file
    format [2]. ``complex_as_json``: write arrays, maps and structs as JSON text (else they
    are refused). ``max_payload_mb``: split the payload into parts under this size [100]
    (``None``: one file, for a publish). ``staging``: how rows reach Hyper (``"auto"``,
    ``"shared"`` Parquet in ``staging_dir``, or ``"driver"`` through Arrow). ``staging_dir``
    / ``output_dir``: folders for the staged rows and the parts (the temporary folder by
    default). ``keep_files``: leave the parts after the update. ``progress``: progress
    bars (on a terminal by default). ``on_bad_rows``: ``"fail"`` (the default: a change the
    target would refuse fails the build or the update) or ``"quarantine"``: such changes are
    set aside, written to ``quarantine`` (a folder, or a function taking a Spark DataFrame
    and the batch's name), and the rest applies; what the target refuses is read from
    ``target_columns`` (``"id BIGINT NOT NULL, amount NUMERIC(12,2)"``); a folder holds
    Parquet files, or a Delta table with ``quarantine_format="delta"`` (delta-rs).
    """

    schema: str
    database_version: int
    complex_as_json: bool
    max_payload_mb: float | None
    staging: StagingMode
    staging_dir: str | os.PathLike[str] | None
    output_dir: str | os.PathLike[str] | None
    keep_files: bool
    progress: bool | None
    on_bad_rows: Literal["fail", "quarantine"]
    quarantine: QuarantineDestination | None
    quarantine_format: Literal["parquet", "delta"]
    target_columns: str | Mapping[str, str] | None


@dataclass(frozen=True)
class BuildSettings:
    """A build's options (:class:`BuildOptions`), checked, with their defaults: made once
    where the keywords enter (:meth:`of`) and passed whole from then on."""

    schema: str = DEFAULT_SCHEMA
    database_version: int = DEFAULT_DATABASE_VERSION
    complex_as_json: bool = False
    max_payload_mb: float | None = DEFAULT_MAX_PAYLOAD_MB
    staging: StagingMode = "auto"
    staging_dir: str | os.PathLike[str] | None = None
    output_dir: str | os.PathLike[str] | None = None
    keep_files: bool = False
    progress: bool | None = None
    on_bad_rows: Literal["fail", "quarantine"] = "fail"
    quarantine: QuarantineDestination | None = None
    quarantine_format: Literal["parquet", "delta"] = "parquet"
    target_columns: str | Mapping[str, str] | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any], where: str) -> BuildSettings:
        """``options`` (keywords ``where`` was given) checked before any Spark job or file
        write: a name it does not take, a cap that is not positive, an unknown staging
        mode or file format, a folder that cannot be used, an empty schema name."""
        made = cls(**check_build_options(options, where))
        cap = made.max_payload_mb
        if cap is not None and (not isinstance(cap, (int, float)) or not cap > 0):
            raise PayloadArgumentError(
                f"max_payload_mb must be positive (or None: one file), got {cap!r}",
                argument="max_payload_mb",
            )
        check_staging(made.staging)
        check_folder(made.staging_dir, "staging_dir", create=False)
        check_folder(made.output_dir, "output_dir", create=False)
        if made.database_version not in SUPPORTED_DATABASE_VERSIONS:
            raise PayloadArgumentError(
                f"database_version must be one of {SUPPORTED_DATABASE_VERSIONS}, got "
                f"{made.database_version!r}",
                argument="database_version",
            )
        if not isinstance(made.schema, str) or not made.schema:
            raise PayloadArgumentError(
                f"schema must be a non-empty string, got {made.schema!r}", argument="schema"
            )
        made.check_bad_rows()
        return made

    def check_bad_rows(self) -> None:
        """``on_bad_rows`` and what it needs: a destination for ``"quarantine"`` (and none
        without it), readable ``target_columns``."""
        check_choice(
            self.on_bad_rows,
            ("fail", "quarantine"),
            "on_bad_rows",
            partial(PayloadArgumentError, argument="on_bad_rows"),
        )
        if self.on_bad_rows == "quarantine":
            if self.quarantine is None:
                raise PayloadArgumentError(
                    "on_bad_rows='quarantine' needs quarantine= (a folder, or a function "
                    "taking the set-aside rows)",
                    argument="quarantine",
                )
            check_destination(self.quarantine)
            self._check_format()
        elif self.quarantine is not None:
            raise PayloadArgumentError(
                "quarantine= is used with on_bad_rows='quarantine'", argument="quarantine"
            )
        if self.target_columns is not None:
            if self.on_bad_rows != "quarantine":
                raise PayloadArgumentError(
                    "target_columns= is used with on_bad_rows='quarantine'",
                    argument="target_columns",
                )
            target_columns(self.target_columns)

    def _check_format(self) -> None:
        """``quarantine_format``: a folder's, and the Delta writer where it is Delta."""
        check_choice(
            self.quarantine_format,
            ("parquet", "delta"),
            "quarantine_format",
            partial(PayloadArgumentError, argument="quarantine_format"),
        )
        if self.quarantine_format == "delta":
            if callable(self.quarantine):
                raise PayloadArgumentError(
                    "quarantine_format='delta' names the form of a folder; a function writes "
                    "the rows its own way",
                    argument="quarantine_format",
                )
            check_delta_writer()

    @property
    def target(self) -> dict[str, DeclaredColumn]:
        """The target's columns as ``target_columns`` declares them (none: not given)."""
        return target_columns(self.target_columns) if self.target_columns is not None else {}

    @property
    def cap_bytes(self) -> int:
        """A part's cap in bytes (None: one file whatever its size, as a snapshot to
        publish has no update cap)."""
        return int(self.max_payload_mb * _MB) if self.max_payload_mb is not None else NO_CAP


def check_build_options(options: Mapping[str, Any], where: str) -> BuildOptions:
    """``options`` as build options, refusing a name that is none (naming the nearest)."""
    if not isinstance(options, Mapping):
        raise ArgumentTypeError(
            f"{where} takes BuildOptions(...) (a mapping of build options), got "
            f"{type(options).__name__}",
            argument="build",
        )
    check_options(options, BuildOptions, where)
    return cast(BuildOptions, dict(options))

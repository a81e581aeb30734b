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
from typing import Any, cast

from typing_extensions import TypedDict

from ..local.folders import check_folder
from ..payload.model import DEFAULT_MAX_PAYLOAD_MB
from ..update.options import check_options
from ..values.actions import DEFAULT_SCHEMA
from ..values.errors import ArgumentTypeError, PayloadArgumentError
from .hyper_parts import NO_CAP
from .hyper_types import DEFAULT_DATABASE_VERSION, SUPPORTED_DATABASE_VERSIONS
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
    bars (on a terminal by default).
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
        return made

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

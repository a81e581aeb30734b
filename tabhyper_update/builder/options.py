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
from typing import Any, cast

from typing_extensions import TypedDict

from ..update.options import check_options
from .staging import StagingMode

__all__ = ["BuildOptions", "check_build_options"]


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


def check_build_options(options: Mapping[str, Any], where: str) -> BuildOptions:
    """``options`` as build options, refusing a name that is none (naming the nearest)."""
    if not isinstance(options, Mapping):
        from ..values.errors import ArgumentTypeError

        raise ArgumentTypeError(
            f"{where} takes BuildOptions(...) (a mapping of build options), got "
            f"{type(options).__name__}",
            argument="build",
        )
    check_options(options, BuildOptions, where)
    return cast(BuildOptions, dict(options))

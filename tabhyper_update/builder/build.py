"""``build_payload``: Spark change sets → ``.hyper`` payload files, fast, with flat driver memory.

How a payload is built (chosen by measurement, see ``benchmarks/payload_build.py``):

1. Spark's executors compute the change set (for CDC: the last change per key, in one
   shuffle, or none for a change set Spark estimates small: see :mod:`.staging`) as one
   Spark SQL query, and write it as Parquet to a private staging directory, with a split
   bucket, a row hash and, for a change set, the change's kind (upsert, delete, error)
   beside each row; or they send it to the driver, which writes the Parquet
   (``staging="driver"``, and ``"auto"`` for a small change set). The driver never holds
   the change set; Spark's own count of the rows of each kind comes back through
   ``DataFrame.observe`` in the same job.
2. Hyper reads the staged Parquet once for per-bucket statistics (exact row counts, an upper
   estimate of the bytes, row-hash sums). Its row count must equal Spark's: anything else is
   an error, never an empty change set.
3. Parts are planned from those statistics alone: consecutive bucket ranges whose estimated
   size stays under ``max_payload_mb``. Buckets are a hash of the key (change sets) or of the
   whole row (plain tables), so the plan does not depend on Spark's partitioning. The
   estimate is an upper bound (Hyper compresses), so when it asks for a few parts the
   payload is first written whole, and kept as one part if the file fits under the cap.
   Only for a payload within a few blocks of the cap can two builds of the same rows choose
   differently (one part, or the planned split); an interrupted run's record catches that
   on the re-run (``UpdateStateError``) instead of applying anything twice.
4. Hyper writes each part (``INSERT … SELECT … FROM external(…) WHERE kind … AND bucket
   BETWEEN …``) under a temporary name and renames it when complete. Files are ``0600`` in
   a ``0700`` directory.

The staging directory must be readable by the driver at the same path the executors wrote
it: the local disk in Spark local mode, a shared filesystem (NFS, a FUSE mount of object
storage such as ``/dbfs``) on a cluster. It is removed in every case, failures included.

>>> with build_payload(df, key=["id"], op_column="op", order_by="seq") as payload:  # doctest: +SKIP
...     payload.parts[0].tables["upserts"].row_count
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from typing_extensions import Unpack

from ..local.folders import check_folder, private_dir, sweep_leftovers_if_due
from ..local.progress import bar as progress_bar
from ..local.progress import show_progress
from ..local.spark_versions import observe, pyspark_version, require_supported_pyspark
from ..local.telemetry import span
from ..payload.model import (
    Payload,
)
from ..values.changeset import ChangeSet
from ..values.errors import (
    ArgumentTypeError,
    PayloadArgumentError,
    PayloadError,
    TabHyperError,
    build_failure,
)
from ..values.names import is_name
from ..values.parts import PayloadPart
from ..values.positions import json_positions
from ..values.quarantine import QuarantineReport
from ..values.redaction import get_logger
from ..values.spark_sql import source_views, sql_name
from .cdc import (
    KIND_DELETE,
    KIND_QUARANTINED,
    KIND_UPSERT,
    CdcSpec,
    resolve_change_sets,
)
from .history import Added, added_columns, mode_tables
from .hyper_parts import (
    STAGED_BUCKET,
    Staged,
    change_identity_sql,
    guard_staged,
    identity_sql,
    kind_counts,
    kind_is,
    plan_parts,
    raise_on_change_set_errors,
    read_bucket_stats,
    size_sql,
)
from .hyper_parts import write_parts as _write_parts
from .hyper_ranking import ranks_in_hyper, stage_and_rank
from .hyper_types import (
    ColumnPlan,
    plan_columns,
)
from .options import BuildOptions, BuildSettings
from .quarantine import QuarantineDestination, bad_rows, set_aside
from .spark_ranking import rank_in_spark
from .staging import (
    StagingMode,
    compiled_apart,
    jit_sized_code,
    probe_to_driver,
    selected,
    staged_files,
    staging_for,
    write_on_driver,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["STAGED_PARQUET_OPTIONS", "build_payload", "build_with"]

log = get_logger("tabhyper_update.build")

_MB = 1024 * 1024
#: Staging Parquet options. Dictionary encoding is off: measured on 2M rows it doubled
#: Spark's write time and slowed Hyper's read, for files that live a few seconds.
STAGED_PARQUET_OPTIONS = {"compression": "snappy", "parquet.enable.dictionary": "false"}


@dataclass
class _Frame:
    """A DataFrame to stage: a table, or a change set (``spec``) named by its upsert table."""

    name: str
    df: DataFrame
    plans: list[ColumnPlan]
    spec: CdcSpec | None = None
    delete_table: str = ""
    #: The columns history and soft deletes write beside the source's.
    added: list[Added] = field(default_factory=list)
    #: Where its changes set aside go (``on_bad_rows="quarantine"``), and in what form.
    quarantine: QuarantineDestination | None = None
    quarantine_format: str = "parquet"


def build_payload(
    source: DataFrame | Mapping[str, DataFrame],
    changes: ChangeSet | Mapping[str, ChangeSet] | None = None,
    *,
    table: str = "Extract",
    **options: Unpack[BuildOptions],
) -> Payload:
    """Build a ``.hyper`` payload from one DataFrame or a mapping of table name → DataFrame.

    Without ``changes`` each DataFrame is written as a table (``table`` names the single
    one) and the update's actions are yours to give. With a :class:`ChangeSet` the one
    DataFrame is read as a change set: the payload holds an ``upserts`` table (every data
    column, the last change per key) and a ``deletes`` table (key columns only), and the
    update derives its actions, delete then upsert by key::

        payload = build_payload(changes, ChangeSet(key=["region", "id"],
                                                   op_column="_change_type",
                                                   order_by="_commit_version"))
        payload.upload().apply(target_table="Orders")

    ``options`` are :class:`~tabhyper_update.builder.options.BuildOptions` (the payload's
    ``schema``, ``max_payload_mb``, ``staging``, its folders, ...), also taken whole
    (``build_payload(df, **opts)``) by the sink, ``Republish`` and the command line.
    """
    return build_with(source, changes, BuildSettings.of(options, "build_payload()"), table=table)


def build_with(
    source: DataFrame | Mapping[str, DataFrame],
    changes: ChangeSet | Mapping[str, ChangeSet] | None,
    settings: BuildSettings,
    *,
    table: str = "Extract",
) -> Payload:
    """:func:`build_payload` with its options already made, checked, as one
    :class:`~tabhyper_update.builder.options.BuildSettings` (the sink's, made once)."""
    _check_arguments(changes, table)
    started = time.perf_counter()
    frames = _frames_of(source, table)
    change_sets = resolve_change_sets(list(frames), changes)
    # Plan every column before any Spark job or file write: bad types fail here.
    spark_frames = _plan_frames(frames, change_sets, settings)
    with span("build", tables=len(spark_frames)) as current:
        parts, owned, ends = _build_parts(
            spark_frames, settings, drop_empty=change_sets is not None
        )
        if current is not None:
            current.set_attribute("tabhyper_update.parts", len(parts))
    payload = Payload(
        parts,
        schema=settings.schema,
        keep_files=settings.keep_files,
        change_set=changes if isinstance(changes, ChangeSet) else None,
        change_sets=change_sets if isinstance(changes, Mapping) else None,
        positions=json_positions(ends.positions),
        committed_at=ends.committed_at,
        quarantined=ends.quarantined,
        checked_types=_checked_types(spark_frames, settings),
        _owned_dir=owned,
    )
    payload.build_seconds = time.perf_counter() - started
    log.info(
        "built payload: %d part(s), %d bytes, tables %s",
        len(parts),
        payload.size_bytes,
        {n: t.row_count for n, t in payload.tables.items()},
    )
    return payload


def _check_arguments(changes: object, table: str) -> None:
    """Refuse bad arguments before any Spark job or file write (nothing is created yet)."""
    if changes is not None and not isinstance(changes, (ChangeSet, Mapping)):
        raise ArgumentTypeError(
            f"build_payload's second argument is a ChangeSet(key=..., op_column=..., "
            f"order_by=...) or a mapping of table name → ChangeSet, got "
            f"{type(changes).__name__}",
            argument="changes",
        )
    _check_names(table, "table")


def _frames_of(source: DataFrame | Mapping[str, DataFrame], table: str) -> dict[str, DataFrame]:
    """Table name → DataFrame, each checked to be one."""
    if isinstance(source, Mapping):
        frames = dict(source)
        if not frames:
            raise PayloadArgumentError("build_payload needs at least one DataFrame")
        for name in frames:
            _check_names(name, "a table name")
    else:
        frames = {table: source}
    for name, df in frames.items():
        if not hasattr(type(df), "schema") or not hasattr(df, "write"):
            raise PayloadArgumentError(
                f"table {name!r}: expected a Spark DataFrame, got {type(df).__name__}"
            )
    require_supported_pyspark()
    for name, df in frames.items():
        _readable_schema(name, df)
    return frames


def _readable_schema(name: str, df: DataFrame) -> None:
    """Refuse a DataFrame whose schema pyspark itself cannot read (pyspark 3.4 cannot name
    a year-month interval in Python), naming the table."""
    try:
        df.schema  # noqa: B018 - only whether pyspark can read it
    except Exception as err:
        said = next((line for line in str(err).splitlines() if line.strip()), "")
        what = (
            "Tableau cannot use interval columns: cast the column or leave it out"
            if "interval" in said.lower()
            else "cast the column to a type the SDK maps"
        )
        raise PayloadError(
            f"table {name!r}: pyspark {pyspark_version()[2]} cannot read a column's type "
            f"({said.strip()}); {what}"
        ) from None


def _plan_frames(
    frames: Mapping[str, DataFrame],
    change_sets: Mapping[str, ChangeSet] | None,
    options: BuildSettings,
) -> list[_Frame]:
    """Each DataFrame with the plan of its columns (and, for a change set, how to read it)."""
    planned: list[_Frame] = []
    for name, df in frames.items():
        cs = change_sets.get(name) if change_sets is not None else None
        if cs is None:
            if options.on_bad_rows == "quarantine":
                raise PayloadArgumentError(
                    f"on_bad_rows='quarantine' sets aside changes of a change set, and table "
                    f"{name!r} is a plain table (build it with a ChangeSet)"
                )
            columns = plan_columns(
                df, name, df.columns, options.database_version, options.complex_as_json
            )
            planned.append(_Frame(name, df, columns))
            continue
        spec = CdcSpec.create(
            df.columns,
            cs,
            table=name if len(frames) > 1 else None,
            types={f.name: f.dataType.simpleString() for f in df.schema.fields},
        )
        plans = plan_columns(
            df,
            cs.upsert_table,
            spec.data_columns(df.columns),
            options.database_version,
            options.complex_as_json,
        )
        added = added_columns(spec, df, cs.upsert_table, options.database_version)
        if options.on_bad_rows == "quarantine":
            spec = _with_quarantine(spec, plans, options, name)
        quarantine = options.quarantine if spec.quarantine else None
        planned.append(
            _Frame(
                cs.upsert_table,
                df,
                plans,
                spec,
                cs.delete_table,
                added,
                quarantine,
                options.quarantine_format,
            )
        )
    return planned


def _with_quarantine(
    spec: CdcSpec, plans: list[ColumnPlan], options: BuildSettings, name: str
) -> CdcSpec:
    """``spec`` checking each upsert's row against the target's types, to set aside the
    rows that do not fit (``on_bad_rows="quarantine"``)."""
    if spec.history is not None:
        raise PayloadArgumentError(
            "on_bad_rows='quarantine' does not combine with history mode yet: every "
            "change of a key is a version there, and one set aside would leave a gap "
            "in its history"
        )
    return replace(spec, quarantine=True, bad_rows=bad_rows(plans, options.target, spec.key, name))


def _build_parts(
    frames: Sequence[_Frame], options: BuildSettings, *, drop_empty: bool
) -> tuple[list[PayloadPart], Path, _Ends]:
    """Stage the rows with Spark and write the parts with Hyper, in private folders: the
    parts, the folder that holds them (removed again on any failure) and where the change
    sets end (:func:`_stage_and_write`)."""
    stage_parent, out = _claim_folders(options.staging_dir, options.output_dir)
    stage, stage_lease = private_dir(stage_parent, "tabhyper-stage-")
    try:
        owned, owned_lease = private_dir(out, "tabhyper-payload-")
    except BaseException:
        stage_lease.release()
        shutil.rmtree(stage, ignore_errors=True)
        raise
    try:
        with source_views():
            parts, ends = _stage_and_write(frames, stage, owned, options, drop_empty)
    except TabHyperError:
        shutil.rmtree(owned, ignore_errors=True)
        raise
    except Exception as err:
        # Spark's and Hyper's own errors (Py4J, analysis, HyperException) become ours.
        shutil.rmtree(owned, ignore_errors=True)
        columns = {frame.name: [p.name for p in frame.plans] for frame in frames}
        raise build_failure(err, columns, stage, owned) from err
    except BaseException:
        shutil.rmtree(owned, ignore_errors=True)
        raise
    finally:
        stage_lease.release()
        owned_lease.release()
        shutil.rmtree(stage, ignore_errors=True)
    if not parts:
        shutil.rmtree(owned, ignore_errors=True)
        log.info("the change set is empty (no change to upsert or delete): nothing to upload")
    return parts, owned, ends


@dataclass(frozen=True)
class _Ends:
    """Where a build's change sets end in their source: per change set (its upsert table)
    its greatest ``order_by`` values, and the latest commit time among their changes (epoch
    seconds) where the change feed says it."""

    positions: dict[str, dict[str, Any]]
    committed_at: float | None
    #: What the change sets set aside (``on_bad_rows="quarantine"``).
    quarantined: QuarantineReport | None = None


def _stage_and_write(
    frames: Sequence[_Frame],
    stage: Path,
    owned: Path,
    options: BuildSettings,
    drop_empty: bool,
) -> tuple[list[PayloadPart], _Ends]:
    """The parts, and where the change sets end."""
    with progress_bar(show_progress(options.progress), total=3, desc="build payload") as shown:
        _step(shown, "Spark stages the rows")
        started = time.perf_counter()
        staged = _stage(frames, stage, options.staging)
        log.debug("Spark staged the change set in %.2f s", time.perf_counter() - started)
        _step(shown, "Hyper reads their statistics")
        started = time.perf_counter()
        read_bucket_stats(staged, stage)
        plan = plan_parts(staged, options.cap_bytes)
        _step(shown, "Hyper writes the parts")
        parts = _write_parts(
            staged,
            plan,
            owned,
            schema=options.schema,
            database_version=options.database_version,
            cap_bytes=options.cap_bytes,
            drop_empty=drop_empty,
        )
        _step(shown, None)
    log.debug("Hyper wrote %d part(s) in %.2f s", len(parts), time.perf_counter() - started)
    ends = {s.name: s.position for s in staged if s.position is not None}
    positions = {
        f.name: dict(zip(f.spec.order_by, ends[f.name], strict=True))
        for f in frames
        if f.spec is not None and f.name in ends
    }
    commits = [s.committed_at for s in staged if s.committed_at is not None]
    reports = [s.quarantined for s in staged if s.quarantined is not None]
    return parts, _Ends(positions, max(commits, default=None), QuarantineReport.total(reports))


# ---------------------------------------------------------------------------------------------
# Spark: stage the rows


def _write_staged(df: DataFrame, target: Path, staging: StagingMode) -> None:
    if staging == "driver":
        write_on_driver(df, target)
        return
    # A file URI of the raw path: Hadoop quotes it itself, so the files land at exactly this
    # path whatever it holds (spaces, %, #, ?, quotes, non-ASCII). ``Path.as_uri()`` would
    # percent-encode it and Spark would take the escapes literally.
    df.write.mode("overwrite").options(**STAGED_PARQUET_OPTIONS).parquet(
        "file://" + str(target.resolve())
    )


class _Route(NamedTuple):
    """How one frame's rows reach the stage: the frame as staged, Spark's mode for it,
    how many rows a probe sends to the driver (0: none), and whether Hyper ranks a change
    set's changes (Spark only tags them)."""

    df: DataFrame
    mode: StagingMode
    probe: int
    by_hyper: bool


def _route(frame: _Frame, staging: StagingMode) -> _Route:
    spec, df = frame.spec, frame.df
    # History, soft deletes and a quarantine are ranked by Spark alone.
    hyper_ranks = (
        spec is not None
        and not frame.added
        and not spec.quarantine
        and ranks_in_hyper(spec, frame.plans)
    )
    mode, small, probe = staging_for(
        df,
        staging,
        table=frame.name,
        change_set=spec is not None,
        # A change set's probe is ranked by Hyper: Spark's ranking needs all of it.
        probe=spec is None or hyper_ranks,
    )
    by_hyper = hyper_ranks and ((small and mode == "driver") or probe > 0)
    if spec is not None and small and not by_hyper:
        # One partition satisfies Spark's ranking's partitioning: no shuffle, one task.
        df = df.coalesce(1)
    elif mode == "driver" or probe:
        df = compiled_apart(df)
    return _Route(df, mode, probe, by_hyper)


def _stage(frames: Sequence[_Frame], stage: Path, staging: StagingMode) -> list[Staged]:
    """Write the change sets (or tables) to Parquet with Spark; nothing is collected.

    The projections are Spark SQL text (one call each): a plan built from column objects
    costs a round trip to the JVM per function, which a small change set feels."""
    staged: list[Staged] = []
    if not frames:
        return staged
    with jit_sized_code(frames[0].df.sparkSession):
        for index, frame in enumerate(frames):
            route = _route(frame, staging)
            target = stage / f"t{index}"
            if frame.spec is None:
                staged.append(_stage_table(frame, route, target))
            else:
                staged += _stage_change_set(frame, frame.spec, route, target)
    return staged


def _staged_values(plans: Sequence[ColumnPlan]) -> tuple[list[str], list[str]]:
    """The staged column names (``c0``, ``c1``, ...) and each column's value as Spark SQL."""
    return [f"c{i}" for i in range(len(plans))], [p.spark_sql(sql_name(p.name)) for p in plans]


def _stage_table(frame: _Frame, route: _Route, target: Path) -> Staged:
    """A plain table's rows staged, with their identity columns; counted as they go."""
    from pyspark.sql import functions as F

    staged_names, values = _staged_values(frame.plans)
    columns = [f"{v} AS {s}" for v, s in zip(values, staged_names, strict=True)]
    rows = selected(route.df, [*columns, *identity_sql(values)])
    sent = probe_to_driver(rows, target, route.probe, frame.name) if route.probe else None
    if sent is None and route.mode == "driver":
        # The driver counts the rows it receives: no observation to wait for.
        sent = write_on_driver(rows, target)
    elif sent is None:
        counted, count = observe(rows, rows=F.expr("count(1)"))
        _write_staged(counted, target, route.mode)
        sent = int(count().get("rows") or 0)
    return Staged(frame.name, frame.plans, staged_names, staged_files(target), sent)


def _stage_change_set(frame: _Frame, spec: CdcSpec, route: _Route, target: Path) -> list[Staged]:
    """A change set's last change per key staged (ranked by Spark, or tagged by Spark and
    ranked by Hyper): its upserts and its deletes, which share the staged rows (in history
    mode every change, :mod:`.history`)."""
    plans = [*frame.plans, *(a.plan for a in frame.added)]
    staged_names, values = _staged_values(frame.plans)
    staged_names += [f"a{i}" for i in range(len(frame.added))]
    values += [a.plan.spark_sql(a.sql) for a in frame.added]
    columns = [f"{v} AS {s}" for v, s in zip(values, staged_names, strict=True)]
    # The ranked rows' statistics by kind (when Hyper ranks them), the greatest position
    # among the changes and their latest commit time.
    ranked = None
    if route.by_hyper:
        log.debug("table %r: Spark tags the changes, Hyper ranks them", frame.name)
        tagging = spec.tags()
        tagged = [*columns, *change_identity_sql(spec, values, f"({tagging.kind})"), *tagging.tags]
        ranked = stage_and_rank(
            route.df, spec, plans, staged_names, tagged, target, route.probe, frame.name
        )
    if ranked is not None:
        stats, last, committed = ranked
        counts = kind_counts(stats)
    else:
        stats = None
        counts, last, committed = rank_in_spark(
            route.df, spec, columns, values, lambda rows: _write_staged(rows, target, route.mode)
        )
    files = staged_files(target)
    if counts["errors"]:
        raise_on_change_set_errors(spec, plans, staged_names, files, counts["errors"])
    quarantined = _set_aside(frame, spec) if counts.get(KIND_QUARANTINED) else None
    key_idx = [i for i, p in enumerate(plans) if p.name in spec.key]
    guard = guard_staged(spec, plans, staged_names, files, counts, stats, key_idx)
    tables = _change_tables(
        frame, spec, plans, staged_names, files, counts, stats, key_idx, (last, committed)
    )
    tables[0].quarantined = quarantined
    return [*guard, *tables]


def _set_aside(frame: _Frame, spec: CdcSpec) -> QuarantineReport | None:
    """The changes set aside, written where the caller said (``on_bad_rows="quarantine"``)."""
    if frame.quarantine is None:
        return None
    report = set_aside(frame.df, spec, frame.quarantine, frame.quarantine_format)
    log.warning(
        "table %r: %d change(s) set aside (%s), written to %s",
        frame.name,
        report.rows,
        ", ".join(f"{r}: {n}" for r, n in sorted(report.reasons.items())),
        report.written_to,
    )
    return report


def _change_tables(
    frame: _Frame,
    spec: CdcSpec,
    plans: list[ColumnPlan],
    staged_names: list[str],
    files: list[Path],
    counts: dict[str, int],
    stats: Any,
    key_idx: list[int],
    ends: tuple[tuple[Any, ...] | None, float | None],
) -> list[Staged]:
    """A change set's payload tables over its staged rows: its upserts first, then its
    deletes (in history mode or with soft deletes, :func:`.history.mode_tables`).
    ``key_idx``: the key's columns among ``plans``; ``ends``: where the change set ends
    (its greatest position and latest commit time)."""
    sent = [i for i, p in enumerate(frame.plans) if p.name not in spec.guard_only]
    # Deletes share their upserts' rows: bucketed by key, estimated as whole rows.
    size = size_sql(plans, staged_names)
    if frame.added:
        return mode_tables(
            spec,
            frame.name,
            frame.delete_table,
            plans,
            staged_names,
            frame.added,
            files,
            counts,
            key_idx,
            sent,
            ends,
        )
    tables = {KIND_UPSERT: (frame.name, sent), KIND_DELETE: (frame.delete_table, key_idx)}
    upserts, deletes = (
        Staged(
            name,
            [plans[i] for i in columns],
            [staged_names[i] for i in columns],
            files,
            counts[kind],
            buckets=None if stats is None else stats.get(kind, {}),
            where=kind_is(kind),
            bucket_of=STAGED_BUCKET,
            size_of=size,
        )
        for kind, (name, columns) in tables.items()
    )
    # The upserts carry where the change set ends; the deletes are its keys alone.
    upserts.position, upserts.committed_at = ends
    return [upserts, deletes]


# ---------------------------------------------------------------------------------------------
# helpers


def _checked_types(frames: Sequence[_Frame], settings: BuildSettings) -> dict[str, dict[str, str]]:
    """Per upsert table, the columns whose rows were checked against ``target_columns``'
    types (a quarantine's), each with that type."""
    target = settings.target
    return {
        f.name: {p.name: target[p.name].text for p in f.plans if p.name in target}
        for f in frames
        if f.spec is not None and f.spec.quarantine and target
    }


def _step(shown: Any, what: str | None) -> None:
    """Move the build's bar on (``what``: the step starting; ``None``: done)."""
    if shown is None:
        return
    if shown.n or what is None:
        shown.update(1)
    if what is not None:
        shown.set_postfix_str(what)


def _claim_folders(
    staging_dir: str | os.PathLike[str] | None, output_dir: str | os.PathLike[str] | None
) -> tuple[Path | None, Path | None]:
    """The staging and output folders, created when missing (their parents must exist),
    after dead builds' leftovers in them are swept (once a minute per folder at most)."""
    stage_parent = check_folder(staging_dir, "staging_dir")
    out = check_folder(output_dir, "output_dir")
    sweep_leftovers_if_due(stage_parent)
    if out is not None and out != (stage_parent or Path(tempfile.gettempdir()).absolute()):
        sweep_leftovers_if_due(out)
    return stage_parent, out


def _check_names(name: str, what: str) -> None:
    if not is_name(name):
        raise PayloadArgumentError(f"{what} must be a non-empty string, got {name!r}")

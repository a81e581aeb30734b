"""What each ``tabhyper-update`` command does (the parser is in ``parser.py``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..builder.build import build_payload
from ..builder.options import BuildOptions, BuildSettings
from ..client import TableauClient
from ..local.folders import LEASE_NAME, check_folder
from ..payload.model import Payload
from ..update.results import PartUpdate
from ..update.state import StateStore, UpdateRecord
from ..values.actions import ActionBatch
from ..values.errors import (
    InvalidActionBatchError,
    PayloadAppliedError,
)
from ..values.probes import PROBE_CASES
from ..values.wording import counted
from .exit_codes import (
    EXIT_DRIFT,
    EXIT_FAILED,
    EXIT_JOB,
    EXIT_OK,
    EXIT_UNCHECKED,
)
from .failures import Refused, UsageError
from .inputs import change_set_of, check_input, read_input, require_pyspark
from .local_server import cmd_demo, cmd_serve_local

if TYPE_CHECKING:
    from ..readback.drift import DriftReport
    from ..update.results import UpdateResult

SCHEMA_ID = "https://tabhyper-update.dev/schemas/action_batch.schema.json"


def action_batch_schema() -> dict[str, Any]:
    """The JSON Schema of an action batch, generated from the models."""
    schema = ActionBatch.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "Tableau Hyper update action batch",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def schema_text() -> str:
    return json.dumps(action_batch_schema(), indent=2, sort_keys=True) + "\n"


def _cmd_validate(args: argparse.Namespace) -> int:
    text = _text_of(args.file)
    try:
        batch = ActionBatch.from_json(text)
    except InvalidActionBatchError as err:
        problems = [{"path": p.path, "message": p.message} for p in err.problems]
        _emit(args, {"valid": False, "problems": problems}, "\n".join(map(str, err.problems)))
        return EXIT_FAILED
    _emit(args, {"valid": True, "actions": len(batch.actions)}, "OK")
    return EXIT_OK


def _text_of(file: str) -> str:
    """The UTF-8 text of ``file`` (``-``: standard input)."""
    try:
        return sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except OSError as err:
        raise UsageError(f"cannot read {file}: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise Refused(f"{file}: not UTF-8 text") from None


def _cmd_schema(args: argparse.Namespace) -> int:
    text = schema_text()
    if args.check:
        current = Path(args.check).read_text(encoding="utf-8") if Path(args.check).exists() else ""
        if current != text:
            print(
                f"{args.check} is out of date: run `tabhyper-update schema -o {args.check}`",
                file=sys.stderr,
            )
            return EXIT_FAILED
        print("OK")
        return EXIT_OK
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    print(json.dumps(data, default=str) if getattr(args, "json", False) else text)


def _client(args: argparse.Namespace) -> TableauClient:
    overrides: dict[str, Any] = {}
    if getattr(args, "server", None):
        overrides["server"] = args.server
    if getattr(args, "site", None) is not None:
        overrides["site"] = args.site
    if getattr(args, "insecure", False):
        overrides["verify"] = False
    if not overrides.get("server") and not os.environ.get("TABLEAU_SERVER_URL"):
        raise UsageError("give --server URL (or set TABLEAU_SERVER_URL)")
    return TableauClient.from_env(**overrides)


def _cmd_build(args: argparse.Namespace) -> int:
    if bool(args.input) == bool(args.spark_table):
        raise UsageError("give input files (--input) or a Spark table (--spark-table)")
    args.change_set = change_set_of(args)
    # A quarantine's flags are read before Spark starts.
    BuildSettings(
        on_bad_rows="quarantine" if args.quarantine else "fail",
        quarantine=args.quarantine,
        quarantine_format=args.quarantine_format,
        target_columns=args.target_columns,
    ).check_bad_rows()
    require_pyspark("build reads its input")
    out = Path(args.output_dir)
    check_folder(args.staging_dir, "--staging-dir", create=False)
    made = not out.exists()
    lock = _claim_output_dir(out)  # before any work: a busy or used folder is refused now
    built = False
    try:
        check_input(args)  # before Spark starts: a wrong path or column is found at once
        code = _build_into(args, out)
        built = True
        return code
    finally:
        lock.unlink(missing_ok=True)
        if made and not built:
            with contextlib.suppress(OSError):
                out.rmdir()  # the folder this build made, still empty: gone again


def _build_into(args: argparse.Namespace, out: Path) -> int:
    from ..local.spark import own_spark

    with own_spark("tabhyper-update", master="local[*]", verbose=args.verbose > 0) as spark:
        return _build_with(spark, args, out)


def _build_with(spark: Any, args: argparse.Namespace, out: Path) -> int:
    payload = build_payload(
        read_input(spark, args), args.change_set, table=args.name, **_build_options(args, out)
    )
    manifest = payload.save_manifest(out)  # moves the parts from the build's subfolder
    _remove_emptied(out)
    _emit(args, *_built(payload, manifest))
    return EXIT_OK


def _build_options(args: argparse.Namespace, out: Path) -> BuildOptions:
    """The build's options as ``build``'s flags give them."""
    return BuildOptions(
        database_version=args.database_version,
        max_payload_mb=args.max_payload_mb,
        complex_as_json=args.complex_as_json,
        staging_dir=args.staging_dir,
        output_dir=out,
        keep_files=True,
        progress=False if args.json or args.quiet else None,  # bars only on a terminal
        on_bad_rows="quarantine" if args.quarantine else "fail",
        quarantine=args.quarantine,
        quarantine_format=args.quarantine_format,
        target_columns=args.target_columns,
    )


def _remove_emptied(out: Path) -> None:
    """The build's own subfolders of ``out``, emptied by saving the manifest: removed."""
    for emptied in out.glob(f"tabhyper-payload-{os.getpid()}-*"):
        with contextlib.suppress(OSError):
            (emptied / LEASE_NAME).unlink(missing_ok=True)
            emptied.rmdir()


def _built(payload: Payload, manifest: Path) -> tuple[dict[str, Any], str]:
    """What ``build`` reports of ``payload``, saved as ``manifest``: for ``--json`` and as
    text."""
    quarantined = payload.quarantined
    data: dict[str, Any] = {
        "manifest": str(manifest),
        "quarantined": None if quarantined is None else quarantined.as_dict(),
    }
    if payload.is_empty:
        text = (
            f"empty change set: an empty payload in {manifest.parent} "
            "(`apply` reports nothing to update)"
        )
        return {"parts": [], "empty": True, **data}, text
    data["parts"] = [
        {
            "path": str(p.path),
            "size_bytes": p.size_bytes,
            "sha256": p.sha256,
            "tables": {n: t.row_count for n, t in p.tables.items()},
        }
        for p in payload.parts
    ]
    lines = [f"payload: {manifest.parent}"] + [
        f"  {p.path.name}: {p.size_bytes} bytes, "
        + ", ".join(f"{n} {counted(t.row_count, 'row')}" for n, t in p.tables.items())
        for p in payload.parts
    ]
    if quarantined is not None:
        reasons = ", ".join(f"{r} {n}" for r, n in quarantined.reasons.items())
        lines.append(
            f"set aside: {counted(quarantined.rows, 'change')} the target would refuse, in "
            f"{quarantined.written_to} ({reasons})"
        )
    return data, "\n".join(lines)


_BUILD_LOCK = ".tabhyper-build.lock"


def _claim_output_dir(out: Path) -> Path:
    """Make ``out`` this build's own: created if missing, refused when another build is
    writing it or when it already holds something."""
    check_folder(out, "--output-dir")
    try:
        lock = out / _BUILD_LOCK
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        raise UsageError(
            f"{str(out)!r} is being written by another build (remove {_BUILD_LOCK} there if "
            "none is running)"
        ) from None
    except OSError as err:
        raise UsageError(f"--output-dir {str(out)!r}: {err.strerror or err}") from None
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    others = sorted(p.name for p in out.iterdir() if p.name != _BUILD_LOCK)
    if others:
        lock.unlink()
        shown = ", ".join(others[:5]) + (", …" if len(others) > 5 else "")
        raise UsageError(
            f"--output-dir {str(out)!r} is not empty ({shown}): give a new or empty folder"
        )
    return lock


def _load_payload(args: argparse.Namespace) -> Payload | None:
    """``--payload``: a folder (or manifest) saved by ``build``, or any ``.hyper`` file."""
    if not args.payload:
        return None
    path = Path(args.payload)
    if path.is_file() and path.suffix.lower() == ".hyper":
        return Payload.from_hyper(path)  # the user's own file: never removed
    return Payload.load(path, keep_files=args.keep)


def _where(args: argparse.Namespace) -> dict[str, str]:
    """The server, site and data source this command names (flags, else environment)."""
    site = getattr(args, "site", None)
    return {
        "server": (args.server or os.environ.get("TABLEAU_SERVER_URL", "")).rstrip("/"),
        "site": site if site is not None else os.environ.get("TABLEAU_SITE", ""),
        "datasource": args.datasource or os.environ.get("TABLEAU_DATASOURCE", ""),
    }


def _cmd_apply(args: argparse.Namespace) -> int:
    try:
        payload = _load_payload(args)
    except PayloadAppliedError as err:
        return _applied_before(args, err)
    actions = _apply_actions(args)
    payload = _payload_sent(payload, actions)
    datasource = _datasource(args)
    if args.dry_run:
        return _dry_run(args, datasource, payload, actions)
    with _client(args) as client:
        # The verb checks the actions and the target before the first request.
        result = client.update_datasource(
            datasource,
            payload,
            actions=actions,
            target_table=args.target_table,
            target_schema=args.target_schema,
            progress=False if args.json else None,  # bars only on a terminal
            state_dir=args.state_dir,
            request_id=args.request_id,
            wait=args.wait,
            timeout=args.timeout,
        )
    jobs = list(map(_part_row, result.parts))
    if result.done and not payload.keep_files and payload.parts:
        payload.mark_applied([str(j["job_id"]) for j in jobs if j["job_id"]], _where(args))
    text = "\n".join(_describe_part(j, applied=args.wait) for j in jobs) or str(result)
    _emit(args, {"jobs": jobs, "empty": result.empty}, text)
    return EXIT_OK


def _payload_sent(payload: Payload | None, actions: ActionBatch | None) -> Payload:
    """The payload ``apply`` sends: the one given, else none (an empty one) for actions that
    read no payload table."""
    if payload is not None:
        return payload
    if actions is None:
        raise UsageError("give --payload, --actions or both")
    if actions.reads_source:
        raise UsageError("these actions read payload tables: give --payload")
    return Payload([])


def _datasource(args: argparse.Namespace) -> str:
    """The data source ``--datasource`` (else ``TABLEAU_DATASOURCE``) names."""
    name = args.datasource or os.environ.get("TABLEAU_DATASOURCE")
    if not name:
        raise UsageError("give --datasource NAME (or set TABLEAU_DATASOURCE)")
    return str(name)


def _dry_run(
    args: argparse.Namespace, datasource: str, payload: Payload, actions: ActionBatch | None
) -> int:
    """``apply --dry-run``: everything ``apply`` checks, nothing sent that changes data."""
    from ..update.chain import bind_payload
    from ..update.options import BindSettings

    with _client(args) as client:
        bound = bind_payload(
            payload,
            datasource,
            client,
            BindSettings(progress=False, state_dir=args.state_dir),
            upload_first=False,
        )
        plan = bound.plan(actions, target_table=args.target_table, target_schema=args.target_schema)
    _emit(args, {"dry_run": True, **plan.as_dict()}, f"{plan}: run it without --dry-run")
    return EXIT_OK


def _applied_before(args: argparse.Namespace, err: PayloadAppliedError) -> int:
    """``apply`` of a payload whose manifest says it was applied: done when it was applied to
    this target, refused otherwise (its files are gone)."""
    if err.target != _where(args):
        # Applied, but elsewhere: this target never got it, and the files are gone.
        raise Refused(
            f"the payload of {err.manifest!r} was applied at {err.applied_at} to "
            f"{err.target or 'another target'}, not to {_where(args)}, and its part "
            "files were removed after it: build it again (keep the files with --keep to "
            "apply one payload to several data sources)"
        ) from None
    # A re-run of an apply that finished on this target: nothing to do, and it says so.
    _emit(args, {"jobs": [], "applied_before": err.jobs, "applied_at": err.applied_at}, str(err))
    return EXIT_OK


def _apply_actions(args: argparse.Namespace) -> ActionBatch | None:
    """The ``--actions`` file's batch, refused beside the flags that target derived actions."""
    if not args.actions:
        return None
    actions = ActionBatch.from_json(Path(args.actions).read_text(encoding="utf-8"))
    if args.target_table or args.target_schema:
        raise UsageError(
            "--target-table and --target-schema choose the target of a change set's derived "
            "actions; the --actions file names its own targets"
        )
    return actions


def _part_row(p: PartUpdate) -> dict[str, Any]:
    """One part of an update as ``apply --json`` reports it."""
    return {
        "part": p.part + 1,
        "job_id": p.job_id,
        "request_id": p.request_id,
        "attempt": p.attempt,
        "resumed": p.resumed,
        "deduplicated": p.deduplicated,
        "skipped": p.skipped,
        "finish_code": p.job.finish_code if p.job else None,
    }


def _describe_part(j: dict[str, Any], *, applied: bool) -> str:
    if j["skipped"]:
        return f"part {j['part']}: applied before as job {j['job_id']} (skipped)"
    how = "applied" if applied else "submitted"
    if j["deduplicated"]:
        how += ", deduplicated: submitted before"
    elif j["deduplicated"] is None:
        how += ", by this request or an earlier one with its RequestID: cannot tell"
    elif j["resumed"]:
        how += ", resumed"
    return f"part {j['part']}: job {j['job_id']} ({how})"


def _cmd_publish(args: argparse.Namespace) -> int:
    source = Path(args.source)
    if source.is_dir() or source.name == Payload.MANIFEST:
        what: Payload | Path = Payload.load(source, keep_files=True)
    elif source.suffix == ".hyper" and source.is_file():
        what = source
    else:
        raise UsageError(
            f"{str(source)!r} is neither a .hyper file nor a payload folder written by `build`"
        )
    with _client(args) as client:
        ref = client.publish(
            what,
            args.name,
            project=args.project,
            mode=args.mode,
            description=args.description,
            timeout=args.timeout,
        )
    data = {"id": ref.id, "name": ref.name, "project": ref.project, "mode": args.mode}
    _emit(args, data, f"published {ref.name!r} in project {ref.project!r} as data source {ref.id}")
    return EXIT_OK


def _cmd_probe(args: argparse.Namespace) -> int:
    quiet = getattr(args, "json", False)
    with _client(args) as client:
        found = client.probe(
            project=args.project,
            keep=args.keep,
            cap=args.cap,
            state_dir=args.state_dir,
            on_step=None if quiet else lambda what: print(f"probing: {what}", file=sys.stderr),
        )
    data = found.as_dict()
    lines = [f"probe of {found.server} (site {found.site!r}), {found.requests} requests:"]
    lines += [f"  {k:<15} {data[k]}" for k in PROBE_CASES]
    if found.cap_mb is not None:
        lines.append(f"  {'cap_mb':<15} {found.cap_mb:g}")
    if found.scopes:
        lines += [f"  scope refused: {s['scope']} ({s['case']})" for s in found.scopes]
    lines.append(f"  canary {found.canary!r} " + ("kept" if found.kept else "removed"))
    _emit(args, data, "\n".join(lines))
    return EXIT_OK


def _cmd_verify(args: argparse.Namespace) -> int:
    _check_verify_flags(args)
    require_pyspark("verify reads the source")
    from ..builder.repair import repair
    from ..local.spark import own_spark
    from ..readback.reconcile import reconcile

    with (
        _client(args) as client,
        own_spark("tabhyper-update", master="local[*]", verbose=args.verbose > 0) as spark,
    ):
        source = read_input(spark, args)
        target = client.datasource(args.datasource, project=args.project)
        options: dict[str, Any] = {
            "key": args.key,
            "client": client,
            "columns": args.columns,
            "budget": args.budget,
        }
        report = reconcile(source, target, **options)
        repaired: tuple[DriftReport, UpdateResult] | None = None
        if args.repair and (report.drift or report.unresolved):
            update = repair(report, source, client=client)
            repaired, report = (report, update), reconcile(source, target, **options)
    _emit(args, *_verified(report, repaired, args.sample))
    if report.drift or report.unresolved:
        return EXIT_DRIFT
    return EXIT_UNCHECKED if report.stopped else EXIT_OK


def _verified(
    report: DriftReport, repaired: tuple[DriftReport, UpdateResult] | None, sample: int
) -> tuple[dict[str, Any], str]:
    """What ``verify`` reports: the last reconciliation, and where drift was repaired (the
    first reconciliation and the update that repaired it), what was repaired."""
    data, text = report.as_dict(per_kind=sample), str(report)
    if repaired is None:
        return data, text
    first, update = repaired
    data["repaired"] = {"report": first.id, "counts": first.counts(), "update": update.summary()}
    return data, f"repaired {sum(first.counts().values())} key(s) ({update.brief()}); then {text}"


def _check_verify_flags(args: argparse.Namespace) -> None:
    if bool(args.input) == bool(args.spark_table):
        raise UsageError(
            "give the source as input files (--input) or a Spark table (--spark-table)"
        )
    if args.sample < 0:
        raise UsageError("--sample must be 0 or more")
    if args.budget is not None and args.budget < 1:
        raise UsageError("--budget must be 1 or more queries")


def _cmd_job(args: argparse.Namespace) -> int:
    with _client(args) as client:
        job = client.job(args.job_id)
        if args.action == "cancel":
            if job.is_done:
                raise Refused(
                    f"job {job.id} has already finished (finish code {job.finish_code}): "
                    "there is nothing to cancel"
                )
            job.cancel()
        elif args.action == "wait":
            job.wait(timeout=args.timeout)
    if job.finish_code == 0:
        # An update applied with --no-wait: `status` no longer lists it as unfinished.
        StateStore(args.state_dir).job_succeeded(job.id)
    data = job.model_dump(mode="json", by_alias=True, exclude_none=True)
    text = f"job {job.id}: {_job_state(job.finish_code)}" + (f" ({job.notes})" if job.notes else "")
    _emit(args, data, text)
    return EXIT_OK if job.finish_code in (None, 0) else EXIT_JOB


#: A job's state by its finish code (none: still running).
_JOB_STATES = {None: "running", 0: "succeeded", 1: "failed", 2: "cancelled"}


def _job_state(code: int | None) -> str:
    return _JOB_STATES.get(code, f"finished with the unknown finish code {code}")


def _cmd_state(args: argparse.Namespace) -> int:
    store = StateStore(args.state_dir)
    if args.action == "clear":
        count = store.clear()
        _emit(args, {"cleared": count}, f"removed {count} record(s) from {store.directory}")
        return EXIT_OK
    records = store.records()

    def describe(r: UpdateRecord) -> str:
        done = sum(p.status == "applied" for p in r.parts)
        jobs = ", ".join(p.job_id for p in r.parts if p.job_id) or "none"
        return (
            f"{r.label}: data source {r.datasource_id}, {done}/{len(r.parts)} part(s) applied, "
            f"jobs {jobs}"
        )

    _emit(
        args,
        {"directory": str(store.records_dir), "records": [r.to_json() for r in records]},
        "\n".join(map(describe, records)) or f"no records in {store.records_dir}",
    )
    return EXIT_OK


def _cmd_status(args: argparse.Namespace) -> int:
    from ..update.status import describe_status, status

    found = status(args.state_dir)
    _emit(args, found, describe_status(found))
    # Files it could not read: the state folder needs a look (nothing was changed).
    return EXIT_FAILED if found["problems"] else EXIT_OK


def _cmd_rows(args: argparse.Namespace) -> int:
    from ..readback.dataservice import DataService

    if args.limit < 1:
        raise UsageError(f"--limit takes a number of rows >= 1, got {args.limit}")
    with _client(args) as client:
        target = client.datasource(args.datasource, project=args.project)
        found = DataService(client, target.id).rows(args.limit)
    text = "\n".join(_rows_lines(found, args.limit, target.label))
    _emit(args, {"datasource": target.label, "tables": found}, text)
    return EXIT_OK


def _rows_lines(found: dict[str | None, list[dict[str, Any]]], limit: int, label: str) -> list[str]:
    """``rows``'s text: each table's rows (``label``: the data source's, for its one table
    unnamed) under their columns' names."""
    lines = []
    for table, rows in found.items():
        more = f" (the first {limit})" if len(rows) == limit else ""
        lines.append(f"{table or label}: {len(rows)} row(s){more}")
        if rows:
            names = list(rows[0])
            lines.append("  " + " | ".join(names))
            lines += ["  " + " | ".join(_shown(r[n]) for n in names) for r in rows]
    return lines


def _shown(value: Any) -> str:
    return "NULL" if value is None else str(value)


#: Each subcommand's function, by the name the parser gives it.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "validate": _cmd_validate,
    "schema": _cmd_schema,
    "build": _cmd_build,
    "apply": _cmd_apply,
    "publish": _cmd_publish,
    "probe": _cmd_probe,
    "verify": _cmd_verify,
    "job": _cmd_job,
    "state": _cmd_state,
    "status": _cmd_status,
    "demo": cmd_demo,
    "serve_local": cmd_serve_local,
    "rows": _cmd_rows,
}

"""Publishing (the first load) and bootstrapping (publish when missing, else update).

``client.publish(payload, "Orders", project="Sales")`` publishes a ``.hyper`` payload as a
live-to-Hyper data source over the REST "Publish Data Source" method: one request carrying
the file when it fits in one chunk, a chunked upload otherwise, answered as a job for large
files and followed to its end. ``client.bootstrap(...)`` is what a CDC job calls every run:
the snapshot is published when the data source does not exist (or a full refresh is asked
for), and the change set is applied otherwise.
"""

from __future__ import annotations

import os
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tableauhyperapi import HyperException, Nullability
from typing_extensions import Unpack

from ..local.hyper import connect, quote_name
from ..rest.jobs import Job
from ..rest.projects import Project, find_project
from ..rest.refs import DataSourceRef, ref_from_item
from ..rest.session import RestSession
from ..values.changeset import ChangeSet
from ..values.errors import (
    ApiError,
    InvalidArgumentError,
    NotFoundError,
    PayloadArgumentError,
    PayloadError,
    TabHyperError,
    TargetMismatchError,
    TransportError,
)
from ..values.parts import ColumnInfo, PayloadLike, TableInfo, sql_type_text
from ..values.redaction import get_logger
from .chain import update_with
from .options import (
    BootstrapOptions,
    BootstrapSettings,
    PublishMode,
    PublishOptions,
    PublishSettings,
)
from .results import UpdateResult
from .schema import record_schema
from .state import StateStore

__all__ = ["BootstrapResult", "PublishMode", "bootstrap", "publish", "snapshot_of"]

log = get_logger("tabhyper_update")

#: Files from this size on are published from a chunked upload, answered as a job.
SINGLE_REQUEST_LIMIT = 64 * 1024 * 1024


def _request_xml(name: str, project_id: str, description: str | None) -> bytes:
    root = ET.Element("tsRequest")
    item = ET.SubElement(root, "datasource", {"name": name})
    if description:
        item.set("description", description)
    ET.SubElement(item, "project", {"id": project_id})
    return bytes(ET.tostring(root, encoding="utf-8"))


def _multipart(xml: bytes, file: tuple[str, bytes] | None) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    chunks = [
        f'--{boundary}\r\nContent-Disposition: name="request_payload"\r\n'
        "Content-Type: text/xml\r\n\r\n".encode(),
        xml,
    ]
    if file is not None:
        filename, data = file
        quoted = filename.replace('"', "_")
        chunks += [
            f'\r\n--{boundary}\r\nContent-Disposition: name="tableau_datasource"; '
            f'filename="{quoted}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode(),
            data,
        ]
    chunks.append(f"\r\n--{boundary}--\r\n".encode())
    return b"".join(chunks), f"multipart/mixed; boundary={boundary}"


def _file_of(
    payload: PayloadLike | str | os.PathLike[str],
) -> tuple[Path, Mapping[str, TableInfo]]:
    if isinstance(payload, PayloadLike):
        if payload.is_empty:
            raise PayloadError("the payload is empty: there is nothing to publish")
        if len(payload.parts) > 1:
            raise PayloadError(
                f"a payload in {len(payload.parts)} parts cannot be published as one data "
                "source: it was split under max_payload_mb (the update cap, which publishing "
                "does not have); build the snapshot with max_payload_mb=None"
            )
        if payload.is_cdc:
            raise PayloadError(
                "a change set (upserts and deletes) is not a snapshot: publish the full table "
                "(build_payload without a ChangeSet), then apply change sets to it"
            )
        part = payload.parts[0]
        if not part.path.is_file():
            raise PayloadError("the payload's files were already removed (cleanup() ran)")
        return part.path, part.tables
    path = Path(payload)
    if path.suffix != ".hyper" or not path.is_file():
        raise PayloadArgumentError(f"{str(path)!r} is not a .hyper file to publish")
    return path, _tables_of(path)


def _tables_of(path: Path) -> dict[str, TableInfo]:
    """The tables of a ``.hyper`` file with their columns (types and nullability)."""
    found: dict[str, TableInfo] = {}
    try:
        with connect(path, read_only=True) as conn:
            for schema in conn.catalog.get_schema_names():
                for name in conn.catalog.get_table_names(schema):
                    table = conn.catalog.get_table_definition(name)
                    columns = tuple(
                        ColumnInfo(
                            c.name.unescaped,
                            sql_type_text(c.type),
                            c.nullability == Nullability.NULLABLE,
                        )
                        for c in table.columns
                    )
                    found[name.name.unescaped] = TableInfo(
                        schema.name.unescaped, name.name.unescaped, columns, 0
                    )
    except HyperException as err:
        raise PayloadArgumentError(
            f"{str(path)!r} cannot be read as a Hyper file: {str(err).splitlines()[0]}"
        ) from None
    return found


def publish(
    client: RestSession,
    payload: PayloadLike | str | os.PathLike[str],
    name: str,
    **options: Unpack[PublishOptions],
) -> DataSourceRef:
    """:meth:`TableauClient.publish`."""
    settings = PublishSettings.of(options, "publish()")
    mode = settings.mode
    if not isinstance(name, str) or not name.strip() or "\x00" in name:
        raise InvalidArgumentError(f"a data source name is required, got {name!r}")
    path, tables = _file_of(payload)
    store = StateStore(settings.state_dir)
    target = find_project(client, settings.project)
    answer = _send(client, path, name, target, mode, settings.description, settings.as_job)
    found = _published(client, answer, name, target, settings.timeout)
    log.info("published %r as data source %s", name, found.id)
    if mode == "append":
        return replace(found, client=client, columns=None)
    try:
        record_schema(store, found.id, tables)
    except TabHyperError as err:
        log.warning("the columns of %r were not recorded for later updates: %s", name, err)
    known = {t: tuple(info.column_names) for t, info in tables.items()}
    return replace(found, client=client, columns=known or None)


def _send(
    client: RestSession,
    path: Path,
    name: str,
    target: Project,
    mode: PublishMode,
    description: str | None,
    as_job: bool | None,
) -> dict[str, Any]:
    """Send the publish request (the file in it, or a chunked upload's session); the answer."""
    size = path.stat().st_size
    chunked = size >= min(SINGLE_REQUEST_LIMIT, client.chunk_size)
    params = {"datasourceType": "hyper"}
    if mode != "create":
        params[mode] = "true"
    if as_job if as_job is not None else chunked:
        params["asJob"] = "true"
    xml = _request_xml(name, target.id, description)
    if chunked:
        params["uploadSessionId"] = client.upload(path)
        body, content_type = _multipart(xml, None)
    else:
        body, content_type = _multipart(xml, (f"{path.stem}.hyper", path.read_bytes()))
    log.info(
        "publishing %s (%d bytes) as %r in project %r (%s)",
        path.name,
        size,
        name,
        target.path,
        mode,
    )
    # Only an overwrite is safe to send twice: a repeated create meets its own data source,
    # a repeated append adds the rows again.
    try:
        _, answer = client.request(
            "POST",
            "datasources",
            retry=mode == "overwrite",
            params=params,
            data=body,
            headers={"Content-Type": content_type},
            expected=(200, 201, 202),
        )
    except ApiError as err:
        if err.status != 409 or mode != "create":
            raise
        raise err.with_hint(
            f"a data source named {name!r} already exists in project {target.path!r}: publish "
            "with mode='overwrite' to replace its data, or mode='append' to add rows"
        ) from None
    return answer or {}


def _published(
    client: RestSession, answer: dict[str, Any], name: str, target: Project, timeout: float | None
) -> DataSourceRef:
    """The data source the publish answer names (its job followed to its end first), checked
    to live in ``target``."""
    if "job" in answer:
        found = _published_by_job(client, answer, name, target, timeout)
    else:
        item = answer.get("datasource")
        ref = ref_from_item(item) if isinstance(item, dict) else None
        if ref is None:
            raise TransportError("the publish answer holds neither a data source nor a job")
        found = replace(ref, name=ref.name or name, project=ref.project or target.name)
    if found.project_id is None:
        return replace(found, project_id=target.id, project=found.project or target.name)
    if found.project_id.lower() != target.id.lower():
        raise TargetMismatchError(
            f"published {name!r} into project {target.path!r} ({target.id}), and the server "
            f"names data source {found.id} of project {found.project_id}: refused"
        )
    return found


def _published_by_job(
    client: RestSession, answer: dict[str, Any], name: str, target: Project, timeout: float | None
) -> DataSourceRef:
    """The data source an asynchronous publish made, once its job finished: the job's own
    word on what it published, where it says; else the one data source of that name in that
    project (by the project's LUID: names repeat across parents)."""
    job = Job.from_response(answer, client)
    job.wait(timeout=timeout)
    said = (job.model_extra or {}).get("datasource")
    if isinstance(said, dict) and said.get("id"):
        return client.datasource(str(said["id"]))
    return client.datasource(name, project=target)


@dataclass
class BootstrapResult:
    """What :meth:`TableauClient.bootstrap` did: ``published`` the snapshot (the data source
    was missing, or a full refresh was asked for), or applied the change set (``update``)."""

    datasource: DataSourceRef
    published: bool
    update: UpdateResult | None = None


def bootstrap(
    client: RestSession, name: str, **options: Unpack[BootstrapOptions]
) -> BootstrapResult:
    """:meth:`TableauClient.bootstrap`."""
    settings = BootstrapSettings.of(options, "bootstrap()")
    snapshot, changes = settings.snapshot, settings.changes
    project, full_refresh = settings.project, settings.full_refresh
    existing: DataSourceRef | None = None
    target = find_project(client, project)
    if not full_refresh:
        try:
            existing = client.datasource(name, project=target)
        except NotFoundError:
            existing = None
    if existing is None:
        why = "a full refresh was asked for" if full_refresh else "it does not exist yet"
        log.info("publishing the snapshot of %r: %s", name, why)
        payload = snapshot()
        try:
            ref = publish(
                client,
                payload,
                name,
                project=target,
                mode="overwrite" if full_refresh else "create",
                timeout=settings.apply.timeout,
                state_dir=settings.bind.state_dir,
            )
        finally:
            payload.cleanup()
        return BootstrapResult(ref, published=True)
    log.info("data source %r exists: applying the change set", name)
    made = changes()
    update = update_with(client, existing, made, None, settings.bind, settings.apply)
    return BootstrapResult(existing, published=False, update=update)


def snapshot_of(payload: Any, table: str) -> Path:
    """A ``.hyper`` file of a change set payload's upserts as the data source's tables, to
    publish over it (a stream started over: :class:`~tabhyper_update.streaming.TableauSink`'s
    ``on_full_refresh="replace"``): each change set's upsert table named as its target
    (``table`` for one change set; its own name for each of a multi-table one), its deletes
    left out. A copy beside the payload's file, owner-only; the caller removes it."""
    if payload.is_empty:
        raise PayloadError(
            "the stream starts over with a batch that holds no change: there are no rows to "
            "replace the data source's tables with (publish the source's snapshot yourself, "
            "or pass reset=True to apply the refreshed stream over what the data source holds)"
        )
    if len(payload.parts) > 1:
        raise PayloadError("a snapshot to publish is one file: build it with max_payload_mb=None")
    sets = payload.change_sets or {table: payload.change_set}
    if any(cs.guard for cs in sets.values()):
        raise PayloadError(
            "a guarded change set (ChangeSet(guard=True)) keeps its positions in tables of the "
            "data source a refresh cannot rebuild from one batch: republish the data source "
            "yourself, then pass reset=True"
        )
    part = payload.parts[0]
    copy: Path = part.path.with_name(f".{uuid.uuid4().hex}.snapshot.hyper")
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as out, part.path.open("rb") as original:
            while chunk := original.read(1 << 20):
                out.write(chunk)
        _upserts_as_targets(copy, payload.schema, sets, part.tables)
    except BaseException:
        copy.unlink(missing_ok=True)
        raise
    return copy


def _upserts_as_targets(
    file: Path, schema: str, sets: Mapping[str, ChangeSet], tables: Mapping[str, Any]
) -> None:
    """In the Hyper ``file``, each change set's upsert table (of ``tables``, in ``schema``)
    renamed as its target, its delete table dropped."""
    with connect(file) as conn:
        for name, cs in sets.items():
            dropped = f"{quote_name(schema)}.{quote_name(cs.delete_table)}"
            conn.execute_command(f"DROP TABLE IF EXISTS {dropped}")
            if cs.upsert_table in tables:
                conn.execute_command(
                    f"ALTER TABLE {quote_name(schema)}.{quote_name(cs.upsert_table)} "
                    f"RENAME TO {quote_name(name)}"
                )

"""The bad-input corpus: each case gets a typed error whose message names the problem, and a
problem the client can see never sends a single request to the server."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tabhyper_update import (
    ApiError,
    ChangeSet,
    ConfigurationError,
    ConnectedAppJWT,
    Delete,
    Insert,
    JobFailedError,
    NotFoundError,
    PayloadError,
    PersonalAccessToken,
    Replace,
    TabHyperError,
    TableauClient,
    Update,
    UsernamePassword,
    build_payload,
    keys_match,
    target,
)
from tabhyper_update.payload.model import Payload
from tabhyper_update.rest.jobs import Job
from tabhyper_update.testing import FakeTableauServer
from tabhyper_update.testing.files import make_hyper
from tabhyper_update.values import redaction
from tabhyper_update.values.actions import ActionBatch
from tabhyper_update.values.conditions import And, Const
from tabhyper_update.values.errors import (
    ArgumentTypeError,
    AuthenticationError,
    InvalidActionBatchError,
    InvalidArgumentError,
    TransportError,
)
from tabhyper_update.values.policies import PollPolicy, RetryPolicy

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class Ctx:
    spark: SparkSession
    server: FakeTableauServer
    payload: Payload
    split: Payload
    tmp: Path
    #: Folders a case made outside ``tmp`` (removed after it).
    cleanup: list[Path] = field(default_factory=list)
    #: The case folder's files before the SDK is called (see :meth:`settled`).
    before: dict[str, tuple[int, int, int]] = field(default_factory=dict)

    def settled(self) -> None:
        """A case calls this once its own files are in place: from here on, nothing outside
        the SDK's folders may change."""
        self.before = files_in(self.tmp)

    def client(self, auth: Any = None, **kw: Any) -> TableauClient:
        kw.setdefault("retry", RetryPolicy(max_attempts=2, initial_wait=0.01))
        return TableauClient(
            self.server.url, "", auth or PersonalAccessToken("ci", "pat-secret"), **kw
        )

    def send(
        self, payload: Payload, actions: Any, *, request_id: str | None = None, **kw: Any
    ) -> None:
        # The verb checks everything before its first request (the chain's upload()
        # uploads before apply() sees the actions).
        with self.client(**kw) as client:
            client.update_datasource(
                "Orders",
                payload,
                actions=actions,
                request_id=request_id,
                timeout=30,
                progress=False,
                state_dir=self.tmp / "state",
            )

    def changes(
        self, rows: list[tuple[Any, ...]], ddl: str = "id long, v string, op string, seq long"
    ) -> DataFrame:
        return self.spark.createDataFrame(rows, ddl)

    def cdc(self, df: DataFrame, **kw: Any) -> None:
        kw.setdefault("op_column", "op")
        kw.setdefault("order_by", "seq")
        build = {k: kw.pop(k) for k in list(kw) if k == "max_payload_mb"}
        payload = build_payload(
            df, ChangeSet(kw.pop("key", "id"), **kw), staging_dir=self.tmp / "stage", **build
        )
        self.send(payload, None)


@pytest.fixture(scope="module")
def shared(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Payload, Payload]]:
    out = tmp_path_factory.mktemp("payloads")
    small = build_payload(
        spark.createDataFrame([(1, "x")], "id long, v string"),
        table="rows",
        output_dir=out,
        keep_files=True,
    )
    split = build_payload(
        spark.range(20_000).selectExpr("id", "uuid() AS v"),
        table="rows",
        output_dir=out,
        keep_files=True,
        max_payload_mb=0.25,
    )
    assert len(split.parts) > 1
    yield small, split
    shutil.rmtree(out, ignore_errors=True)


@pytest.fixture
def ctx(
    spark: SparkSession,
    shared: tuple[Payload, Payload],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Ctx]:
    for key in (
        "TABLEAU_SERVER_URL",
        "TABLEAU_PAT_NAME",
        "TABLEAU_PAT_SECRET",
        "TABLEAU_USERNAME",
        "TABLEAU_PASSWORD",
        "TABLEAU_JWT_CLIENT_ID",
        "TABLEAU_JWT",
        "TABLEAU_DATASOURCE",
    ):
        monkeypatch.delenv(key, raising=False)
    start = make_hyper(tmp_path / "t.hyper", {"Extract": ("id BIGINT, v TEXT", ["(1, 'a')"])})
    with FakeTableauServer(
        pats={"ci": "pat-secret"},
        connected_app={"client_id": "c", "secret_id": "k", "secret_value": "right"},
    ) as server:
        server.add_datasource("Orders", start)
        made = Ctx(spark, server, shared[0], shared[1], tmp_path)
        yield made
    for folder in made.cleanup:
        shutil.rmtree(folder, ignore_errors=True)


UPSERT_ID = keys_match("id")


def settle(c: Ctx) -> bool:
    """:meth:`Ctx.settled` in an expression."""
    c.settled()
    return True


@dataclass
class Case:
    id: str
    run: Callable[[Ctx], object]
    error: type[BaseException]
    words: str
    client_side: bool = True
    #: Also in the message (e.g. the option's name as the caller wrote it).
    also: str = ""


def empty_frame_with(ddl: str) -> Callable[[Ctx], object]:
    def run(c: Ctx) -> object:
        if " AS " in ddl:  # a literal says what pyspark 3.4's schema strings cannot
            df = c.spark.range(0).selectExpr("id", ddl)
        else:
            df = c.spark.createDataFrame([], f"id long, {ddl}")
        c.send(build_payload(df, staging_dir=c.tmp / "s"), None)
        return None

    return run


def send_insert(c: Ctx) -> None:
    c.send(c.payload, [Insert(target_table="Extract", source_table="rows")])


def sign_in(c: Ctx) -> None:
    c.client().sign_in()


def server_cap_below_payload(c: Ctx) -> None:
    c.server.max_upload_mb = 0.001
    send_insert(c)


def with_fault(
    route: str, action: Callable[[Ctx], object], **fault: Any
) -> Callable[[Ctx], object]:
    def run(c: Ctx) -> object:
        c.server.inject(route, **fault)
        return action(c)

    return run


def batch_case(id: str, actions: Any, words: str) -> Case:
    return Case(id, lambda c: c.send(c.payload, actions), InvalidActionBatchError, words)


def const_leaf(ctype: str, v: Any, op: str = "eq") -> dict[str, Any]:
    return {
        "actions": [
            {
                "action": "delete",
                "target-table": "Extract",
                "condition": {"op": op, "target-col": "v", "const": {"type": ctype, "v": v}},
            }
        ]
    }


CASES: list[Case] = [
    # -- malformed action JSON ----------------------------------------------------------------
    batch_case("json-not-json", '{"actions": [', "not valid JSON"),
    batch_case("json-empty-batch", {"actions": []}, "at least one action"),
    batch_case(
        "json-unknown-action",
        {"actions": [{"action": "merge", "target-table": "T"}]},
        "unknown action 'merge'",
    ),
    batch_case(
        "json-missing-target",
        {"actions": [{"action": "insert", "source-table": "rows"}]},
        "missing required field 'target-table'",
    ),
    batch_case(
        "json-unknown-key",
        {
            "actions": [
                {
                    "action": "insert",
                    "target-table": "Extract",
                    "source-table": "rows",
                    "mode": "fast",
                }
            ]
        },
        "unknown key 'mode'",
    ),
    batch_case(
        "json-integer-abc",
        const_leaf("integer", "abc"),
        "integer constant must be a whole number, got 'abc'",
    ),
    batch_case("json-has-integer", const_leaf("integer", 1, op="has"), "takes a string constant"),
    batch_case(
        "json-datetime-no-offset", const_leaf("datetime", "2024-01-01T00:00:00"), "with an offset"
    ),
    batch_case(
        "json-and-without-args",
        {"actions": [{"action": "delete", "target-table": "Extract", "condition": {"op": "and"}}]},
        "missing required field 'args'",
    ),
    batch_case(
        "json-update-without-condition",
        {"actions": [{"action": "update", "target-table": "Extract", "source-table": "rows"}]},
        "update needs a 'condition'",
    ),
    # -- batches that do not fit the payload --------------------------------------------------
    batch_case(
        "fit-missing-table",
        [Insert(target_table="Extract", source_table="nope")],
        "the payload has no table 'nope' (its tables: 'rows')",
    ),
    batch_case(
        "fit-missing-column",
        [Update(target_table="Extract", source_table="rows", condition=keys_match("order_id"))],
        "source column(s) 'order_id' are not in payload table 'rows'",
    ),
    batch_case(
        "fit-delete-extra-columns",
        [Delete(target_table="Extract", source_table="rows", condition=UPSERT_ID)],
        "may hold only the columns its condition names; 'rows' also has 'v'",
    ),
    batch_case(
        "fit-wrong-schema",
        [Insert(target_table="Extract", source_table="rows", source_schema="public")],
        "in schema 'Extract', not 'public'",
    ),
    Case(
        "fit-replace-split",
        lambda c: c.send(c.split, [Replace(target_table="Extract", source_table="rows")]),
        InvalidActionBatchError,
        "a replace needs the whole table in one update",
    ),
    Case(
        "fit-empty-source",
        lambda c: c.send(
            build_payload(
                {
                    "rows": c.changes([(1, "a", "I", 1)]),
                    "none": c.spark.createDataFrame([], "id long"),
                },
                staging_dir=c.tmp / "s",
            ),
            [Insert(target_table="Extract", source_table="none")],
        ),
        InvalidActionBatchError,
        "payload table 'none' holds no rows",
    ),
    Case(
        "fit-no-actions-for-plain",
        lambda c: c.send(c.payload, None),
        ValueError,
        "no actions to apply",
    ),
    # -- Spark types we cannot carry ----------------------------------------------------------
    *[
        Case(f"type-{name}", empty_frame_with(ddl), PayloadError, words)
        for name, ddl, words in [
            ("array", "tags array<string>", "column 'tags' of table 'Extract' is array<string>"),
            ("map", "m map<string,int>", "column 'm' of table 'Extract' is map<string,int>"),
            ("struct", "s struct<a:int>", "column 's' of table 'Extract' is struct<a:int>"),
            ("interval-day", "w interval day to second", "cannot use interval columns"),
            ("interval-year", "INTERVAL '1-2' YEAR TO MONTH AS w", "cannot use interval columns"),
            ("wide-decimal", "d decimal(30,2)", "wider than the 18 digits"),
        ]
    ],
    Case(
        "type-void",
        lambda c: c.send(
            build_payload(
                c.spark.range(1).selectExpr("id", "NULL AS nothing"), staging_dir=c.tmp / "s"
            ),
            None,
        ),
        PayloadError,
        "column 'nothing' of table 'Extract' has no type",
    ),
    # -- key problems -------------------------------------------------------------------------
    Case(
        "key-null",
        lambda c: c.cdc(c.changes([(None, "a", "I", 1)])),
        PayloadError,
        "key column 'id' is NULL",
    ),
    Case(
        "key-missing-column",
        lambda c: c.cdc(c.changes([(1, "a", "I", 1)]), key="order_id"),
        PayloadError,
        "key column 'order_id' is not in the change set",
    ),
    Case(
        "key-missing-op-column",
        lambda c: c.cdc(c.changes([(1, "a", "I", 1)]), op_column="change"),
        PayloadError,
        "op column 'change' is not in the change set",
    ),
    Case(
        "key-missing-order-column",
        lambda c: c.cdc(c.changes([(1, "a", "I", 1)]), order_by="lsn"),
        PayloadError,
        "order_by column 'lsn' is not in the change set",
    ),
    Case(
        "key-duplicate-ordering",
        lambda c: c.cdc(c.changes([(1, "a", "I", 7), (1, "b", "U", 7)])),
        PayloadError,
        "several changes for key (id=1) share the greatest order_by value",
    ),
    Case(
        "key-unknown-op",
        lambda c: c.cdc(c.changes([(1, "a", "MERGE", 1)])),
        PayloadError,
        "holds the unknown value 'MERGE'",
    ),
    Case(
        "key-empty",
        lambda c: c.cdc(c.changes([(1, "a", "I", 1)]), key=[]),
        PayloadError,
        "key= must name at least one column",
    ),
    Case(
        "key-twice",
        lambda c: c.cdc(c.changes([(1, "a", "I", 1)]), key=["id", "id"]),
        PayloadError,
        "key names a column twice",
    ),
    Case(
        "key-no-order",
        lambda c: c.cdc(c.changes([(1, "a", "I", 1)]), order_by=None),
        PayloadError,
        "order_by= is required",
    ),
    # -- credentials missing or wrong ---------------------------------------------------------
    Case(
        "creds-none-in-env",
        lambda c: TableauClient.from_env({"TABLEAU_SERVER_URL": c.server.url}),
        ConfigurationError,
        "no Tableau credentials",
    ),
    Case(
        "creds-half-pat",
        lambda c: TableauClient.from_env(
            {"TABLEAU_SERVER_URL": c.server.url, "TABLEAU_PAT_NAME": "ci"}
        ),
        ConfigurationError,
        "set both TABLEAU_PAT_NAME and TABLEAU_PAT_SECRET",
    ),
    Case(
        "creds-no-server",
        lambda c: TableauClient.from_env({"TABLEAU_PAT_NAME": "ci"}),
        ConfigurationError,
        "TABLEAU_SERVER_URL is not set",
    ),
    Case(
        "creds-bad-url",
        lambda c: TableauClient("ftp://x", "", PersonalAccessToken("a", "b")),
        ConfigurationError,
        "server must be an http(s) URL",
    ),
    Case(
        "creds-jwt-incomplete",
        lambda c: ConnectedAppJWT(client_id="c"),
        ValueError,
        "needs client_id, secret_id, secret_value and username",
    ),
    Case(
        "creds-no-target",
        lambda c: c.payload.upload(client=c.client()),
        ConfigurationError,
        "no target data source",
    ),
    Case(
        "creds-wrong-pat",
        lambda c: c.send(
            c.payload,
            [Insert(target_table="Extract", source_table="rows")],
            auth=PersonalAccessToken("ci", "wrong"),
        ),
        AuthenticationError,
        "401001",
        client_side=False,
    ),
    Case(
        "creds-wrong-jwt-secret",
        lambda c: c.client(
            ConnectedAppJWT(client_id="c", secret_id="k", secret_value="wrong", username="u")
        ).sign_in(),
        AuthenticationError,
        "check the credentials",
        client_side=False,
    ),
    # -- payloads over the cap ----------------------------------------------------------------
    Case(
        "cap-unsplittable",
        lambda c: c.cdc(
            c.spark.range(3000).selectExpr("id", "uuid() AS v", "'U' AS op", "id AS seq"),
            max_payload_mb=0.0001,
        ),
        PayloadError,
        "cannot be split under max_payload_mb",
    ),
    Case("cap-server-413", server_cap_below_payload, ApiError, "HTTP 413", client_side=False),
    # -- malformed server answers -------------------------------------------------------------
    Case(
        "answer-html-error-page",
        with_fault(
            "datasources",
            send_insert,
            status=502,
            times=10,
            body=b"<html><body><h1>502 Bad Gateway</h1>nginx</body></html>",
        ),
        ApiError,
        "HTTP 502",
        client_side=False,
    ),
    Case(
        "answer-html-200",
        with_fault("signin", sign_in, body=b"<!DOCTYPE html><html><title>Login</title></html>"),
        TransportError,
        "not JSON or XML: '<!DOCTYPE html>",
        client_side=False,
    ),
    Case(
        "answer-truncated-json",
        with_fault(
            "signin",
            sign_in,
            content_type="application/json",
            body=b'{"credentials": {"token": "abc',
        ),
        TransportError,
        "malformed JSON",
        client_side=False,
    ),
    Case(
        "answer-200-with-error-body",
        with_fault(
            "signin",
            sign_in,
            content_type="application/json",
            body=json.dumps(
                {"error": {"code": "400000", "summary": "Bad Request", "detail": "oops"}}
            ).encode(),
        ),
        ApiError,
        "code 400000: Bad Request (oops)",
        client_side=False,
    ),
    Case(
        "answer-broken-xml",
        with_fault(
            "signin",
            sign_in,
            content_type="application/xml",
            body=b"<tsResponse><credentials token='x'>",
        ),
        TransportError,
        "malformed XML",
        client_side=False,
    ),
    Case(
        "answer-no-token",
        with_fault("signin", sign_in, content_type="application/json", body=b'{"credentials": {}}'),
        TransportError,
        "without a token",
        client_side=False,
    ),
    Case(
        "answer-no-job-id",
        with_fault("update", send_insert, content_type="application/json", body=b'{"job": {}}'),
        TransportError,
        "the server answered without a job id",
        client_side=False,
    ),
]


# -- hostile manifests ---------------------------------------------------------------------


def manifest_with(
    change: Callable[[dict[str, Any], Path], None],
) -> Callable[[Ctx], object]:
    def run(c: Ctx) -> object:
        folder = c.tmp / "m"
        folder.mkdir()
        copy = folder / "payload.hyper"
        shutil.copy(c.payload.parts[0].path, copy)
        own = Payload([replace(c.payload.parts[0], path=copy)], schema=c.payload.schema)
        manifest = own.save_manifest(folder)
        doc = json.loads(manifest.read_text())
        change(doc, folder)
        manifest.write_text(json.dumps(doc))
        c.settled()
        c.send(Payload.load(folder), [Insert(target_table="Extract", source_table="rows")])
        return None

    return run


def victim(c: Ctx) -> Path:
    path = c.tmp / "victim" / "id_rsa"
    path.parent.mkdir(exist_ok=True)
    shutil.copy(c.payload.parts[0].path, path)  # same size and digest as the real part
    return path


def traversal(relative: bool) -> Callable[[Ctx], object]:
    def run(c: Ctx) -> object:
        secret = victim(c)

        def change(doc: dict[str, Any], folder: Path) -> None:
            doc["parts"][0]["file"] = "../victim/id_rsa" if relative else str(secret)

        try:
            return manifest_with(change)(c)
        finally:
            assert secret.exists()  # never uploaded, never deleted

    return run


def symlinked_part(c: Ctx) -> object:
    secret = victim(c)

    def change(doc: dict[str, Any], folder: Path) -> None:
        (folder / "link.hyper").symlink_to(secret)
        doc["parts"][0]["file"] = "link.hyper"

    return manifest_with(change)(c)


def _deep_condition(depth: int) -> Any:
    condition: Any = target("v") == "x"
    for _ in range(depth):
        condition = And(args=[condition])
    return condition


def _deep_json(depth: int) -> str:
    leaf = '{"op": "eq", "target-col": "v", "const": {"type": "string", "v": "x"}}'
    condition = '{"op": "and", "args": [' * depth + leaf + "]}" * depth
    action = f'{{"action": "delete", "target-table": "Extract", "condition": {condition}}}'
    return f'{{"actions": [{action}]}}'


def with_env(**env: str) -> Callable[[Ctx], object]:
    def run(c: Ctx) -> object:
        values = {"TABLEAU_SERVER_URL": c.server.url, "TABLEAU_PAT_NAME": "ci"}
        values["TABLEAU_PAT_SECRET"] = "pat-secret"
        values.update(env)
        return TableauClient.from_env(values)

    return run


def listing_bomb(c: Ctx) -> object:
    item = {"id": "00000000-0000-0000-0000-000000000001", "name": "Other"}
    body = {"pagination": {"totalAvailable": "1000000000"}, "datasources": {"datasource": [item]}}
    c.server.inject(
        "datasources", times=100, content_type="application/json", body=json.dumps(body).encode()
    )
    with c.client() as client:
        return client.datasource("Orders")


def deep_answer(c: Ctx) -> object:
    body = b'{"a": ' * 5000 + b"1" + b"}" * 5000
    c.server.inject("signin", content_type="application/json", body=body)
    sign_in(c)
    return None


def cdc_frame(c: Ctx, extra: str) -> Any:
    return c.spark.createDataFrame(
        [(1, "x", "I", 1)], "id long, v string, op string, seq long"
    ).selectExpr("*", extra)


HOSTILE: list[Case] = [
    Case(
        "manifest-parent-traversal", traversal(True), PayloadError, "outside the manifest's folder"
    ),
    Case("manifest-absolute-path", traversal(False), PayloadError, "outside the manifest's folder"),
    Case(
        "manifest-symlink-out", symlinked_part, PayloadError, "leads outside the manifest's folder"
    ),
    Case(
        "manifest-missing-field",
        manifest_with(lambda d, f: d["parts"][0].pop("size_bytes")),
        PayloadError,
        "missing field 'size_bytes'",
    ),
    Case(
        "manifest-parts-not-a-list",
        manifest_with(lambda d, f: d.update(parts="payload.hyper")),
        PayloadError,
        "no 'parts' list",
    ),
    Case(
        "manifest-changed-size",
        manifest_with(lambda d, f: d["parts"][0].update(size_bytes=1)),
        PayloadError,
        "changed size since it was built",
    ),
    Case(
        "manifest-not-json",
        lambda c: (c.tmp / "manifest.json").write_text("{") and settle(c) and Payload.load(c.tmp),
        PayloadError,
        "is not a payload manifest",
    ),
    Case(
        "model-insert-without-source",
        lambda c: Insert(target_table="E"),
        InvalidActionBatchError,
        "'source-table' is required",
    ),
    Case(
        "model-empty-batch",
        lambda c: ActionBatch(actions=[]),
        InvalidActionBatchError,
        "at least one action",
    ),
    Case(
        "model-connected-app-incomplete",
        lambda c: ConnectedAppJWT(client_id="a"),
        ConfigurationError,
        "needs client_id, secret_id, secret_value and username",
    ),
    Case(
        "model-lone-surrogate",
        lambda c: Delete(target_table="E\ud800", condition=target("v") == "x"),
        InvalidActionBatchError,
        "valid string",
    ),
    Case(
        "condition-nested-too-deep",
        lambda c: _deep_condition(100),
        InvalidActionBatchError,
        "conditions nest deeper than 64 levels",
    ),
    Case(
        "json-nested-too-deep",
        lambda c: ActionBatch.from_json(_deep_json(5000)),
        InvalidActionBatchError,
        "nested too deeply to read",
    ),
    Case(
        "json-nested-deeper-than-the-limit",
        lambda c: ActionBatch.from_json(_deep_json(80)),
        InvalidActionBatchError,
        "conditions nest deeper than 64 levels",
    ),
    Case(
        "datetime-before-year-1-in-utc",
        lambda c: Const.of(datetime(1, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=1)))),
        InvalidArgumentError,
        "outside years 1-9999 once converted to UTC",
    ),
    Case(
        "datetime-after-year-9999-in-utc",
        lambda c: (
            target("t") < datetime(9999, 12, 31, 23, 30, tzinfo=timezone(timedelta(hours=-1)))
        ),
        InvalidArgumentError,
        "outside years 1-9999 once converted to UTC",
    ),
    Case(
        "python-and-on-conditions",
        lambda c: (target("a") == 1) and (target("b") == 2),
        ArgumentTypeError,
        "use & and | to combine conditions",
    ),
    Case(
        "const-of-an-object",
        lambda c: Const.of(object()),
        ArgumentTypeError,
        "cannot make a Tableau constant",
    ),
    Case(
        "keys-match-nothing",
        lambda c: keys_match(),
        InvalidArgumentError,
        "at least one key column",
    ),
    Case(
        "retry-zero-attempts",
        lambda c: RetryPolicy(max_attempts=0),
        InvalidArgumentError,
        "max_attempts",
    ),
    Case(
        "poll-without-pause",
        lambda c: PollPolicy(initial=0),
        InvalidArgumentError,
        "0 < initial <= maximum",
    ),
    Case(
        "poll-shrinking-waits",
        lambda c: PollPolicy(factor=0.5),
        InvalidArgumentError,
        "factor=0.5",
    ),
    Case(
        "chunk-size-over-64",
        lambda c: c.client(chunk_size_mb=100),
        InvalidArgumentError,
        "chunk_size_mb must be in",
    ),
    Case(
        "job-without-client",
        lambda c: Job(id="j").refresh(),
        InvalidArgumentError,
        "not bound to a client",
    ),
    Case(
        "apply-plain-without-actions",
        lambda c: c.send(c.payload, None),
        InvalidArgumentError,
        "no actions to apply",
    ),
    Case(
        "request-id-with-crlf",
        lambda c: c.send(
            c.payload,
            [Insert(target_table="Extract", source_table="rows")],
            request_id="nightly\r\nX-Evil: 1",
        ),
        InvalidArgumentError,
        "no CR, LF",
    ),
    Case(
        "request-id-empty",
        lambda c: c.send(
            c.payload, [Insert(target_table="Extract", source_table="rows")], request_id=""
        ),
        InvalidArgumentError,
        "request_id must be 1-187 printable ASCII",
    ),
    Case(
        "verify-tls-missing-bundle",
        with_env(TABLEAU_VERIFY_TLS="/no/such/ca.pem"),
        ConfigurationError,
        "existing CA bundle",
    ),
    Case(
        "verify-missing-bundle",
        lambda c: c.client(verify="/no/such/ca.pem"),
        ConfigurationError,
        "existing CA bundle",
    ),
    Case(
        "column-named-like-an-internal-one",
        lambda c: build_payload(
            c.spark.createDataFrame([(1, "x")], "id long, __tabhyper_kind string")
        ),
        PayloadError,
        "reserved for the payload builder's own columns",
    ),
    Case(
        "database-version-unknown",
        lambda c: build_payload(c.spark.createDataFrame([(1,)], "id long"), database_version=9),
        PayloadError,
        "database_version must be one of",
    ),
    Case(
        "spark-fails-while-staging",
        lambda c: build_payload(
            c.spark.range(3).selectExpr("id", "IF(id = 2, raise_error('boom'), 'x') AS v"),
            staging_dir=c.tmp / "stage",
        ),
        PayloadError,
        # Spark 4 names the error's class ([USER_RAISED_EXCEPTION] boom); 3.x does not.
        "Spark failed while building the payload: ",
        also="boom",
    ),
    Case(
        "invalid-utf8-names-the-column",
        lambda c: build_payload(
            c.spark.range(2).selectExpr("id", "CAST(X'41FF42' AS STRING) AS customer_name"),
            staging_dir=c.tmp / "stage",
        ),
        PayloadError,
        "invalid UTF-8 sequence: column name: c1 (c1 is column 'customer_name' of table 'Extract')",
    ),
    Case(
        "upload-missing-file",
        lambda c: c.client().upload(c.tmp / "nope.hyper"),
        PayloadError,
        "cannot upload",
    ),
    Case(
        "state-dir-is-a-file",
        lambda c: (
            (c.tmp / "f").write_text("x")
            and settle(c)
            and c.payload.upload("Orders", client=c.client(), state_dir=c.tmp / "f")
        ),
        ConfigurationError,
        "is a file, not a folder",
    ),
    Case(
        "listing-that-never-ends",
        listing_bomb,
        TransportError,
        "more than 5,000 candidates",
        client_side=False,
    ),
    Case(
        "answer-nested-too-deeply",
        deep_answer,
        TransportError,
        "nested too deeply to read",
        client_side=False,
    ),
    Case(
        "name-with-a-comma-not-found",
        lambda c: c.client().datasource("Orders, Europe"),
        NotFoundError,
        "no data source named 'Orders, Europe'",
        client_side=False,
    ),
]
CASES += HOSTILE


# ---------------------------------------------------------------------------------------------
# files, folders and secrets under stress


def tiny(c: Ctx) -> DataFrame:
    return c.spark.createDataFrame([(1, "x")], "id long, v string")


def a_file(c: Ctx) -> Path:
    path = c.tmp / "a-file"
    path.write_text("not a folder")
    c.settled()
    return path


def build_with(**folders: Callable[[Ctx], Path]) -> Callable[[Ctx], object]:
    def run(c: Ctx) -> object:
        paths: dict[str, Any] = {k: make(c) for k, make in folders.items()}
        return build_payload(tiny(c), **paths)

    return run


def open_sandbox(c: Ctx, mode: int) -> Path:
    """A folder with ``mode`` inside one every user can reach (pytest's own is owner-only)."""
    base = Path(tempfile.mkdtemp(prefix="tabhyper-test-"))
    base.chmod(0o755)
    c.cleanup.append(base)
    folder = base / "folder"
    folder.mkdir()
    folder.chmod(mode)
    return folder


@contextlib.contextmanager
def as_another_user() -> Iterator[None]:
    """Permissions mean nothing to root: run as ``nobody`` (effective ids) when root."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(65534)
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


def build_as_another_user(mode: int) -> Callable[[Ctx], object]:
    def run(c: Ctx) -> object:
        folder = open_sandbox(c, mode)
        df = tiny(c)
        with as_another_user():
            return build_payload(df, staging_dir=folder / "stage")

    return run


def link_out_of_parent(c: Ctx) -> Path:
    """``<tmp>/jobs/stage`` → ``<tmp>/victim-folder``, a folder the SDK does not own."""
    foreign = c.tmp / "victim-folder"
    foreign.mkdir(exist_ok=True)
    (foreign / "notes.txt").write_text("mine")
    (c.tmp / "jobs").mkdir(exist_ok=True)
    link = c.tmp / "jobs" / "stage"
    link.symlink_to(foreign, target_is_directory=True)
    c.settled()
    return link


def records_linked_elsewhere(c: Ctx) -> object:
    foreign = c.tmp / "victim-folder"
    foreign.mkdir()
    state = c.tmp / "state"
    state.mkdir()
    (state / "records").symlink_to(foreign, target_is_directory=True)
    c.settled()
    send_insert(c)
    return None


def state_dir_linked_out(c: Ctx) -> object:
    link = link_out_of_parent(c)
    return c.payload.upload("Orders", client=c.client(), state_dir=link)


def json_error(status: int, detail: str) -> dict[str, Any]:
    body = {"error": {"code": f"{status}001", "summary": "Signin Error", "detail": detail}}
    return {"status": status, "content_type": "application/json", "body": json.dumps(body).encode()}


def echoed_at_sign_in(auth: Any, times: int = 1, **fault: Any) -> Callable[[Ctx], object]:
    def run(c: Ctx) -> object:
        c.server.inject("signin", times=times, **fault)
        c.client(auth).sign_in()
        return None

    return run


def token_echoed_by_a_lookup(c: Ctx) -> object:
    with c.client() as client:
        client.sign_in()
        token = client._token
        assert token
        page = f"<html><body>Bad gateway for session {token}</body></html>"
        c.server.inject("datasources", times=2, status=502, body=page.encode())
        return client.datasource("Orders")


def token_echoed_in_job_notes(c: Ctx) -> object:
    with c.client() as client:
        client.sign_in()
        token = client._token
        job = {
            "job": {
                "id": "11111111-2222-3333-4444-555555555555",
                "finishCode": "1",
                "updateUploadedFileJob": {"notes": f"session {token} lacks permission"},
            }
        }
        c.server.inject("job", content_type="application/json", body=json.dumps(job).encode())
        return client.update_datasource(
            "Orders",
            c.payload,
            actions=[Insert(target_table="Extract", source_table="rows")],
            timeout=30,
            progress=False,
            state_dir=c.tmp / "state",
        )


FILES_AND_SECRETS: list[Case] = [
    Case(
        "staging-dir-is-a-file",
        build_with(staging_dir=a_file),
        ConfigurationError,
        "is a file, not a folder",
        also="staging_dir",
    ),
    Case(
        "staging-dir-under-a-file",
        build_with(staging_dir=lambda c: a_file(c) / "stage"),
        ConfigurationError,
        "which is a file, not a folder",
        also="staging_dir",
    ),
    Case(
        "staging-dir-parent-missing",
        build_with(staging_dir=lambda c: c.tmp / "no" / "such" / "stage"),
        ConfigurationError,
        "its parent folder",
        also="does not exist",
    ),
    Case(
        "output-dir-is-a-file",
        build_with(staging_dir=lambda c: c.tmp / "stage", output_dir=a_file),
        ConfigurationError,
        "is a file, not a folder",
        also="output_dir",
    ),
    Case(
        "output-dir-under-a-file",
        build_with(staging_dir=lambda c: c.tmp / "stage", output_dir=lambda c: a_file(c) / "x"),
        ConfigurationError,
        "which is a file, not a folder",
        also="output_dir",
    ),
    Case(
        "staging-dir-not-writable",
        build_as_another_user(0o555),
        ConfigurationError,
        "not writable by this user",
        also="staging_dir",
    ),
    Case(
        "staging-dir-not-readable",
        build_as_another_user(0o311),
        ConfigurationError,
        "not readable by this user",
        also="staging_dir",
    ),
    Case(
        "staging-dir-symlink-out-of-its-folder",
        build_with(staging_dir=link_out_of_parent),
        ConfigurationError,
        "is a symbolic link to",
        also="Pass the real path",
    ),
    Case(
        "output-dir-symlink-out-of-its-folder",
        build_with(staging_dir=lambda c: c.tmp / "stage", output_dir=link_out_of_parent),
        ConfigurationError,
        "is a symbolic link to",
        also="output_dir",
    ),
    Case(
        "state-records-symlinked-elsewhere",
        records_linked_elsewhere,
        ConfigurationError,
        "is a symbolic link; the SDK keeps its update records only in a folder it made",
    ),
    Case(
        "state-dir-symlink-out-of-its-folder",
        state_dir_linked_out,
        ConfigurationError,
        "is a symbolic link to",
        also="state_dir",
    ),
    Case(
        "pat-secret-echoed-in-401-detail",
        echoed_at_sign_in(None, **json_error(401, "token pat-secret is not valid")),
        AuthenticationError,
        "token [redacted] is not valid",
        client_side=False,
    ),
    Case(
        "password-echoed-in-a-proxy-page",
        echoed_at_sign_in(
            UsernamePassword("ana", "Pw-Secret-123"),
            times=2,
            status=502,
            body=b"<html><body>upstream rejected name=ana&password=Pw-Secret-123</body></html>",
        ),
        ApiError,
        "password=[redacted]",
        client_side=False,
    ),
    Case(
        "password-url-encoded-in-a-proxy-page",
        echoed_at_sign_in(
            UsernamePassword("ana", "p@ss word/1"),
            times=2,
            status=502,
            body=b"<html><body>GET /login?password=p%40ss%20word%2F1 failed</body></html>",
        ),
        ApiError,
        "password=[redacted]",
        client_side=False,
    ),
    Case(
        "jwt-echoed-in-401-detail",
        echoed_at_sign_in(
            ConnectedAppJWT(jwt="eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1In0.c2lnbmF0dXJl"),
            **json_error(401, "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1In0.c2lnbmF0dXJl expired"),
        ),
        AuthenticationError,
        "jwt [redacted] expired",
        client_side=False,
    ),
    Case(
        "connected-app-secret-echoed",
        echoed_at_sign_in(
            ConnectedAppJWT(client_id="c", secret_id="k", secret_value="right", username="u"),
            **json_error(401, 'secret "right" does not match'),
        ),
        AuthenticationError,
        'secret "[redacted]" does not match',
        client_side=False,
    ),
    Case(
        "session-token-echoed-by-a-lookup",
        token_echoed_by_a_lookup,
        ApiError,
        "Bad gateway for session [redacted]",
        client_side=False,
    ),
    Case(
        "session-token-echoed-in-job-notes",
        token_echoed_in_job_notes,
        JobFailedError,
        "session [redacted] lacks permission",
        client_side=False,
    ),
]
CASES += FILES_AND_SECRETS


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 80
    assert len({c.id for c in CASES}) == len(CASES)


#: Folders the SDK owns in a case's folder (its state, the staging folders cases name).
SDK_FOLDERS = ("state", "stage", "s")


def files_in(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every file and link under ``root`` (links not followed): size, mode and mtime."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if (Path(folder) / d).is_symlink()]:
            path = Path(folder) / name
            info = path.lstat()
            found[str(path.relative_to(root))] = (info.st_size, info.st_mode, info.st_mtime_ns)
    return found


def _sdk_owned(relative: str) -> bool:
    first = relative.split(os.sep)[0]
    return first in SDK_FOLDERS or "tabhyper-" in relative


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(ctx: Ctx, case: Case, caplog: pytest.LogCaptureFixture) -> None:
    ctx.settled()
    caplog.set_level(logging.DEBUG, logger="tabhyper_update")
    with pytest.raises(case.error) as caught:
        case.run(ctx)
    err = caught.value
    assert isinstance(err, TabHyperError), type(err).__mro__
    assert case.words in str(err), str(err)
    assert case.also in str(err), str(err)
    if case.client_side:
        assert sum(ctx.server.counts.values()) == 0, dict(ctx.server.counts)
    stage = ctx.tmp / "stage"
    assert not stage.exists() or list(stage.iterdir()) == []  # no staging left behind
    # Nothing outside the SDK's own files changed: no file written, changed or removed.
    after = files_in(ctx.tmp)
    before = ctx.before
    changed = {p for p in before if p not in after or after[p] != before[p]}
    added = {p for p in after if p not in before and not _sdk_owned(p)}
    assert not changed, changed
    assert not added, added
    # No secret a client held in this case leaks into the error, its fields or the log.
    texts = [str(err), repr(err), caplog.text, *map(str, vars(err).values())]
    for secret in redaction._secrets:
        assert not any(secret in text for text in texts), f"{secret!r} leaked"

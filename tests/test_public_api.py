"""The public surface is explicit; a change to it is a deliberate change to this list."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

import tabhyper_update
import tabhyper_update.testing
from tabhyper_update import ChangeSet, Debezium, Payload, TableauClient, TableauSink, build_payload
from tabhyper_update.types import BoundPayload

#: The public surface: the verbs, the models a job builds, the base error and the errors
#: callers catch. Everything else is importable from its module.
EXPECTED = {
    "__version__",
    "build_payload",
    "reconcile",
    "repair",
    "TableauClient",
    "Payload",
    "ChangeSet",
    "Insert",
    "Update",
    "Delete",
    "Replace",
    "Upsert",
    "source",
    "target",
    "keys_match",
    "ActionBatch",
    "PersonalAccessToken",
    "UsernamePassword",
    "ConnectedAppJWT",
    "TableauSink",
    "Debezium",
    "UpdateResult",
    "TabHyperError",
    "ConfigurationError",
    "ApiError",
    "NotFoundError",
    "JobFailedError",
    "PayloadError",
    "DriftError",
    "Republish",
}


def test_public_surface_is_pinned() -> None:
    assert set(tabhyper_update.__all__) == EXPECTED
    assert len(EXPECTED) <= 30
    for name in tabhyper_update.__all__:
        assert hasattr(tabhyper_update, name), name
    assert set(dir(tabhyper_update)) == EXPECTED


@pytest.mark.parametrize("name", ["RetryPolicy", "BoundPayload", "SchemaDriftError"])
def test_a_name_kept_by_a_public_module_is_not_an_alias_at_the_root(name: str) -> None:
    """Nothing was published under the old root names: no aliases, an error that says
    where the name is."""
    with pytest.raises(AttributeError, match=r"import it from tabhyper_update\.(types|errors)"):
        getattr(tabhyper_update, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        tabhyper_update.Nothing  # noqa: B018


def test_a_tools_probe_for_a_private_name_loads_no_layer() -> None:
    code = (
        "import sys, tabhyper_update; hasattr(tabhyper_update, '__wrapped__'); "
        "print(sorted(m for m in sys.modules if m.startswith('tabhyper_update.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['tabhyper_update._version']"


def test_importing_the_package_loads_none_of_its_layers() -> None:
    code = (
        "import sys, tabhyper_update; "
        "print(sorted(m for m in sys.modules if m.startswith('tabhyper_update.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['tabhyper_update._version']"


@pytest.mark.parametrize(
    ("function", "parameters"),
    [
        (
            build_payload,
            "source, changes, *, table, schema, database_version, complex_as_json, "
            "staging_dir, output_dir, max_payload_mb, keep_files, progress, staging, on_bad_rows, "
            "quarantine, quarantine_format, target_columns",
        ),
        (
            ChangeSet,
            "key, *, op_column, order_by, op_map, keep_columns, upsert_table, delete_table, "
            "order_as, guard, history, soft_delete",
        ),
        (Payload.upload, "self, target, *, client, progress, state_dir"),
        (
            BoundPayload.apply,
            "self, actions, *, target_table, target_schema, request_id, wait, timeout, verify, "
            "verify_budget, position, committed_at, on_schema_change, allow_narrowing",
        ),
        (
            TableauClient.update_datasource,
            "self, target, payload, *, actions, target_table, target_schema, request_id, "
            "wait, timeout, progress, state_dir, verify, verify_budget, position, committed_at, "
            "on_schema_change, allow_narrowing",
        ),
        (Payload.derived_actions, "self, part, *, target_table, target_schema"),
        (
            TableauSink,
            "target, changes, *, client, actions, prepare, target_table, target_schema, "
            "sink_id, build, state_dir, timeout, reset, check, on_schema_change, on_full_refresh",
        ),
        (
            Debezium,
            "row_schema, *, key, connector, position, table, truncate, decimal_handling, "
            "time_precision, binary_handling, units",
        ),
    ],
)
def test_the_round_trip_signatures_are_pinned(
    function: Callable[..., Any], parameters: str
) -> None:
    shown = []
    for p in inspect.signature(function).parameters.values():
        if p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) and "*" not in shown:
            shown.append("*")
        if p.kind is p.VAR_KEYWORD:
            # Keywords declared once as a TypedDict (``**options: Unpack[UpdateOptions]``).
            declared = str(p.annotation).removeprefix("Unpack[").removesuffix("]")
            options = getattr(function, "__globals__", {})[declared]
            shown += sorted(options.__optional_keys__)
        else:
            shown.append(p.name)
    # Keyword-only names in any order: what a caller can pass.
    positional, _, keywords = ", ".join(shown).partition("*, ")
    expected_positional, _, expected_keywords = parameters.partition("*, ")
    assert positional == expected_positional
    assert sorted(keywords.split(", ")) == sorted(expected_keywords.split(", "))


def test_the_testing_package_exports_the_fake_and_its_helpers() -> None:
    assert set(tabhyper_update.testing.__all__) == {
        "BackendSettings",
        "DataSource",
        "FakeBackend",
        "Request",
        "Response",
        "ServerProfile",
        "FakeTableauServer",
        "Fault",
        "local_spark",
        "make_hyper",
        "read_table",
        "run_sql",
    }


#: The public modules: what the README, the examples and the docs import from. Everything in
#: a layer folder is internal and may move.
PUBLIC_MODULES = {
    "tabhyper_update",
    "tabhyper_update.errors",
    "tabhyper_update.types",
    "tabhyper_update.testing",
}


def test_every_exception_is_in_the_errors_module_and_its_drawn_tree() -> None:
    import tabhyper_update.errors as errors
    from tabhyper_update.values import errors as internal

    raised = {
        name
        for name, value in vars(internal).items()
        if isinstance(value, type) and issubclass(value, internal.TabHyperError)
    }
    assert raised <= set(errors.__all__)
    assert len(raised) == 30
    drawn = "\n".join("    " + line for line in errors.tree().splitlines())
    assert drawn in (errors.__doc__ or "")
    for name in raised:
        assert getattr(errors, name) is getattr(internal, name)


def test_the_types_module_holds_what_the_calls_return() -> None:
    import tabhyper_update.types as types
    from tabhyper_update.readback.reconcile import reconcile

    returned: dict[Callable[..., Any], str] = {
        Payload.upload: "BoundPayload",
        BoundPayload.apply: "UpdateResult",
        types.UpdateResult.verify: "DriftReport",
        reconcile: "DriftReport",
        TableauClient.probe: "ProbeResult",
    }
    for function, name in returned.items():
        assert inspect.signature(function).return_annotation == name
        assert name in types.__all__
    for name in (
        "RetryPolicy",
        "PollPolicy",
        "ApplyOptions",
        "UpdateOptions",
        "BuildOptions",
        "SchemaChange",
        "UpdatePlan",
        "PlannedPart",
        "ProbeOptions",
        "Credentials",
        "StagingMode",
        "PublishMode",
    ):
        assert name in types.__all__


def test_every_type_a_public_signature_names_is_importable_from_a_public_module() -> None:
    """What a public function or method takes or returns, a user can annotate with: each of
    the package's own names in its annotations is one a public module exports."""
    import pkgutil
    import re

    import tabhyper_update

    exported: set[int] = set()
    for module_name in sorted(PUBLIC_MODULES):
        module = importlib.import_module(module_name)
        exported |= {id(getattr(module, n)) for n in module.__all__}
    ours: dict[str, list[object]] = {}
    for info in pkgutil.walk_packages(tabhyper_update.__path__, "tabhyper_update."):
        if info.name.endswith(".__main__"):
            continue  # runs the command line
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue  # needs an extra this environment lacks
        for name, value in vars(module).items():
            defined_here = getattr(value, "__module__", None) == info.name
            alias = (
                name[:1].isupper()
                and not isinstance(value, type)
                and name in getattr(module, "__all__", ())
            )
            if defined_here or alias:
                ours.setdefault(name, []).append(value)

    def annotations(function: object) -> list[str]:
        try:
            signature = inspect.signature(function)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return []
        found = [str(p.annotation) for p in signature.parameters.values()]
        return [*found, str(signature.return_annotation)]

    missing: dict[str, set[str]] = {}
    for module_name in sorted(PUBLIC_MODULES):
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            members = [(name, value)]
            if isinstance(value, type):
                members += [
                    (f"{name}.{attr}", getattr(value, attr))
                    for attr, raw in vars(value).items()
                    if (not attr.startswith("_") or attr == "__init__")
                    and (inspect.isfunction(raw) or isinstance(raw, (classmethod, staticmethod)))
                ]
            for where, function in members:
                if not callable(function):
                    continue
                for text in annotations(function):
                    for token in set(re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", text)):
                        if "." in token and not token.startswith("tabhyper_update."):
                            continue  # another library's name (requests.Session)
                        word = token.rpartition(".")[2]
                        candidates = ours.get(word, [])
                        if candidates and not any(id(c) in exported for c in candidates):
                            missing.setdefault(word, set()).add(f"{module_name}:{where}")
    assert not missing, sorted(missing.items())


def _imports(text: str) -> set[str]:
    import re

    return set(re.findall(r"^\s*from (tabhyper_update[\w.]*) import", text, flags=re.M)) | set(
        re.findall(r"^\s*import (tabhyper_update[\w.]*)", text, flags=re.M)
    )


def test_what_users_are_shown_imports_only_public_modules_without_warnings() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    shown = [root / "README.md", *sorted((root / "examples").glob("*.py"))]
    shown += sorted((root / "docs").rglob("*.md")) if (root / "docs").is_dir() else []
    for path in shown:
        used = _imports(path.read_text())
        assert used <= PUBLIC_MODULES, f"{path.name} imports {sorted(used - PUBLIC_MODULES)}"
    code = (
        "import warnings; warnings.simplefilter('error'); "
        "from tabhyper_update import *; from tabhyper_update.errors import *; "
        "from tabhyper_update.types import *; from tabhyper_update.testing import *"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)

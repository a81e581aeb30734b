"""An update's keyword options, declared once.

``payload.upload(...)`` takes the :class:`BindOptions`, ``.apply(...)`` the
:class:`ApplyOptions`, and the one-call verbs (``client.update_datasource``,
``client.bootstrap``) both, as :class:`UpdateOptions`; ``client.publish`` and
``payload.publish`` take the :class:`PublishOptions`. Each passes them on whole::

    client.update_datasource("Orders", payload, target_table="Extract", verify=True)

Where the keywords enter they become one frozen object that owns their defaults and
checks (:class:`ApplySettings` for an update's), passed whole from then on.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from typing_extensions import Required, TypedDict

from ..rest.projects import Project
from ..rest.refs import DataSourceRef, check_request_id
from ..rest.session import RestSession
from ..values.errors import ArgumentTypeError, InvalidArgumentError
from ..values.parts import PayloadLike

__all__ = [
    "MAX_REQUEST_ID",
    "ApplyOptions",
    "ApplySettings",
    "BindOptions",
    "BindSettings",
    "BootstrapOptions",
    "BootstrapSettings",
    "ProbeSettings",
    "PublishMode",
    "PublishOptions",
    "PublishSettings",
    "SchemaChange",
    "Snapshot",
    "UpdateOptions",
    "check_options",
    "check_policy",
    "narrowing_allowed",
    "update_settings",
]

PublishMode = Literal["create", "overwrite", "append"]
PUBLISH_MODES: tuple[PublishMode, ...] = ("create", "overwrite", "append")

#: How long a caller's request id may be: the RequestID header holds at most 200
#: characters, and the scope adds 13.
MAX_REQUEST_ID = 200 - 13


@runtime_checkable
class Snapshot(Protocol):
    """A republish policy (:class:`tabhyper_update.Republish`): publishes the source's
    snapshot over the data source, with its new schema, and returns the data source."""

    def republish(
        self, client: RestSession, target: DataSourceRef, state_dir: Path
    ) -> DataSourceRef: ...


#: ``on_schema_change=``: fail, leave the columns the data source lacks out, or republish.
SchemaChange = Literal["fail", "ignore"] | Snapshot


class ApplyOptions(TypedDict, total=False):
    """How an update is applied.

    ``target_table`` / ``target_schema``: the table a change set's derived actions go to
    (``Extract.Extract`` unless given). ``request_id``: bind the update's identity to a
    position of the caller's own. ``wait`` (default True): return once applied, else once
    the last part is submitted. ``timeout``: seconds to wait for each part's job (the poll
    policy's by default). ``verify``: read the update back (True, or a sample size).
    ``allow_narrowing``: columns the data source may hold narrower than the payload (fewer
    decimal places or digits, shorter text); any other narrowing is refused before the first
    part is sent.
    """

    target_table: str | None
    target_schema: str | None
    request_id: str | None
    wait: bool
    timeout: float | None
    verify: bool | int
    verify_budget: int | None
    position: Any
    committed_at: float | None
    on_schema_change: SchemaChange
    allow_narrowing: Sequence[str]


class BindOptions(TypedDict, total=False):
    """How a payload is bound to its target: ``progress`` bars (on a terminal by default),
    and ``state_dir``, the folder of the update records that make re-runs resume."""

    progress: bool | None
    state_dir: str | os.PathLike[str] | None


class UpdateOptions(ApplyOptions, BindOptions, total=False):
    """Both: the options of the one-call verbs."""


class BootstrapOptions(UpdateOptions, total=False):
    """``bootstrap``'s: ``snapshot`` and ``changes`` (functions that build the payload to
    publish, or the change set to apply: only the one needed is built), the ``project``,
    ``full_refresh`` (publish over the data source even when it exists), and the update's
    options."""

    snapshot: Required[Callable[[], PayloadLike]]
    changes: Required[Callable[[], PayloadLike]]
    project: str | Project | None
    full_refresh: bool


class PublishOptions(TypedDict, total=False):
    """How a payload or ``.hyper`` file is published.

    ``project``: a name, a path from the top (``"Sales/EMEA"``), a LUID, or the default
    project. ``mode``: ``"create"`` (the default; refused when the name exists in the
    project), ``"overwrite"`` (replace its data) or ``"append"`` (add the file's rows).
    ``description``; ``as_job``: publish as a job (by default for a chunked upload);
    ``timeout``: seconds to follow that job; ``state_dir``: where the columns published are
    recorded for the updates after it.
    """

    project: str | Project | None
    mode: PublishMode
    description: str | None
    as_job: bool | None
    timeout: float | None
    state_dir: str | os.PathLike[str] | None


class ProbeOptions(TypedDict, total=False):
    """How a probe of a server runs (:meth:`TableauClient.probe`).

    ``keep``: leave the canary data source in place; ``cap``: also find the update cap with
    a bounded upload; ``state_dir``: where the result is remembered; ``on_step``: called
    with a line naming each case as it starts.
    """

    keep: bool
    cap: bool
    state_dir: str | os.PathLike[str] | None
    on_step: Callable[[str], None] | None


@dataclass(frozen=True)
class ApplySettings:
    """An update's options (:class:`ApplyOptions`), checked, with their defaults: made once
    where the keywords enter (:meth:`of`) and passed whole from then on."""

    target_table: str | None = None
    target_schema: str | None = None
    request_id: str | None = None
    wait: bool = True
    timeout: float | None = None
    verify: bool | int = False
    verify_budget: int | None = None
    position: Any = None
    committed_at: float | None = None
    on_schema_change: SchemaChange = "fail"
    allow_narrowing: tuple[str, ...] = ()

    @classmethod
    def of(cls, options: Mapping[str, Any], where: str) -> ApplySettings:
        """``options`` (keywords ``where`` was given) checked: a name it does not take, a
        RequestID that cannot travel, an unknown schema policy or a narrowing list of
        anything but column names is refused naming it, before anything is sent."""
        check_options(options, ApplyOptions, where)
        made = cls(**options)
        if made.request_id is not None:
            check_request_id(made.request_id, most=MAX_REQUEST_ID)
        check_policy(made.on_schema_change)
        narrowing = narrowing_allowed(made.allow_narrowing)
        return (
            made if narrowing == made.allow_narrowing else replace(made, allow_narrowing=narrowing)
        )


@dataclass(frozen=True)
class BindSettings:
    """How a payload is bound (:class:`BindOptions`), checked, with their defaults."""

    progress: bool | None = None
    state_dir: str | os.PathLike[str] | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any], where: str) -> BindSettings:
        check_options(options, BindOptions, where)
        return cls(**options)


def update_settings(options: Mapping[str, Any], where: str) -> tuple[BindSettings, ApplySettings]:
    """The one-call verbs' options (:class:`UpdateOptions`) as the binding's and the
    applying's settings, each checked (a keyword neither takes is refused naming it)."""
    check_options(options, UpdateOptions, where)
    bind_keys = BindOptions.__optional_keys__
    return (
        BindSettings.of({k: v for k, v in options.items() if k in bind_keys}, where),
        ApplySettings.of({k: v for k, v in options.items() if k not in bind_keys}, where),
    )


@dataclass(frozen=True)
class PublishSettings:
    """A publish's options (:class:`PublishOptions`), checked, with their defaults."""

    project: str | Project | None = None
    mode: PublishMode = "create"
    description: str | None = None
    as_job: bool | None = None
    timeout: float | None = None
    state_dir: str | os.PathLike[str] | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any], where: str) -> PublishSettings:
        check_options(options, PublishOptions, where)
        made = cls(**options)
        if made.mode not in PUBLISH_MODES:
            raise InvalidArgumentError(
                f"mode must be one of {', '.join(PUBLISH_MODES)}, got {made.mode!r}",
                argument="mode",
            )
        return made


@dataclass(frozen=True)
class BootstrapSettings:
    """``bootstrap``'s options (:class:`BootstrapOptions`), checked, with their defaults;
    ``bind`` and ``apply`` the update's own, passed on whole."""

    snapshot: Callable[[], PayloadLike]
    changes: Callable[[], PayloadLike]
    project: str | Project | None = None
    full_refresh: bool = False
    bind: BindSettings = BindSettings()
    apply: ApplySettings = ApplySettings()

    @classmethod
    def of(cls, options: Mapping[str, Any], where: str) -> BootstrapSettings:
        check_options(options, BootstrapOptions, where)
        own = {"snapshot", "changes", "project", "full_refresh"}
        bind, apply = update_settings({k: v for k, v in options.items() if k not in own}, where)
        made = cls(**{k: v for k, v in options.items() if k in own}, bind=bind, apply=apply)
        for what, fn in (("snapshot", made.snapshot), ("changes", made.changes)):
            if not callable(fn):
                raise InvalidArgumentError(
                    f"{what}= takes a function that builds the payload (e.g. lambda: "
                    f"build_payload(...)), so that only the one needed is built; got {fn!r}",
                    argument=what,
                )
        return made


@dataclass(frozen=True)
class ProbeSettings:
    """A probe's options (:class:`ProbeOptions`), checked, with their defaults."""

    keep: bool = False
    cap: bool = False
    state_dir: str | os.PathLike[str] | None = None
    on_step: Callable[[str], None] | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any], where: str) -> ProbeSettings:
        check_options(options, ProbeOptions, where)
        return cls(**options)


def check_policy(policy: object) -> None:
    """Refuse, before anything is sent, a schema policy that is none of the three."""
    if policy in ("fail", "ignore") or isinstance(policy, Snapshot):
        return
    raise InvalidArgumentError(
        f"on_schema_change must be 'fail', 'ignore' or Republish(snapshot), got {policy!r}",
        argument="on_schema_change",
    )


def narrowing_allowed(value: object) -> tuple[str, ...]:
    """``allow_narrowing=``: the column names whose narrowing the caller accepts."""
    names: tuple[object, ...] | None = None
    if not isinstance(value, (str, bytes)) and isinstance(value, Iterable):
        names = tuple(value)
    if names is None or not all(isinstance(c, str) for c in names):
        raise ArgumentTypeError(
            f"allow_narrowing takes a list of column names, got {value!r}",
            argument="allow_narrowing",
        )
    return tuple(map(str, names))


def check_options(options: Mapping[str, Any], declared: Any, where: str) -> None:
    """Refuse a keyword ``where`` does not take (a typo would otherwise be ignored), naming
    the nearest it does take."""
    known = sorted(declared.__optional_keys__ | declared.__required_keys__)
    for name in options:
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f" (it takes {', '.join(known)})"
            raise ArgumentTypeError(
                f"{where} got an unexpected keyword argument {name!r}{hint}", argument=name
            )

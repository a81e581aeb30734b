"""An update's keyword options, declared once.

``payload.upload(...)`` takes the :class:`BindOptions`, ``.apply(...)`` the
:class:`ApplyOptions`, and the one-call verbs (``client.update_datasource``,
``client.bootstrap``) both, as :class:`UpdateOptions`; ``client.publish`` and
``payload.publish`` take the :class:`PublishOptions`. Each passes them on whole::

    client.update_datasource("Orders", payload, target_table="Extract", verify=True)
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, cast

from typing_extensions import Required, TypedDict

from ..rest.projects import Project
from ..values.errors import ArgumentTypeError
from ..values.parts import PayloadLike

__all__ = [
    "ApplyOptions",
    "BindOptions",
    "BootstrapOptions",
    "PublishMode",
    "PublishOptions",
    "UpdateOptions",
    "check_options",
    "split_options",
]

PublishMode = Literal["create", "overwrite", "append"]


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
    on_schema_change: Any
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


def split_options(options: UpdateOptions) -> tuple[BindOptions, ApplyOptions]:
    """The binding options and the applying options of ``options``."""
    bind_keys = BindOptions.__optional_keys__
    bind = {k: v for k, v in options.items() if k in bind_keys}
    apply = {k: v for k, v in options.items() if k not in bind_keys}
    return cast(BindOptions, bind), cast(ApplyOptions, apply)

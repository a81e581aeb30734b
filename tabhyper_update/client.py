"""``TableauClient``: the REST session with the workflows on top.

>>> with TableauClient.from_env() as client:  # doctest: +SKIP
...     orders = client.datasource("Orders", project="Sales")
...     client.update_datasource(orders, payload)        # upload, apply, wait
...     client.publish(snapshot, "Orders", project="Sales")

The REST calls (sign-in, data sources, uploads, the update request, jobs) are the
:class:`~tabhyper_update.rest.session.RestSession`'s; this class adds the verbs that compose
them into workflows (:mod:`tabhyper_update.update`). No network I/O happens in the
constructor: the client signs in on first use (or on ``sign_in()``) and signs out,
best-effort, when used as a context manager.
"""

from __future__ import annotations

import os

from typing_extensions import Unpack

from .rest.refs import DataSourceRef
from .rest.session import RestSession, client_for
from .rest.versions import MIN_API_VERSION
from .update.chain import update_datasource
from .update.options import BootstrapOptions, ProbeOptions, PublishOptions, UpdateOptions
from .update.probe import ProbeResult, probe
from .update.publish import BootstrapResult, bootstrap, publish
from .update.results import UpdateResult
from .update.schema import exact_columns
from .update.state import StateStore
from .values.actions import BatchLike
from .values.parts import PayloadLike

__all__ = ["MIN_API_VERSION", "DataSourceRef", "TableauClient", "client_for"]


class TableauClient(RestSession):
    """A client for the Tableau REST endpoints that update live-to-Hyper data sources.

    ``server`` is the base URL (``https://tableau.example.com``), ``site`` the site's
    content URL (``""`` for the default site of Tableau Server), ``auth`` a
    :class:`PersonalAccessToken`, :class:`UsernamePassword` or :class:`ConnectedAppJWT`.
    """

    def update_datasource(
        self,
        target: DataSourceRef | str,
        payload: PayloadLike | None = None,
        *,
        actions: BatchLike | None = None,
        **options: Unpack[UpdateOptions],
    ) -> UpdateResult:
        """Update a data source: upload ``payload`` part by part and apply ``actions`` (a
        change set's own actions by default), waiting until applied unless ``wait=False``.
        Everything is checked before the first request; ``options`` are
        :class:`~tabhyper_update.update.options.UpdateOptions`.

        The verb behind ``payload.upload(target).apply(actions)``; with no payload, a batch
        that reads no table (e.g. a delete by constant)::

            client.update_datasource("Orders", payload)
            client.update_datasource("Orders", actions=[Delete(target_table="Extract",
                                                               condition=target("day") < cutoff)])
        """
        return update_datasource(self, target, payload, actions=actions, **options)

    def publish(
        self,
        payload: PayloadLike | str | os.PathLike[str],
        name: str,
        **options: Unpack[PublishOptions],
    ) -> DataSourceRef:
        """Publish a one-file payload (or a ``.hyper`` file) as the live-to-Hyper data source
        ``name``, ready for updates (``options``:
        :class:`~tabhyper_update.update.options.PublishOptions`: the project, the mode
        ``"create"``, ``"overwrite"`` or ``"append"``, ...). Files from 64 MB on (or
        ``chunk_size_mb``) go as a chunked upload and a job, followed to its end. Returns a
        reference that knows its columns; their types are recorded in the state folder for
        the updates after it.
        """
        return publish(self, payload, name, **options)

    def bootstrap(self, name: str, **options: Unpack[BootstrapOptions]) -> BootstrapResult:
        """Publish when missing, else update: what a CDC job calls on every run.

        When data source ``name`` does not exist in ``project`` (or ``full_refresh``), the
        payload ``snapshot()`` builds is published (overwriting on a full refresh);
        otherwise the change set ``changes()`` builds is applied with the update's options.
        Only the one needed is built (``options``:
        :class:`~tabhyper_update.update.options.BootstrapOptions`).
        """
        return bootstrap(self, name, **options)

    def target_columns(
        self,
        target: DataSourceRef | str,
        *,
        state_dir: str | os.PathLike[str] | None = None,
    ) -> dict[str, str]:
        """Each table of data source ``target`` as DDL with its exact column types
        (``{"Extract": '"id" BIGINT NOT NULL, "amount" NUMERIC(12,2)'}``), as an update's
        schema check learns them: what this SDK recorded when it published it, the columns
        declared with the reference, or the data source's file where the server's probe
        found its types exact. A quarantine takes a table's entry
        (``build_payload(..., on_bad_rows="quarantine", target_columns=...)``). Refused
        (:class:`~tabhyper_update.errors.ConfigurationError`) where none of those knows
        them."""
        ref = target if isinstance(target, DataSourceRef) else self.datasource(target)
        return exact_columns(self, ref, StateStore(state_dir))

    def probe(
        self,
        *,
        project: str,
        **options: Unpack[ProbeOptions],
    ) -> ProbeResult:
        """Measure what this server does where Tableau's documentation is silent: publish a
        small canary data source into ``project``, run scripted updates whose outcomes
        differ by semantics (a key matched twice, NULL into NOT NULL, a narrowed decimal, a
        repeated RequestID, a stale update under the ordering guard), read each outcome
        back from the canary's rows, remove the canary (unless ``keep``), and remember the
        result per server and site in the state folder. ``cap``: also find the update cap
        with a bounded upload. At most 200 requests; nothing but the canary is touched.

        ``ChangeSet(guard=True)`` is sent only to a server whose probe found the guard
        working. See :mod:`tabhyper_update.update.probe`.
        """
        return probe(self, project=project, **options)

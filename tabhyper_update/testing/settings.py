"""How the fake server behaves: its settings, declared once (the fake server and its backend
both take them)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from typing_extensions import TypedDict

__all__ = ["BackendSettings"]


class BackendSettings(TypedDict, total=False):
    """How the fake behaves (each key optional, its default in brackets).

    The accepted credentials: ``pats`` (name → secret), ``users`` (name → password),
    ``connected_app`` (``client_id``, ``secret_id``, ``secret_value``); the ``site`` [""];
    the REST ``api_version`` ["3.24"] and ``product_version`` ["2024.2.0"]; the session
    ``token_lifetime`` in seconds [4 h]; ``job_delay``, seconds each job waits in the queue
    [0]; the RequestID de-duplication ``dedup_window`` in seconds [24 h]; ``max_upload_mb``
    [100]; the ``directory`` of its files [a temporary one]; ``store_uploads`` [True]; and
    the VizQL Data Service, ``"on"``, ``"absent"`` (a server before 2025.1) or ``"denied"``
    to the signed-in user (``data_service``) ["on"].
    """

    pats: Mapping[str, str] | None
    users: Mapping[str, str] | None
    connected_app: Mapping[str, str] | None
    site: str
    api_version: str
    product_version: str
    token_lifetime: float
    job_delay: float
    dedup_window: float
    max_upload_mb: float
    directory: str | os.PathLike[str] | None
    store_uploads: bool
    data_service: str

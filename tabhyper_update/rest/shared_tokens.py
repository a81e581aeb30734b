"""One personal access token's session, shared by the clients of one process.

A PAT holds one session: each sign-in with it ends the one before (401002). Clients made in
one process with the same server, site and PAT (sixteen threads of one job, a sink and a
reconcile) would sign each other out on every call; instead they share the session: the
first signs in, the others adopt its token, a client whose session ended adopts the token
another client already signed in with rather than signing in again, and only the last
client to close signs out. Across processes nothing can be shared: there the session
recovers and, when it keeps being ended, the error names the cause and what to do.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field

from .auth import Credentials, PersonalAccessToken

__all__ = ["SharedToken", "shared_token"]


@dataclass
class SharedToken:
    """The session of one (server, site, PAT) in this process."""

    #: Held while a client signs in, so that one sign-in serves everyone waiting.
    lock: threading.RLock = field(default_factory=threading.RLock)
    token: str | None = None
    site_id: str | None = None
    #: The REST API version it signed in with.
    api_version: str | None = None
    #: The clients holding it (by ``id``); the last one out signs out.
    users: set[int] = field(default_factory=set)


_lock = threading.Lock()
_shared: dict[tuple[str, str, str, str], SharedToken] = {}


def shared_token(server: str, site: str, auth: Credentials) -> SharedToken | None:
    """The shared session of ``auth`` on ``server`` and ``site`` (a PAT only; other
    credentials hold as many sessions as they sign in)."""
    if not isinstance(auth, PersonalAccessToken):
        return None
    secret = hashlib.sha256(auth.secret.get_secret_value().encode()).hexdigest()
    key = (server.rstrip("/"), site, auth.name, secret)
    with _lock:
        return _shared.setdefault(key, SharedToken())

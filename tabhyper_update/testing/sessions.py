"""The fake server's sign-ins: the credentials it accepts (PATs, passwords, connected-app
JWTs), its sessions, and the rule that one PAT holds one session."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..rest.scopes import scope_for
from .settings import BackendConfig
from .wire import ApiFailure

__all__ = ["Session", "SignIns"]


@dataclass
class Session:
    token: str = field(repr=False)
    user_id: str
    credential: str  # PAT name, user name or connected-app subject
    expires_at: float
    #: The scopes a connected app's token granted (``None``: not a connected app).
    scopes: frozenset[str] | None = None


#: The credentials' fields that hold a secret.
_SECRETS = ("personalAccessTokenSecret", "password", "jwt")


def _b64url_decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


class SignIns:
    """Sign-in, sign-out and the check of a session token, for the credentials the fake's
    settings accept (a part of the backend: ``backend.sign_ins``)."""

    def __init__(self, config: BackendConfig) -> None:
        self.pats = dict(config.pats)
        self.users = dict(config.users)
        self.connected_app = dict(config.connected_app)
        self.site = config.site
        self.site_id = str(uuid.uuid4())
        self.token_lifetime = config.token_lifetime
        self.lock = threading.RLock()
        self.sessions: dict[str, Session] = {}
        #: Every secret that crossed the wire (PAT secrets, passwords, JWTs, session
        #: tokens), so that tests can check that none of them leaked into logs or messages.
        self.secrets_seen: set[str] = set()

    def sign_in(self, credentials: Mapping[str, Any]) -> Session:
        """A new session for valid credentials on this site (401001 otherwise)."""
        with self.lock:
            self.secrets_seen.update(str(credentials[k]) for k in _SECRETS if credentials.get(k))
        who, scopes = self._who(credentials)
        site = (credentials.get("site") or {}).get("contentUrl", "")
        if who is None or site != self.site:
            raise ApiFailure(
                401,
                "401001",
                "Signin Error",
                "Error signing in to Tableau Server (invalid credentials or site)",
            )
        token = uuid.uuid4().hex + uuid.uuid4().hex
        user_id = str(uuid.uuid5(uuid.NAMESPACE_OID, who))
        session = Session(token, user_id, who, time.time() + self.token_lifetime, scopes)
        with self.lock:
            self.secrets_seen.add(token)
            if who.startswith("pat:"):
                # One PAT holds one session: signing in again ends the earlier one.
                for key in [k for k, s in self.sessions.items() if s.credential == who]:
                    del self.sessions[key]
            self.sessions[token] = session
        return session

    def _who(self, creds: Mapping[str, Any]) -> tuple[str | None, frozenset[str] | None]:
        """Whom valid credentials name (``pat:``, ``jwt:`` or ``user:`` and the name;
        ``None`` for invalid ones), and the scopes a connected app's token grants."""
        if "personalAccessTokenName" in creds:
            name = creds.get("personalAccessTokenName")
            valid = self.pats.get(str(name)) == creds.get("personalAccessTokenSecret")
            return (f"pat:{name}" if valid else None), None
        if "jwt" in creds:
            subject, scopes = self._check_jwt(str(creds["jwt"]))
            return f"jwt:{subject}", scopes
        name = creds.get("name")
        valid = name is not None and self.users.get(str(name)) == creds.get("password")
        return (f"user:{name}" if valid else None), None

    def sign_out(self, token: str) -> None:
        with self.lock:
            self.sessions.pop(token, None)

    def authorise(self, token: str | None, site: str | None = None) -> Session:
        """The live session of ``token``, allowed on ``site`` (a site LUID from the URL)."""
        if not token:
            raise ApiFailure(
                401, "401000", "Authentication required", "the X-Tableau-Auth header is missing"
            )
        with self.lock:
            session = self.sessions.get(token)
            if session is None or session.expires_at < time.time():
                raise ApiFailure(
                    401,
                    "401002",
                    "Unauthorized Access",
                    "Invalid authentication credentials were provided",
                )
        if site is not None and site != self.site_id:
            raise ApiFailure(
                403, "403000", "Forbidden", "the session's site is not the one in the URL"
            )
        return session

    def expire_tokens(self) -> None:
        """Make every live session token expire now (next use answers 401002)."""
        with self.lock:
            for session in self.sessions.values():
                session.expires_at = 0

    def check_scope(self, session: Session, method: str, path: str) -> None:
        """Refuse (403) a connected app's call its token's scopes do not grant."""
        if session.scopes is None:
            return
        needed = scope_for(method, path)
        if needed is not None and needed not in session.scopes:
            raise ApiFailure(
                403,
                "403000",
                "Forbidden",
                "the connected app's token does not grant the scope this call needs",
            )

    def _check_jwt(self, token: str) -> tuple[str, frozenset[str]]:
        app = self.connected_app
        try:
            head_b64, claims_b64, sig_b64 = token.split(".")
            header = json.loads(_b64url_decode(head_b64))
            claims = json.loads(_b64url_decode(claims_b64))
        except (ValueError, TypeError):
            raise ApiFailure(401, "401001", "Signin Error", "malformed JWT") from None
        expected = hmac.new(
            str(app.get("secret_value", "")).encode(),
            f"{head_b64}.{claims_b64}".encode(),
            hashlib.sha256,
        ).digest()
        ok = (
            app
            and header.get("alg") == "HS256"
            and header.get("kid") == app.get("secret_id")
            and claims.get("iss") == app.get("client_id")
            and claims.get("aud") == "tableau"
            and hmac.compare_digest(expected, _b64url_decode(sig_b64))
            and 0 < float(claims.get("exp", 0)) - time.time() <= 600 + 5
        )
        if not ok:
            raise ApiFailure(401, "401001", "Signin Error", "the JWT was not accepted")
        granted = claims.get("scp") or []
        return str(claims.get("sub")), frozenset(map(str, granted))

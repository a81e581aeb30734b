"""Credentials for signing in: personal access token, user name and password, connected app.

Secrets are pydantic ``SecretStr``: their ``repr`` and ``str`` show ``**********``, and
they are read only to build a sign-in body, at which point they are handed to
:mod:`tabhyper_update.values.redaction` so that no server's echo of them is ever kept in text.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from ..values.errors import ConfigurationError
from ..values.redaction import remember
from .scopes import DEFAULT_JWT_SCOPES

__all__ = [
    "DEFAULT_JWT_SCOPES",
    "ConnectedAppJWT",
    "Credentials",
    "PersonalAccessToken",
    "UsernamePassword",
]


class _Credentials(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Sign in on behalf of this user (LUID); needs an administrator's credentials.
    impersonate_user_id: str | None = None

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as err:
            # Only field names and messages: never the values, which may be secrets.
            problems = "; ".join(
                (f"{'.'.join(map(str, e['loc']))}: " if e["loc"] else "")
                + e["msg"].removeprefix("Value error, ")
                for e in err.errors(include_url=False, include_input=False)
            )
            raise ConfigurationError(f"{type(self).__name__}: {problems}") from None

    def credentials(self, site: str) -> dict[str, Any]:
        """The sign-in body; its secrets are remembered first, so no echo of them leaks."""
        remember(*(v.get_secret_value() for v in self._secrets()))
        body = self._fields()
        remember(*(v for k, v in body.items() if k in _SECRET_FIELDS))
        body["site"] = {"contentUrl": site}
        if self.impersonate_user_id:
            body["user"] = {"id": self.impersonate_user_id}
        return {"credentials": body}

    def _fields(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        """Who signs in, without any secret (for a refused sign-in's message)."""
        return type(self).__name__

    def _secrets(self) -> list[SecretStr]:
        return [v for v in self.__dict__.values() if isinstance(v, SecretStr)]


#: Sign-in body fields that hold a secret (a minted JWT is new at every sign-in).
_SECRET_FIELDS = frozenset({"personalAccessTokenSecret", "password", "jwt"})


class PersonalAccessToken(_Credentials):
    """A personal access token. One PAT holds one session: two jobs sharing it sign each
    other out (401002), so give each concurrent job its own."""

    name: str = Field(min_length=1)
    secret: SecretStr

    def __init__(
        self, name: str | None = None, secret: str | SecretStr | None = None, **data: Any
    ) -> None:
        if name is not None:
            data["name"] = name
        if secret is not None:
            data["secret"] = secret
        super().__init__(**data)

    def describe(self) -> str:
        return f"personal access token {self.name!r}"

    def _fields(self) -> dict[str, Any]:
        return {
            "personalAccessTokenName": self.name,
            "personalAccessTokenSecret": self.secret.get_secret_value(),
        }


class UsernamePassword(_Credentials):
    """A user name and password (not available on Tableau Cloud with MFA)."""

    username: str = Field(min_length=1)
    password: SecretStr

    def __init__(
        self, username: str | None = None, password: str | SecretStr | None = None, **data: Any
    ) -> None:
        if username is not None:
            data["username"] = username
        if password is not None:
            data["password"] = password
        super().__init__(**data)

    def _fields(self) -> dict[str, Any]:
        return {"name": self.username, "password": self.password.get_secret_value()}

    def describe(self) -> str:
        return f"user {self.username!r} and a password"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


class ConnectedAppJWT(_Credentials):
    """A connected app (direct trust): a fresh HS256 JWT is minted for every sign-in.

    ``jwt=`` passes a token minted elsewhere instead (it is sent as is, every time).
    """

    client_id: str | None = None
    secret_id: str | None = None
    secret_value: SecretStr | None = None
    username: str | None = None
    scopes: tuple[str, ...] = DEFAULT_JWT_SCOPES
    lifetime_seconds: int = Field(default=300, gt=0, le=600)
    jwt: SecretStr | None = None
    clock: Callable[[], float] = Field(default=time.time, exclude=True, repr=False)

    @field_validator("scopes", mode="before")
    @classmethod
    def _scopes_tuple(cls, value: Sequence[str] | str) -> tuple[str, ...]:
        return (value,) if isinstance(value, str) else tuple(value)

    def model_post_init(self, context: Any) -> None:
        minting = (self.client_id, self.secret_id, self.secret_value, self.username)
        if self.jwt is None and not all(minting):
            raise ValueError(
                "ConnectedAppJWT needs client_id, secret_id, secret_value and username "
                "(or a pre-minted jwt=)"
            )

    def mint(self) -> str:
        """A new signed token (``exp`` at most 10 minutes ahead, a fresh ``jti``)."""
        if self.jwt is not None:
            return self.jwt.get_secret_value()
        assert self.secret_value is not None  # checked in model_post_init
        now = int(self.clock())
        header = {"alg": "HS256", "typ": "JWT", "kid": self.secret_id, "iss": self.client_id}
        claims = {
            "iss": self.client_id,
            "sub": self.username,
            "aud": "tableau",
            "jti": str(uuid.uuid4()),
            "iat": now,
            "exp": now + self.lifetime_seconds,
            "scp": list(self.scopes),
        }
        signing_input = ".".join(
            _b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
        )
        signature = hmac.new(
            self.secret_value.get_secret_value().encode(), signing_input.encode(), hashlib.sha256
        ).digest()
        return f"{signing_input}.{_b64url(signature)}"

    def describe(self) -> str:
        if self.username is None:
            return "a connected app's token"
        return f"connected app {self.client_id!r} as user {self.username!r}"

    def _fields(self) -> dict[str, Any]:
        return {"jwt": self.mint()}


Credentials = PersonalAccessToken | UsernamePassword | ConnectedAppJWT

"""Secrets never leave the process in text the SDK writes.

Every secret a client holds (a PAT secret, a password, a connected app's secret value and
the JWTs minted from it, a session token) is remembered here when the client first sends
it. Every text that can carry a server's words is scrubbed of them before it is kept: the
messages and fields of the SDK's errors (so ``str``, ``repr`` and ``--json`` output), job
notes, and every log line of the SDK's loggers. A server, proxy or load balancer that
echoes a credential (a 401 ``detail``, an HTML error page) cannot leak it through us.

A secret is matched as sent and in the forms an echo takes: URL-encoded, JSON-escaped and
HTML-escaped. Values shorter than :data:`MIN_SECRET_LENGTH` are not matched (they would
blank out ordinary words); no real credential is that short.
"""

from __future__ import annotations

import html
import json
import logging
import threading
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = ["MIN_SECRET_LENGTH", "REDACTED", "get_logger", "remember", "scrub", "scrub_value"]

#: What a secret is replaced with.
REDACTED = "[redacted]"
#: Shorter values are not scrubbed.
MIN_SECRET_LENGTH = 4
#: At most this many secrets are remembered (session tokens are renewed; oldest go first).
_MAX_SECRETS = 512

_lock = threading.Lock()
_secrets: dict[str, None] = {}  # insertion-ordered set
_forms: tuple[str, ...] = ()  # every form of every secret, longest first


def _variants(secret: str) -> set[str]:
    return {
        secret,
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
        json.dumps(secret)[1:-1],
        html.escape(secret),
    }


def remember(*secrets: str | None) -> None:
    """Scrub these values from every text the SDK keeps from now on."""
    global _forms
    fresh = [s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH and s not in _secrets]
    if not fresh:
        return
    with _lock:
        for secret in fresh:
            _secrets[secret] = None
        while len(_secrets) > _MAX_SECRETS:
            del _secrets[next(iter(_secrets))]
        forms: set[str] = set()
        for secret in _secrets:
            forms |= _variants(secret)
        _forms = tuple(sorted(forms, key=len, reverse=True))


def scrub(text: str) -> str:
    """``text`` with every remembered secret replaced by :data:`REDACTED`."""
    for form in _forms:
        if form in text:
            text = text.replace(form, REDACTED)
    return text


def scrub_value(value: Any) -> Any:
    """Strings scrubbed, inside tuples, lists and dicts too; anything else as it is."""
    if not _forms:
        return value
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, tuple):
        return tuple(map(scrub_value, value))
    if isinstance(value, list):
        return list(map(scrub_value, value))
    if isinstance(value, dict):
        return {k: scrub_value(v) for k, v in value.items()}
    return value


class _ScrubFilter(logging.Filter):
    """Renders a record's message once and scrubs it (arguments included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _forms:
            message = record.getMessage()
            cleaned = scrub(message)
            if cleaned != message:
                record.msg, record.args = cleaned, None
        return True


_FILTER = _ScrubFilter()


def get_logger(name: str) -> logging.Logger:
    """The logger ``name`` with the scrubbing filter (a logger's filters do not reach its
    children, so every logger of the SDK is made here)."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger

"""How long to retry and how to wait: the client's two policies, as settings.

``RetryPolicy`` says when a request that is safe to repeat is tried again; ``PollPolicy``
says how a job is followed to its end. Both are plain frozen values passed to
:class:`~tabhyper_update.TableauClient` (``retry=``, ``poll=``); tests inject ``sleep`` and
``clock`` into the client instead of waiting.

>>> TableauClient(url, site, auth, retry=RetryPolicy(max_attempts=3),  # doctest: +SKIP
...               poll=PollPolicy(initial=0.2, timeout=600))
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import (
    ApiError,
    ConnectionFailedError,
    InvalidArgumentError,
    RequestTimeoutError,
    TlsVerificationError,
    UnknownHostError,
)

__all__ = ["JobTimes", "PollPolicy", "RetryPolicy"]


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to retry a request that is safe to repeat.

    Waits grow exponentially from ``initial_wait`` (with jitter) up to ``max_wait``; a
    ``Retry-After`` header is honoured instead. Retrying stops after ``max_attempts`` or
    when the next wait would pass ``max_total_seconds`` since the first attempt.
    """

    max_attempts: int = 5
    max_total_seconds: float = 120.0
    initial_wait: float = 0.5
    max_wait: float = 30.0
    jitter: float = 0.25
    statuses: frozenset[int] = field(default_factory=lambda: frozenset({429, 500, 502, 503, 504}))

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidArgumentError("max_attempts must be at least 1")
        if self.max_total_seconds < 0 or self.initial_wait < 0 or self.max_wait < 0:
            raise InvalidArgumentError("retry times must not be negative")

    def backoff(self, attempt: int) -> float:
        base = min(self.max_wait, self.initial_wait * (2 ** (attempt - 1)))
        jitter = 1.0 + self.jitter * random.random()  # noqa: S311 - not cryptographic
        return float(base * jitter)

    def is_retryable(self, error: BaseException) -> bool:
        if isinstance(error, (TlsVerificationError, UnknownHostError)):
            return False
        if isinstance(error, ConnectionFailedError) and error.refused_locally:
            return False  # nothing listens on this machine's address: it will not start
        if isinstance(error, (ConnectionFailedError, RequestTimeoutError)):
            return True
        return isinstance(error, ApiError) and error.status in self.statuses


@dataclass(frozen=True)
class PollPolicy:
    """How to wait for a job: first poll at once, then ``initial`` growing by ``factor``
    after each poll up to ``maximum``; give up after ``timeout`` seconds.

    The first waits are short (0.05 s, doubling): a small update is often applied within
    a fraction of a second, and a micro-batch should not wait half a second to learn it.
    From a second on it polls less often than a 0.5 s start growing by 1.4 would.

    ``learn``: an update waits on its job as :meth:`expecting` says, given how long the
    last updates of the same data source took to be seen finished (a stream's jobs take
    similar times): its first poll comes just before the usual time rather than at once,
    the next just after it, then a tenth of it apart, so that a job taking about the usual
    time is seen finished in one or two polls, at most a tenth of its time late (the time
    learned is the middle of the last poll that saw it unfinished and the one that saw it
    finished, so the polls settle around the job's real time).

    ``busy_timeout``: how long an update waits out a data source that is busy (the server
    answers 409093 while a refresh or another job of it runs), in waits growing from 1 s by
    ``factor`` up to ``maximum``."""

    initial: float = 0.05
    factor: float = 2.0
    maximum: float = 30.0
    timeout: float = 3600.0
    learn: bool = True
    busy_timeout: float = 1800.0

    def __post_init__(self) -> None:
        if (
            not (0 < self.initial <= self.maximum)
            or self.factor < 1
            or self.timeout < 0
            or self.busy_timeout < 0
        ):
            raise InvalidArgumentError(
                "poll waits need 0 < initial <= maximum, factor >= 1 and timeout >= 0; got "
                f"initial={self.initial!r}, maximum={self.maximum!r}, factor={self.factor!r}, "
                f"timeout={self.timeout!r}"
            )

    def waits(self, start: float | None = None) -> Callable[[], float]:
        """Waits from ``start`` (``initial`` by default) growing by ``factor`` up to
        ``maximum``."""
        current = min(self.maximum, self.initial if start is None else start)

        def next_wait() -> float:
            nonlocal current
            value = current
            current = min(self.maximum, current * self.factor)
            return value

        return next_wait

    def usable(self, seconds: float | None) -> bool:
        """Whether an expectation of ``seconds`` paces the polls (:meth:`expecting`), so
        that the first poll waits for its first mark rather than going at once."""
        return seconds is not None and self.learn and seconds > self.initial

    def expecting(self, seconds: float | None) -> Callable[[], float]:
        """The waits for a job expected to be seen finished after about ``seconds``: polls
        at 0.95 and 1.05 times it, then 1.15, 1.25, 1.4, 1.6, 1.8 and 2 times it, then waits
        growing by ``factor`` from ``seconds`` (none longer than ``maximum``; marks closer
        than half of ``initial`` to the previous poll are skipped). Without an expectation,
        with ``learn`` off, or when ``seconds`` is within ``initial``: :meth:`waits`."""
        if not self.usable(seconds):
            return self.waits()
        assert seconds is not None
        return _Marks(seconds, self).next_wait


_MARKS = (0.95, 1.05, 1.15, 1.25, 1.4, 1.6, 1.8, 2.0)


class _Marks:
    """Waits that reach the marks of :meth:`PollPolicy.expecting` one after another."""

    def __init__(self, expected: float, policy: PollPolicy) -> None:
        self.policy = policy
        self.marks = [expected * m for m in _MARKS]
        self.at = 0.0
        self.then = policy.waits(expected)

    def next_wait(self) -> float:
        gap = self.policy.initial / 2
        while self.marks and self.marks[0] - self.at < gap:
            self.marks.pop(0)
        if not self.marks:
            return self.then()
        wait = min(self.policy.maximum, self.marks[0] - self.at)
        self.at += wait
        return wait


class JobTimes:
    """How long the last jobs of each data source took to be seen finished, in seconds
    (from the first poll on): the expectation :meth:`PollPolicy.expecting` takes."""

    KEPT = 3

    def __init__(self) -> None:
        self._seconds: dict[str, list[float]] = {}

    def expected(self, datasource_id: str) -> float | None:
        """The median of the kept times (one slow or quick job does not move it), or
        ``None`` before the first."""
        kept = self._seconds.get(datasource_id)
        return statistics.median(kept) if kept else None

    def note(self, datasource_id: str, seconds: float) -> None:
        kept = self._seconds.setdefault(datasource_id, [])
        kept.append(max(0.0, seconds))
        del kept[: -self.KEPT]

"""The fake server's limits: calls per user and window, service queries per window (site
wide), and requests in flight at once. Each refusal is a 429 with ``Retry-After``, the
seconds until the limit would let the request through."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

from .data_service import ServiceFailure
from .wire import ApiFailure

__all__ = ["Limits", "Window"]


class Window:
    """At most ``limit`` events per ``seconds`` (a sliding window)."""

    def __init__(self, limit: int, seconds: float, clock: Callable[[], float]) -> None:
        self.limit, self.seconds, self.clock = limit, seconds, clock
        self.times: deque[float] = deque()

    def take(self) -> float | None:
        """Count one event now; ``None`` when it fits, else the seconds until one would."""
        now = self.clock()
        while self.times and self.times[0] <= now - self.seconds:
            self.times.popleft()
        if len(self.times) >= self.limit:
            oldest = self.times[0] if self.times else now
            return max(1.0, math.ceil(oldest + self.seconds - now))
        self.times.append(now)
        return None

    def age(self, seconds: float) -> None:
        """Move every counted event ``seconds`` into the past."""
        self.times = deque(t - seconds for t in self.times)


def too_many(what: str, wait: float, *, service: bool = False) -> ApiFailure:
    headers = {"Retry-After": f"{wait:g}"}
    if service:
        return ServiceFailure(429, "429000", "Too Many Requests", what, headers)
    return ApiFailure(429, "429000", "Too Many Requests", what, headers)


class Limits:
    """The limits of one fake site (``None``: no limit)."""

    def __init__(
        self,
        *,
        calls_per_window: int | None,
        queries_per_window: int | None,
        max_concurrent: int | None,
        window: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.calls_per_window = calls_per_window
        self.queries = (
            Window(queries_per_window, window, clock) if queries_per_window is not None else None
        )
        self.max_concurrent = max_concurrent
        self.window, self.clock = window, clock
        self._calls: dict[str, Window] = {}
        self._lock = threading.Lock()
        self.in_flight = 0
        #: Refusals so far, by limit ("calls", "queries", "concurrent").
        self.refused: dict[str, int] = {"calls": 0, "queries": 0, "concurrent": 0}

    def enter(self) -> None:
        """A request starts (429 when too many are in flight); pair with :meth:`leave`."""
        with self._lock:
            if self.max_concurrent is not None and self.in_flight >= self.max_concurrent:
                self.refused["concurrent"] += 1
                raise too_many(
                    f"the site has {self.in_flight} requests in flight; at most "
                    f"{self.max_concurrent} at once",
                    1,
                )
            self.in_flight += 1

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def call(self, user: str) -> None:
        """Count one REST call of ``user`` (429 past the limit)."""
        if self.calls_per_window is None:
            return
        with self._lock:
            window = self._calls.setdefault(
                user, Window(self.calls_per_window, self.window, self.clock)
            )
            wait = window.take()
            if wait is not None:
                self.refused["calls"] += 1
        if wait is not None:
            raise too_many(
                f"this user made {self.calls_per_window} calls in {self.window:g} s", wait
            )

    def query(self) -> None:
        """Count one VizQL Data Service query on the site (429 past the quota)."""
        if self.queries is None:
            return
        with self._lock:
            wait = self.queries.take()
            if wait is not None:
                self.refused["queries"] += 1
        if wait is not None:
            raise too_many(
                f"the site's VizQL Data Service quota of {self.queries.limit} queries per "
                f"{self.window:g} s is spent",
                wait,
                service=True,
            )

    def age(self, seconds: float) -> None:
        """Move every counted call and query ``seconds`` into the past."""
        with self._lock:
            for window in [*self._calls.values(), *([self.queries] if self.queries else [])]:
                window.age(seconds)

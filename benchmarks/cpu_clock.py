"""CPU seconds of the processes a benchmark runs on: this Python process, the Spark JVM
and every ``hyperd`` (Linux ``/proc``). On N cores a step cannot take less than its CPU
seconds / N, however its engines overlap."""

from __future__ import annotations

import os
from typing import Any


class CpuClock:
    """CPU seconds (user + system) used so far by this Python process, the Spark JVM and
    every ``hyperd`` process, read from ``/proc`` (Linux); ``None`` elsewhere."""

    def __init__(self, jvm_pid: int | None) -> None:
        self.jvm_pid = jvm_pid
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def _of(self, pid: int) -> float:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / self.tick

    def _hyperd(self) -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/comm") as f:
                        if f.read().startswith("hyperd"):
                            found.append(int(entry))
                except OSError:
                    continue
        return found

    def now(self) -> dict[str, float] | None:
        if not os.path.isdir("/proc/self"):
            return None
        return {
            "JVM": self._of(self.jvm_pid) if self.jvm_pid else 0.0,
            "Hyper": sum(self._of(p) for p in self._hyperd()),
            "Python": self._of(os.getpid()),
        }


def jvm_pid(spark: Any) -> int | None:
    """The pid of ``spark``'s JVM (``None`` under Spark Connect, which has no local JVM)."""
    jvm = getattr(spark, "_jvm", None)
    return int(jvm.java.lang.ProcessHandle.current().pid()) if jvm else None

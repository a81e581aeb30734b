"""The Spark sessions the SDK starts itself (the command line, the demo, the examples).

Loopback only, no UI, no console progress bars, and quiet: the JVM's start-up lines and
Spark's log4j output are kept off the terminal unless ``verbose``. A session the caller
already has is used as it is and never changed or stopped. With ``SPARK_REMOTE`` set the
session is a Spark Connect one (``SPARK_REMOTE=local[2]`` starts a local Connect server).

Python workers run with the driver's own interpreter (``sys.executable``), so a virtual
environment of another Python than the ``python3`` on the PATH works; ``PYSPARK_PYTHON``
or ``spark.pyspark.python``, when the user set either, wins.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["COMPILE_HUGE_METHODS", "local_spark", "own_spark"]


@contextlib.contextmanager
def _stderr_silenced(silenced: bool) -> Iterator[None]:
    """While the JVM starts, file descriptor 2 points to /dev/null: the JVM keeps that as
    its stderr (its warnings and log4j console), the Python process gets its own back."""
    if not silenced:
        yield
        return
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


@contextlib.contextmanager
def _workers_python(conf: Mapping[str, str]) -> Iterator[None]:
    """While a session starts, ``PYSPARK_PYTHON`` names the Python its workers run: the
    user's ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` if set, else this interpreter.
    PySpark reads it when the context (and the JVM, which inherits it) starts; the variable
    is restored afterwards."""
    if os.environ.get("PYSPARK_PYTHON"):
        yield
        return
    os.environ["PYSPARK_PYTHON"] = conf.get("spark.pyspark.python") or sys.executable
    try:
        yield
    finally:
        os.environ.pop("PYSPARK_PYTHON", None)


#: A JVM that runs for seconds over a few rows spends more CPU in the JIT's optimising
#: compiler than that compiler's code saves: the quick compiler alone (the demo, 2 cores:
#: 43 -> 23 CPU seconds, 26 -> 20 s).
QUICK_JIT = "-XX:TieredStopAtLevel=1"
#: HotSpot leaves any method over 8,000 bytes of bytecode interpreted. Spark fuses a stage's
#: operators into one generated method, which a few decoded columns take past that size
#: (a Debezium decoding: 14 KB); compiled, such a stage runs fused at full speed, where
#: Spark's advice (``spark.sql.codegen.hugeMethodLimit=8000``) unfuses it, copying each row
#: from operator to operator (measured: ``benchmarks/debezium_decoding.py``).
COMPILE_HUGE_METHODS = "-XX:-DontCompileHugeMethods"


@contextlib.contextmanager
def own_spark(
    app_name: str,
    *,
    master: str = "local[2]",
    verbose: bool = False,
    conf: Mapping[str, str] | None = None,
    quick_jit: bool = False,
) -> Iterator[Any]:
    """The application's active session, or a new quiet local one (stopped at the end),
    with ``conf`` on top of the SDK's own settings. A JVM this call starts compiles methods
    of any size (:data:`COMPILE_HUGE_METHODS`); ``quick_jit``: with its quick compiler only
    (:data:`QUICK_JIT`)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:  # inside an application that has one: borrow it, never stop it
        yield active
        return
    remote = os.environ.get("SPARK_REMOTE")
    builder = SparkSession.builder.appName(app_name)
    if remote:
        # Spark Connect: the server has its own settings (a local one is started quiet).
        builder = builder.remote(remote)
        settings = dict(conf or {})
    else:
        if not os.environ.get("MASTER"):
            builder = builder.master(master)
        settings = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.extraJavaOptions": " ".join(
                [COMPILE_HUGE_METHODS, *([QUICK_JIT] if quick_jit else [])]
            ),
            **(conf or {}),
        }
    for key, value in settings.items():
        builder = builder.config(key, value)
    with _stderr_silenced(not verbose), _workers_python(settings):
        spark = builder.getOrCreate()
    if not remote:
        spark.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    try:
        yield spark
    finally:
        spark.stop()


@contextlib.contextmanager
def local_spark(verbose: bool = False, *, few_rows: bool = False) -> Iterator[Any]:
    """A quiet local Spark session for the demo, the examples and the benchmarks (loopback
    only, no UI, two shuffle partitions, UTC), or the application's active one.
    ``few_rows``: a short run over a few rows (the demo): a session this call starts gets
    a JVM that compiles with its quick compiler only."""
    with own_spark(
        "tabhyper-update-demo",
        verbose=verbose,
        conf={"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"},
        quick_jit=few_rows,
    ) as spark:
        yield spark

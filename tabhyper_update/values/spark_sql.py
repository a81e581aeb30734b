"""Spark SQL text the SDK writes: quoted names, literals that mean the same under every
parser setting, whole numbers read from text."""

from __future__ import annotations

import contextlib
import inspect
import re
import uuid
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["number_from_text", "query_over", "source_views", "sql_name", "sql_text"]

#: Whole numbers written as text, as many digits as DECIMAL(38, 0) holds.
_WHOLE_NUMBER = "^[0-9]{1,38}$"

#: Text a single-quoted literal holds as it is under every parser setting.
_PLAIN_TEXT = re.compile(r"[A-Za-z0-9_.:\-]*")


def sql_name(name: str) -> str:
    """A column name quoted for Spark SQL (a dot or a backtick in it stays part of it)."""
    return "`" + name.replace("`", "``") + "`"


def sql_text(value: str) -> str:
    """A Spark SQL string literal of ``value`` that means the same whatever the parser's
    escaping settings: quoted as it is when it holds only letters, digits and ``_ . : -``,
    else its UTF-8 bytes in hexadecimal, decoded (a function call each, which Spark's
    analyser and optimiser then fold: dearer on a small change set)."""
    if _PLAIN_TEXT.fullmatch(value):
        return f"'{value}'"
    return f"decode(unhex('{value.encode('utf-8').hex()}'), 'UTF-8')"


def number_from_text(sql: str) -> str:
    """Spark SQL: the whole number written in ``sql``'s text, or NULL when it is none."""
    text = f"CAST({sql} AS STRING)"
    return f"CASE WHEN {text} RLIKE '{_WHOLE_NUMBER}' THEN CAST({text} AS DECIMAL(38, 0)) END"


_SOURCE = "\x00source\x00"
#: The temporary views :func:`query_over` made where Spark's ``sql()`` takes no DataFrame,
#: dropped when the :func:`source_views` scope that holds them ends.
_VIEWS: ContextVar[list[tuple[Any, str]] | None] = ContextVar("tabhyper_views", default=None)


def query_over(df: DataFrame, query_of: Callable[[str], str]) -> DataFrame:
    """The Spark SQL query ``query_of(source)`` run over ``df`` (``source`` names it in the
    query's text), in one call to Spark.

    A plan built from DataFrame calls costs a round trip to the JVM per call, and one per
    expression of each list it passes; a micro-batch feels that. One query text costs one
    parse, one analysis and a few calls (PySpark names ``df`` by a temporary view it drops
    again; Spark Connect sends ``df``'s plan with the query).

    Where ``sql()`` takes no DataFrame (the Spark Connect client of pyspark 3.x), ``df`` is
    named by a temporary view of a name of its own, which lives until the enclosing
    :func:`source_views` scope ends (Spark Connect reads the query again each time it runs).
    """
    spark = df.sparkSession
    if _takes_dataframes(spark.sql):
        # Braces in the text (literals, names) are the formatter's escapes, not placeholders.
        text = query_of(_SOURCE).replace("{", "{{").replace("}", "}}")
        return spark.sql(text.replace(_SOURCE, "{source}"), source=df)
    views = _VIEWS.get()
    if views is None:
        raise RuntimeError("query_over() without DataFrame arguments needs a source_views() scope")
    name = f"tabhyper_source_{uuid.uuid4().hex}"
    df.createOrReplaceTempView(name)
    views.append((spark, name))
    return spark.sql(query_of(sql_name(name)))


@contextlib.contextmanager
def source_views() -> Iterator[None]:
    """The scope of the temporary views :func:`query_over` makes: dropped when it ends."""
    views: list[tuple[Any, str]] = []
    token = _VIEWS.set(views)
    try:
        yield
    finally:
        _VIEWS.reset(token)
        for spark, name in views:
            with contextlib.suppress(Exception):  # a session already stopped holds none
                spark.catalog.dropTempView(name)


def _takes_dataframes(sql: Callable[..., Any]) -> bool:
    """Whether ``sql`` (a session's ``sql`` method) takes DataFrames as keyword arguments."""
    try:
        parameters = inspect.signature(sql).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)

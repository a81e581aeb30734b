"""Spark SQL text the SDK writes: quoted names, literals that mean the same under every
parser setting, whole numbers read from text."""

from __future__ import annotations

__all__ = ["number_from_text", "sql_name", "sql_text"]

#: Whole numbers written as text, as many digits as DECIMAL(38, 0) holds.
_WHOLE_NUMBER = "^[0-9]{1,38}$"


def sql_name(name: str) -> str:
    """A column name quoted for Spark SQL (a dot or a backtick in it stays part of it)."""
    return "`" + name.replace("`", "``") + "`"


def sql_text(value: str) -> str:
    """A Spark SQL string literal of ``value`` that means the same whatever the parser's
    escaping settings: the UTF-8 bytes in hexadecimal, decoded."""
    return f"decode(unhex('{value.encode('utf-8').hex()}'), 'UTF-8')"


def number_from_text(sql: str) -> str:
    """Spark SQL: the whole number written in ``sql``'s text, or NULL when it is none."""
    text = f"CAST({sql} AS STRING)"
    return f"CASE WHEN {text} RLIKE '{_WHOLE_NUMBER}' THEN CAST({text} AS DECIMAL(38, 0)) END"

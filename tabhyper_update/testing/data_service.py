"""The fake server's VizQL Data Service: ``read-metadata`` and ``query-datasource`` answered
with Hyper on the data source's ``.hyper`` file.

It understands what the SDK asks for and refuses the rest with a 400 in the service's
error shape: fields as dimensions, as measures (SUM, AVG, MIN, MAX, COUNT, COUNTD) or as
calculations in a small part of Tableau's formula language (``[field]``, numbers, strings,
``#date#``, ``+ - * /``, ``IF … THEN … ELSE … END``, FLOOR, LEFT, LEN, INT, DATEDIFF by
'second' or 'day' and the aggregations); SET and numeric RANGE / MIN /
MAX filters on dimensions and calculations. Field captions are the column names (with
`` (table)`` added when two tables share one).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

from tableauhyperapi import TypeTag

from ..local.hyper import connect, quote_literal, quote_name, table_ref
from .wire import ApiFailure

__all__ = ["ServiceFailure", "metadata", "run_query"]

_TYPES = {
    TypeTag.BIG_INT: "INTEGER",
    TypeTag.INT: "INTEGER",
    TypeTag.SMALL_INT: "INTEGER",
    TypeTag.OID: "INTEGER",
    TypeTag.DOUBLE: "REAL",
    TypeTag.NUMERIC: "REAL",
    TypeTag.TEXT: "STRING",
    TypeTag.VARCHAR: "STRING",
    TypeTag.CHAR: "STRING",
    TypeTag.BOOL: "BOOLEAN",
    TypeTag.DATE: "DATE",
    TypeTag.TIMESTAMP: "DATETIME",
    TypeTag.TIMESTAMP_TZ: "DATETIME",
}
#: The aggregations a field or a calculation may name: Hyper SQL of each (``{}``: its
#: argument) and, in a calculation, the kind of its result.
_AGGREGATES: dict[str, tuple[str, str]] = {
    "SUM": ("SUM({})", "number"),
    "AVG": ("AVG({})", "number"),
    "MIN": ("MIN({})", "number"),
    "MAX": ("MAX({})", "number"),
    "COUNT": ("COUNT({})", "number"),
    "COUNTD": ("COUNT(DISTINCT {})", "INTEGER"),
}
_TOKEN = re.compile(
    r"\s*(?:(?P<field>\[(?:[^\]]|\]\])+\])|(?P<string>'(?:[^']|'')*')"
    r"|(?P<number>\d+(?:\.\d+)?)|(?P<date>#[0-9: -]+#)|(?P<name>[A-Za-z_]+)"
    r"|(?P<op>>=|<=|<>|!=|==|[-+*/%(),=<>]))"
)


class ServiceFailure(ApiFailure):
    """An error answer in the VizQL Data Service's shape."""

    def response(self) -> Any:
        answer = super().response()
        answer.body = {
            "errorCode": self.code,
            "message": self.detail or self.summary,
            "datetime": datetime.now(timezone.utc).isoformat(),
        }
        return answer


def refused(message: str) -> ServiceFailure:
    return ServiceFailure(400, "400800", "Bad Request", message)


@dataclass(frozen=True)
class _Field:
    caption: str
    schema: str
    table: str
    column: str
    data_type: str


def _fields(file: Path) -> dict[str, _Field]:
    """Caption → field, over every table of the file."""
    found: list[_Field] = []
    with connect(file) as conn:
        for schema in conn.catalog.get_schema_names():
            for name in conn.catalog.get_table_names(schema):
                table = conn.catalog.get_table_definition(name)
                for col in table.columns:
                    found.append(
                        _Field(
                            str(col.name.unescaped),
                            str(schema.name.unescaped),
                            str(name.name.unescaped),
                            str(col.name.unescaped),
                            _TYPES.get(col.type.tag, "UNKNOWN"),
                        )
                    )
    counts: dict[str, int] = {}
    for f in found:
        counts[f.column] = counts.get(f.column, 0) + 1
    return {(f.column if counts[f.column] == 1 else f"{f.column} ({f.table})"): f for f in found}


def metadata(file: Path) -> list[dict[str, Any]]:
    """``read-metadata``'s ``data``: one entry per field."""
    return [
        {
            "fieldName": caption,
            "fieldCaption": caption,
            "dataType": f.data_type,
            "defaultAggregation": "SUM" if f.data_type in ("INTEGER", "REAL") else "COUNT",
            "columnClass": "COLUMN",
            "logicalTableId": f.table,
        }
        for caption, f in _fields(file).items()
    ]


class _Formula:
    """A calculation's formula as Hyper SQL (a recursive-descent reading of the subset)."""

    def __init__(self, text: str, query: _Query) -> None:
        self.query = query
        self.tokens: list[tuple[str, str]] = []
        position = 0
        while position < len(text.rstrip()):
            match = _TOKEN.match(text, position)
            if match is None or match.end() == position:
                raise refused(f"cannot read the calculation {text!r} at {text[position:]!r}")
            kind = match.lastgroup or ""
            self.tokens.append((kind, match.group(kind)))
            position = match.end()
        self.at = 0
        self.aggregate = False

    def sql(self) -> str:
        out, _ = self._or()
        if self.at != len(self.tokens):
            raise refused(f"unexpected {self.tokens[self.at][1]!r} in a calculation")
        return out

    def _peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def _take(self, expected: str | None = None) -> tuple[str, str]:
        if self.at >= len(self.tokens):
            raise refused("a calculation ends too early")
        token = self.tokens[self.at]
        if expected is not None and token[1] != expected:
            raise refused(f"expected {expected!r} in a calculation, found {token[1]!r}")
        self.at += 1
        return token

    def _or(self) -> tuple[str, str]:
        left, kind = self._and()
        while (self._peek() or "").upper() == "OR":
            self._take()
            right, _ = self._and()
            left, kind = f"({left} OR {right})", "BOOLEAN"
        return left, kind

    def _and(self) -> tuple[str, str]:
        left, kind = self._compare()
        while (self._peek() or "").upper() == "AND":
            self._take()
            right, _ = self._compare()
            left, kind = f"({left} AND {right})", "BOOLEAN"
        return left, kind

    def _compare(self) -> tuple[str, str]:
        left, kind = self._sum()
        if self._peek() in ("=", "==", "<", ">", "<=", ">=", "<>", "!="):
            taken = self._take()[1]
            op = {"==": "=", "!=": "<>"}.get(taken, taken)
            right, _ = self._sum()
            return f"({left} {op} {right})", "BOOLEAN"
        return left, kind

    def _sum(self) -> tuple[str, str]:
        left, kind = self._product()
        while self._peek() in ("+", "-"):
            op = self._take()[1]
            right, _ = self._product()
            left, kind = f"({left} {op} {right})", "number"
        return left, kind

    def _product(self) -> tuple[str, str]:
        left, kind = self._atom()
        while self._peek() in ("*", "/", "%"):
            op = self._take()[1]
            right, _ = self._atom()
            if op == "/":  # Tableau divides as real numbers
                left = f"(CAST({left} AS DOUBLE PRECISION) / {right})"
            elif op == "%":  # integers: the remainder has the dividend's sign
                left = f"({left} % {right})"
            else:
                left = f"({left} * {right})"
            kind = "number"
        return left, kind

    def _atom(self) -> tuple[str, str]:
        kind, text = self._take()
        if kind == "number":
            return text, "number"
        if kind == "date":
            return f"TIMESTAMP {quote_literal(text[1:-1].strip())}", "DATETIME"
        if kind == "string":
            return quote_literal(text[1:-1].replace("''", "'")), "string"
        if kind == "field":
            field = self.query.field(text[1:-1].replace("]]", "]"))
            return quote_name(field.column), field.data_type
        if text == "-":
            inner, _ = self._atom()
            return f"(-{inner})", "number"
        if text == "(":
            inner, inner_kind = self._or()
            self._take(")")
            return f"({inner})", inner_kind
        if kind == "name" and text.upper() == "IF":
            return self._if()
        if kind == "name":
            return self._call(text.upper())
        raise refused(f"unexpected {text!r} in a calculation")

    def _word(self, word: str) -> None:
        found = self._take()[1]
        if found.upper() != word:
            raise refused(f"expected {word} in a calculation, found {found!r}")

    def _if(self) -> tuple[str, str]:
        """``IF condition THEN a ELSE b END``."""
        condition, _ = self._or()
        self._word("THEN")
        then, kind = self._or()
        self._word("ELSE")
        otherwise, _ = self._or()
        self._word("END")
        return f"(CASE WHEN {condition} THEN {then} ELSE {otherwise} END)", kind

    def _call(self, name: str) -> tuple[str, str]:
        self._take("(")
        args = [self._or()]
        while self._peek() == ",":
            self._take(",")
            args.append(self._or())
        self._take(")")
        sql = [a for a, _ in args]
        if name in _AGGREGATES:
            if self.aggregate:
                raise refused("an aggregation inside an aggregation")
            self.aggregate = True
            template, kind = _AGGREGATES[name]
            return template.format(sql[0]), kind
        rule = _FUNCTIONS.get((name, len(sql)))
        made = rule(sql, [kind for _, kind in args]) if rule is not None else None
        if made is not None:
            return made
        raise refused(f"the function {name} with {len(sql)} argument(s) is not supported here")


def _datediff(sql: list[str], kinds: list[str]) -> tuple[str, str] | None:
    if sql[0] == "'day'":
        return f"(CAST({sql[2]} AS DATE) - CAST({sql[1]} AS DATE))", "INTEGER"
    if sql[0] == "'second'":
        epoch = "FLOOR(EXTRACT(EPOCH FROM {}))"
        return f"CAST({epoch.format(sql[2])} - {epoch.format(sql[1])} AS BIGINT)", "INTEGER"
    return None


def _int(sql: list[str], kinds: list[str]) -> tuple[str, str]:
    if kinds[0] == "BOOLEAN":
        return f"(CASE WHEN {sql[0]} THEN 1 WHEN NOT {sql[0]} THEN 0 END)", "INTEGER"
    return f"CAST(TRUNC({sql[0]}) AS BIGINT)", "INTEGER"


#: The calculation functions the fake knows, by (name, number of arguments): each makes
#: (Hyper SQL, result kind) of its arguments' SQL and kinds, or ``None`` (not supported).
_FUNCTIONS: dict[tuple[str, int], Callable[[list[str], list[str]], tuple[str, str] | None]] = {
    ("DATEDIFF", 3): _datediff,
    ("ROUND", 2): lambda sql, _: (f"ROUND({sql[0]}, CAST({sql[1]} AS INTEGER))", "number"),
    ("FLOOR", 1): lambda sql, _: (f"CAST(FLOOR({sql[0]}) AS BIGINT)", "INTEGER"),
    ("LEFT", 2): lambda sql, _: (f"LEFT({sql[0]}, CAST({sql[1]} AS INTEGER))", "STRING"),
    ("LEN", 1): lambda sql, _: (f"LENGTH({sql[0]})", "INTEGER"),
    ("INT", 1): _int,
}


class _Query:
    """One ``query-datasource`` request as SQL over the file's tables."""

    def __init__(self, fields: dict[str, _Field]) -> None:
        self.fields = fields
        self.tables: set[tuple[str, str]] = set()

    def field(self, caption: str) -> _Field:
        found = self.fields.get(caption)
        if found is None:
            raise refused(f"unknown field {caption!r}")
        self.tables.add((found.schema, found.table))
        return found

    def expression(self, spec: dict[str, Any]) -> tuple[str, bool]:
        """(SQL, is it an aggregate) of one field of the query or of a filter."""
        if not isinstance(spec, dict):
            raise refused(f"a field must be an object, got {spec!r}")
        if "calculation" in spec:
            formula = _Formula(str(spec["calculation"]), self)
            return formula.sql(), formula.aggregate
        caption = spec.get("fieldCaption")
        if not isinstance(caption, str):
            raise refused("a field needs a fieldCaption or a calculation")
        column = quote_name(self.field(caption).column)
        function = spec.get("function")
        if function is None:
            return column, False
        if function not in _AGGREGATES:
            raise refused(f"the function {function!r} is not supported here")
        return _AGGREGATES[function][0].format(column), True

    def condition(self, spec: dict[str, Any]) -> str:
        sql, aggregate = self.expression(spec.get("field") or {})
        if aggregate:
            raise refused("filters on aggregated fields are not supported here")
        build = _FILTERS.get(spec.get("filterType"))
        if build is None:
            raise refused(f"the filter type {spec.get('filterType')!r} is not supported here")
        return build(sql, spec)


def _set_filter(sql: str, spec: dict[str, Any]) -> str:
    """Hyper SQL of a ``SET`` filter on ``sql``."""
    values = spec.get("values")
    if not isinstance(values, list):
        raise refused("a SET filter needs a list of values")
    if not values:
        return "TRUE" if spec.get("exclude") else "FALSE"
    listed = ", ".join(map(_literal, values))
    return f"{sql} {'NOT ' if spec.get('exclude') else ''}IN ({listed})"


#: The bounds each ``quantitativeFilterType`` reads, and how each bound tests a value.
_BOUNDS: dict[Any, tuple[str, ...]] = {"RANGE": ("min", "max"), "MIN": ("min",), "MAX": ("max",)}
_BOUND_TESTS = {"min": ">=", "max": "<="}


def _range_filter(sql: str, spec: dict[str, Any]) -> str:
    """Hyper SQL of a ``QUANTITATIVE_NUMERICAL`` filter on ``sql``."""
    how = spec.get("quantitativeFilterType")
    bounds = _BOUNDS.get(how)
    if bounds is None:
        raise refused(f"the quantitative filter type {how!r} is not supported here")
    test = " AND ".join(f"{sql} {_BOUND_TESTS[b]} {_number(spec.get(b))}" for b in bounds)
    return f"({test} OR {sql} IS NULL)" if spec.get("includeNulls") else f"({test})"


#: Each filter type's Hyper SQL, by the ``filterType`` a query names.
_FILTERS: dict[Any, Callable[[str, dict[str, Any]], str]] = {
    "SET": _set_filter,
    "QUANTITATIVE_NUMERICAL": _range_filter,
}


def _literal(value: Any) -> str:
    if value is None:
        raise refused("a SET filter cannot hold null")
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return _number(value)
    return quote_literal(str(value))


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise refused(f"expected a number, got {value!r}")
    return repr(value)


def _json_value(value: Any) -> Any:
    if hasattr(value, "to_datetime"):
        moment: datetime = value.to_datetime()
        if moment.tzinfo is not None:
            return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")
    if hasattr(value, "to_date"):
        return value.to_date().isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN or infinity
    return value


def run_query(file: Path, body: dict[str, Any]) -> list[Any]:
    """``query-datasource``'s ``data`` for ``body`` over ``file``: one object per row
    (``returnFormat`` OBJECTS) or one array (ARRAYS), at most ``rowLimit`` rows."""
    query_spec = body.get("query")
    if not isinstance(query_spec, dict) or not query_spec.get("fields"):
        raise refused("the query needs 'fields'")
    shape, limit, disaggregate = _options(body.get("options") or {})
    text, names = _query_sql(file, query_spec, disaggregate, limit)
    with connect(file) as conn:
        rows = conn.execute_list_query(text)
    if shape == "ARRAYS":
        return [list(map(_json_value, row)) for row in rows]
    return [{n: _json_value(v) for n, v in zip(names, row, strict=True)} for row in rows]


def _options(options: dict[str, Any]) -> tuple[str, int | None, bool]:
    """A query's ``returnFormat``, ``rowLimit`` and ``disaggregate``, checked."""
    shape = options.get("returnFormat", "OBJECTS")
    if shape not in ("OBJECTS", "ARRAYS"):
        raise refused(f"returnFormat must be OBJECTS or ARRAYS, got {shape!r}")
    limit = options.get("rowLimit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise refused(f"rowLimit must be a positive integer, got {limit!r}")
    return shape, limit, bool(options.get("disaggregate"))


def _field_name(spec: dict[str, Any]) -> str:
    """The name a query's field answers under: its alias, else its caption."""
    return str(spec.get("fieldAlias") or spec.get("fieldCaption"))


def _query_sql(
    file: Path, query_spec: dict[str, Any], disaggregate: bool, limit: int | None
) -> tuple[str, list[str]]:
    """Hyper SQL of a query's fields and filters over the one table they read, and the
    names of its columns."""
    query = _Query(_fields(file))
    selected = [(_field_name(spec), *query.expression(spec)) for spec in query_spec["fields"]]
    where = list(map(query.condition, query_spec.get("filters") or []))
    if len(query.tables) != 1:
        raise refused("a query here reads exactly one table")
    ((schema, table),) = query.tables
    if disaggregate and any(aggregate for _, _, aggregate in selected):
        raise refused("disaggregate with aggregated fields is not supported here")
    sql = _select(selected, table_ref(schema, table), where, grouped=not disaggregate)
    limited = f" LIMIT {int(limit)}" if limit is not None else ""
    return sql + limited, [n for n, _, _ in selected]


def _select(
    selected: Sequence[tuple[str, str, bool]], source: str, where: Sequence[str], grouped: bool
) -> str:
    """Hyper SQL of the ``selected`` fields (name, SQL, whether aggregated) of ``source``:
    filtered by all of ``where``, ``grouped`` by the fields not aggregated, and ordered by
    them."""
    dims = [(i, sql) for i, (_, sql, aggregate) in enumerate(selected, 1) if not aggregate]
    clauses = [
        f"SELECT {', '.join(f'{sql} AS {quote_name(n)}' for n, sql, _ in selected)}",
        f"FROM {source}",
        *(["WHERE " + " AND ".join(where)] if where else []),
    ]
    if dims:
        clauses += ["GROUP BY " + ", ".join(sql for _, sql in dims)] if grouped else []
        clauses.append("ORDER BY " + ", ".join(str(i) for i, _ in dims))
    return " ".join(clauses)

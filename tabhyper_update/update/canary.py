"""The probe's canary: the data source it publishes (:data:`CANARY`: a table per case, each
column's type and nullability chosen so that the cases' outcomes differ by semantics) and the
small ``.hyper`` files of its scripted updates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..local.hyper import connect, create_tables, quote_name, table_ref
from ..values.actions import Insert, Update, Upsert, _Action
from ..values.conditions import keys_match

__all__ = [
    "CANARY",
    "ROW",
    "ROW_CASES",
    "SCHEMA",
    "by_id",
    "hyper_file",
    "insert_from",
    "oracle",
    "padding_file",
    "upsert_by",
]

#: The schema of every table the probe makes.
SCHEMA = "Extract"
CANARY = {
    "Extract": (
        "id BIGINT NOT NULL, val TEXT, amount NUMERIC(12,2), flag BOOLEAN NOT NULL",
        [
            "(1, 'one', 1.00, TRUE)",
            "(2, 'two', 2.00, TRUE)",
            "(3, 'three', 3.00, TRUE)",
            "(4, 'four', 4.00, TRUE)",
            "(6, 'six', 6.00, TRUE)",
        ],
    ),
    "Guarded": ("gid BIGINT NOT NULL, gval TEXT", ["(5, 'start')"]),
    "Guarded_positions": (
        "gid BIGINT NOT NULL, gseq BIGINT NOT NULL, guarded BOOLEAN NOT NULL",
        ["(5, 10, TRUE)"],
    ),
    "Padding": ("pid BIGINT, filler TEXT", []),
}


def hyper_file(path: Path, tables: Mapping[str, tuple[str, Sequence[str]]]) -> Path:
    """A ``.hyper`` file at ``path`` with ``tables``: name → (column DDL, rows as SQL)."""
    create_tables(path, tables, schema=SCHEMA)
    return path


def by_id(source_table: str) -> Update:
    return Update(
        target_schema=SCHEMA,
        target_table="Extract",
        source_schema=SCHEMA,
        source_table=source_table,
        condition=keys_match("id"),
    )


def upsert_by(source_table: str, target_table: str, key: str) -> Upsert:
    return Upsert(
        target_schema=SCHEMA,
        target_table=target_table,
        source_schema=SCHEMA,
        source_table=source_table,
        condition=keys_match(key),
    )


def insert_from(source_table: str, target_table: str) -> _Action:
    return Insert(
        target_schema=SCHEMA,
        target_table=target_table,
        source_schema=SCHEMA,
        source_table=source_table,
    )


def padding_file(path: Path, size: int) -> None:
    """A ``.hyper`` file of at least ``size`` bytes of text Hyper cannot compress away."""
    with connect(path, create=True) as conn:
        conn.execute_command(f"CREATE SCHEMA {quote_name(SCHEMA)}")
        padding = table_ref(SCHEMA, "Padding")
        conn.execute_command(f"CREATE TABLE {padding} (pid BIGINT, filler TEXT)")
        rows = size // 200 + 1
        conn.execute_command(
            f"INSERT INTO {padding} "
            "SELECT g, CAST(random() AS TEXT) || CAST(random() AS TEXT) || CAST(random() AS TEXT) "
            "|| CAST(random() AS TEXT) || CAST(random() AS TEXT) || CAST(random() AS TEXT) "
            "|| CAST(random() AS TEXT) || CAST(random() AS TEXT) || CAST(random() AS TEXT) "
            f"FROM generate_series(1, {rows}) AS s(g)"
        )


#: The canary's ``Extract`` columns as a source names them: an update's source holds every
#: one, so that each case measures one thing (how a source lacking columns is met is a case
#: of its own).
ROW = "id BIGINT, val TEXT, amount NUMERIC(12,2), flag BOOLEAN"


def oracle(table: str, key_column: str, key: int) -> tuple[str, list[str]]:
    """A source row for canary table ``table`` holding every column, NULL but its key
    ``key_column`` = ``key``: an update from it fails wherever it meets a row (a NOT NULL
    column set to NULL) and applies nothing where it meets none."""
    columns = [c.replace(" NOT NULL", "") for c in CANARY[table][0].split(", ")]
    values = [str(key) if c.split()[0] == key_column else "NULL" for c in columns]
    return ", ".join(columns), [f"({', '.join(values)})"]


#: A case read back from one canary row: the update's payload tables (name → column DDL,
#: rows as SQL) and its action, the row read back (key, column), and what each value found
#: there says (the update refused: "refused").
RowCase = tuple[dict[str, tuple[str, list[str]]], _Action, tuple[int, str], dict[Any, str]]

#: The probe's cases read back from one canary row.
ROW_CASES: dict[str, RowCase] = {
    # A key matched by two source rows: one of them used, or refused.
    "multi_match": (
        {"twice": (ROW, ["(1, 'first', 1.00, TRUE)", "(1, 'second', 1.00, TRUE)"])},
        by_id("twice"),
        (1, "val"),
        {"first": "one_row_used", "second": "one_row_used"},
    ),
    # A NUMERIC(12,4) value into NUMERIC(12,2).
    "narrowing": (
        {
            "wide": (
                "id BIGINT, val TEXT, amount NUMERIC(12,4), flag BOOLEAN",
                ["(3, 'three', 1.2345, TRUE)"],
            )
        },
        by_id("wide"),
        (3, "amount"),
        {1.23: "rounded", 1.2345: "kept"},
    ),
    # An update whose source holds a column the target lacks.
    "extra_columns": (
        {"extra": (f"{ROW}, stray TEXT", ["(6, 'extra', 6.00, TRUE, 'stray')"])},
        by_id("extra"),
        (6, "val"),
        {"extra": "ignored"},
    ),
    # Rows inserted from a source lacking target columns (the canary's have no default:
    # inserted, they are NULL).
    "missing_columns": (
        {"lacking": ("id BIGINT, flag BOOLEAN", ["(7, TRUE)"])},
        insert_from("lacking", "Extract"),
        (7, "flag"),
        {True: "null"},
    ),
    # Rows updated from a source lacking a (nullable) target column: row 2's amount (2.00)
    # as it was, or NULL.
    "partial_update": (
        {"partial": ("id BIGINT, val TEXT, flag BOOLEAN", ["(2, 'two-partial', TRUE)"])},
        by_id("partial"),
        (2, "amount"),
        {2.0: "kept", None: "null"},
    ),
}

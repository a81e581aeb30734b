"""The probe's canary: the data source it publishes (:data:`CANARY`: a table per case, each
column's type and nullability chosen so that the cases' outcomes differ by semantics) and the
small ``.hyper`` files of its scripted updates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ..local.hyper import connect, create_tables, quote_name, table_ref
from ..values.actions import Insert, Update, Upsert, _Action
from ..values.conditions import keys_match

__all__ = ["CANARY", "SCHEMA", "by_id", "hyper_file", "insert_padding", "padding_file", "upsert_by"]

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


def insert_padding() -> _Action:
    return Insert(
        target_schema=SCHEMA,
        target_table="Padding",
        source_schema=SCHEMA,
        source_table="Padding",
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

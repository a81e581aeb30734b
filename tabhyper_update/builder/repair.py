"""Repairing a data source from a reconcile report: one ordinary update, built from the
source's rows of the keys that differ, whose identity is the report's.

>>> report = reconcile(spark.table("sales.orders"), "Orders", key="order_id")  # doctest: +SKIP
>>> if not report.ok:                                                           # doctest: +SKIP
...     repair(report, spark.table("sales.orders"))
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..readback.drift import DriftReport
from ..readback.reconcile import target_of
from ..rest.refs import DataSourceRef
from ..rest.session import RestSession
from ..update.chain import update_datasource
from ..update.results import UpdateResult
from ..values.actions import Delete, Insert
from ..values.conditions import keys_match
from ..values.errors import InvalidArgumentError
from ..values.spark_sql import sql_name
from .build import build_payload

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["repair"]


def repair(
    report: DriftReport,
    source: DataFrame,
    *,
    client: RestSession | None = None,
    target_table: str = "Extract",
    state_dir: str | os.PathLike[str] | None = None,
) -> UpdateResult:
    """Make the data source hold what ``source`` holds for every key ``report`` names:
    one update that deletes those keys' rows and inserts the source's rows of them. Its
    RequestID is the report's id, so repairing from the same report twice applies once."""
    from pyspark.sql import functions as F

    if report.scope != "reconcile":
        raise InvalidArgumentError(
            "repair takes a reconcile report (an update's read-back names only the keys "
            "that update touched): reconcile the data source first",
            argument="report",
        )
    if report.unresolved:
        raise InvalidArgumentError(
            "the report holds differences not pinned to keys "
            f"({'; '.join(report.unresolved[:2])}): a repair by key would not fix them; "
            "republish the data source instead",
            argument="report",
        )
    keys = report.keys()
    if not keys:
        return UpdateResult([], done=True)
    key = list(report.key)
    spark = source.sparkSession
    key_frame = spark.createDataFrame(
        list(map(tuple, keys)), source.select(*[F.col(sql_name(k)) for k in key]).schema
    )
    rows = source.join(F.broadcast(key_frame), on=key, how="left_semi")
    payload = build_payload({"repair_keys": key_frame, "repair_rows": rows}, max_payload_mb=None)
    actions: list[Any] = [
        Delete(target_table=target_table, source_table="repair_keys", condition=keys_match(*key))
    ]
    if payload.tables["repair_rows"].row_count:
        actions.append(Insert(target_table=target_table, source_table="repair_rows"))
    target = DataSourceRef(report.datasource_id, report.datasource or None)
    chosen, ref = target_of(client, target, None, "repair")
    return update_datasource(
        chosen, ref, payload, actions=actions, request_id=f"repair-{report.id}", state_dir=state_dir
    )

"""The VizQL Data Service: queries against a published data source with the client's
sign-in (Tableau Cloud, Tableau Server 2025.1 and later).

:class:`DataService` reads a data source's fields (``read-metadata``) and runs queries
(``query-datasource``) over one client's session, and counts what it sent and received so
that a read-back can say what it cost::

    service = DataService(client, orders.id)
    rows = service.query([dimension("region"), measure("amount", "SUM")])

Reading back is separate from updating: any failure here is a :class:`DataServiceError`
(or a transport error) and never touches an update.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..values.errors import ApiError, DataServiceError, InvalidArgumentError, QueryBudgetError
from ..values.redaction import get_logger

if TYPE_CHECKING:
    from ..rest.caller import RestCaller

__all__ = [
    "DataService",
    "FieldInfo",
    "ServiceStats",
    "calculation",
    "dimension",
    "measure",
    "range_filter",
    "set_filter",
]

log = get_logger("tabhyper_update")

SERVICE_PATH = "api/v1/vizql-data-service"
#: Aggregations the SDK asks for (the service knows more; the SDK needs no others).
FUNCTIONS = frozenset({"SUM", "AVG", "MIN", "MAX", "COUNT", "COUNTD"})
#: Options of later service releases the SDK sends where they are taken (20253: metadata
#: read past the service's cache, so that columns published a moment ago are seen). A
#: release that refuses one is remembered (per server) and not sent it again.
LATER_OPTIONS: dict[str, dict[str, Any]] = {"read-metadata": {"bypassMetadataCache": True}}
#: Per server origin, the options its service refused.
_REFUSED: dict[str, set[str]] = {}
_UNKNOWN_OPTION = re.compile(r"(?i)unrecogni[sz]ed|unknown|not (?:allowed|permitted|supported)")


@dataclass(frozen=True)
class FieldInfo:
    """A field of a published data source: its name, the caption queries use, its type
    (INTEGER, REAL, STRING, DATETIME, DATE, BOOLEAN, ...) and its logical table."""

    name: str
    caption: str
    data_type: str
    table: str | None = None


@dataclass
class ServiceStats:
    """What reading back cost: requests, bytes each way, seconds waiting on answers."""

    requests: int = 0
    #: Of the requests, the queries (``query-datasource``: what the site's quota counts).
    queries: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "queries": self.queries,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "seconds": round(self.seconds, 3),
        }


def dimension(caption: str, alias: str | None = None) -> dict[str, Any]:
    """A field the query groups by: ``{"fieldCaption": caption}``."""
    field: dict[str, Any] = {"fieldCaption": caption}
    if alias is not None:
        field["fieldAlias"] = alias
    return field


def measure(caption: str, function: str, alias: str | None = None) -> dict[str, Any]:
    """A field aggregated over the groups (``SUM``, ``MIN``, ``COUNT``, ...)."""
    if function not in FUNCTIONS:
        raise InvalidArgumentError(
            f"function must be one of {sorted(FUNCTIONS)}, got {function!r}", argument="function"
        )
    return {**dimension(caption, alias), "function": function}


def calculation(alias: str, formula: str) -> dict[str, Any]:
    """A field computed by a Tableau formula (``FLOOR([id] / 1000)``, ``SUM(LEN([name]))``)."""
    return {"fieldCaption": alias, "fieldAlias": alias, "calculation": formula}


def set_filter(field: Mapping[str, Any], values: Sequence[Any]) -> dict[str, Any]:
    """Keep the rows whose ``field`` is one of ``values``."""
    return {
        "field": _filter_field(field),
        "filterType": "SET",
        "values": list(values),
        "exclude": False,
    }


def range_filter(field: Mapping[str, Any], low: float, high: float) -> dict[str, Any]:
    """Keep the rows whose numeric ``field`` lies in ``[low, high]``."""
    return {
        "field": _filter_field(field),
        "filterType": "QUANTITATIVE_NUMERICAL",
        "quantitativeFilterType": "RANGE",
        "min": low,
        "max": high,
        "includeNulls": False,
    }


def _filter_field(field: Mapping[str, Any]) -> dict[str, Any]:
    # A filter names its field by caption or by calculation, without alias or sorting.
    if "calculation" in field:
        return {"calculation": field["calculation"]}
    return {"fieldCaption": field["fieldCaption"]}


#: What a server without the VizQL Data Service answers (a 404 to every query) means.
_NO_SERVICE = (
    "this server has no VizQL Data Service (it needs Tableau Cloud or Tableau Server 2025.1 "
    "or later); the data source cannot be read back"
)
#: What the service's error statuses mean for reading back (``{wait}``: how long it asks
#: to wait, where it says).
_HINTS = {
    404: "the VizQL Data Service does not know this data source",
    403: (
        "the signed-in user may not query this data source through the VizQL Data Service "
        "(it needs the data source's API Access permission)"
    ),
    429: (
        "the site's VizQL Data Service quota is spent (Tableau Cloud allows 100 queries per "
        "hour per Creator license, shared by the whole site){wait}"
    ),
}


class DataService:
    """Queries against one published data source (by LUID) over ``client``'s session."""

    def __init__(
        self, client: RestCaller, datasource_id: str, *, budget: int | None = None
    ) -> None:
        if not datasource_id:
            raise InvalidArgumentError("a data source LUID is required", argument="datasource")
        if budget is not None and (isinstance(budget, bool) or budget < 1):
            raise InvalidArgumentError(
                f"budget must be a number of queries >= 1, got {budget!r}", argument="budget"
            )
        self.client = client
        self.datasource_id = datasource_id
        #: The most queries (``query-datasource`` requests) this reader may send.
        self.budget = budget
        self.queries = 0
        self.stats = ServiceStats()
        self._fields: dict[str, FieldInfo] | None = None

    # -- fields ------------------------------------------------------------------------------
    def fields(self) -> dict[str, FieldInfo]:
        """The data source's fields by name (read once, then kept)."""
        if self._fields is None:
            body = self._post("read-metadata", {})
            found: dict[str, FieldInfo] = {}
            for item in body.get("data") or []:
                if not isinstance(item, dict) or not item.get("fieldCaption"):
                    continue
                name = str(item.get("fieldName") or item["fieldCaption"])
                found[name] = FieldInfo(
                    name,
                    str(item["fieldCaption"]),
                    str(item.get("dataType") or "UNKNOWN"),
                    str(item["logicalTableId"]) if item.get("logicalTableId") else None,
                )
            self._fields = found
        return self._fields

    def field(self, column: str) -> FieldInfo:
        """The field that holds ``column`` (by field name, else by caption), or an error
        naming the column and the fields there are."""
        fields = self.fields()
        if column in fields:
            return fields[column]
        by_caption = [f for f in fields.values() if f.caption == column]
        if len(by_caption) == 1:
            return by_caption[0]
        known = ", ".join(sorted(repr(f.caption) for f in fields.values())) or "none"
        raise DataServiceError(
            status=None,
            summary=f"the data source has no field for column {column!r}",
            detail=f"its fields: {known}",
            hint="read back only columns the published data source holds",
        )

    # -- queries -----------------------------------------------------------------------------
    def query(
        self,
        fields: Sequence[Mapping[str, Any]],
        filters: Sequence[Mapping[str, Any]] = (),
        *,
        rows: int | None = None,
    ) -> list[dict[str, Any]]:
        """The rows the query answers with, one dict per row keyed by alias (or caption).
        ``rows``: the rows themselves (every field a dimension, none grouped), at most that
        many."""
        if not fields:
            raise InvalidArgumentError("a query needs at least one field", argument="fields")
        query: dict[str, Any] = {"fields": list(map(dict, fields))}
        if filters:
            query["filters"] = list(map(dict, filters))
        self._spend_query()
        # Rows as arrays (the service's compact shape), in the order of the fields asked.
        options: dict[str, Any] = {"returnFormat": "ARRAYS", "disaggregate": rows is not None}
        if rows is not None:
            options["rowLimit"] = rows
        body = self._post("query-datasource", {"query": query, "options": options})
        names = [str(f.get("fieldAlias") or f.get("fieldCaption")) for f in fields]
        return [dict(zip(names, row, strict=True)) for row in _answered_rows(body, len(names))]

    def _spend_query(self) -> None:
        """Count one query against the budget, refused once the budget is spent."""
        if self.budget is not None and self.queries >= self.budget:
            raise QueryBudgetError(
                status=None,
                summary=f"the read-back's budget of {self.budget} queries is spent",
                hint="raise budget= to check more in one go",
            )
        self.queries += 1
        self.stats.queries += 1

    def rows(self, limit: int) -> dict[str | None, list[dict[str, Any]]]:
        """Per logical table, up to ``limit`` of its rows (every field): what
        ``tabhyper-update rows`` shows."""
        by_table: dict[str | None, list[FieldInfo]] = {}
        for info in self.fields().values():
            by_table.setdefault(info.table, []).append(info)
        return {
            table: self.query([dimension(f.caption) for f in fields], rows=limit)
            for table, fields in by_table.items()
        }

    def count(self, caption: str, filters: Sequence[Mapping[str, Any]]) -> int:
        """How many rows pass ``filters`` (one query): what an answer that may have been cut
        short is checked against."""
        (row,) = self.query([measure(caption, "COUNT", "n")], filters) or [{"n": 0}]
        return int(row.get("n") or 0)

    def _post(self, endpoint: str, extra: Mapping[str, Any]) -> dict[str, Any]:
        """One request, with the later release's options the service has not refused (one
        it refuses is remembered and the request sent again without it)."""
        refused = _REFUSED.setdefault(self.client.server, set())
        later = {k: v for k, v in LATER_OPTIONS.get(endpoint, {}).items() if k not in refused}
        if not later:
            return self._send(endpoint, extra)
        options = {**(extra.get("options") or {}), **later}
        try:
            return self._send(endpoint, {**extra, "options": options})
        except DataServiceError as err:
            named = _options_refused(err, later)
            if not named:
                raise
            refused.update(named)
            log.info(
                "this server's VizQL Data Service does not take %s (an older release): "
                "not sending it again",
                ", ".join(named),
            )
            return self._post(endpoint, extra)

    def _send(self, endpoint: str, extra: Mapping[str, Any]) -> dict[str, Any]:
        request = {"datasource": {"datasourceLuid": self.datasource_id}, **extra}
        sent = len(json.dumps(request))
        started = time.perf_counter()
        try:
            response, body = self.client.request(
                "POST",
                f"{SERVICE_PATH}/{endpoint}",
                retry=True,
                site_scoped=False,
                json_body=request,
            )
        except ApiError as err:
            raise self._explain(err) from None
        finally:
            self.stats.requests += 1
            self.stats.bytes_sent += sent
            self.stats.seconds += time.perf_counter() - started
        self.stats.bytes_received += len(response.content)
        return body or {}

    def _hint(self, err: ApiError) -> str | None:
        """What an HTTP error of the service means for reading back (``None``: nothing more
        than it says: sign-in trouble is the client's, as for any other call, and a server
        error is the server's)."""
        status = err.status
        if status == 404 and not self._service_answers():
            return _NO_SERVICE
        if status in _HINTS:
            wait = f" (it says to retry after {err.retry_after:g} s)" if err.retry_after else ""
            return _HINTS[status].format(wait=wait)
        if status is not None and status < 500 and status != 401:
            return "the VizQL Data Service refused the query"
        return None

    def _explain(self, err: ApiError) -> ApiError:
        """An HTTP error of the service as what it means for reading back."""
        hint = self._hint(err)
        if hint is None:
            return err
        kind = QueryBudgetError if err.status == 429 else DataServiceError
        explained = kind(
            status=err.status,
            code=err.code,
            summary=err.summary,
            detail=err.detail,
            method=err.method,
            url=err.url,
            hint=hint,
        )
        explained.retry_after, explained.attempts = err.retry_after, err.attempts
        return explained

    def _service_answers(self) -> bool:
        """Whether the service's health check answers (it needs no sign-in)."""
        try:
            self.client.request(
                "GET", f"{SERVICE_PATH}/simple-request", retry=False, site_scoped=False
            )
        except Exception as err:  # any failure means: no service to talk to
            log.info("VizQL Data Service health check failed: %s", err)
            return False
        return True


def _answered_rows(body: Mapping[str, Any], width: int) -> list[list[Any]]:
    """The rows of a query's answer (``data``), each a list of ``width`` values; an answer
    of another shape is refused."""
    rows = body.get("data")
    if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == width for r in rows):
        raise DataServiceError(
            status=None,
            summary=(
                "the VizQL Data Service answered without a list of rows in 'data', "
                f"each of {width} values"
            ),
        )
    return rows


def _options_refused(err: DataServiceError, sent: Iterable[str]) -> list[str]:
    """The options of those ``sent`` that ``err`` refuses as unknown (none where it is
    another error)."""
    text = f"{err.summary or ''} {err.detail or ''}"
    if err.status != 400 or not _UNKNOWN_OPTION.search(text):
        return []
    return [k for k in sent if k in text]

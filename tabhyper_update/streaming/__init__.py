"""Structured Streaming: the ``foreachBatch`` sink, and Debezium change events as change sets.

Nothing here imports Spark until a batch or an event DataFrame is at hand.
"""

from .debezium import Debezium
from .sink import TableauSink

__all__ = ["Debezium", "TableauSink"]

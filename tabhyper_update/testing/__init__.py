"""Test helpers: a fake Tableau Server that runs updates with real Hyper, small ``.hyper``
helpers, and the quiet local Spark session the demo and examples use.

``FakeTableauServer`` serves the REST endpoints on 127.0.0.1 (or in-process through
``responses`` with :meth:`FakeTableauServer.mock_requests`), so examples, demos and tests of
CDC jobs run without a Tableau Server. ``make_hyper`` and ``read_table`` make a ``.hyper``
file from SQL and read a table back; ``local_spark`` starts a local Spark session (the
``[spark]`` extra).
"""

from ..local.spark import local_spark
from .backend import DataSource, FakeBackend
from .fake_server import FakeTableauServer, Fault
from .files import make_hyper, read_table, run_sql
from .profiles import ServerProfile
from .settings import BackendSettings
from .wire import Request, Response

__all__ = [
    "BackendSettings",
    "DataSource",
    "FakeBackend",
    "FakeTableauServer",
    "Fault",
    "Request",
    "Response",
    "ServerProfile",
    "local_spark",
    "make_hyper",
    "read_table",
    "run_sql",
]

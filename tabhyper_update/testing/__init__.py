"""Test helpers: a fake Tableau Server that runs updates with real Hyper.

``FakeTableauServer`` serves the REST endpoints on 127.0.0.1 (or in-process through
``responses`` with :meth:`FakeTableauServer.mock_requests`), so examples, demos and tests of
CDC jobs run without a Tableau Server.
"""

from .fake_server import FakeTableauServer, Fault

__all__ = ["FakeTableauServer", "Fault"]

"""The commands that run the SDK's own fake server on this machine: ``demo`` (the end-to-end
round trip against it) and ``serve-local`` (a fake Tableau server for a job, a test or the
quickstart)."""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from typing import TYPE_CHECKING

from .exit_codes import EXIT_FAILED, EXIT_OK
from .failures import UsageError
from .inputs import require_pyspark

if TYPE_CHECKING:
    from ..testing import FakeTableauServer

__all__ = ["SAMPLE", "cmd_demo", "cmd_serve_local"]


def cmd_demo(args: argparse.Namespace) -> int:
    require_pyspark("the demo builds its change set")
    from ..demo import run_demo

    return (
        EXIT_OK
        if run_demo(
            sys.stdout,
            progress=False if args.no_progress or args.quiet else None,
            verbose=args.verbose > 0,
        )
        else EXIT_FAILED
    )


#: ``serve-local``'s data source when none is given: what the quickstart updates.
SAMPLE = {
    "Extract": (
        "id BIGINT NOT NULL, name TEXT, qty INTEGER",
        ["(1, 'apples', 10)", "(2, 'pears', 20)", "(3, 'plums', 30)"],
    )
}


def cmd_serve_local(args: argparse.Namespace) -> int:
    from ..testing import FakeTableauServer

    pats = dict(item.split(":", 1) for item in args.pat)
    if any(not name or not secret for name, secret in pats.items()):
        raise UsageError("--pat takes NAME:SECRET")
    server_ = FakeTableauServer(
        pats=pats,
        site=args.site_url,
        directory=args.directory,
        store_uploads=not args.discard_uploads,
        port=args.port,
    )
    try:
        server_.start()
    except OSError as err:
        server_.stop()
        raise UsageError(f"--port {args.port}: cannot listen on it ({err.strerror})") from None
    with server_ as server:
        _publish_datasources(server, args)
        print(f"keeping files in {server.directory}")
        print(f"serving on {server.url} (site {args.site_url!r}); Ctrl-C stops")
        _print_exports(server.url, args.site_url, pats)
        _serve(args.duration)
    return EXIT_OK


def _publish_datasources(server: FakeTableauServer, args: argparse.Namespace) -> None:
    """The data sources ``--datasource`` names published on ``server``, else a sample."""
    for item in args.datasource:
        name, _, path = item.partition("=")
        if not path:
            raise UsageError(f"--datasource takes NAME=FILE.hyper, got {item!r}")
        luid = server.add_datasource(name, path, project=args.project)
        print(f"data source {name!r}: {luid}")
    if not args.datasource:
        from ..testing.files import make_hyper

        sample = make_hyper(server.directory / "sample-orders.hyper", SAMPLE)
        luid = server.add_datasource("Orders", sample, project=args.project)
        print(
            f"data source 'Orders': {luid} (a sample: table Extract, columns id, name, qty, "
            "3 rows; --datasource NAME=FILE.hyper publishes your own)"
        )


def _print_exports(url: str, site: str, pats: dict[str, str]) -> None:
    """The environment a job or the command line points at the server with. A local test
    server's own made-up credentials: shown so that a job can use them."""
    name, secret = next(iter(pats.items()))
    print("to point a job or the command line at it:")
    for line in (
        f"TABLEAU_SERVER_URL={url}",
        f"TABLEAU_SITE={site}",
        f"TABLEAU_PAT_NAME={name}",
        f"TABLEAU_PAT_SECRET={secret}",
    ):
        print(f"  export {shlex.quote(line)}")
    sys.stdout.flush()


def _serve(duration: float | None) -> None:
    """Serve for ``duration`` seconds (none: until Ctrl-C)."""
    deadline = time.monotonic() + duration if duration else None
    try:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass

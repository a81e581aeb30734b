"""Benchmark: an upload's blocks in flight at once (``upload_streams``, with ``sequenceID``)
against a modelled per-connection network pace.

    python benchmarks/parallel_upload.py                  # 2,048 MB at 20 MB/s per connection
    python benchmarks/parallel_upload.py --mb 512 --mb-per-second 50 --streams 1 4

The fake Tableau server runs in its own process on 127.0.0.1, keeping no bytes
(``store_uploads=False``), each append taking ``size / rate`` seconds to arrive
(``upload_seconds_per_mb``: one connection's pace, as a WAN link per TCP stream). The file
is sparse (no disk in the way). For each number of streams: the upload's seconds against
the least it can take, size / (streams * rate), and the ratio. A first small upload teaches
the client that the server takes ``sequenceID`` (as a job's first upload would).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tabhyper_update import PersonalAccessToken, TableauClient  # noqa: E402

SERVER = """
import sys, time
from tabhyper_update.testing import FakeTableauServer
with FakeTableauServer(pats={"bench": "bench-secret"}, store_uploads=False,
                       upload_seconds_per_mb=float(sys.argv[1]), directory=sys.argv[2]) as s:
    print(s.url, flush=True)
    time.sleep(float(sys.argv[3]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=2048)
    parser.add_argument("--chunk-mb", type=float, default=50)
    parser.add_argument("--mb-per-second", type=float, default=20.0, help="per connection")
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(1 / args.mb_per_second), work, "3600"],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            big = Path(work) / "big.hyper"
            with big.open("wb") as f:
                f.truncate(args.mb * 1024 * 1024)
            small = Path(work) / "small.hyper"
            small.write_bytes(b"\0" * 200_000)
            found = []
            for streams in args.streams:
                with TableauClient(
                    url,
                    "",
                    PersonalAccessToken("bench", "bench-secret"),
                    chunk_size_mb=args.chunk_mb,
                    upload_streams=streams,
                ) as client:
                    client.chunk_size = 100_000  # the warm-up in two blocks
                    client.upload(small)
                    client.chunk_size = int(args.chunk_mb * 1024 * 1024)
                    started = time.perf_counter()
                    client.upload(big)
                    took = time.perf_counter() - started
                floor = args.mb / (streams * args.mb_per_second)
                found.append(
                    {
                        "streams": streams,
                        "seconds": round(took, 2),
                        "floor_seconds": round(floor, 2),
                        "ratio": round(took / floor, 3),
                        "mb_per_second": round(args.mb / took, 1),
                    }
                )
                print(json.dumps(found[-1]), flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()

"""Benchmark: the client's chunked upload against one raw ``requests.put`` of the same file.

    python benchmarks/upload.py                    # 200 MB, 50 MB chunks
    python benchmarks/upload.py --mb 200 --chunk-mb 25
    python benchmarks/upload.py --rate-mbit 800    # a network-like link (root: ip, tc)

The fake Tableau server runs in its own process on 127.0.0.1 (``serve-local
--discard-uploads``: it parses each append but keeps no bytes), so this process's peak RSS
is the client's alone and neither figure includes the server's disk. The raw PUT streams the
whole file to the same server's append URL in one request (the server reads it all, then
refuses it as not multipart): the transfer cost without the protocol. A third figure is the
hand-rolled way (each chunk read into memory, framed and PUT with requests). Reports
throughput (median of --repeat), the ratios, and the client's peak RSS.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tabhyper_update import PersonalAccessToken, TableauClient  # noqa: E402
from tabhyper_update.rest.uploads import multipart_framing  # noqa: E402


def start_server(directory: str) -> tuple[subprocess.Popen[bytes], str]:
    # The server's output goes to a file: an undrained pipe measurably slowed it.
    log = Path(directory) / "server.out"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tabhyper_update",
                "serve-local",
                "--pat",
                "bench:bench-secret",
                "--duration",
                "900",
                "--directory",
                directory,
                "--discard-uploads",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("serving on "):
                return proc, line.split()[2]
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the fake server did not start")


def fresh_append_url(client: TableauClient, url: str) -> str:
    """The append URL of a new upload session (for the baselines that PUT by hand)."""
    session = quote(client.initiate_upload(), safe="")
    return f"{url}/api/{client.api_version}/sites/{client.site_id}/fileUploads/{session}"


def run_on_shaped_loopback(rate_mbit: int) -> int:
    """Re-run this benchmark in a private network namespace whose loopback is limited to
    ``rate_mbit`` (needs root, ``ip`` and ``tc``): a network-like link, still 127.0.0.1."""
    namespace = f"tabhyper-bench-{os.getpid()}"
    setup = [
        ["ip", "netns", "add", namespace],
        ["ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up"],
        [
            "ip",
            "netns",
            "exec",
            namespace,
            "tc",
            "qdisc",
            "add",
            "dev",
            "lo",
            "root",
            "tbf",
            "rate",
            f"{rate_mbit}mbit",
            "burst",
            "1mb",
            "latency",
            "50ms",
        ],
    ]
    try:
        for command in setup:
            subprocess.run(command, check=True)
        # The inner run sees TABHYPER_BENCH_SHAPED and measures instead of recursing.
        env = {**os.environ, "TABHYPER_BENCH_SHAPED": f"{rate_mbit}"}
        return subprocess.run(
            ["ip", "netns", "exec", namespace, sys.executable, __file__, *sys.argv[1:]],
            env=env,
            check=False,
        ).returncode
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--chunk-mb", type=float, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--rate-mbit",
        type=int,
        help="limit the loopback to this rate, in a private network namespace",
    )
    args = parser.parse_args()
    if args.rate_mbit and not os.environ.get("TABHYPER_BENCH_SHAPED"):
        sys.exit(run_on_shaped_loopback(args.rate_mbit))
    # The server counts upload bytes without storing them, as it does for the raw PUT it
    # refuses: both figures are about the client and the wire, not the fake server's disk.
    server_dir = tempfile.mkdtemp(prefix="tabhyper-bench-server-")
    proc, url = start_server(server_dir)
    with tempfile.TemporaryDirectory(prefix="tabhyper-bench-") as work:
        path = Path(work) / "payload.hyper"
        with path.open("wb") as f:
            for _ in range(args.mb):
                f.write(os.urandom(1024 * 1024))
        try:
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            client = TableauClient(
                url, "", PersonalAccessToken("bench", "bench-secret"), chunk_size_mb=args.chunk_mb
            )
            client.sign_in()
            chunked: list[float] = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                client.upload(path)
                chunked.append(time.perf_counter() - start)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            raw: list[float] = []
            token = client._token or ""
            for _ in range(args.repeat):
                target = fresh_append_url(client, url)
                start = time.perf_counter()
                with path.open("rb") as f:
                    answer = requests.put(
                        target, data=f, timeout=600, headers={"X-Tableau-Auth": token}
                    )
                raw.append(time.perf_counter() - start)
                assert answer.status_code in (400, 413), answer.status_code
            # The hand-rolled way: each chunk read into memory, framed, PUT with requests.
            naive: list[float] = []
            head, tail = multipart_framing("naive-boundary")
            chunk = int(args.chunk_mb * 1024 * 1024)
            for _ in range(args.repeat):
                target = fresh_append_url(client, url)
                start = time.perf_counter()
                with path.open("rb") as f, requests.Session() as http:
                    while block := f.read(chunk):
                        answer = http.put(
                            target,
                            data=head + block + tail,
                            timeout=600,
                            headers={
                                "X-Tableau-Auth": token,
                                "Content-Type": "multipart/mixed; boundary=naive-boundary",
                            },
                        )
                        assert answer.status_code == 200, answer.status_code
                naive.append(time.perf_counter() - start)
            client.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            shutil.rmtree(server_dir, ignore_errors=True)
    t_chunked, t_raw = statistics.median(chunked), statistics.median(raw)
    mb = args.mb
    shaped = os.environ.get("TABHYPER_BENCH_SHAPED")
    link = f"loopback limited to {shaped} Mbit/s" if shaped else "unlimited loopback"
    print(f"{mb} MB to a server on 127.0.0.1 ({link}), {args.chunk_mb:g} MB chunks")
    print(
        f"  client chunked upload  {t_chunked:6.2f} s  {mb / t_chunked:7.1f} MB/s  "
        f"(runs: {', '.join(f'{t:.2f}' for t in chunked)})"
    )
    print(
        f"  raw requests.put       {t_raw:6.2f} s  {mb / t_raw:7.1f} MB/s  "
        f"(runs: {', '.join(f'{t:.2f}' for t in raw)})"
    )
    t_naive = statistics.median(naive)
    print(
        f"  hand-rolled appends    {t_naive:6.2f} s  {mb / t_naive:7.1f} MB/s  "
        f"(runs: {', '.join(f'{t:.2f}' for t in naive)})"
    )
    print(
        f"  => throughput ratio chunked / raw: {t_raw / t_chunked:.2f}x  (target >= 0.8x); "
        f"chunked / hand-rolled: {t_naive / t_chunked:.2f}x"
    )
    limit = 2 * args.chunk_mb + 50
    print(
        f"  client peak RSS: {peak:.0f} MB (before uploading: {rss_before:.0f} MB; "
        f"target <= 2 chunks + 50 MB = {limit:.0f} MB)"
    )


if __name__ == "__main__":
    main()

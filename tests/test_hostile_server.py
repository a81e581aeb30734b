"""A hostile or broken server against the client, over real sockets on 127.0.0.1.

Each server here answers at most a few connections and stops by itself; every client call
is bounded by its timeout and retry policy.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tabhyper_update import TableauClient
from tabhyper_update.values.errors import RequestTimeoutError, TlsVerificationError, TransportError
from tabhyper_update.values.policies import RetryPolicy

from . import _util

Handler = Callable[[socket.socket, bytes], None]


@contextmanager
def raw_server(handler: Handler, *, lifetime: float = 30.0) -> Iterator[tuple[str, list[bytes]]]:
    """A server that reads each request's head and lets ``handler`` answer; it records the
    raw requests it saw and stops after ``lifetime`` seconds at the latest."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    seen: list[bytes] = []
    stop = threading.Event()
    deadline = time.monotonic() + lifetime

    def serve() -> None:
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                head = b""
                try:
                    while b"\r\n\r\n" not in head:
                        piece = conn.recv(65536)
                        if not piece:
                            break
                        head += piece
                    seen.append(head)
                    handler(conn, head)
                except OSError:
                    pass  # the client hung up: that is what some tests want

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", seen
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def answer(status: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


SERVERINFO = b'{"serverInfo": {"restApiVersion": "3.24", "productVersion": "2024.2"}}'


def client_for(url: str, **kw: Any) -> TableauClient:
    kw.setdefault("retry", RetryPolicy(max_attempts=2, initial_wait=0.01, max_total_seconds=10))
    return _util.client_for(url, **kw)


def test_a_redirect_to_another_origin_on_sign_in_is_not_followed() -> None:
    with raw_server(lambda c, h: c.sendall(answer("200 OK", b"{}"))) as (elsewhere, stolen):

        def redirect(conn: socket.socket, head: bytes) -> None:
            if b"serverinfo" in head:
                conn.sendall(answer("200 OK", SERVERINFO, {"Content-Type": "application/json"}))
            else:
                location = f"{elsewhere}/api/3.24/auth/signin"
                conn.sendall(answer("307 Temporary Redirect", b"", {"Location": location}))

        with (
            raw_server(redirect) as (url, _),
            client_for(url) as client,
            pytest.raises(TransportError) as caught,
        ):
            client.sign_in()
    message = str(caught.value)
    assert "redirected (HTTP 307) to another origin" in message
    assert elsewhere.replace("http://", "") in message
    assert stolen == []  # the PAT secret never left for the other origin
    assert "pat-secret" not in message


def test_a_redirect_after_sign_in_does_not_carry_the_token() -> None:
    with raw_server(lambda c, h: c.sendall(answer("200 OK", b"{}"))) as (elsewhere, stolen):

        def server(conn: socket.socket, head: bytes) -> None:
            if b"serverinfo" in head:
                conn.sendall(answer("200 OK", SERVERINFO))
            elif b"auth/signin" in head:
                body = b'{"credentials": {"token": "tok-123", "site": {"id": "site-1"}}}'
                conn.sendall(answer("200 OK", body))
            else:
                location = f"{elsewhere}/steal"
                conn.sendall(answer("302 Found", b"", {"Location": location}))

        with (
            raw_server(server) as (url, _),
            client_for(url) as client,
            pytest.raises(TransportError, match="another origin"),
        ):
            client.job("some-job")
    assert stolen == []


def test_a_same_origin_redirect_is_followed() -> None:
    def server(conn: socket.socket, head: bytes) -> None:
        if b"/moved/" in head:
            conn.sendall(answer("200 OK", SERVERINFO))
        else:
            conn.sendall(answer("301 Moved", b"", {"Location": "/moved/api/2.4/serverinfo"}))

    with raw_server(server) as (url, seen), client_for(url) as client:
        assert client.server_info()["restApiVersion"] == "3.24"
    assert len(seen) == 2


def test_a_server_dripping_its_answer_is_cut_off_at_the_deadline() -> None:
    def drip(conn: socket.socket, head: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(200):  # one byte every 0.1 s: each read is quick, the whole is not
            conn.sendall(b" ")
            time.sleep(0.1)

    with raw_server(drip) as (url, _), client_for(url, timeout=1.0) as client:
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError, match="no complete answer within"):
            client.server_info()
        elapsed = time.monotonic() - started
    # Two attempts of at most about one second each, and a short wait between them.
    assert elapsed < 5, elapsed


def test_a_server_dripping_its_headers_is_cut_off_too() -> None:
    def drip(conn: socket.socket, head: bytes) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100:
            conn.sendall(bytes([byte]))
            time.sleep(0.1)

    with raw_server(drip) as (url, _), client_for(url, timeout=1.0) as client:
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError):
            client.server_info()
        assert time.monotonic() - started < 5


def test_an_oversized_answer_is_refused_without_reading_it_all() -> None:
    size = 64 * 1024 * 1024

    def huge(conn: socket.socket, head: bytes) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        block = b"x" * 65536
        for _ in range(size // len(block)):
            conn.sendall(block)

    with (
        raw_server(huge) as (url, _),
        client_for(url) as client,
        pytest.raises(TransportError, match=r"larger than 16,777,216 bytes"),
    ):
        client.server_info()


def test_a_tls_verification_failure_is_not_retried_and_says_what_to_do(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    command = [
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=127.0.0.1",
    ]
    made = subprocess.run(
        [*command, "-keyout", str(key), "-out", str(cert)],
        capture_output=True,
        check=False,
        timeout=60,
    )
    if made.returncode != 0:
        pytest.skip("openssl cannot make a test certificate here")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(5)
    accepted: list[int] = []

    def serve() -> None:  # a self-signed certificate the client does not trust
        for _ in range(3):
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            try:
                context.wrap_socket(conn, server_side=True).close()
            except OSError:
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        url = f"https://127.0.0.1:{listener.getsockname()[1]}"
        with (
            client_for(url, retry=RetryPolicy(max_attempts=5)) as client,
            pytest.raises(TlsVerificationError) as caught,
        ):
            client.server_info()
    finally:
        listener.close()
        thread.join(timeout=10)
    assert "TLS verification failed (certificate verify failed" in str(caught.value)
    assert "ca-bundle" in str(caught.value)
    assert caught.value.attempts == 1
    assert len(accepted) == 1

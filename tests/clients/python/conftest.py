"""Shared fixtures for the real-client round-trip tests.

The server under test is started by scripts/conformance.sh (cachalot, or
memcached 1.6 with TARGET_SERVER=memcached for cross-checking) and passed in
through MC_HOST / MC_PORT.  The tests never start a server themselves, so the
same files check both servers byte-for-byte through the same clients.
"""

import os
import socket
import uuid

import pytest


def _server():
    port = os.environ.get("MC_PORT")
    if not port:
        # Failing loudly beats silently testing a server on a default port
        # that may not be the one the script started.
        raise pytest.UsageError("MC_PORT is not set: run via scripts/conformance.sh")
    return os.environ.get("MC_HOST", "127.0.0.1"), int(port)


@pytest.fixture(scope="session")
def server():
    """(host, port) of the server under test."""
    return _server()


@pytest.fixture
def keyprefix():
    """A unique key prefix per test, so tests never see each other's items
    even though they share one server and none of them flushes it."""
    return "t" + uuid.uuid4().hex[:12] + "_"


class Raw:
    """A bare socket speaking the text protocol, to see exact reply bytes
    where a client library would hide them."""

    def __init__(self, addr):
        self.sock = socket.create_connection(addr, timeout=5)
        self.buf = b""

    def send(self, data: bytes):
        self.sock.sendall(data)

    def line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line + b"\r\n"

    def close(self):
        self.sock.close()


@pytest.fixture
def raw(server):
    conn = Raw(server)
    yield conn
    conn.close()

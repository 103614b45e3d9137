"""A real TLS client for tests/it/tls.rs: Python's ssl module (OpenSSL) under
pymemcache, verifying the server's certificate against a CA file.

    tls_client.py roundtrip HOST PORT CAFILE [CERT KEY]
        commands through pymemcache; prints one line per result, so the test
        can compare cachalot's transcript with memcached's
    tls_client.py pipeline HOST PORT CAFILE
        3000 sets in one write, then one get of them all
    tls_client.py probe HOST PORT CAFILE [CERT KEY]
        one handshake and `version`: prints "OK", or "REFUSED <why>" where
        why is verify (the client rejected the server), alert (the server
        rejected the client) or closed (the connection ended)
"""

import socket
import ssl
import sys

from pymemcache.client.base import Client


def context(cafile, cert=None, key=None):
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = True
    ctx.verify_mode = ssl.CERT_REQUIRED
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def roundtrip(host, port, ctx):
    c = Client((host, port), tls_context=ctx, connect_timeout=10, timeout=10)
    print("set", c.set("tls-a", b"hello", noreply=False))
    print("get", c.get("tls-a"))
    print("add-existing", c.add("tls-a", b"x", noreply=False))
    print("incr-missing", c.incr("tls-n", 1))
    c.set("tls-n", b"41", noreply=False)
    print("incr", c.incr("tls-n", 1))
    # Larger than rustls' and OpenSSL's records and than ssl_wbuf_size.
    big = bytes(range(256)) * 1200
    print("set-big", c.set("tls-big", big, noreply=False))
    print("get-big", c.get("tls-big") == big)
    # 100 sets in one write: memcached 1.6.18 stalls at 200 (see pipeline).
    pipeline_once(c, 100)
    print("delete", c.delete("tls-a", noreply=False))
    print("get-deleted", c.get("tls-a"))
    print("version", bool(c.version()))
    c.quit()


def pipeline_once(c, n):
    many = {f"tls-k{i}": str(i).encode() * 50 for i in range(n)}
    print("set-many", c.set_many(many, noreply=False))
    got = c.get_many(list(many))
    print("get-many", len(got), got == many)


def pipeline(host, port, ctx):
    """Thousands of sets in one write, far more than one read takes: the
    server must go on reading what TLS has already decrypted (memcached
    1.6.18 waits for the socket instead, and the client times out)."""
    c = Client((host, port), tls_context=ctx, connect_timeout=10, timeout=10)
    pipeline_once(c, 3000)
    c.quit()


def probe(host, port, ctx):
    try:
        with socket.create_connection((host, port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname=host) as s:
                # TLS 1.3 sends the client's certificate after the
                # handshake: a refusal shows up on the first read.
                s.sendall(b"version\r\n")
                reply = s.recv(100)
                if reply.startswith(b"VERSION "):
                    print("OK")
                else:
                    print("REFUSED closed", reply)
    except ssl.SSLCertVerificationError:
        print("REFUSED verify")
    except ssl.SSLError as e:
        print("REFUSED alert" if "ALERT" in str(e).upper() else f"REFUSED closed {e}")
    except (ConnectionError, OSError):
        print("REFUSED closed")


def main():
    action, host, port, cafile = sys.argv[1:5]
    ctx = context(cafile, *sys.argv[5:7])
    actions = {"roundtrip": roundtrip, "pipeline": pipeline, "probe": probe}
    actions[action](host, int(port), ctx)


if __name__ == "__main__":
    main()

"""Round trips through pymemcache, the most used pure-Python memcached client.

pymemcache speaks the text protocol only and parses replies strictly (an
unexpected line raises), so every call here checks that cachalot's replies are
what memcached 1.6 sends.  Each test asserts the values that come back, not
just that no exception was raised.  Written and checked against memcached
1.6.18 first (TARGET_SERVER=memcached scripts/conformance.sh python).
"""

import time

import pytest
from pymemcache.client.base import Client, PooledClient
from pymemcache.client.hash import HashClient
from pymemcache.exceptions import (
    MemcacheClientError,
    MemcacheIllegalInputError,
    MemcacheServerError,
)


@pytest.fixture
def client(server):
    c = Client(server, connect_timeout=5, timeout=5)
    yield c
    c.close()


def k(prefix, name):
    return (prefix + name).encode()


def test_set_get_and_missing(client, keyprefix):
    key = k(keyprefix, "a")
    assert client.get(key) is None
    assert client.set(key, b"hello world", noreply=False) is True
    assert client.get(key) == b"hello world"
    # Overwrite with a value of a different length.
    assert client.set(key, b"x", noreply=False) is True
    assert client.get(key) == b"x"
    # Empty values are legal and must come back empty, not missing.
    assert client.set(key, b"", noreply=False) is True
    assert client.get(key) == b""


def test_binary_safe_value(client, keyprefix):
    key = k(keyprefix, "bin")
    value = bytes(range(256)) + b"\r\nEND\r\n" + b"\x00" * 10
    assert client.set(key, value, noreply=False) is True
    assert client.get(key) == value


def test_noreply_set_then_get(client, keyprefix):
    key = k(keyprefix, "nr")
    client.set(key, b"quiet", noreply=True)
    # The get on the same connection is answered after the noreply set.
    assert client.get(key) == b"quiet"


def test_get_many_set_many_delete_many(client, keyprefix):
    values = {k(keyprefix, "m%d" % i): b"v%d" % i for i in range(10)}
    assert client.set_many(values, noreply=False) == []
    missing = k(keyprefix, "missing")
    got = client.get_many(list(values) + [missing])
    assert got == values
    assert client.delete_many(list(values)[:5], noreply=False) is True
    got = client.get_many(list(values))
    assert got == dict(list(values.items())[5:])


def test_flags_round_trip(server, keyprefix):
    class FlagSerde:
        """Stores the flags in the item and reports which ones came back."""

        def serialize(self, key, value):
            return value[1], value[0]

        def deserialize(self, key, value, flags):
            return flags, value

    c = Client(server, serde=FlagSerde(), connect_timeout=5, timeout=5)
    try:
        for flags in (0, 1, 12345, 2**31, 2**32 - 1):
            key = k(keyprefix, "f%d" % flags)
            assert c.set(key, (flags, b"v"), noreply=False) is True
            assert c.get(key) == (flags, b"v")
    finally:
        c.close()


def test_add_replace(client, keyprefix):
    key = k(keyprefix, "ar")
    assert client.replace(key, b"r", noreply=False) is False
    assert client.get(key) is None
    assert client.add(key, b"first", noreply=False) is True
    assert client.add(key, b"second", noreply=False) is False
    assert client.get(key) == b"first"
    assert client.replace(key, b"third", noreply=False) is True
    assert client.get(key) == b"third"


def test_append_prepend(client, keyprefix):
    key = k(keyprefix, "ap")
    assert client.append(key, b"x", noreply=False) is False
    assert client.prepend(key, b"x", noreply=False) is False
    assert client.get(key) is None
    client.set(key, b"mid", noreply=False)
    assert client.append(key, b"_end", noreply=False) is True
    assert client.prepend(key, b"start_", noreply=False) is True
    assert client.get(key) == b"start_mid_end"


def test_gets_cas(client, keyprefix):
    key = k(keyprefix, "cas")
    assert client.gets(key) == (None, None)
    # cas on a missing key is NOT_FOUND, which pymemcache reports as None.
    assert client.cas(key, b"v", b"1", noreply=False) is None
    client.set(key, b"one", noreply=False)
    value, token = client.gets(key)
    assert value == b"one"
    assert int(token) > 0
    assert client.cas(key, b"two", token, noreply=False) is True
    assert client.get(key) == b"two"
    # The old token is stale now: EXISTS, reported as False, value unchanged.
    assert client.cas(key, b"three", token, noreply=False) is False
    assert client.get(key) == b"two"
    value2, token2 = client.gets(key)
    assert value2 == b"two"
    assert token2 != token
    # Any store gives the item a new cas unique.
    client.set(key, b"four", noreply=False)
    assert client.gets(key)[1] not in (token, token2)


def test_gets_many(client, keyprefix):
    a, b = k(keyprefix, "ga"), k(keyprefix, "gb")
    client.set(a, b"A", noreply=False)
    client.set(b, b"B", noreply=False)
    got = client.gets_many([a, b, k(keyprefix, "none")])
    assert set(got) == {a, b}
    assert got[a][0] == b"A" and got[b][0] == b"B"
    assert got[a][1] != got[b][1]


def test_incr_decr(client, keyprefix):
    key = k(keyprefix, "n")
    assert client.incr(key, 1, noreply=False) is None
    assert client.decr(key, 1, noreply=False) is None
    client.set(key, b"10", noreply=False)
    assert client.incr(key, 5, noreply=False) == 15
    assert client.get(key) == b"15"
    assert client.decr(key, 3, noreply=False) == 12
    # decr stops at zero instead of going negative.  A result shorter than
    # the stored value is written in place and padded with spaces, so the
    # stored bytes are "0 ", exactly as memcached leaves them.
    assert client.decr(key, 100, noreply=False) == 0
    assert client.get(key) == b"0 "
    # incr wraps around at 2**64 (and pads the same way).
    client.set(key, b"18446744073709551615", noreply=False)
    assert client.incr(key, 2, noreply=False) == 1
    assert client.get(key) == b"1" + b" " * 19
    # A longer result grows the value.
    client.set(key, b"99", noreply=False)
    assert client.incr(key, 1, noreply=False) == 100
    assert client.get(key) == b"100"
    client.set(key, b"abc", noreply=False)
    with pytest.raises(MemcacheClientError) as err:
        client.incr(key, 1, noreply=False)
    assert "cannot increment or decrement non-numeric value" in str(err.value)


def test_delete(client, keyprefix):
    key = k(keyprefix, "d")
    assert client.delete(key, noreply=False) is False
    client.set(key, b"v", noreply=False)
    assert client.delete(key, noreply=False) is True
    assert client.get(key) is None
    assert client.delete(key, noreply=False) is False


def test_touch_and_expiry(client, keyprefix):
    touched, untouched, forever = (k(keyprefix, n) for n in ("tt", "tu", "tf"))
    assert client.touch(touched, 10, noreply=False) is False
    assert client.set(touched, b"t", expire=2, noreply=False) is True
    assert client.set(untouched, b"u", expire=2, noreply=False) is True
    assert client.set(forever, b"f", expire=0, noreply=False) is True
    assert client.touch(touched, 100, noreply=False) is True
    # The server clock ticks once a second, so a 2 s ttl lasts between 1 and
    # 2 s: long enough that the touch above cannot race the expiry, and gone
    # after 3.5 s.
    time.sleep(3.5)
    assert client.get(untouched) is None
    assert client.get(touched) == b"t"
    assert client.get(forever) == b"f"


def test_large_values(client, keyprefix):
    key = k(keyprefix, "big")
    # Just under the default 1 MiB item size limit (-I), with room for the
    # item header, fits.
    value = bytes(i % 251 for i in range(1_000_000))
    assert client.set(key, value, noreply=False) is True
    assert client.get(key) == value
    # Twice the limit is refused with memcached's exact error text...
    with pytest.raises(MemcacheServerError) as err:
        client.set(key, b"y" * 2_000_000, noreply=False)
    assert "object too large for cache" in str(err.value)
    # ...and a refused *set* unlinks the old item (memcached does so to avoid
    # serving stale data) and leaves the connection in sync.
    assert client.get(key) is None
    assert client.set(key, b"small", noreply=False) is True
    assert client.get(key) == b"small"


def test_key_rules(client, server, keyprefix, raw):
    # pymemcache refuses bad keys before sending anything...
    with pytest.raises(MemcacheIllegalInputError):
        client.set(b"key with space", b"v", noreply=False)
    with pytest.raises(MemcacheClientError):
        client.set(b"x" * 251, b"v", noreply=False)
    with pytest.raises(MemcacheIllegalInputError):
        client.get("cl\u00e9")
    # ...so check what the server itself says to a 251-byte key.
    raw.send(b"get " + b"x" * 251 + b"\r\n")
    assert raw.line() == b"CLIENT_ERROR bad command line format\r\n"
    # 250 bytes is the longest legal key.
    long_key = k(keyprefix, "") + b"L" * (250 - len(keyprefix))
    assert len(long_key) == 250
    assert client.set(long_key, b"long", noreply=False) is True
    assert client.get(long_key) == b"long"
    # UTF-8 keys are opaque bytes to the server: allowed once the client lets
    # them through, and stored under exactly those bytes.
    uc = Client(server, allow_unicode_keys=True, connect_timeout=5, timeout=5)
    try:
        ukey = keyprefix + "cl\u00e9\u20ac"
        assert uc.set(ukey, b"unicode", noreply=False) is True
        assert uc.get(ukey) == b"unicode"
        assert client.get(ukey.encode("utf-8")) == b"unicode"
    finally:
        uc.close()


def test_stats_and_version(client, keyprefix):
    version = client.version()
    assert version and version[:1].isdigit()
    before = client.stats()
    assert before[b"version"] == version
    assert before[b"pid"] > 0
    assert before[b"curr_connections"] >= 1
    client.set(k(keyprefix, "s"), b"v", noreply=False)
    client.get(k(keyprefix, "s"))
    client.get(k(keyprefix, "nope"))
    after = client.stats()
    assert after[b"cmd_set"] == before[b"cmd_set"] + 1
    assert after[b"get_hits"] == before[b"get_hits"] + 1
    assert after[b"get_misses"] == before[b"get_misses"] + 1
    assert after[b"curr_items"] >= 1
    settings = client.stats("settings")
    assert settings[b"item_size_max"] == 1024 * 1024
    assert settings[b"tcpport"] == client.server[1]


def test_flush_all(client, keyprefix):
    key = k(keyprefix, "fl")
    client.set(key, b"v", noreply=False)
    assert client.flush_all(noreply=False) is True
    assert client.get(key) is None
    # The cache still works after a flush.
    assert client.set(key, b"w", noreply=False) is True
    assert client.get(key) == b"w"


@pytest.mark.parametrize("cls", [PooledClient, HashClient])
def test_pooled_and_hash_clients(cls, server, keyprefix):
    c = cls([server] if cls is HashClient else server, connect_timeout=5, timeout=5)
    try:
        values = {k(keyprefix, "p%d" % i): b"%d" % (i * i) for i in range(20)}
        for key, value in values.items():
            assert c.set(key, value, noreply=False) is True
        assert c.get_many(list(values)) == values
        assert c.incr(k(keyprefix, "p3"), 1) == 10
    finally:
        c.close()

"""Round trips through pylibmc (libmemcached underneath), in text AND binary mode.

libmemcached is the C client behind pylibmc, PHP's memcached extension and the
memc* tools; with `binary=True` it speaks the binary protocol, which pure-
Python clients do not, so this is the Python-side check of cachalot's binary
protocol.  Every test runs once per protocol and asserts the values that come
back.  Written and checked against memcached 1.6.18 first; the few places
where libmemcached reports the same server reply differently per protocol are
spelled out in the tests.
"""

import time

import pylibmc
import pytest


@pytest.fixture(params=[False, True], ids=["text", "binary"])
def binary(request):
    return request.param


@pytest.fixture
def mc(server, binary):
    host, port = server
    c = pylibmc.Client(
        ["%s:%d" % (host, port)],
        binary=binary,
        # `cas` makes libmemcached ask for cas uniques (gets instead of get).
        behaviors={"cas": True, "connect_timeout": 5000},
    )
    yield c
    c.disconnect_all()


def test_set_get(mc, keyprefix):
    key = keyprefix + "a"
    assert mc.get(key) is None
    assert mc.set(key, b"value") is True
    assert mc.get(key) == b"value"
    assert mc.set(key, b"") is True
    assert mc.get(key) == b""
    raw = bytes(range(256)) * 4
    assert mc.set(key, raw) is True
    assert mc.get(key) == raw


def test_python_types_round_trip_through_flags(mc, keyprefix):
    # pylibmc marks the value's type in the item flags, so these only come
    # back right if the server returns the flags it was given.
    values = {
        "int": 42,
        "bool": True,
        "long": 2**70,
        "text": "ol\u00e9",
        "obj": {"a": [1, 2, (3, "x")]},
    }
    for name, value in values.items():
        assert mc.set(keyprefix + name, value) is True
    got = {name: mc.get(keyprefix + name) for name in values}
    # bool is stored as an int by pylibmc.
    assert got == dict(values, bool=1)
    assert type(got["text"]) is str


def test_multi(mc, keyprefix):
    values = {"m%d" % i: b"v%d" % i for i in range(25)}
    assert mc.set_multi(values, key_prefix=keyprefix) == []
    got = mc.get_multi(list(values) + ["missing"], key_prefix=keyprefix)
    assert got == values
    # delete_multi is False when some key was not there.
    assert mc.delete_multi(["m0", "m1", "missing"], key_prefix=keyprefix) is False
    assert mc.delete_multi(["m2"], key_prefix=keyprefix) is True
    got = mc.get_multi(list(values), key_prefix=keyprefix)
    assert set(got) == set(values) - {"m0", "m1", "m2"}


def test_add_replace(mc, binary, keyprefix):
    key = keyprefix + "ar"
    # libmemcached reports a failed replace as False in text mode but raises
    # NotFound in binary mode (the binary reply carries "Not found", status 1).
    if binary:
        with pytest.raises(pylibmc.NotFound):
            mc.replace(key, b"x")
    else:
        assert mc.replace(key, b"x") is False
    assert mc.get(key) is None
    assert mc.add(key, b"one") is True
    assert mc.add(key, b"two") is False
    assert mc.get(key) == b"one"
    assert mc.replace(key, b"three") is True
    assert mc.get(key) == b"three"


def test_append_prepend(mc, keyprefix):
    key = keyprefix + "ap"
    assert mc.append(key, b"x") is False
    assert mc.prepend(key, b"x") is False
    assert mc.set(key, b"mid") is True
    assert mc.append(key, b">") is True
    assert mc.prepend(key, b"<") is True
    assert mc.get(key) == b"<mid>"


def test_delete(mc, keyprefix):
    key = keyprefix + "d"
    assert mc.delete(key) is False
    mc.set(key, b"v")
    assert mc.delete(key) is True
    assert mc.get(key) is None


def test_incr_decr(mc, binary, keyprefix):
    key = keyprefix + "n"
    with pytest.raises(pylibmc.NotFound):
        mc.incr(key)
    mc.set(key, b"10")
    assert mc.incr(key, 5) == 15
    assert mc.get(key) == b"15"
    assert mc.decr(key, 100) == 0
    # The shorter result is written in place and padded with a space.
    assert mc.get(key) == b"0 "
    mc.set(key, b"18446744073709551615")
    assert mc.incr(key, 1) == 0
    mc.set(key, b"7")
    mc.incr_multi([key], key_prefix="", delta=3)
    assert mc.get(key) == b"10"
    mc.set(key, b"not a number")
    # Text: "CLIENT_ERROR cannot increment or decrement non-numeric value";
    # binary: status 6 (non-numeric value); libmemcached maps them so.
    expected = pylibmc.UnknownReadFailure if binary else pylibmc.ClientError
    with pytest.raises(expected):
        mc.incr(key, 1)


def test_gets_cas(mc, keyprefix):
    key = keyprefix + "cas"
    mc.set(key, b"one")
    value, token = mc.gets(key)
    assert value == b"one"
    assert token > 0
    assert mc.cas(key, b"two", token) is True
    assert mc.get(key) == b"two"
    # A stale token fails and leaves the value alone.
    assert mc.cas(key, b"three", token) is False
    assert mc.get(key) == b"two"
    value2, token2 = mc.gets(key)
    assert (value2, token2 != token) == (b"two", True)
    with pytest.raises(pylibmc.NotFound):
        mc.cas(keyprefix + "nokey", b"x", token2)


def test_touch_and_expiry(mc, keyprefix):
    touched, untouched = keyprefix + "tt", keyprefix + "tu"
    assert mc.touch(touched, 10) is False
    assert mc.set(touched, b"t", time=2) is True
    assert mc.set(untouched, b"u", time=2) is True
    assert mc.touch(touched, 100) is True
    # The server clock ticks once a second, so a 2 s ttl lasts between 1 and
    # 2 s: long enough that the touch above cannot race the expiry, and gone
    # after 3.5 s.
    time.sleep(3.5)
    assert mc.get(untouched) is None
    assert mc.get(touched) == b"t"


def test_large_values(mc, keyprefix):
    key = keyprefix + "big"
    value = bytes(i % 253 for i in range(1_000_000))
    assert mc.set(key, value) is True
    assert mc.get(key) == value
    # Over the 1 MiB item limit: SERVER_ERROR object too large for cache
    # (text) or status 3 "Too large." (binary), both TooBig to libmemcached.
    with pytest.raises(pylibmc.TooBig):
        mc.set(key, b"z" * 2_000_000)
    # Compressed by the client, a large value fits and comes back whole.
    big = b"abc" * 500_000
    assert mc.set(key, big, min_compress_len=1) is True
    assert mc.get(key) == big


def test_utf8_keys(mc, keyprefix):
    key = keyprefix + "cl\u00e9\u20ac"
    assert mc.set(key, b"unicode") is True
    assert mc.get(key) == b"unicode"
    # Stored under its UTF-8 bytes.
    assert mc.get(key.encode("utf-8")) == b"unicode"


def test_binary_keys_may_hold_spaces(server, keyprefix):
    # The binary protocol carries the key length, so memcached accepts a key
    # with a space in it there (the text protocol cannot express one).
    host, port = server
    mc = pylibmc.Client(["%s:%d" % (host, port)], binary=True)
    try:
        key = keyprefix + "with space"
        assert mc.set(key, b"spaced") is True
        assert mc.get(key) == b"spaced"
    finally:
        mc.disconnect_all()


def test_stats(mc, keyprefix):
    (name, before), = mc.get_stats()
    assert int(before["pid"]) > 0
    assert before["version"]
    mc.set(keyprefix + "s", b"v")
    mc.get(keyprefix + "s")
    (_, after), = mc.get_stats()
    assert int(after["cmd_set"]) == int(before["cmd_set"]) + 1
    assert int(after["get_hits"]) == int(before["get_hits"]) + 1
    assert int(after["curr_items"]) >= 1


def test_flush_all(mc, keyprefix):
    key = keyprefix + "fl"
    mc.set(key, b"v")
    assert mc.flush_all() is True
    assert mc.get(key) is None
    assert mc.set(key, b"after") is True
    assert mc.get(key) == b"after"

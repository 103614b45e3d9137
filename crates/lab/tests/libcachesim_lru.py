"""Miss ratios of a cachalot-lab CSV trace according to libCacheSim.

The reference side of crates/lab/tests/mrc_vs_libcachesim.rs (the issue's
check 1) and of benches/nzone-policy.sh (the N-zone policy table):
libCacheSim's own caches (PyPI package `libcachesim`, the Python bindings of
Juncheng Yang's libCacheSim) replay the trace that `cachalot-lab mrc` or
`cachalot-lab sim` ran, at the same cache sizes, and the miss ratios are
printed as JSON.

Two ways to replay:

- whole trace (the default; what mrc_vs_libcachesim.rs uses): libCacheSim's
  own `process_trace`, every request a read. Item-count caches read the
  trace with every object of size 1 (libCacheSim's ignore_obj_size); byte
  caches use the trace's `size` column (the value size, what `cachalot-lab
  mrc --bytes-of value` counts). LRU only.
- `--look-aside` (benches/nzone-policy.sh): the requests `cachalot-lab sim`
  makes of the engine, one at a time. A `get` is a cache access counted in
  the miss ratio; a miss inserts the object (sim's fill). A `set` is the
  same access (`cache.get`: inserted if absent, a hit otherwise, which the
  policies treat as a use, as the engine's in-place SET sets the item's REF
  bit) but it is not counted: sim's hit ratio is over GETs only. `delete`
  removes. An object is `key_size + size` bytes, the key and value bytes the
  engine stores (its 16-byte header and the slab chunk's slack are not
  counted: the bench gives libCacheSim the key and value bytes the engine
  actually held, see docs/benchmarks.md). `--algos` picks the caches.

Usage: libcachesim_lru.py TRACE.csv --items N,N,... --bytes N,N,...
       libcachesim_lru.py TRACE.csv --look-aside --algos LRU,Sieve --bytes N,N
Exit status 2 if libcachesim is not installed (the test fails on it).
"""

import argparse
import json
import sys

try:
    import libcachesim as lcs
except ImportError as e:  # the Rust test reports this and fails
    print(f"libcachesim is not installed for {sys.executable}: {e}", file=sys.stderr)
    sys.exit(2)

# Objects must never expire: libCacheSim gives every object a default TTL
# (300 days of trace time) and our time column is in microseconds, so the
# reader is told nothing about time at all (time_field stays unset).
NO_TTL = 2**62

# libCacheSim's caches by the names the bench uses; each with its defaults
# (S3FIFO: small queue 10%, ghost 90%, move to main at 2 reads, the SOSP'23
# paper's settings; WTinyLFU: 1% window, SLRU main, Einziger et al.'s).
ALGOS = {
    "LRU": lcs.LRU,
    "FIFO": lcs.FIFO,
    "Clock": lcs.Clock,
    "Sieve": lcs.Sieve,
    "S3FIFO": lcs.S3FIFO,
    "WTinyLFU": lcs.WTinyLFU,
}


def reader(path, ignore_size):
    p = lcs.ReaderInitParam(has_header=True, delimiter=",", ignore_obj_size=ignore_size)
    # libCacheSim's csv columns are 1-based: key is column 2, size column 3.
    p.obj_id_field = 2
    p.obj_size_field = 3
    return lcs.TraceReader(path, lcs.TraceType.CSV_TRACE, p)


def miss_ratios(path, sizes, ignore_size):
    out = []
    for size in sizes:
        r = reader(path, ignore_size)
        cache = lcs.LRU(size, default_ttl=NO_TTL)
        req_miss, byte_miss = cache.process_trace(r)
        out.append({"size": size, "miss_ratio": req_miss, "byte_miss_ratio": byte_miss})
    return out


GET, SET, DELETE = 0, 1, 2


def load_look_aside(path):
    """(key, key_size + size, op) per request, by the CSV header's names."""
    ops = {"get": GET, "set": SET, "delete": DELETE}
    reqs = []
    with open(path) as f:
        cols = f.readline().strip().split(",")
        ik, isz, iop = cols.index("key"), cols.index("size"), cols.index("op")
        iks = cols.index("key_size") if "key_size" in cols else None
        for line in f:
            p = line.rstrip("\n").split(",")
            if len(p) < len(cols):
                continue
            ks = int(p[iks]) if iks is not None else 16
            reqs.append((int(p[ik]), ks + int(p[isz]), ops[p[iop]]))
    return reqs


def look_aside(reqs, algo, size):
    cache = ALGOS[algo](size, default_ttl=NO_TTL)
    req = lcs.Request()
    gets = misses = 0
    get = cache.get
    for key, obj_size, op in reqs:
        req.obj_id = key
        req.obj_size = obj_size
        if op == DELETE:
            cache.remove(key)
            continue
        hit = get(req)
        if op == GET:
            gets += 1
            misses += not hit
    return {
        "size": size,
        "miss_ratio": misses / gets if gets else 0.0,
        "gets": gets,
        "misses": misses,
        "occupied_bytes": cache.get_occupied_byte(),
        "objects": cache.get_n_obj(),
    }


def ints(s):
    return [int(x) for x in s.split(",") if x]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--items", type=ints, default=[])
    ap.add_argument("--bytes", type=ints, default=[])
    ap.add_argument("--look-aside", action="store_true")
    ap.add_argument("--algos", default="LRU")
    a = ap.parse_args()
    version = getattr(lcs, "__version__", "unknown")
    if a.look_aside:
        algos = [x for x in a.algos.split(",") if x]
        unknown = [x for x in algos if x not in ALGOS]
        if unknown:
            sys.exit(f"unknown algorithms {unknown}; known: {sorted(ALGOS)}")
        reqs = load_look_aside(a.trace)
        result = {
            "libcachesim_version": version,
            "policies": {x: [look_aside(reqs, x, s) for s in a.bytes] for x in algos},
        }
    else:
        result = {
            "libcachesim_version": version,
            "items": miss_ratios(a.trace, a.items, True),
            "bytes": miss_ratios(a.trace, a.bytes, False),
        }
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()

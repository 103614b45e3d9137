"""LRU miss ratios of a cachalot-lab CSV trace according to libCacheSim.

The reference side of crates/lab/tests/mrc_vs_libcachesim.rs (the issue's
check 1): libCacheSim's own LRU (PyPI package `libcachesim`, the Python
bindings of Juncheng Yang's libCacheSim) replays the trace that
`cachalot-lab mrc` analysed, at the same cache sizes, and prints the miss
ratios as JSON. Item-count caches read the trace with every object of size 1
(libCacheSim's ignore_obj_size); byte caches use the trace's `size` column
(the value size, what `cachalot-lab mrc --bytes-of value` counts).

Usage: libcachesim_lru.py TRACE.csv --items N,N,... --bytes N,N,...
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


def ints(s):
    return [int(x) for x in s.split(",") if x]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--items", type=ints, default=[])
    ap.add_argument("--bytes", type=ints, default=[])
    a = ap.parse_args()
    result = {
        "libcachesim_version": getattr(lcs, "__version__", "unknown"),
        "items": miss_ratios(a.trace, a.items, True),
        "bytes": miss_ratios(a.trace, a.bytes, False),
    }
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()

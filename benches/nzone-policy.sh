#!/usr/bin/env bash
# The N-zone eviction policy table (issue 34, criterion 7): the miss ratio
# of cachalot's engine (`cachalot-lab sim`, Z-zone off, so the N-zone's
# policy alone) beside libCacheSim's LRU, FIFO, CLOCK, SIEVE, S3-FIFO and
# W-TinyLFU on the lab's ETC, YCSB-B and Twitter-like traces at three sizes.
#
# Both sides run the same look-aside requests: a GET is counted, a miss is
# filled; a SET writes without being counted (crates/lab/tests/
# libcachesim_lru.py --look-aside says how libCacheSim is driven).
#
# Capacity, made comparable: libCacheSim counts an object as its key and
# value bytes; the engine's -m also pays for the hash index, a 16-byte header
# per item, the slack of slab chunks, and at least one 1 MB page per slab
# class in use. So libCacheSim gets two capacities per cell:
#  - matched: the key + value bytes the engine (default policy, CLOCK) held
#    at the end of the run (stats `bytes` - 16 x `curr_items`): the same
#    bytes of data in both, the fair comparison of the policies;
#  - raw: the -m bytes themselves (what an operator would type; libCacheSim
#    then holds more data than the engine can).
# The policy rows inside libCacheSim are always comparable to each other.
#
# Usage: benches/nzone-policy.sh   (see docs/benchmarks.md)
# Environment: LAB_BIN (default target/release/cachalot-lab), CACHALOT_PYTHON
# (with libcachesim; default .venv/bin/python, else python3),
# ENGINE_POLICIES (the engine's -o eviction= values; default "lru sieve gdwheel"),
# ALGOS (libCacheSim's; default LRU,FIFO,Clock,Sieve,S3FIFO,WTinyLFU),
# OUT_DIR (traces, sim and libCacheSim JSON; reused when present, so a new
# engine policy costs only its sim runs; default a new temporary directory).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LAB=${LAB_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/cachalot-lab}
if [ -n "${CACHALOT_PYTHON:-}" ]; then
    PY=$CACHALOT_PYTHON
elif [ -x "$ROOT/.venv/bin/python" ]; then
    PY=$ROOT/.venv/bin/python
else
    PY=python3
fi
ENGINE_POLICIES=${ENGINE_POLICIES:-"lru sieve gdwheel"}
ALGOS=${ALGOS:-LRU,FIFO,Clock,Sieve,S3FIFO,WTinyLFU}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cachalot-nzone-policy.XXXXXX)}
mkdir -p "$OUT_DIR"
DRIVER=$ROOT/crates/lab/tests/libcachesim_lru.py
[ -x "$LAB" ] || { echo "$LAB not found (cargo build --release -p cachalot-lab)" >&2; exit 1; }

# name | gen arguments | -m sizes (MB), chosen so misses span ~5-40%.
# ETC keeps its default key space (its one-hit keys put a ~15% floor under
# every cache); YCSB-B's 1 M keys would be mostly cold misses in 2 M
# requests, so it gets 100 000 (a 100 MB working set of 1 KB values).
TRACES=(
    "etc|--model etc --requests 3000000 --seed 1|24 32 48"
    "ycsb-b|--model ycsb-b --param keys=100000 --requests 2000000 --seed 1|32 64 96"
    "twitter|--model twitter --requests 2000000 --seed 1|4 8 32"
)

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -n1)," \
    "$(free -g | awk '/^Mem:/ {print $2}') GiB RAM, $(uname -sr); date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cachalot-lab: $LAB (checkout at $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "libCacheSim: $("$PY" -c 'import libcachesim as l; print(getattr(l, "__version__", "?"))') ($PY)"
echo "out: $OUT_DIR"

for spec in "${TRACES[@]}"; do
    IFS='|' read -r name genargs sizes <<<"$spec"
    trace=$OUT_DIR/$name.csv
    # shellcheck disable=SC2086
    [ -s "$trace" ] || "$LAB" gen $genargs --quiet --out "$trace" >/dev/null
    caps=()
    for m in $sizes; do
        for pol in $ENGINE_POLICIES; do
            j=$OUT_DIR/sim-$name-$m-$pol.json
            [ -s "$j" ] || "$LAB" sim --trace "$trace" -m "$m" --eviction "$pol" \
                --zzone false --json "$j" >/dev/null
        done
        # The matched capacity comes from the default-policy run, so adding
        # an engine policy does not move libCacheSim's sizes.
        j=$OUT_DIR/sim-$name-$m-lru.json
        [ -s "$j" ] || "$LAB" sim --trace "$trace" -m "$m" --zzone false --json "$j" >/dev/null
        caps+=("$("$PY" -c 'import json, sys
s = json.load(open(sys.argv[1]))["meta"]["server_stats"]
print(int(s["bytes"]) - 16 * int(s["curr_items"]))' "$j")")
        caps+=($((m << 20)))
    done
    list=$(IFS=,; echo "${caps[*]}")
    lj=$OUT_DIR/lcs-$name.json
    if ! [ -s "$lj" ] || [ "$(cat "$lj.sizes" 2>/dev/null)" != "$list $ALGOS" ]; then
        "$PY" "$DRIVER" "$trace" --look-aside --algos "$ALGOS" --bytes "$list" >"$lj.tmp"
        mv "$lj.tmp" "$lj"
        echo "$list $ALGOS" >"$lj.sizes"
    fi
done

# The table: one row per trace and -m; GET miss ratios in percent.
cells=()
for spec in "${TRACES[@]}"; do
    IFS='|' read -r name _ sizes <<<"$spec"
    cells+=("$name=${sizes// /,}")
done
python3 - "$OUT_DIR" "$ENGINE_POLICIES" "$ALGOS" "${cells[@]}" <<'PYEOF'
import json, sys
out, engine, algos = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(",")
traces = [(c.split("=")[0], [int(m) for m in c.split("=")[1].split(",")]) for c in sys.argv[4:]]
names = {"lru": "CLOCK", "sieve": "SIEVE", "gdwheel": "GD-Wheel", "gdwheel-lazy": "GD-Wheel lazy"}
for kind, col in (("matched", 0), ("raw -m", 1)):
    print(f"\n### libCacheSim at the {kind} capacity\n")
    head = ["trace", "-m MB", "capacity MB"] + [f"cachalot {names.get(p, p)}" for p in engine] + algos
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, sizes in traces:
        lcs = json.load(open(f"{out}/lcs-{name}.json"))["policies"]
        for i, m in enumerate(sizes):
            row = [name, str(m)]
            cap = lcs[algos[0]][2 * i + col]["size"]
            row.append(f"{cap / 2**20:.1f}")
            for p in engine:
                d = json.load(open(f"{out}/sim-{name}-{m}-{p}.json"))
                row.append(f"{100 * (1 - d['totals']['hit_ratio']):.2f}")
            for a in algos:
                row.append(f"{100 * lcs[a][2 * i + col]['miss_ratio']:.2f}")
            print("| " + " | ".join(row) + " |")
    if col == 0 and "lru" in engine and len(engine) > 1:
        print("\nthe engine's policies relative to its CLOCK at the same -m (negative = fewer misses):")
        for name, sizes in traces:
            for m in sizes:
                miss = {p: 1 - json.load(open(f"{out}/sim-{name}-{m}-{p}.json"))["totals"]["hit_ratio"]
                        for p in engine}
                rel = [f"{names.get(p, p)} {100 * (miss[p] / miss['lru'] - 1):+.1f}%"
                       for p in engine if p != "lru"]
                print(f"  {name} -m {m}: " + ", ".join(rel))
    if "Clock" in algos:
        print("\nmisses relative to libCacheSim's Clock (negative = fewer):")
        for name, sizes in traces:
            lcs = json.load(open(f"{out}/lcs-{name}.json"))["policies"]
            for i, m in enumerate(sizes):
                base = lcs["Clock"][2 * i + col]["miss_ratio"]
                rel = [f"{a} {100 * (lcs[a][2 * i + col]['miss_ratio'] / base - 1):+.1f}%"
                       for a in algos if a != "Clock"]
                print(f"  {name} -m {m}: " + ", ".join(rel))
PYEOF

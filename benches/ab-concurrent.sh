#!/usr/bin/env bash
# Two builds or configurations of cachalot (or memcached) under the same
# load at the same time: both servers pinned to CPU 0, one loadgen each,
# both on CPU 1, started together, ROUNDS rounds of DURATION seconds. Each
# round's ratio B/A of requests/s compares the two in the same time
# window, so the machine's moods, which move alternated runs of one build
# by 10-30% here (docs/benchmarks.md), hit both sides alike: two copies of
# one build gave ratios within 1.5% of 1. It measures what each server's
# CPU costs per request while they share a core; use it for small
# differences (a few %), and the alternated scripts for absolute figures.
#
# Usage: A_BIN=<server or wrapper> B_BIN=<...> benches/ab-concurrent.sh
# Environment: ROUNDS (9), DURATION (s, 4), CONNS (per server, 25), KEYS
# (100000), KEY_LEN (20), VALUE_SIZE (32), DEPTH (16), GET_RATIO (1),
# MULTIGET (1), MEM_MB (64), LOADGEN_BIN. PERF=1 adds a round under
# `perf record` (each server alone) and prints where B's CPU per request
# differs from A's: ns per request by symbol, and the kernel, the
# observers and the rest in all. In a 10 s round two copies of one build
# differed by up to 10 ns on one symbol, and by 0.1% in all.
set -euo pipefail
# shellcheck source=benches/lib.sh
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-9}
DURATION=${DURATION:-4}
CONNS=${CONNS:-25}
KEYS=${KEYS:-100000}
KEY_LEN=${KEY_LEN:-20}
VALUE_SIZE=${VALUE_SIZE:-32}
DEPTH=${DEPTH:-16}
GET_RATIO=${GET_RATIO:-1}
MULTIGET=${MULTIGET:-1}
MEM_MB=${MEM_MB:-64}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cachalot-ab.XXXXXX)}
MEMCACHED_BIN=${A_BIN:?set A_BIN} CACHALOT_BIN=${B_BIN:?set B_BIN}
check_bins
ensure_loadgen

machine_line
echo "A: $MEMCACHED_BIN"
echo "B: $CACHALOT_BIN"
echo "both on CPU 0 (-m $MEM_MB -t 1), loadgens on CPU 1, $CONNS connections each, $KEYS keys, depth $DEPTH, get ratio $GET_RATIO, multiget $MULTIGET, $ROUNDS x ${DURATION}s"
# shellcheck disable=SC2206
FLAGS=(-l 127.0.0.1 -m "$MEM_MB" -t 1 -U 0 -c 1024 $USER_FLAG)
start_server memcached 0 "${FLAGS[@]}"
A_PORT=$SERVER_PORT
A_PID=$SERVER_PID
start_server cachalot 0 "${FLAGS[@]}"
B_PORT=$SERVER_PORT
B_PID=$SERVER_PID
for p in $A_PORT $B_PORT; do
    taskset -c 1 "$LOADGEN" fill --addr "127.0.0.1:$p" --items "$KEYS" \
        --value-size "$VALUE_SIZE" --key-len "$KEY_LEN" >/dev/null
done

load() { # port round out
    taskset -c 1 "$LOADGEN" load --addr "127.0.0.1:$1" --conns "$CONNS" --threads 1 \
        --duration "$DURATION" --get-ratio "$GET_RATIO" --keys "$KEYS" --key-len "$KEY_LEN" \
        --value-size "$VALUE_SIZE" --depth "$DEPTH" --multiget "$MULTIGET" --warm 0 \
        --seed "$2" >"$3"
}

# Both loadgens of round `name` (its seed `seed`), A's first if `a_first`
# is 1; their pids in la and lb.
both() { # name seed a_first
    if [ "$3" = 1 ]; then
        load "$A_PORT" "$2" "$OUT_DIR/a-$1.txt" &
        la=$!
        load "$B_PORT" "$2" "$OUT_DIR/b-$1.txt" &
        lb=$!
    else
        load "$B_PORT" "$2" "$OUT_DIR/b-$1.txt" &
        lb=$!
        load "$A_PORT" "$2" "$OUT_DIR/a-$1.txt" &
        la=$!
    fi
}

ratios=()
for r in $(seq 1 "$ROUNDS"); do
    # The loadgen started first gets a head start: the order alternates.
    both "$r" "$r" $((r % 2))
    wait "$la" "$lb"
    for f in "$OUT_DIR/a-$r.txt" "$OUT_DIR/b-$r.txt"; do
        [ "$(lg_result "$f" errors)" = 0 ] || echo "warning: errors in $f" >&2
    done
    a=$(lg_result "$OUT_DIR/a-$r.txt" ops_per_sec)
    b=$(lg_result "$OUT_DIR/b-$r.txt" ops_per_sec)
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')
    ratios+=("$ratio")
    echo "round $r: A $a, B $b requests/s, B/A $ratio"
done
echo "B/A median of $ROUNDS rounds: $(printf '%s\n' "${ratios[@]}" | median)"

[ "${PERF:-0}" = 1 ] || exit 0
# One more round, each server under its own `perf record` for all but the
# round's first and last half second.
both perf 0 1
sleep 0.5
span=$(awk -v d="$DURATION" 'BEGIN { print (d > 1.5 ? d - 1 : 0.5) }')
perf record -F 1999 -p "$A_PID" -o "$OUT_DIR/a.perf" -- sleep "$span" >/dev/null 2>&1 &
pa=$!
perf record -F 1999 -p "$B_PID" -o "$OUT_DIR/b.perf" -- sleep "$span" >/dev/null 2>&1 &
pb=$!
wait "$la" "$lb" "$pa" "$pb"
for s in a b; do
    perf report -i "$OUT_DIR/$s.perf" --no-children --sort symbol --stdio -n 2>/dev/null |
        awk -v s="$s" '/^ +[0-9.]+%/ { n = $2; $1 = ""; $2 = ""; sub(/^ +/, ""); sub(/ +- +-$/, ""); print s "\t" n "\t" $0 }'
done >"$OUT_DIR/perf.tsv"
python3 - "$OUT_DIR/perf.tsv" "$(lg_result "$OUT_DIR/a-perf.txt" ops_per_sec)" \
    "$(lg_result "$OUT_DIR/b-perf.txt" ops_per_sec)" "$span" <<'PY'
import collections, sys
path, ra, rb, span = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
# A sample stands for 1/1999 s of CPU: ns of CPU per request.
k = tuple(1e9 / (1999 * r * span) for r in (ra, rb))
by_sym = collections.defaultdict(lambda: [0.0, 0.0])
for line in open(path):
    side, n, sym = line.rstrip("\n").split("\t", 2)
    by_sym[sym.strip()][side == "b"] += int(n) * k[side == "b"]
def kind(sym):
    if sym.startswith("[k]"):
        return "kernel"
    observers = ("hotkeys", "prefixes", "watch::", "mrc", "stack::", "capture")
    return "observers" if any(o in sym for o in observers) else "the rest"
total = collections.defaultdict(lambda: [0.0, 0.0])
for sym, (a, b) in by_sym.items():
    for key in ("all", kind(sym)):
        total[key][0] += a
        total[key][1] += b
print(f"perf round: A {ra:.0f}, B {rb:.0f} requests/s; ns of CPU per request")
print(f"{'':>10} {'A':>9} {'B':>9} {'B - A':>9}")
for key in ("all", "kernel", "observers", "the rest"):
    a, b = total[key]
    print(f"{key:>10} {a:9.1f} {b:9.1f} {b - a:+9.1f}")
for sym, (a, b) in sorted(by_sym.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0]))[:25]:
    print(f"{a:9.1f} {b:9.1f} {b - a:+9.1f}  {sym[:100]}")
PY

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
# MULTIGET (1), MEM_MB (64), LOADGEN_BIN.
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
start_server cachalot 0 "${FLAGS[@]}"
B_PORT=$SERVER_PORT
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

ratios=()
for r in $(seq 1 "$ROUNDS"); do
    # The loadgen started first gets a head start: the order alternates.
    if ((r % 2)); then
        load "$A_PORT" "$r" "$OUT_DIR/a-$r.txt" &
        la=$!
        load "$B_PORT" "$r" "$OUT_DIR/b-$r.txt" &
        lb=$!
    else
        load "$B_PORT" "$r" "$OUT_DIR/b-$r.txt" &
        lb=$!
        load "$A_PORT" "$r" "$OUT_DIR/a-$r.txt" &
        la=$!
    fi
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

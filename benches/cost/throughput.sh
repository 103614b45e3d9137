#!/usr/bin/env bash
# Issue 4, criterion 5: no throughput regression. Two cachalot servers from
# the same build, -o eviction=lru and -o eviction=gdwheel, under the same
# uniform-cost load (loadgen sends no cost: every item costs the same),
# alternating which goes first, REPS runs each, medians and their ratio.
# Same method as benches/throughput.sh (servers pinned to CPU 0, load tool to
# CPU 1; loadgen `load`, 50 connections, keys warmed first); two mixes:
# get90 (90% GET) and set90 (90% SET, which exercises eviction bookkeeping
# on every store), unpipelined. MEM_MB small enough that the set-heavy run
# evicts (KEYS x VALUE_SIZE exceeds it) so eviction is on the measured path.
set -euo pipefail
# Before ../lib.sh, which would default CACHALOT_BIN to target/release.
COST_ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHALOT_BIN=${CACHALOT_BIN:-${CARGO_TARGET_DIR:-$COST_ROOT/target}/release/cachalot}
. "$(dirname "$0")/../lib.sh"

DURATION=${DURATION:-10}
REPS=${REPS:-5}
CONNS=${CONNS:-50}
KEYS=${KEYS:-1000000}
KEY_LEN=${KEY_LEN:-20}
VALUE_SIZE=${VALUE_SIZE:-100}
MEM_MB=${MEM_MB:-64}
MIXES=${MIXES:-"get90 set90"}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cost-throughput.XXXXXX)}
check_bins
ensure_loadgen
machine_line
echo "keys $KEYS x ${KEY_LEN}B, values ${VALUE_SIZE}B, -m $MEM_MB, $CONNS conns, ${DURATION}s x $REPS runs; raw in $OUT_DIR"

declare -A PORT PID
for ev in lru gdwheel; do
    start_server cachalot 0 -l 127.0.0.1 -m "$MEM_MB" -t 1 -U 0 -c 1024 $USER_FLAG -o "eviction=$ev"
    PORT[$ev]=$SERVER_PORT PID[$ev]=$SERVER_PID
    taskset -c 1 "$LOADGEN" fill --addr "127.0.0.1:$SERVER_PORT" --items "$KEYS" \
        --value-size "$VALUE_SIZE" --key-len "$KEY_LEN" >"$OUT_DIR/fill-$ev.txt"
done
: >"$OUT_DIR/results.tsv"
for mix in $MIXES; do
    case $mix in get90) ratio=0.9 ;; set90) ratio=0.1 ;; esac
    for rep in $(seq 1 "$REPS"); do
        if [ $((rep % 2)) = 1 ]; then order="lru gdwheel"; else order="gdwheel lru"; fi
        for ev in $order; do
            busy=$(wait_quiet)
            raw=$OUT_DIR/$mix-$ev-$rep.txt
            taskset -c 1 "$LOADGEN" load --addr "127.0.0.1:${PORT[$ev]}" --conns "$CONNS" --threads 1 \
                --duration "$DURATION" --get-ratio "$ratio" --keys "$KEYS" --key-len "$KEY_LEN" \
                --value-size "$VALUE_SIZE" --depth 1 --warm 0 --seed "$rep" >"$raw"
            ops=$(grep '^ops=' "$raw" | tr ' ' '\n' | sed -n 's/^ops_per_sec=//p')
            printf '%s\t%s\t%s\t%s\t%s\n' "$mix" "$ev" "$rep" "$ops" "$busy" >>"$OUT_DIR/results.tsv"
            printf '  %s %-8s run %s: %s ops/s (machine %s%% busy before)\n' "$mix" "$ev" "$rep" "$ops" "$busy"
        done
    done
done
echo
for mix in $MIXES; do
    l=$(awk -v m="$mix" '$1 == m && $2 == "lru" { print $4 }' "$OUT_DIR/results.tsv" | median)
    g=$(awk -v m="$mix" '$1 == m && $2 == "gdwheel" { print $4 }' "$OUT_DIR/results.tsv" | median)
    awk -v m="$mix" -v l="$l" -v g="$g" 'BEGIN { printf "%s: median lru %.0f ops/s, gdwheel %.0f ops/s, gdwheel/lru %.3f\n", m, l, g, g / l }'
done
for ev in lru gdwheel; do
    echo "$ev stats: $(printf 'stats\r\nquit\r\n' | nc -q1 127.0.0.1 "${PORT[$ev]}" | grep -E 'evictions|curr_items' | tr -d '\r' | tr '\n' ' ')"
done

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
# shellcheck source=benches/lib.sh
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
mkdir -p "$OUT_DIR"
check_bins
ensure_loadgen
machine_line
echo "keys $KEYS x ${KEY_LEN}B, values ${VALUE_SIZE}B, -m $MEM_MB, $CONNS conns, ${DURATION}s x $REPS runs; raw in $OUT_DIR"

# perf stat on the server during each run: instructions per request do not
# depend on how much CPU other people's work leaves us, unlike ops/s.
PERF_OK=0
if command -v perf >/dev/null && perf stat -e instructions -x, -o /dev/null -- true >/dev/null 2>&1; then
    PERF_OK=1
fi

declare -A PORT PID
for ev in lru gdwheel; do
    # shellcheck disable=SC2086 # USER_FLAG is empty or "-u root"
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
            perf_pid=
            if [ "$PERF_OK" = 1 ]; then
                perf stat -x, -e instructions -p "${PID[$ev]}" -o "$raw.perf" >/dev/null 2>&1 &
                perf_pid=$!
            fi
            taskset -c 1 "$LOADGEN" load --addr "127.0.0.1:${PORT[$ev]}" --conns "$CONNS" --threads 1 \
                --duration "$DURATION" --get-ratio "$ratio" --keys "$KEYS" --key-len "$KEY_LEN" \
                --value-size "$VALUE_SIZE" --depth 1 --warm 0 --seed "$rep" >"$raw"
            if [ -n "$perf_pid" ]; then
                kill -INT "$perf_pid" 2>/dev/null || true
                wait "$perf_pid" 2>/dev/null || true
            fi
            ops=$(lg_result "$raw" ops_per_sec)
            total=$(lg_result "$raw" ops)
            kins=$(awk -F, -v n="$total" '$3 ~ /^instructions/ && $1 ~ /^[0-9]+$/ && n > 0 { printf "%.2f", $1 / n / 1000; f = 1 } END { if (!f) print "-" }' "$raw.perf" 2>/dev/null || echo -)
            printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$mix" "$ev" "$rep" "$ops" "$busy" "$kins" >>"$OUT_DIR/results.tsv"
            printf '  %s %-8s run %s: %s ops/s, %s kinstr/op on the server (machine %s%% busy before)\n' "$mix" "$ev" "$rep" "$ops" "$kins" "$busy"
        done
    done
done
echo
for mix in $MIXES; do
    l=$(awk -v m="$mix" '$1 == m && $2 == "lru" { print $4 }' "$OUT_DIR/results.tsv" | median)
    g=$(awk -v m="$mix" '$1 == m && $2 == "gdwheel" { print $4 }' "$OUT_DIR/results.tsv" | median)
    li=$(awk -v m="$mix" '$1 == m && $2 == "lru" && $6 != "-" { print $6 }' "$OUT_DIR/results.tsv" | median)
    gi=$(awk -v m="$mix" '$1 == m && $2 == "gdwheel" && $6 != "-" { print $6 }' "$OUT_DIR/results.tsv" | median)
    awk -v m="$mix" -v l="$l" -v g="$g" -v li="$li" -v gi="$gi" 'BEGIN { printf "%s: median lru %.0f ops/s, gdwheel %.0f ops/s, gdwheel/lru %.3f; server kinstr/op lru %s, gdwheel %s\n", m, l, g, g / l, li, gi }'
done
for ev in lru gdwheel; do
    echo "$ev stats: $(python3 -c 'import socket,sys; s=socket.create_connection(("127.0.0.1",int(sys.argv[1]))); s.sendall(b"stats\r\nquit\r\n"); d=b""
while True:
    c=s.recv(65536)
    if not c: break
    d+=c
print(" ".join(l for l in d.decode().split("\r\n") if "evictions" in l or "curr_items" in l))' "${PORT[$ev]}")"
done

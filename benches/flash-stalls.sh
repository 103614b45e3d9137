#!/usr/bin/env bash
# Do flash reads stall memory hits? (issue 12, criterion 6: with flash reads
# in flight, the p99 of memory hits stays within 1.5x of the flash-off build.)
#
# One cachalot, two clients at once:
#   - a reader of a large key set that lives on flash (loadgen load: GETs only
#     over KEYS_FLASH keys it first writes, most of them evicted from memory
#     to flash; with flash off these GETs miss);
#   - the measured client: cachalot-lab replay of YCSB-C over KEYS_HOT keys
#     (look-aside, so they are filled and then stay in memory) at RATE
#     requests/s, open loop; its GET p99 is the figure.
# Runs alternate flash off / on, REPEAT pairs; medians are what to quote.
#
# Usage: benches/flash-stalls.sh   (see docs/benchmarks.md)
# Environment: CACHALOT_BIN, LOADGEN_BIN, LAB_BIN (default
# target/release/cachalot-lab), MEM_MB (64), FLASH_MB (512), THREADS (2),
# KEYS_FLASH (1000000), KEYS_HOT (10000: they must fit in memory beside the
# flash index), RATE (10000), REQUESTS (300000), REPEAT (3), CACHALOT_ARGS
# (extra flags for both modes), OUT_DIR.
set -euo pipefail
# shellcheck source=benches/lib.sh
. "$(dirname "$0")/lib.sh"

MEM_MB=${MEM_MB:-64}
FLASH_MB=${FLASH_MB:-512}
THREADS=${THREADS:-2}
KEYS_FLASH=${KEYS_FLASH:-1000000}
KEYS_HOT=${KEYS_HOT:-10000}
RATE=${RATE:-10000}
REQUESTS=${REQUESTS:-300000}
REPEAT=${REPEAT:-3}
LAB=${LAB_BIN:-$BENCH_ROOT/target/release/cachalot-lab}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cachalot-flash-stalls.XXXXXX)}
mkdir -p "$OUT_DIR"
SERVERS="cachalot"

check_bins
ensure_loadgen
machine_line
echo "cachalot -m $MEM_MB -t $THREADS, flash ${FLASH_MB} MB when on; flash reader: $KEYS_FLASH keys;"
echo "measured: ycsb-c over $KEYS_HOT keys at $RATE req/s, $REQUESTS requests; raw outputs: $OUT_DIR"
echo

# shellcheck disable=SC2206
FLAGS=(-l 127.0.0.1 -m "$MEM_MB" -t "$THREADS" -U 0 $USER_FLAG ${CACHALOT_ARGS:-})
printf '%-4s %-6s %10s %10s %10s %12s\n' rep flash p50_us p99_us p999_us flash_hits
for rep in $(seq 1 "$REPEAT"); do
    for mode in off on; do
        extra=()
        file=$OUT_DIR/flash-$rep
        if [ "$mode" = on ]; then
            rm -f "$file" "$file".*
            extra=(--flash-path "$file" --flash-size "$FLASH_MB")
        fi
        start_server cachalot - "${FLAGS[@]}" "${extra[@]}"
        addr=127.0.0.1:$SERVER_PORT
        # The flash reader writes its keys first (warm), then only GETs.
        "$LOADGEN" load --addr "$addr" --keys "$KEYS_FLASH" --value-size 100 \
            --get-ratio 1.0 --conns 4 --duration 60 --warm 1 \
            >"$OUT_DIR/load-$rep-$mode.txt" 2>&1 &
        load_pid=$!
        # Wait for its warm fill (it prints when done).
        for _ in $(seq 1 600); do
            grep -q warmed "$OUT_DIR/load-$rep-$mode.txt" 2>/dev/null && break
            sleep 0.1
        done
        sleep 2
        "$LAB" replay --server "$addr" --model ycsb-c --param keys="$KEYS_HOT" \
            --requests "$REQUESTS" --rate "$RATE" --json "$OUT_DIR/replay-$rep-$mode.json" \
            >"$OUT_DIR/replay-$rep-$mode.txt" 2>&1
        hits=$("$LOADGEN" stats --addr "$addr" | sed -n 's/^get_extstore=//p')
        kill "$load_pid" 2>/dev/null || true
        wait "$load_pid" 2>/dev/null || true
        stop_server "$SERVER_PID"
        rm -f "$file" "$file".*
        read -r p50 p99 p999 < <(python3 -c '
import json, sys
g = json.load(open(sys.argv[1]))["totals"]["latency"]["get"]
print(round(g["p50_us"]), round(g["p99_us"]), round(g["p999_us"]))
' "$OUT_DIR/replay-$rep-$mode.json")
        printf '%-4s %-6s %10s %10s %10s %12s\n' "$rep" "$mode" "$p50" "$p99" "$p999" "${hits:-0}"
    done
done

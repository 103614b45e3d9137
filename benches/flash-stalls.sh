#!/usr/bin/env bash
# Do flash reads stall memory hits? (issue 12, criterion 6: with flash reads
# in flight, the p99 of memory hits stays within 1.5x of the flash-off build.)
#
# One cachalot, two clients at once:
#   - a reader of a large key set that lives on flash (loadgen load: GETs only
#     over KEYS_FLASH keys it first writes, most of them evicted from memory
#     to flash; with flash off these GETs miss), FLASH_RATE GETs/s over 4
#     connections (0: closed loop, as fast as the server answers);
#   - the measured client: cachalot-lab replay of YCSB-C over KEYS_HOT keys
#     (look-aside, so they are filled and then stay in memory) at RATE
#     requests/s, open loop, over CONNS connections; its GET p99 is the
#     figure. Its values are VALUE_SIZE bytes like the reader's, so that
#     both live in one slab class and its keys stay in memory in both modes
#     (the hit column shows they do).
# Runs alternate the MODES (off: no flash; uring, threads: flash, read by
# the workers' io_uring or by reader threads; memcached and extstore:
# memcached 1.6 without and with extstore on the same file size, for
# comparison), REPEAT rounds; medians are what to quote.
#
# Usage: benches/flash-stalls.sh   (see docs/benchmarks-history.md)
# Environment: CACHALOT_BIN, LOADGEN_BIN, LAB_BIN (default
# target/release/cachalot-lab), MEM_MB (64), FLASH_MB (512), THREADS (2),
# KEYS_FLASH (1000000), FLASH_RATE (3000), VALUE_SIZE (100), KEYS_HOT (10000:
# they must fit in memory beside the flash index), RATE (10000), CONNS (8),
# REQUESTS (150000), REPEAT (3), MODES ("off uring threads"), CACHALOT_ARGS
# (extra flags for the cachalot modes), OUT_DIR.
set -euo pipefail
# shellcheck source=benches/lib.sh
. "$(dirname "$0")/lib.sh"

MEM_MB=${MEM_MB:-64}
FLASH_MB=${FLASH_MB:-512}
THREADS=${THREADS:-2}
KEYS_FLASH=${KEYS_FLASH:-1000000}
KEYS_HOT=${KEYS_HOT:-10000}
FLASH_RATE=${FLASH_RATE:-3000}
VALUE_SIZE=${VALUE_SIZE:-100}
RATE=${RATE:-10000}
CONNS=${CONNS:-8}
REQUESTS=${REQUESTS:-150000}
REPEAT=${REPEAT:-3}
MODES=${MODES:-off uring threads}
# memcached's extstore keeps items under 512 bytes in memory by default;
# the flash reader's are 100 bytes.
EXT_ITEM_SIZE=${EXT_ITEM_SIZE:-64}
LAB=${LAB_BIN:-$BENCH_ROOT/target/release/cachalot-lab}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cachalot-flash-stalls.XXXXXX)}
mkdir -p "$OUT_DIR"
SERVERS="cachalot"
case " $MODES " in
*" memcached "* | *" extstore "*) SERVERS="cachalot memcached" ;;
esac

check_bins
ensure_loadgen
machine_line
echo "cachalot -m $MEM_MB -t $THREADS, flash ${FLASH_MB} MB when on; flash reader: $KEYS_FLASH keys x $VALUE_SIZE B at $FLASH_RATE GETs/s (0: closed loop);"
echo "measured: ycsb-c over $KEYS_HOT keys x $VALUE_SIZE B at $RATE req/s on $CONNS connections, $REQUESTS requests; raw outputs: $OUT_DIR"
echo

# shellcheck disable=SC2206
FLAGS=(-l 127.0.0.1 -m "$MEM_MB" -t "$THREADS" -U 0 $USER_FLAG)
printf '%-4s %-8s %8s %8s %8s %8s %12s\n' rep mode p50_us p99_us p999_us hit flash_hits
for rep in $(seq 1 "$REPEAT"); do
    for mode in $MODES; do
        file=$OUT_DIR/flash-$rep
        rm -f "$file" "$file".*
        server=cachalot
        # shellcheck disable=SC2206
        extra=(${CACHALOT_ARGS:-})
        case $mode in
        off) ;;
        memcached) server=memcached extra=() ;;
        extstore) server=memcached extra=(-o "ext_path=$file:${FLASH_MB}m,ext_item_size=$EXT_ITEM_SIZE") ;;
        *) extra+=(--flash-path "$file" --flash-size "$FLASH_MB" -o "flash_io=$mode") ;;
        esac
        start_server "$server" - "${FLAGS[@]}" "${extra[@]}"
        addr=127.0.0.1:$SERVER_PORT
        # The flash reader writes its keys first (warm), then only GETs.
        "$LOADGEN" load --addr "$addr" --keys "$KEYS_FLASH" --value-size "$VALUE_SIZE" \
            --get-ratio 1.0 --conns 4 --duration 60 --warm 1 --rate "$FLASH_RATE" \
            >"$OUT_DIR/load-$rep-$mode.txt" 2>&1 &
        load_pid=$!
        # Wait for its warm fill (it prints when done).
        for _ in $(seq 1 600); do
            grep -q warmed "$OUT_DIR/load-$rep-$mode.txt" 2>/dev/null && break
            sleep 0.1
        done
        sleep 2
        "$LAB" replay --server "$addr" --model ycsb-c --param keys="$KEYS_HOT" \
            --param value_size="$VALUE_SIZE" --connections "$CONNS" \
            --requests "$REQUESTS" --rate "$RATE" --json "$OUT_DIR/replay-$rep-$mode.json" \
            >"$OUT_DIR/replay-$rep-$mode.txt" 2>&1
        hits=$("$LOADGEN" stats --addr "$addr" | sed -n 's/^get_extstore=//p')
        kill "$load_pid" 2>/dev/null || true
        wait "$load_pid" 2>/dev/null || true
        stop_server "$SERVER_PID"
        rm -f "$file" "$file".*
        read -r p50 p99 p999 hit < <(python3 -c '
import json, sys
t = json.load(open(sys.argv[1]))["totals"]
g = t["latency"]["get"]
print(round(g["p50_us"]), round(g["p99_us"]), round(g["p999_us"]), round(t["hit_ratio"], 3))
' "$OUT_DIR/replay-$rep-$mode.json")
        printf '%-4s %-8s %8s %8s %8s %8s %12s\n' "$rep" "$mode" "$p50" "$p99" "$p999" "$hit" "${hits:-0}"
    done
done

#!/usr/bin/env bash
# How long the flash tier takes to come back (issue 12: "recovery time is
# reported, with a target of one second per 10 million items"), after a
# clean shutdown (SIGTERM: the index snapshot is loaded) and after a crash
# (kill -9: every slab is read, checked and decoded).
#
# One cachalot (-m MEM_MB, a FLASH_MB tier) is filled with ITEMS items of
# VALUES values (VALUE_SIZE bytes) at FILL_RATE items/s, then stopped with
# SIGTERM and started again on the same file, then killed with -9 and
# started again; `stats flash` gives the items recovered and the time.
# REPEAT rounds; medians are what to quote.
#
# Usage: benches/flash-restart.sh   (see docs/benchmarks-history.md)
# Environment: CACHALOT_BIN, LOADGEN_BIN, MEM_MB (64), FLASH_MB (64), ITEMS
# (2500000), VALUE_SIZE (100), VALUES (json), FILL_RATE (150000), REPEAT (3),
# CACHALOT_ARGS, OUT_DIR.
set -euo pipefail
# shellcheck source=benches/lib.sh
. "$(dirname "$0")/lib.sh"

MEM_MB=${MEM_MB:-64}
FLASH_MB=${FLASH_MB:-64}
ITEMS=${ITEMS:-2500000}
VALUE_SIZE=${VALUE_SIZE:-100}
VALUES=${VALUES:-json}
FILL_RATE=${FILL_RATE:-150000}
REPEAT=${REPEAT:-3}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cachalot-flash-restart.XXXXXX)}
mkdir -p "$OUT_DIR"
SERVERS="cachalot"

check_bins
ensure_loadgen
machine_line
echo "cachalot -m $MEM_MB, flash $FLASH_MB MB; $ITEMS $VALUES items of $VALUE_SIZE B at $FILL_RATE/s; raw outputs: $OUT_DIR"
echo

file=$OUT_DIR/flash
# shellcheck disable=SC2206
FLAGS=(-l 127.0.0.1 -m "$MEM_MB" -U 0 $USER_FLAG --flash-path "$file" --flash-size "$FLASH_MB" ${CACHALOT_ARGS:-})

# `stats flash` values of the server at $1: items recovered, microseconds.
recovered() {
    "$LOADGEN" stats --addr "$1" >/dev/null
    server_stats "$1" flash flash_recovered_items flash_recovery_us flash_recovered_clean
}

printf '%-4s %-8s %10s %12s %14s\n' rep restart items micros s_per_10M
for rep in $(seq 1 "$REPEAT"); do
    rm -f "$file" "$file".*
    start_server cachalot - "${FLAGS[@]}"
    "$LOADGEN" capacity --addr "127.0.0.1:$SERVER_PORT" --pid "$SERVER_PID" --items "$ITEMS" \
        --value-size "$VALUE_SIZE" --values "$VALUES" --fill-rate "$FILL_RATE" \
        >"$OUT_DIR/fill-$rep.txt"
    stop_server "$SERVER_PID" # SIGTERM: a clean shutdown
    sleep 1
    for how in clean crash; do
        start_server cachalot - "${FLAGS[@]}"
        read -r items us clean < <(recovered "127.0.0.1:$SERVER_PORT")
        want=$([ "$how" = clean ] && echo 1 || echo 0)
        [ "$clean" = "$want" ] || echo "warning: flash_recovered_clean $clean after a $how stop" >&2
        printf '%-4s %-8s %10s %12s %14s\n' "$rep" "$how" "$items" "$us" \
            "$(python3 -c "print(round($us / 1e6 * 1e7 / max($items, 1), 2))")"
        if [ "$how" = clean ]; then
            kill -9 "$SERVER_PID"
            wait "$SERVER_PID" 2>/dev/null || true
            stop_server "$SERVER_PID"
            sleep 1
        else
            stop_server "$SERVER_PID"
        fi
    done
    rm -f "$file" "$file".*
done

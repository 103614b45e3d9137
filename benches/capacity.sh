#!/usr/bin/env bash
# Capacity benchmark: how many items memcached 1.6 and cachalot keep in the
# same memory limit, and how much resident memory each process uses.
#
# The issue's acceptance criteria: at `-m 64`, write 1.5 M items with
# 14-byte keys ("key:0000000001") and random 10-byte values, then (on fresh
# servers) with random 100-byte values; read `stats` curr_items and the
# process's resident memory (VmRSS sampled every 10 ms during and after the
# fill, and VmHWM); re-read every key to see which ones survived eviction,
# in tenths of write order (the last tenth = the most recent 10%).
# Targets: cachalot keeps >= 1.8x memcached's curr_items with 10-byte values
# and >= 1.25x with 100-byte values, and its RSS stays under 64 MB + 16 MB.
#
# Usage: benches/capacity.sh   (see docs/benchmarks.md)
# Environment: CACHALOT_BIN (default target/release/cachalot), MEMCACHED_BIN,
# LOADGEN_BIN, ITEMS (1500000), MEM_MB (64), THREADS (-t, 4), VALUE_SIZES
# ("10 100"), KEY_LEN (14), PROTO (text: set noreply | meta: ms q),
# SERVERS ("memcached cachalot"), BENCH_NICE (priority, default 0),
# VALUES (random | json | proto | text: the lab's value models, docs/lab.md),
# CACHALOT_ARGS (extra cachalot flags, e.g. "-o zzone=1"),
# FLASH_MB (a flash tier of this size for every server, memcached's extstore
# and cachalot's, in a fresh file of OUT_DIR per run: -o ext_path=FILE:SIZE),
# FILL_RATE (items per second; default 0: as fast as the server reads),
# OUT_DIR (raw outputs; default a new temporary directory).
set -euo pipefail
# shellcheck source=benches/lib.sh
. "$(dirname "$0")/lib.sh"

ITEMS=${ITEMS:-1500000}
MEM_MB=${MEM_MB:-64}
THREADS=${THREADS:-4}
VALUE_SIZES=${VALUE_SIZES:-"10 100"}
KEY_LEN=${KEY_LEN:-14}
PROTO=${PROTO:-text}
VALUES=${VALUES:-random}
CACHALOT_ARGS=${CACHALOT_ARGS:-}
FLASH_MB=${FLASH_MB:-}
FILL_RATE=${FILL_RATE:-0}
SERVERS=${SERVERS:-"memcached cachalot"}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cachalot-capacity.XXXXXX)}
mkdir -p "$OUT_DIR"

check_bins
ensure_loadgen

# shellcheck disable=SC2206
FLAGS=(-l 127.0.0.1 -m "$MEM_MB" -t "$THREADS" -U 0 $USER_FLAG)
machine_line
echo "server flags: -p <free port> ${FLAGS[*]}"
echo "fill: $ITEMS items, $KEY_LEN-byte keys, $VALUES values, pipelined ($PROTO), one connection"
echo "cachalot's extra flags: ${CACHALOT_ARGS:-none}"
echo "flash tier: ${FLASH_MB:+$FLASH_MB MB (-o ext_path), }fill rate: $FILL_RATE items/s (0: unpaced)"
echo "raw outputs: $OUT_DIR"
echo

for vs in $VALUE_SIZES; do
    for name in $SERVERS; do
        extra=()
        # shellcheck disable=SC2206
        [ "$name" = cachalot ] && extra=($CACHALOT_ARGS)
        flash_file=""
        if [ -n "$FLASH_MB" ]; then
            flash_file=$OUT_DIR/flash-$name-$vs
            rm -f "$flash_file" "$flash_file".*
            extra+=(-o "ext_path=$flash_file:${FLASH_MB}m")
        fi
        start_server "$name" - "${FLAGS[@]}" "${extra[@]}"
        echo "== $name, ${vs}-byte values (port $SERVER_PORT, pid $SERVER_PID)" >&2
        "${NICE[@]}" "$LOADGEN" capacity --addr "127.0.0.1:$SERVER_PORT" --pid "$SERVER_PID" \
            --items "$ITEMS" --value-size "$vs" --key-len "$KEY_LEN" --proto "$PROTO" \
            --values "$VALUES" --fill-rate "$FILL_RATE" \
            >"$OUT_DIR/$name-$vs.txt"
        stop_server "$SERVER_PID"
        [ -z "$flash_file" ] || rm -f "$flash_file" "$flash_file".*
    done
done

# Table. Max RSS is the larger of the sampled VmRSS maximum and VmHWM.
RSS_LIMIT_KB=$(( (MEM_MB + 16) * 1024 ))
printf '%-6s %-10s %11s %11s %8s %10s %10s %9s %9s %8s %10s\n' \
    value server curr_items readable x_memc max_rss_MB end_rss_MB recent10% corrupt fill_s on_flash
status=0
for vs in $VALUE_SIZES; do
    base=""
    [ -f "$OUT_DIR/memcached-$vs.txt" ] && base=$(kv "$OUT_DIR/memcached-$vs.txt" curr_items)
    for name in $SERVERS; do
        f=$OUT_DIR/$name-$vs.txt
        items=$(kv "$f" curr_items)
        rss=$(kv "$f" rss_max_sampled_kb)
        hwm=$(kv "$f" vm_hwm_kb)
        maxrss=$(( rss > hwm ? rss : hwm ))
        ratio=$(awk -v a="$items" -v b="${base:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
        printf '%-6s %-10s %11s %11s %8s %10.1f %10.1f %9s %9s %8s %10s\n' \
            "${vs}B" "$name" "$items" "$(kv "$f" reread_hits)" "$ratio" \
            "$(awk -v k="$maxrss" 'BEGIN { print k / 1024 }')" \
            "$(awk -v k="$(kv "$f" rss_end_kb)" 'BEGIN { print k / 1024 }')" \
            "$(kv "$f" recent_hit_pct)" "$(kv "$f" reread_corrupt)" "$(kv "$f" fill_secs)" \
            "$(kv "$f" extstore_objects_used)"
    done
done
echo
echo "hit % by tenth of write order (oldest first):"
for vs in $VALUE_SIZES; do
    for name in $SERVERS; do
        printf '  %-5s %-10s %s\n' "${vs}B" "$name" "$(kv "$OUT_DIR/$name-$vs.txt" band_hit_pct)"
    done
done

# Verdicts against the issue's targets (only when both servers ran).
if [[ " $SERVERS " == *" memcached "* && " $SERVERS " == *" cachalot "* ]]; then
    echo
    for vs in $VALUE_SIZES; do
        case $vs in 10) want=1.8 ;; 100) want=1.25 ;; *) want="" ;; esac
        c=$OUT_DIR/cachalot-$vs.txt
        m=$OUT_DIR/memcached-$vs.txt
        ratio=$(awk -v a="$(kv "$c" curr_items)" -v b="$(kv "$m" curr_items)" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
        rss=$(kv "$c" rss_max_sampled_kb); hwm=$(kv "$c" vm_hwm_kb)
        maxrss=$(( rss > hwm ? rss : hwm ))
        if [ -n "$want" ]; then
            if awk -v r="$ratio" -v w="$want" 'BEGIN { exit !(r >= w) }'; then v=MET; else v=MISSED; status=1; fi
            echo "target ${vs}B: cachalot/memcached curr_items = $ratio (want >= $want): $v"
        fi
        if [ "$maxrss" -le "$RSS_LIMIT_KB" ]; then v=MET; else v=MISSED; status=1; fi
        echo "target ${vs}B: cachalot max RSS = $((maxrss / 1024)) MiB (want <= $((RSS_LIMIT_KB / 1024)) MiB): $v"
        if [ "$(kv "$c" reread_corrupt)" != 0 ]; then
            echo "cachalot ${vs}B: $(kv "$c" reread_corrupt) values read back differ from what was written"
            status=1
        fi
    done
fi
exit $status

#!/usr/bin/env bash
# Warm restart (`-e FILE`, issue 13), cachalot beside memcached 1.6.18: each
# server is filled with ITEMS items of VALUE_SIZE bytes under -m MEM_MB,
# stopped with SIGUSR1 (memcached's graceful restart; cachalot saves on it
# too) and started again on the same file. Reported per round: the items
# before and after, the seconds the stop took (cachalot writes its file
# then; memcached only its metadata, its items live in the mapped file) and
# the seconds until the restarted server answers. The file sits in
# WARM_DIR (default /dev/shm: memcached maps its whole -m onto it, and asks
# for a RAM disk). REPEAT rounds alternate which server goes first.
#
# Usage: benches/warm-restart.sh   (see docs/benchmarks.md)
# Environment: CACHALOT_BIN, MEMCACHED_BIN, LOADGEN_BIN, MEM_MB (1024),
# ITEMS (4000000), VALUE_SIZE (100), VALUES (json), FILL_RATE (300000),
# REPEAT (3), WARM_DIR, OUT_DIR.
set -euo pipefail
# shellcheck source=benches/lib.sh
. "$(dirname "$0")/lib.sh"

MEM_MB=${MEM_MB:-1024}
ITEMS=${ITEMS:-4000000}
VALUE_SIZE=${VALUE_SIZE:-100}
VALUES=${VALUES:-json}
FILL_RATE=${FILL_RATE:-300000}
REPEAT=${REPEAT:-3}
WARM_DIR=${WARM_DIR:-/dev/shm}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cachalot-warm-restart.XXXXXX)}
mkdir -p "$OUT_DIR"
SERVERS="memcached cachalot"

check_bins
ensure_loadgen
machine_line
echo "-m $MEM_MB; $ITEMS $VALUES items of $VALUE_SIZE B at $FILL_RATE/s; files in $WARM_DIR; raw outputs: $OUT_DIR"
echo

# curr_items of the server at $1
items() { server_stats "$1" "" curr_items; }

now() { date +%s.%N; }
secs() { python3 -c "print(round($2 - $1, 3))"; }

printf '%-4s %-10s %10s %10s %8s %8s\n' rep server before after stop_s start_s
for rep in $(seq 1 "$REPEAT"); do
    order=$SERVERS
    [ $((rep % 2)) -eq 0 ] && order="cachalot memcached"
    for name in $order; do
        file=$WARM_DIR/cachalot-bench-warm-$$-$name
        rm -f "$file" "$file".*
        # shellcheck disable=SC2206
        flags=(-l 127.0.0.1 -m "$MEM_MB" -U 0 -t 2 $USER_FLAG -e "$file")
        start_server "$name" - "${flags[@]}"
        "$LOADGEN" capacity --addr "127.0.0.1:$SERVER_PORT" --pid "$SERVER_PID" --items "$ITEMS" \
            --value-size "$VALUE_SIZE" --values "$VALUES" --fill-rate "$FILL_RATE" \
            >"$OUT_DIR/fill-$rep-$name.txt"
        before=$(items "127.0.0.1:$SERVER_PORT")
        t0=$(now)
        kill -USR1 "$SERVER_PID"
        wait "$SERVER_PID" 2>/dev/null || true
        t1=$(now)
        stop_server "$SERVER_PID"
        # memcached needs its clock to move on before it restores.
        sleep 2
        t2=$(now)
        start_server "$name" - "${flags[@]}"
        t3=$(now)
        after=$(items "127.0.0.1:$SERVER_PORT")
        printf '%-4s %-10s %10s %10s %8s %8s\n' "$rep" "$name" "$before" "$after" \
            "$(secs "$t0" "$t1")" "$(secs "$t2" "$t3")"
        stop_server "$SERVER_PID"
        rm -f "$file" "$file".*
    done
done

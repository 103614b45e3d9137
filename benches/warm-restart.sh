#!/usr/bin/env bash
# Warm restart (`-e FILE`, issues 13 and 32), cachalot beside memcached
# 1.6.18: each server is filled with ITEMS items of VALUE_SIZE bytes under
# -m MEM_MB (the same flags for both), plus a probe key written last,
# stopped with SIGUSR1 (memcached's graceful restart; cachalot saves on it
# too) and started again on the same file. Reported per round: the items
# before and after, the seconds the stop took (cachalot writes its file
# then; memcached only its metadata, its items live in the mapped file) and
# the seconds from exec to the first hit (`get` of the probe key answered
# with its value; polled every 2 ms). Then the median of each column per
# server. The file sits in WARM_DIR (default /dev/shm: memcached maps its
# whole -m onto it, and asks for a RAM disk). REPEAT rounds alternate
# which server goes first.
#
# Usage: benches/warm-restart.sh [ITEMS]   (see docs/benchmarks.md)
# Environment: CACHALOT_BIN, MEMCACHED_BIN, LOADGEN_BIN, MEM_MB (1024, or
# 8192 from 10 M items), ITEMS (4000000), VALUE_SIZE (100), VALUES (json),
# REPEAT (3), WARM_DIR, OUT_DIR.
set -euo pipefail
# shellcheck source=benches/lib.sh
. "$(dirname "$0")/lib.sh"

ITEMS=${1:-${ITEMS:-4000000}}
if [ "$ITEMS" -ge 10000000 ]; then
    MEM_MB=${MEM_MB:-8192}
else
    MEM_MB=${MEM_MB:-1024}
fi
VALUE_SIZE=${VALUE_SIZE:-100}
VALUES=${VALUES:-json}
REPEAT=${REPEAT:-3}
WARM_DIR=${WARM_DIR:-/dev/shm}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cachalot-warm-restart.XXXXXX)}
mkdir -p "$OUT_DIR"
PROBE=warm-restart-probe

check_bins
ensure_loadgen
machine_line
echo "-m $MEM_MB; $ITEMS $VALUES items of $VALUE_SIZE B; files in $WARM_DIR; raw outputs: $OUT_DIR"
echo

# curr_items of the server at $1
items() { server_stats "$1" "" curr_items; }

now() { date +%s.%N; }
secs() { python3 -c "print(round($2 - $1, 3))"; }

# set_probe PORT: store the probe key (after the fill, so it is the newest).
set_probe() {
    exec 3<>"/dev/tcp/127.0.0.1/$1"
    printf 'set %s 0 0 5\r\nprobe\r\n' "$PROBE" >&3
    read -r -t 10 reply <&3
    exec 3>&-
    [ "${reply%$'\r'}" = STORED ] || { echo "probe not stored: $reply" >&2; exit 1; }
}

# restart NAME PORT FLAGS...: exec the server on PORT and wait for the
# probe's first hit; sets SERVER_PID.
restart() {
    local name=$1 port=$2
    shift 2
    "${NICE[@]}" "$(server_bin "$name")" -p "$port" "$@" >"$OUT_DIR/$name-$port-restart.log" 2>&1 &
    SERVER_PID=$!
    STARTED_PIDS+=("$SERVER_PID")
    "$LOADGEN" wait --addr "127.0.0.1:$port" --get "$PROBE" --poll-ms 2 --timeout-ms 900000 >/dev/null || {
        echo "$name did not come back; log:" >&2
        cat "$OUT_DIR/$name-$port-restart.log" >&2
        exit 1
    }
}

results=$OUT_DIR/rounds.txt
: >"$results"
printf '%-4s %-10s %10s %10s %8s %8s\n' rep server before after stop_s start_s
for rep in $(seq 1 "$REPEAT"); do
    order="memcached cachalot"
    [ $((rep % 2)) -eq 0 ] && order="cachalot memcached"
    for name in $order; do
        file=$WARM_DIR/cachalot-bench-warm-$$-$name
        rm -f "$file" "$file".*
        # shellcheck disable=SC2206
        flags=(-l 127.0.0.1 -m "$MEM_MB" -U 0 -t 2 $USER_FLAG -e "$file")
        start_server "$name" - "${flags[@]}"
        port=$SERVER_PORT
        "$LOADGEN" fill --addr "127.0.0.1:$port" --items "$ITEMS" \
            --value-size "$VALUE_SIZE" --values "$VALUES" >"$OUT_DIR/fill-$rep-$name.txt"
        set_probe "$port"
        before=$(items "127.0.0.1:$port")
        t0=$(now)
        kill -USR1 "$SERVER_PID"
        wait "$SERVER_PID" 2>/dev/null || true
        t1=$(now)
        stop_server "$SERVER_PID"
        # memcached needs its clock to move on before it restores.
        sleep 2
        sync
        t2=$(now)
        restart "$name" "$port" "${flags[@]}"
        t3=$(now)
        after=$(items "127.0.0.1:$port")
        line=$(printf '%-4s %-10s %10s %10s %8s %8s' "$rep" "$name" "$before" "$after" \
            "$(secs "$t0" "$t1")" "$(secs "$t2" "$t3")")
        echo "$line"
        echo "$line" >>"$results"
        stop_server "$SERVER_PID"
        rm -f "$file" "$file".*
    done
done

echo
printf '%-10s %14s %14s\n' "median" stop_s start_s
for name in memcached cachalot; do
    printf '%-10s %14s %14s\n' "$name" \
        "$(awk -v n="$name" '$2 == n { print $5 }' "$results" | median)" \
        "$(awk -v n="$name" '$2 == n { print $6 }' "$results" | median)"
done

#!/usr/bin/env bash
# Issue 34's criterion 5 (closed-loop throughput) past the Z-zone's fill:
# YCSB-B look-aside over 1 M keys of 100 B protobuf-like values at `-m
# 64`, long enough (6 M requests) that the zone has stopped growing. The
# criterion's usual command (`cachalot-lab compare ... --requests
# 2000000`) ends while the zone is still taking pages from the N-zone, so
# it measures a fill; this measures both, and where the time goes.
#
# For ROUNDS rounds, in turn: cachalot with the defaults, cachalot with
# `-o zzone=0`, memcached (`-t 2`, unpinned, as `compare` runs them). Each
# run replays the same trace closed loop (`cachalot-lab replay`, 4
# connections, one in flight each) and reports its requests/s over the
# whole run and over the last STEADY intervals of 1 M requests, the hit
# ratio of the last one, the server's CPU per request (all threads, from
# /proc/PID/task/*/schedstat), and the Z-zone's reads and demotions. Then
# the medians per configuration.
#
# Usage: benches/zone-steady.sh
# Environment: ROUNDS (2), REQUESTS (6000000), STEADY (2), MEM_MB (64),
# CACHALOT_BIN, MEMCACHED_BIN, LAB_BIN, OUT_DIR.
set -euo pipefail
# shellcheck source=benches/lib.sh
. "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-2}
REQUESTS=${REQUESTS:-6000000}
STEADY=${STEADY:-2}
MEM_MB=${MEM_MB:-64}
LAB_BIN=${LAB_BIN:-$BENCH_ROOT/target/release/cachalot-lab}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cachalot-steady.XXXXXX)}
mkdir -p "$OUT_DIR"
check_bins
ensure_loadgen
[ -x "$LAB_BIN" ] || (cd "$BENCH_ROOT" && cargo build --release -q -p cachalot-lab)
machine_line
echo "trace: ycsb-b, 1 M keys, 100 B proto values, $REQUESTS requests, -m $MEM_MB -t 2; steady = the last $STEADY M requests"

CONFIGS=("cachalot|default|" "cachalot|zzone=0|-o zzone=0" "memcached|memcached|")
: >"$OUT_DIR/runs.txt"
for round in $(seq 1 "$ROUNDS"); do
    for c in "${CONFIGS[@]}"; do
        IFS='|' read -r name label extra <<<"$c"
        # shellcheck disable=SC2086  # extra flags split on purpose
        start_server "$name" - -l 127.0.0.1 -m "$MEM_MB" -t 2 -U 0 $USER_FLAG $extra
        log="$OUT_DIR/$label-$round.txt"
        "$LAB_BIN" replay --server "127.0.0.1:$SERVER_PORT" --model ycsb-b --values proto \
            --param keys=1000000 --param value_size=100 --requests "$REQUESTS" \
            --interval 1000000 --show-intervals >"$log" 2>&1
        cpu=$(cat /proc/"$SERVER_PID"/task/*/schedstat | awk -v n="$REQUESTS" '{t += $1} END {printf "%.2f", t / n / 1000}')
        read -r zhits zdemotions <<<"$(server_stats "127.0.0.1:$SERVER_PORT" zzone zzone_hits zzone_demotions)"
        stop_server "$SERVER_PID"
        all=$(awk '$1 == "cachalot" || $1 == "memcached" {print $8; exit}' "$log")
        # The interval table's rows: index, from, requests, hit, ..., req/s (8th).
        steady=$(awk -v n="$STEADY" -v last=$((REQUESTS / 1000000 - 1)) \
            '$1 ~ /^[0-9]+$/ && NF >= 8 && $1 > last - n {s += $8; k++; hit = $4} END {if (k) printf "%.0f %s", s / k, hit}' "$log")
        echo "$label round=$round all_rps=$all steady_rps=${steady% *} steady_hit=${steady#* } cpu_us=$cpu zzone_hits=$zhits zzone_demotions=$zdemotions" |
            tee -a "$OUT_DIR/runs.txt"
    done
done

# m LABEL FIELD -> the median of FIELD over LABEL's runs
m() { grep "^$1 " "$OUT_DIR/runs.txt" | tr ' ' '\n' | sed -n "s/^$2=//p" | median; }
echo "medians over $ROUNDS rounds:"
for label in default zzone=0 memcached; do
    echo "$label all_rps=$(m "$label" all_rps) steady_rps=$(m "$label" steady_rps) steady_hit=$(m "$label" steady_hit) cpu_us=$(m "$label" cpu_us)"
done
echo "runs and replay logs: $OUT_DIR"

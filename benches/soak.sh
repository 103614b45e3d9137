#!/usr/bin/env bash
# Soak: a long mixed workload from the lab (`cachalot-lab replay`, Twitter-like
# model with mixed value sizes, TTLs and deletes) whose working set is twice
# -m, against cachalot and memcached side by side, each server's resident
# memory (VmRSS) sampled every few seconds throughout.
#
#   benches/soak.sh                      # 30 minutes at -m 64, both servers
#   DURATION_S=120 benches/soak.sh       # a short run
#
# Environment: MEM_MB (64), DURATION_S (1800), RATE (requests/s per server,
# 8000), SAMPLE_S (5), SERVERS ("cachalot memcached"), THREADS (-t, 4),
# OUT (CSV of samples: t_s,<server>_rss_kb...; default docs/data/soak-<date>.csv),
# LAB_BIN / CACHALOT_BIN / MEMCACHED_BIN (binaries; the lab and cachalot come
# from target/release, built with `cargo build --release`).
#
# Prints, per server, min / median / max RSS, the least-squares slope over
# the whole run and over its second half (MB per hour), and the replay's
# summary (hit ratio, errors). The run fails if cachalot's RSS ever exceeds
# -m + 16 MB.
set -euo pipefail
# shellcheck source=benches/lib.sh
source "$(dirname "$0")/lib.sh"

MEM_MB=${MEM_MB:-64}
DURATION_S=${DURATION_S:-1800}
RATE=${RATE:-8000}
SAMPLE_S=${SAMPLE_S:-5}
SERVERS=${SERVERS:-"cachalot memcached"}
THREADS=${THREADS:-4}
LAB=${LAB_BIN:-$BENCH_ROOT/target/release/cachalot-lab}
OUT=${OUT:-$BENCH_ROOT/docs/data/soak-$(date -u +%Y%m%d-%H%M).csv}
OUT_DIR=$(mktemp -d)

# The workload: value sizes from 64 B to 512 KB (many slab classes), 20% of
# keys expiring after a minute, 10% SETs and 1% DELETEs besides the
# look-aside fills, Zipf 0.9 over enough keys that their values add up to
# twice -m (sizes are uniform within +-50% of each entry, so the mean is the
# mix's mean).
SIZES=${SIZES:-"64:4,512:3,4096:2,65536:0.05,524288:0.002"}
MEAN=$(awk -v mix="$SIZES" 'BEGIN { n = split(mix, e, ","); for (i = 1; i <= n; i++) {
    split(e[i], p, ":"); s += p[1] * p[2]; w += p[2] } printf "%.0f", s / w }')
KEYS=$((2 * MEM_MB * 1048576 / MEAN))
PARAMS=(--param "keys=$KEYS" --param "sizes=$SIZES" --param alpha=0.9
    --param write=0.1 --param delete=0.01 --param "ttl=60:0.2,3600:0.4,0:0.4")

[ -x "$LAB" ] || { echo "cachalot-lab not found at $LAB (cargo build --release)" >&2; exit 1; }
check_bins
ensure_loadgen
mkdir -p "$(dirname "$OUT")"

machine_line
echo "soak: -m $MEM_MB -t $THREADS, ${DURATION_S}s at $RATE requests/s per server," \
    "twitter model ${PARAMS[*]} (mean value $MEAN B, working set $((KEYS * MEAN / 1048576)) MB)"

rss_kb() {
    awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0
}

names=() pids=() replays=()
header="t_s"
for name in $SERVERS; do
    # shellcheck disable=SC2086  # USER_FLAG is empty or two words
    start_server "$name" - -l 127.0.0.1 -U 0 -m "$MEM_MB" -t "$THREADS" $USER_FLAG
    "$LAB" replay --server "127.0.0.1:$SERVER_PORT" --model twitter "${PARAMS[@]}" \
        --requests $((RATE * DURATION_S)) --rate "$RATE" --connections 4 --interval 60s \
        --json "$OUT_DIR/$name.json" >"$OUT_DIR/$name.txt" 2>"$OUT_DIR/$name.err" &
    replays+=("$!")
    names+=("$name")
    pids+=("$SERVER_PID")
    header="$header,${name}_rss_kb"
done

echo "$header" >"$OUT"
start=$SECONDS
while :; do
    line=$((SECONDS - start))
    for pid in "${pids[@]}"; do
        line="$line,$(rss_kb "$pid")"
    done
    echo "$line" >>"$OUT"
    running=0
    for r in "${replays[@]}"; do
        kill -0 "$r" 2>/dev/null && running=1
    done
    [ "$running" = 1 ] || break
    sleep "$SAMPLE_S"
done
status=0
for i in "${!replays[@]}"; do
    if ! wait "${replays[$i]}"; then
        echo "replay against ${names[$i]} failed:" >&2
        cat "$OUT_DIR/${names[$i]}.err" >&2
        status=1
    fi
done

echo
echo "samples: $OUT ($(($(wc -l <"$OUT") - 1)) every ${SAMPLE_S}s)"
printf '%-10s %10s %10s %10s %16s %16s\n' server "min MB" "median MB" "max MB" "slope MB/h" "2nd half MB/h"
for i in "${!names[@]}"; do
    col=$((i + 2))
    stats=$(awk -F, -v c="$col" 'NR > 1 { t[++n] = $1; r[n] = $c / 1024
            if (n == 1 || r[n] < mn) mn = r[n]; if (n == 1 || r[n] > mx) mx = r[n] }
        function slope(from,   i, k, st, sr, stt, str) {
            k = 0; st = sr = stt = str = 0
            for (i = from; i <= n; i++) { k++; st += t[i]; sr += r[i]; stt += t[i] * t[i]; str += t[i] * r[i] }
            if (k < 2 || k * stt == st * st) return 0
            return (k * str - st * sr) / (k * stt - st * st) * 3600
        }
        END { printf "%.1f %.1f %.2f %.2f", mn, mx, slope(1), slope(int(n / 2) + 1) }' "$OUT")
    md=$(tail -n +2 "$OUT" | cut -d, -f"$col" | median | awk '{ printf "%.1f", $1 / 1024 }')
    read -r mn mx sl sl2 <<<"$stats"
    printf '%-10s %10s %10s %10s %16s %16s\n' "${names[$i]}" "$mn" "$md" "$mx" "$sl" "$sl2"
    if [ "${names[$i]}" = cachalot ] && awk -v m="$mx" -v lim="$((MEM_MB + 16))" 'BEGIN { exit !(m > lim) }'; then
        echo "cachalot exceeded -m + 16 MB ($mx MB)" >&2
        status=1
    fi
done
for name in "${names[@]}"; do
    echo
    echo "== replay against $name"
    sed -n '1,12p' "$OUT_DIR/$name.txt"
    # The totals come first in the result document (meta, totals, intervals).
    errors=$(awk '/"totals"/ { t = 1 } t && /"errors"/ { gsub(/[^0-9]/, ""); print; exit }' "$OUT_DIR/$name.json")
    echo "errors (SERVER_ERROR and other failed requests): ${errors:-?}"
done
rm -rf "$OUT_DIR"
exit "$status"

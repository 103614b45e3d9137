#!/usr/bin/env bash
# Live miss-ratio curves (issue 36, criterion 3): is the miss ratio
# `stats mrc` predicts at half and twice the memory the one a re-run of
# the same trace at that -m measures?
#
# For each trace and each -m in its list, the trace is run look-aside at
# -m/2, -m and 2 x -m (each size once, shared between the lists), default
# settings otherwise (the Z-zone on). At -m, `stats mrc`'s
# mrc_miss_ratio_50pct and _200pct are read at the end of the run; at the
# other two sizes the GET miss ratio is measured. Two ways to run:
#   - MODE=server (default): a release server per size, driven by
#     `cachalot-lab replay --server` (`stats` and `stats mrc` read from it);
#   - MODE=sim: `cachalot-lab sim`, the engine in-process, which feeds the
#     same curve the same requests (crates/lab/src/sim.rs) and writes its
#     `stats mrc` figures into the result's server_stats.
#
# Usage: benches/mrc-predict.sh   (see docs/benchmarks.md)
# Environment: MODE (server|sim), VALUES (random|text|proto|json, default
# random), CACHALOT_BIN, LAB_BIN (default target/release/...), THREADS
# (-t, 2), CONNS (replay connections, 4), TRACES (name|gen args|-m list;
# default ETC, YCSB-B and Twitter-like), OUT_DIR (traces and results;
# reused when present).
set -euo pipefail
# shellcheck source=benches/lib.sh
. "$(dirname "$0")/lib.sh"
TARGET=${CARGO_TARGET_DIR:-$BENCH_ROOT/target}
LAB=${LAB_BIN:-$TARGET/release/cachalot-lab}
MODE=${MODE:-server}
VALUES=${VALUES:-random}
THREADS=${THREADS:-2}
CONNS=${CONNS:-4}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cachalot-mrc-predict.XXXXXX)}
mkdir -p "$OUT_DIR"
for b in "$CACHALOT_BIN" "$LAB"; do
    [ -x "$b" ] || { echo "$b not found (cargo build --release -p cachalot -p cachalot-lab)" >&2; exit 1; }
done
[ "$MODE" = sim ] || ensure_loadgen
if [ -n "${TRACES:-}" ]; then
    IFS=';' read -r -a TRACE_LIST <<<"$TRACES"
else
    TRACE_LIST=(
        "etc|--model etc --requests 3000000 --seed 1|96 128"
        "ycsb-b|--model ycsb-b --param keys=100000 --requests 2000000 --seed 1|40 64"
        "twitter|--model twitter --requests 2000000 --seed 1|16 32"
    )
fi
echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -n1)," \
    "$(free -g | awk '/^Mem:/ {print $2}') GiB RAM, $(uname -sr); date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cachalot: $CACHALOT_BIN (checkout at $(cd "$BENCH_ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "mode: $MODE, values: $VALUES, -t $THREADS; out: $OUT_DIR"

# run NAME M: the trace at -m M; writes $OUT_DIR/NAME-M-VALUES.stats, the
# `stats` and `stats mrc` pairs (name value per line) at the end.
run() {
    local name=$1 m=$2 out=$OUT_DIR/$1-$2-$VALUES.stats
    [ -s "$out" ] && return
    if [ "$MODE" = sim ]; then
        "$LAB" sim --trace "$OUT_DIR/$name.csv" -m "$m" --values "$VALUES" \
            --json "$OUT_DIR/$name-$m-$VALUES.json" >/dev/null
        python3 - "$OUT_DIR/$name-$m-$VALUES.json" >"$out" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
c = d["totals"]["counts"]
print("get_hits", c["hits"])
print("get_misses", c["gets"] - c["hits"])
for k, v in d["meta"]["server_stats"].items():
    if k.startswith("mrc_"):
        print(k, v)
EOF
        return
    fi
    # shellcheck disable=SC2086  # USER_FLAG is one word or none
    start_server cachalot - -l 127.0.0.1 -U 0 $USER_FLAG -m "$m" -t "$THREADS"
    local addr=127.0.0.1:$SERVER_PORT
    "$LAB" replay --server "$addr" --trace "$OUT_DIR/$name.csv" \
        --values "$VALUES" --connections "$CONNS" --json "$OUT_DIR/$name-$m-$VALUES.json" >/dev/null
    # The maintainer hands the curve the cache's GET counts every 200 ms.
    sleep 0.5
    local hits misses p50 p200
    read -r hits misses <<<"$(server_stats "$addr" "" get_hits get_misses)"
    # "-" where the curve is off (below its default size): only the miss
    # ratio of those runs is used.
    read -r p50 p200 <<<"$(server_stats "$addr" mrc mrc_miss_ratio_50pct mrc_miss_ratio_200pct)"
    printf 'get_hits %s\nget_misses %s\nmrc_miss_ratio_50pct %s\nmrc_miss_ratio_200pct %s\n' \
        "$hits" "$misses" "$p50" "$p200" >"$out"
    stop_server "$SERVER_PID"
}

stat() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }
miss() {
    local f=$OUT_DIR/$1-$2-$VALUES.stats
    python3 -c "h, m = $(stat "$f" get_hits), $(stat "$f" get_misses); print('%.4f' % (m / (h + m)))"
}

printf '\n%-8s %5s | %8s %8s %8s | %9s %9s | %8s %8s\n' trace "-m" "miss/2" "miss" "miss*2" \
    "pred/2" "pred*2" "err/2" "err*2"
for spec in "${TRACE_LIST[@]}"; do
    IFS='|' read -r name genargs sizes <<<"$spec"
    # shellcheck disable=SC2086
    [ -s "$OUT_DIR/$name.csv" ] || "$LAB" gen $genargs --quiet --out "$OUT_DIR/$name.csv" >/dev/null
    for m in $sizes; do
        for s in $((m / 2)) "$m" $((m * 2)); do
            run "$name" "$s"
        done
        f=$OUT_DIR/$name-$m-$VALUES.stats
        half=$(miss "$name" $((m / 2)))
        one=$(miss "$name" "$m")
        two=$(miss "$name" $((m * 2)))
        p50=$(stat "$f" mrc_miss_ratio_50pct)
        p200=$(stat "$f" mrc_miss_ratio_200pct)
        python3 - "$name" "$m" "$half" "$one" "$two" "$p50" "$p200" <<'EOF'
import sys
name, m = sys.argv[1:3]
h, o, t = map(float, sys.argv[3:6])
if "-" in sys.argv[6:8]:
    # The curve is off at this -m (below its default size).
    print("%-8s %5s | %8.4f %8.4f %8.4f | curve off at this -m" % (name, m, h, o, t))
else:
    a, b = map(float, sys.argv[6:8])
    print("%-8s %5s | %8.4f %8.4f %8.4f | %9.4f %9.4f | %+8.4f %+8.4f" % (name, m, h, o, t, a, b, a - h, b - t))
EOF
    done
done

#!/usr/bin/env bash
# Engine scaling (issue 10): `cachalot-lab engine-bench`, the engine
# in-process with N threads (crates/lab/src/enginebench.rs), over threads and
# over data set sizes, and the simulated cache misses per GET. The figures of
# docs/benchmarks-history.md, "Engine scaling", come from here.
#
#   benches/engine-scaling.sh threads   # Zipf 0.99, -m 64: 1, 2, 4, 8 threads, GET_RATIOS
#                                       # (0.9 and 1); paths: inplace (GETs on stripes, SETs
#                                       # in place), stripes (SETs under the engine lock:
#                                       # --in-place-sets false), locked (GETs too: --locked-gets)
#   benches/engine-scaling.sh inserts   # a data set 4x -m (SETs of new keys evict): 1, 2, 4
#                                       # threads, INSERT_RATIOS (0.5 and 0.9 GETs); new keys in
#                                       # reserved chunks (lockfree) or under the engine lock
#                                       # (--lockfree-inserts false)
#   benches/engine-scaling.sh data      # GETs over SMALL_MB vs BIG_MB of data, 1 and 2 threads
#   benches/engine-scaling.sh misses    # callgrind: D1/LL misses per GET, small vs big data
#   benches/engine-scaling.sh layout    # huge pages on/off, multi-gets of BATCH keys with and
#                                       # without prefetching, SMALL_MB and BIG_MB of data
#   benches/engine-scaling.sh repartition  # Cavast's re-partitioning within pages on/off, after
#                                       # SETTLE s (BIG_SETTLE for BIG_MB) of the same load,
#                                       # SMALL_MB and BIG_MB of data, GET_RATIOS, 1 thread
#
# Runs alternate between the configurations, REPEAT times (3); each row is
# the median. Environment: REPEAT, DURATION (5 s), SMALL_MB (64), BIG_MB
# (8192), BIG_M (12288, -m for the big data set: it must hold it all),
# BATCH (16), GET_RATIOS ("0.9 1"), SETTLE (10), BIG_SETTLE (150), SIZES
# (repartition: "SMALL_MB BIG_MB"), MISS_OPS (GETs under callgrind, 200000), MISS_SMALL_MB (8), MISS_BIG_MB
# (1024), LL (simulated last-level cache, 33554432,16,64), LAB_BIN. Each run's
# JSON report stays in OUT (a temporary directory).
set -euo pipefail
# shellcheck source=benches/lib.sh
source "$(dirname "$0")/lib.sh"

REPEAT=${REPEAT:-3}
DURATION=${DURATION:-5}
SMALL_MB=${SMALL_MB:-64}
BIG_MB=${BIG_MB:-8192}
BIG_M=${BIG_M:-12288}
MISS_OPS=${MISS_OPS:-200000}
MISS_SMALL_MB=${MISS_SMALL_MB:-8}
MISS_BIG_MB=${MISS_BIG_MB:-1024}
LL=${LL:-33554432,16,64}
BATCH=${BATCH:-16}
GET_RATIOS=${GET_RATIOS:-0.9 1}
INSERT_RATIOS=${INSERT_RATIOS:-0.5 0.9}
SETTLE=${SETTLE:-10}
BIG_SETTLE=${BIG_SETTLE:-150}
SIZES=${SIZES:-$SMALL_MB $BIG_MB}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
LAB=${LAB_BIN:-$BENCH_ROOT/target/release/cachalot-lab}
[ -x "$LAB" ] || { echo "cachalot-lab not found at $LAB (cargo build --release)" >&2; exit 1; }

echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -n1)," \
    "$(free -g | awk '/^Mem:/ {print $2}') GiB RAM; date: $(date -u '+%Y-%m-%d %H:%M UTC');" \
    "checkout $(cd "$BENCH_ROOT" && git rev-parse --short HEAD); reports in $OUT"

# bench NAME ARGS...: one run, its report in $OUT/NAME.RUN.json.
bench() {
    local name=$1 run=$2
    shift 2
    "$LAB" engine-bench --warm --duration "$DURATION" --json "$OUT/$name.$run.json" "$@" >/dev/null
}

# median NAME FIELD: the median of a jq expression over NAME's runs.
median() {
    jq -s "[.[] | $2] | sort | .[length / 2 | floor]" "$OUT/$1".*.json
}

threads() {
    local run t ratio path
    echo "command: cachalot-lab engine-bench --warm --duration $DURATION -m 64 --dataset 32 --zipf 0.99 --get-ratio R --threads T --in-place-sets true|false [--locked-gets]"
    for run in $(seq "$REPEAT"); do
        for ratio in $GET_RATIOS; do
            for t in 1 2 4 8; do
                for path in inplace stripes locked; do
                    local extra=(--in-place-sets true)
                    case $path in
                        stripes) extra=(--in-place-sets false) ;;
                        locked) extra=(--in-place-sets false --locked-gets) ;;
                    esac
                    bench "threads-$ratio-$path-$t" "$run" -m 64 --dataset 32 --zipf 0.99 \
                        --get-ratio "$ratio" --threads "$t" "${extra[@]}"
                done
            done
        done
    done
    echo "| GET share | path | threads | ops/s | vs 1 thread | engine lock by requests / maintainer | SETs in place | maintainer hold max | request hold p50 / p99 | request wait p99 | GET w/o engine lock p50 / p99 | SET in place p50 / p99 |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    for ratio in $GET_RATIOS; do
        for path in inplace stripes locked; do
            local one
            one=$(median "threads-$ratio-$path-1" .ops_per_s)
            for t in 1 2 4 8; do
                local n=threads-$ratio-$path-$t
                printf '| %s | %s | %s | %.0f | %.2f | %s / %s | %.0f%% | %.0f us | %s / %s ns | %s ns | %s / %s ns | %s / %s ns |\n' \
                    "$ratio" "$path" "$t" \
                    "$(median "$n" .ops_per_s)" "$(jq -n "$(median "$n" .ops_per_s) / $one")" \
                    "$(median "$n" .lock.request_acquisitions)" \
                    "$(median "$n" .lock.maintainer_acquisitions)" \
                    "$(median "$n" '.lock.unlocked_sets / ([.sets, 1] | max) * 100')" \
                    "$(jq -n "$(median "$n" .lock.maintainer_hold_max_ns) / 1000")" \
                    "$(median "$n" .lock.request_hold_p50_ns)" "$(median "$n" .lock.request_hold_p99_ns)" \
                    "$(median "$n" .lock.request_wait_p99_ns)" \
                    "$(median "$n" .lock.stripe_get_p50_ns)" "$(median "$n" .lock.stripe_get_p99_ns)" \
                    "$(median "$n" .lock.stripe_set_p50_ns)" "$(median "$n" .lock.stripe_set_p99_ns)"
            done
        done
    done
}

inserts() {
    local run t ratio path
    echo "command: cachalot-lab engine-bench --warm --duration $DURATION -m 64 --dataset 256 --zipf 0.99 --get-ratio R --threads T --lockfree-inserts true|false"
    for run in $(seq "$REPEAT"); do
        for ratio in $INSERT_RATIOS; do
            for t in 1 2 4; do
                for path in lockfree engine; do
                    bench "inserts-$ratio-$path-$t" "$run" -m 64 --dataset 256 --zipf 0.99 \
                        --get-ratio "$ratio" --threads "$t" \
                        --lockfree-inserts "$([ $path = lockfree ] && echo true || echo false)"
                done
            done
        done
    done
    echo "| GET share | new keys | threads | ops/s | vs 1 thread | hit ratio | engine lock by requests / SETs | SETs without it | request hold p50 / p99 / max | request wait p99 | SET attempt p50 / p99 |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    for ratio in $INSERT_RATIOS; do
        for path in lockfree engine; do
            local one
            one=$(median "inserts-$ratio-$path-1" .ops_per_s)
            for t in 1 2 4; do
                local n=inserts-$ratio-$path-$t
                printf '| %s | %s | %s | %.0f | %.2f | %.4f | %.3f | %.1f%% | %s / %s / %s ns | %s ns | %s / %s ns |\n' \
                    "$ratio" "$path" "$t" \
                    "$(median "$n" .ops_per_s)" "$(jq -n "$(median "$n" .ops_per_s) / $one")" \
                    "$(median "$n" .hit_ratio)" \
                    "$(median "$n" '.lock.request_acquisitions / ([.sets, 1] | max)')" \
                    "$(median "$n" '.lock.unlocked_sets / ([.sets, 1] | max) * 100')" \
                    "$(median "$n" .lock.request_hold_p50_ns)" "$(median "$n" .lock.request_hold_p99_ns)" \
                    "$(median "$n" .lock.request_hold_max_ns)" \
                    "$(median "$n" .lock.request_wait_p99_ns)" \
                    "$(median "$n" .lock.stripe_set_p50_ns)" "$(median "$n" .lock.stripe_set_p99_ns)"
            done
        done
    done
}

data() {
    local run t
    local small=(-m $((SMALL_MB * 2)) --dataset "$SMALL_MB")
    local big=(-m "$BIG_M" --dataset "$BIG_MB")
    echo "command: cachalot-lab engine-bench --warm --duration $DURATION --get-ratio 1 --zipf 0.99 --threads T {${small[*]} | ${big[*]}}"
    for run in $(seq "$REPEAT"); do
        for t in 1 2; do
            bench "small-$t" "$run" "${small[@]}" --get-ratio 1 --threads "$t"
            bench "big-$t" "$run" "${big[@]}" --get-ratio 1 --threads "$t"
        done
    done
    echo "| threads | GET/s ${SMALL_MB} MB | GET/s ${BIG_MB} MB | big / small | hit ratio small / big | prefill s small / big |"
    echo "|---|---|---|---|---|---|"
    for t in 1 2; do
        local s b
        s=$(median "small-$t" .ops_per_s)
        b=$(median "big-$t" .ops_per_s)
        printf '| %s | %.0f | %.0f | %.2f | %.4f / %.4f | %.1f / %.1f |\n' "$t" "$s" "$b" \
            "$(jq -n "$b / $s")" "$(median "small-$t" .hit_ratio)" "$(median "big-$t" .hit_ratio)" \
            "$(median "small-$t" .prefill_s)" "$(median "big-$t" .prefill_s)"
    done
}

# The GETs alone (`enginebench::get` and what it calls) are simulated, with a
# 48 KB 12-way D1 like this machine's and the LL given: a deterministic count.
# Runs of N and 2N GETs draw the same first N keys, so their difference is
# the second N GETs', with the caches warmed by the first N (steady state).
misses() {
    command -v valgrind >/dev/null || { echo "valgrind missing: apt-get install valgrind" >&2; exit 1; }
    local mb n
    echo "command: valgrind --tool=callgrind --cache-sim=yes --D1=49152,12,64 --LL=$LL --toggle-collect='*enginebench::get*'" \
        "cachalot-lab engine-bench --threads 1 --warm --ops N --get-ratio 1 --time-every 0 -m <2 x MB> --dataset <MB>"
    echo "| data set | GETs | instructions / GET | D1 misses / GET | LL misses / GET |"
    echo "|---|---|---|---|---|"
    for mb in "$MISS_SMALL_MB" "$MISS_BIG_MB"; do
        for n in "$MISS_OPS" $((2 * MISS_OPS)); do
            valgrind --tool=callgrind --cache-sim=yes --D1=49152,12,64 --LL="$LL" \
                --toggle-collect='*enginebench::get*' --callgrind-out-file="$OUT/callgrind.$mb.$n.out" \
                "$LAB" engine-bench --threads 1 --warm --ops "$n" --get-ratio 1 --time-every 0 \
                -m $((mb * 2)) --dataset "$mb" >/dev/null 2>&1
        done
        # The totals line lists Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw.
        awk -v mb="$mb" -v n="$MISS_OPS" '/^totals:/ {
            if (FNR == NR) { for (i = 2; i <= 10; i++) first[i] = $i; next }
            printf "| %s MB | first %d | %.0f | %.2f | %.3f |\n", mb, n, first[2] / n,
                (first[6] + first[7]) / n, (first[9] + first[10]) / n
            printf "| %s MB | next %d | %.0f | %.2f | %.3f |\n", mb, n, ($2 - first[2]) / n,
                ($6 + $7 - first[6] - first[7]) / n, ($9 + $10 - first[9] - first[10]) / n }' \
            "$OUT/callgrind.$mb.$MISS_OPS.out" "$OUT/callgrind.$mb.$((2 * MISS_OPS)).out"
    done
}

# Cavast's huge pages (section 6.1) and batched, prefetching multi-gets,
# each on and off, 1 thread, GETs only: configurations alternate within
# each repetition.
layout() {
    local run mb
    local -A conf=(
        [huge-single]="--hugepages true --batch 1"
        [small-single]="--hugepages false --batch 1"
        [huge-batch]="--hugepages true --batch $BATCH --prefetch true"
        [huge-batch-noprefetch]="--hugepages true --batch $BATCH --prefetch false"
    )
    local order=(huge-single small-single huge-batch huge-batch-noprefetch)
    echo "command: cachalot-lab engine-bench --warm --duration $DURATION --get-ratio 1 --zipf 0.99 --threads 1 -m <2 x MB, at least BIG_M for BIG_MB> --dataset <MB> <configuration>"
    for run in $(seq "$REPEAT"); do
        for mb in "$SMALL_MB" "$BIG_MB"; do
            local m=$((mb * 2))
            [ "$mb" != "$BIG_MB" ] || m=$BIG_M
            for c in "${order[@]}"; do
                # shellcheck disable=SC2086 # the configuration is a list of flags
                bench "layout-$mb-$c" "$run" -m "$m" --dataset "$mb" --get-ratio 1 --threads 1 ${conf[$c]}
            done
        done
    done
    echo "| data | configuration | GET/s | vs 4 KB pages, one key per lock | on huge pages | prefill s |"
    echo "|---|---|---|---|---|---|"
    for mb in "$SMALL_MB" "$BIG_MB"; do
        local base
        base=$(median "layout-$mb-small-single" .ops_per_s)
        for c in "${order[@]}"; do
            local n=layout-$mb-$c
            printf '| %s MB | %s (%s) | %.0f | %.2f | %s MB | %.1f |\n' "$mb" "$c" "${conf[$c]}" \
                "$(median "$n" .ops_per_s)" "$(jq -n "$(median "$n" .ops_per_s) / $base")" \
                "$(median "$n" .anon_huge_mb)" "$(median "$n" .prefill_s)"
        done
    done
}

# Cavast's hot/cold re-partitioning within pages (sections 4.1, 6.1), on
# and off, after the same untimed load has let it converge: 1 thread, the
# maintainer beside it as in the server.
repartition() {
    local run mb ratio on
    echo "command: cachalot-lab engine-bench --warm --settle <SETTLE or BIG_SETTLE> --duration $DURATION --zipf 0.99 --get-ratio R --threads 1 -m <2 x MB, BIG_M for BIG_MB> --dataset <MB> --repartition true|false"
    for run in $(seq "$REPEAT"); do
        for mb in $SIZES; do
            local m=$((mb * 2)) settle=$SETTLE
            [ "$mb" != "$BIG_MB" ] || { m=$BIG_M; settle=$BIG_SETTLE; }
            for ratio in $GET_RATIOS; do
                for on in true false; do
                    bench "repartition-$mb-$ratio-$on" "$run" -m "$m" --dataset "$mb" --settle "$settle" \
                        --get-ratio "$ratio" --threads 1 --repartition "$on"
                done
            done
        done
    done
    echo "| data | GET share | ops/s on | ops/s off | on / off | hit ratio on / off | swaps / s | chunks read / s | maintainer hold max on / off |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for mb in $SIZES; do
        for ratio in $GET_RATIOS; do
            local a=repartition-$mb-$ratio-true b=repartition-$mb-$ratio-false
            printf '| %s MB | %s | %.0f | %.0f | %.3f | %.4f / %.4f | %.0f | %.0f | %s / %s us |\n' "$mb" "$ratio" \
                "$(median "$a" .ops_per_s)" "$(median "$b" .ops_per_s)" \
                "$(jq -n "$(median "$a" .ops_per_s) / $(median "$b" .ops_per_s)")" \
                "$(median "$a" .hit_ratio)" "$(median "$b" .hit_ratio)" \
                "$(median "$a" '.repartition.swaps / .elapsed_s')" \
                "$(median "$a" '.repartition.scanned / .elapsed_s')" \
                "$(jq -n "$(median "$a" .lock.maintainer_hold_max_ns) / 1000 | floor")" \
                "$(jq -n "$(median "$b" .lock.maintainer_hold_max_ns) / 1000 | floor")"
        done
    done
}

case "${1:-}" in
threads) threads ;;
repartition) repartition ;;
inserts) inserts ;;
data) data ;;
misses) misses ;;
layout) layout ;;
*)
    echo "usage: $0 threads|inserts|data|misses|layout|repartition" >&2
    exit 2
    ;;
esac

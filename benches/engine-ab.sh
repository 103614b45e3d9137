#!/usr/bin/env bash
# A/B of two builds of the engine, in process: `cachalot-lab engine-bench`
# of build A and of build B, alternated, REPEAT times each, at 1 and 2
# threads, with a small cache (-m 64, 32 MB of data) and a big one (-m 8192,
# BIG_DATA MB of data), 90% GETs over Zipf 0.99 keys. Prints the median
# ops/s of each side, their ratio B/A, and the median of the runs' own B/A
# (each run's two sides back to back): on a shared 2-core machine the 2-thread
# runs swing between two levels from one run to the next, and the paired
# ratio is the steadier figure. Used to show that a restructuring (issue 33)
# changed nothing on the hot paths: the two sides must be within noise.
#
#   LAB_A=/path/old/cachalot-lab LAB_B=target/release/cachalot-lab benches/engine-ab.sh
#
# Or two configurations of one build (issue 34: an eviction policy against
# CLOCK, with a small cache under pressure):
#
#   LAB_A=target/release/cachalot-lab LAB_B=$LAB_A ARGS_B="--eviction sieve" \
#       SIZES=64 SMALL_DATA=128 benches/engine-ab.sh
#
# Environment: LAB_A, LAB_B (required), ARGS_A, ARGS_B (extra engine-bench
# flags of each side), REPEAT (5), DURATION (5 s), SMALL_DATA (32: MB of data
# for -m 64), BIG_DATA (2048), THREADS ("1 2"), SIZES ("64 8192"), OUT (a
# temp dir).
set -euo pipefail
: "${LAB_A:?LAB_A: the first build's cachalot-lab}" "${LAB_B:?LAB_B: the second build's cachalot-lab}"
REPEAT=${REPEAT:-5}
DURATION=${DURATION:-5}
BIG_DATA=${BIG_DATA:-2048}
SMALL_DATA=${SMALL_DATA:-32}
ARGS_A=${ARGS_A:-}
ARGS_B=${ARGS_B:-}
THREADS=${THREADS:-1 2}
SIZES=${SIZES:-64 8192}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

echo "machine: $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB RAM; date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "A: $LAB_A $ARGS_A (built $(date -u -r "$LAB_A" '+%Y-%m-%d %H:%M UTC'))"
echo "B: $LAB_B $ARGS_B (built $(date -u -r "$LAB_B" '+%Y-%m-%d %H:%M UTC'))"
echo "command: cachalot-lab engine-bench --warm --duration $DURATION -m M --dataset D --zipf 0.99 --get-ratio 0.9 --threads T; reports in $OUT"

data_of() { [ "$1" = 64 ] && echo "$SMALL_DATA" || echo "$BIG_DATA"; }

for run in $(seq "$REPEAT"); do
    for m in $SIZES; do
        for t in $THREADS; do
            # Alternate which side goes first, so drift favours neither.
            sides="A B"
            [ $((run % 2)) = 0 ] && sides="B A"
            for side in $sides; do
                lab=$LAB_A
                args=$ARGS_A
                [ "$side" = B ] && lab=$LAB_B && args=$ARGS_B
                # shellcheck disable=SC2086  # flags, split on purpose
                "$lab" engine-bench $args --warm --duration "$DURATION" -m "$m" \
                    --dataset "$(data_of "$m")" --zipf 0.99 --get-ratio 0.9 --threads "$t" \
                    --json "$OUT/$side-$m-$t.$run.json" >/dev/null
            done
        done
    done
done

median() { jq -s '[.[] | .ops_per_s] | sort | .[length / 2 | floor]' "$OUT/$1".*.json; }
# paired NAME: the median over runs of B's ops/s / A's in the same run.
paired() {
    for run in $(seq "$REPEAT"); do
        jq -n "$(jq .ops_per_s "$OUT/B-$1.$run.json") / $(jq .ops_per_s "$OUT/A-$1.$run.json")"
    done | sort -g | awk '{a[NR]=$1} END { print a[int((NR+1)/2)] }'
}
echo "| -m | threads | A ops/s | B ops/s | B/A of medians | median of paired B/A |"
echo "|---|---|---|---|---|---|"
for m in $SIZES; do
    for t in $THREADS; do
        a=$(median "A-$m-$t")
        b=$(median "B-$m-$t")
        printf '| %s | %s | %.0f | %.0f | %.3f | %.3f |\n' "$m" "$t" "$a" "$b" "$(jq -n "$b / $a")" "$(paired "$m-$t")"
    done
done

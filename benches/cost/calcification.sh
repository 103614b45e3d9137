#!/usr/bin/env bash
# Issue 4, criterion 3: the calcification experiment of Carra & Michiardi
# (../shared/seeds/003_*, section 5.1; model `calcification`): two object sets
# with different size distributions, popularity shifting from set 1 to set 2
# in phase 2; costs 1. Hit ratio over time for cachalot's engine with each
# rebalancer (`sim`), for a real cachalot server (REAL_REBALANCE, default
# sas) and for memcached 1.6.18 (`replay`), and the offline optimum of the
# last phase: `cachalot-lab mrc` Algorithm 2 (greedy and exact DP) for the
# engine's memory in pages, counting only the last phase (--warmup = the
# first two thirds of the requests).
#
# Scale: the paper has Q1 = Q2 = 7 M objects, 200 M requests and 1 GB; here
# KEYS per set (default 1 750 000, 1/4) and memory 1 GB / 4 = 256 MB (MEM),
# with REQ = 24 M requests (about 7 per object, half the paper's 14, so that
# a replay takes minutes). Smaller scales distort the result: every slab
# class in use keeps at least one page, and at 500 000 keys / 73 MB that is
# 20 of 69 pages in classes the optimum gives none; at 200 000 keys / 30 MB
# there are fewer pages than classes and nothing can move.
set -euo pipefail
# shellcheck source=benches/cost/lib.sh
. "$(dirname "$0")/lib.sh"

KEYS=${KEYS:-1750000}
MEM=${MEM:-256}
REQ=${REQ:-24000000}
LAST=$((REQ * 2 / 3)) # the model's phases: 0.333 / 0.333 / rest
SEED=${SEED:-1}
REBALANCERS=${REBALANCERS:-"off memcached sas cost-per-byte"}
REAL_REBALANCE=${REAL_REBALANCE:-sas}
REPLAY=${REPLAY:-1}
RAW=${RAW_DIR:-$(mktemp -d /tmp/cost-calc.XXXXXX)}
SRC=(--model calcification --param keys="$KEYS" --requests "$REQ" --seed "$SEED")
cost_machine_line
echo "keys $KEYS per set, requests $REQ, -m $MEM, last phase from request $LAST; raw runs in $RAW"

FILES=()
for rb in $REBALANCERS; do
    f=$DATA/cost-calcification-sim-$rb.json
    "$LAB" sim "${SRC[@]}" -m "$MEM" --rebalance "$rb" --json "$f" >"$RAW/sim-$rb.txt"
    FILES+=("$f")
done

# The offline optimum for the last phase (Algorithm 2 over per-class LRU
# stacks): for -m MEM pages (an upper bound: the engine keeps its hash index
# in -m too) and for the pages the engine really has (from the last sim).
PAGES=$(sed -n 's/.*pages per class: //p' "$RAW/sim-$rb.txt" | tr ' ' '\n' | awk -F: '{ s += $2 } END { print s }')
echo "engine pages at -m $MEM: $PAGES"
for m in "$MEM" "$PAGES"; do
    "$LAB" mrc "${SRC[@]}" --warmup "$LAST" --bytes-of chunk -m "$m" --points 2 \
        --json "$DATA/cost-calcification-mrc-$m.json" | tee "$RAW/mrc-$m.txt" | grep -A4 '^Optimal'
done
if [ "$REPLAY" = 1 ]; then
    replay_srv memcached "$MEM" "" "$RAW/memcached.json" "${SRC[@]}"
    replay_srv cachalot "$MEM" "-o rebalance=$REAL_REBALANCE" "$RAW/cachalot.json" "${SRC[@]}"
    cp "$RAW/memcached.json" "$DATA/cost-calcification-memcached.json"
    cp "$RAW/cachalot.json" "$DATA/cost-calcification-cachalot-$REAL_REBALANCE.json"
    FILES+=("$DATA/cost-calcification-memcached.json" "$DATA/cost-calcification-cachalot-$REAL_REBALANCE.json")
fi
$SUMMARIZE phases --warmup "$LAST" "${FILES[@]}"
for ext in png svg; do
    "$LAB" plot --kind hit-ratio-over-time --x requests \
        --title "Calcification ($KEYS objects per set, -m $MEM): hit ratio over time" \
        --out "$IMG/cost-calcification.$ext" "${FILES[@]}" >/dev/null
done
"$LAB" plot --kind hit-ratio-over-time --x requests --json "$DATA/cost-calcification-series.json" \
    --out "$RAW/plot.svg" "${FILES[@]}"

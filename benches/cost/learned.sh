#!/usr/bin/env bash
# Issue 4, criterion 4: learned costs. Clients send no cost; the backend's
# delay differs per key (the SET after a miss comes the key's cost in
# microseconds later: `sim --backend-delay cost`), and cachalot learns the
# cost from the miss-to-SET gap (`--learn-costs`, -o learn_costs=1). Baseline
# workload (gdwheel-1), same scale, warm-up and memory as gdwheel.sh. Compared:
# lru, gdwheel without costs (everything costs the same: LRU-like), gdwheel
# learning, and gdwheel told the costs explicitly (cost=, the upper bound).
# (replay has no backend delay, so there is no real-server run here.)
set -euo pipefail
# shellcheck source=benches/cost/lib.sh
. "$(dirname "$0")/lib.sh"

KEYS=${KEYS:-300000}
N=${WORKLOAD:-1}
# GETS: GETs per key after the load phase (10 as in gdwheel.sh); WARM: the
# requests not measured (default: the load phase and the first KEYS GETs).
# A longer run (GETS=30 WARM=$((21 * KEYS))) measures after the costs are learned.
GETS=${GETS:-10}
REQ=$(((GETS + 1) * KEYS))
WARM=${WARM:-$((2 * KEYS))}
TAG=${TAG:-learned}
M=${MEM:-93}
RAW=${RAW_DIR:-$(mktemp -d /tmp/cost-learned.XXXXXX)}
OUT=$DATA/cost-$TAG.json
cost_machine_line
echo "gdwheel-$N, keys $KEYS, requests $REQ, warm-up $WARM, -m $M; raw runs in $RAW"
TAGS=()
for seed in $SEEDS; do
    for p in lru-delay gdwheel-delay gdwheel-learn-delay gdwheel-explicit; do
        case $p in
            lru-delay) a=(--eviction lru --backend-delay cost) ;;
            gdwheel-delay) a=(--eviction gdwheel --backend-delay cost) ;;
            gdwheel-learn-delay) a=(--eviction gdwheel --learn-costs --backend-delay cost) ;;
            gdwheel-explicit) a=(--eviction gdwheel) ;;
        esac
        f=$RAW/$TAG-$p-s$seed.json
        "$LAB" sim --model "gdwheel-$N" --param keys="$KEYS" --param load="$KEYS" \
            --requests "$REQ" --seed "$seed" -m "$M" "${a[@]}" --json "$f" >"$f.txt"
        TAGS+=("$TAG/gdwheel-$N/$p/$seed=$f")
    done
done
$SUMMARIZE runs --warmup "$WARM" --out "$OUT" "${TAGS[@]}"
$SUMMARIZE table "$OUT" --base lru-delay

#!/usr/bin/env bash
# Issue 4, criterion 4: learned costs. Clients send no cost; the backend's
# delay differs per key (the SET after a miss comes the key's cost in
# microseconds later: `sim --backend-delay cost`), and cachalot learns the
# cost from the miss-to-SET gap (`--learn-costs`, -o learn_costs=1). Baseline
# workload (gdwheel-1), same scale and memory as gdwheel.sh. Compared:
# lru, gdwheel without costs (everything costs the same: LRU-like), gdwheel
# learning, and gdwheel told the costs explicitly (cost=, the upper bound).
# (replay has no backend delay, so there is no real-server run here.)
set -euo pipefail
# shellcheck source=benches/cost/lib.sh
. "$(dirname "$0")/lib.sh"

KEYS=${KEYS:-300000}
N=${WORKLOAD:-1}
# LOAD: keys SET before the GETs (YCSB's load phase, as gdwheel.sh; those
# items are stored with no miss before them, so their cost cannot be
# learned until they miss once). LOAD=0 (default): a look-aside cache filled
# by its misses only, as in production: every item's cost is learned when
# it is stored.
# GETS: GETs per key; WARM: the requests not measured. Defaults: with a load
# phase, 10 GETs per key and the thesis's warm-up (the load and the first
# KEYS GETs); without, 20 GETs per key and the first 10 x KEYS (GreedyDual
# from an empty cache takes that long to settle, with explicit costs too).
# A longer run with the load phase (GETS=30 WARM=$((21 * KEYS))) measures
# after the costs are learned.
LOAD=${LOAD:-0}
if [ "$LOAD" = 0 ]; then
    GETS=${GETS:-20}
    WARM=${WARM:-$((10 * KEYS))}
else
    GETS=${GETS:-10}
    WARM=${WARM:-$((LOAD + KEYS))}
fi
REQ=$((LOAD + GETS * KEYS))
TAG=${TAG:-learned}
M=${MEM:-93}
RAW=${RAW_DIR:-$(mktemp -d /tmp/cost-learned.XXXXXX)}
mkdir -p "$RAW"
OUT=$DATA/cost-$TAG.json
cost_machine_line
echo "gdwheel-$N, keys $KEYS, load $LOAD, requests $REQ, warm-up $WARM, -m $M; raw runs in $RAW"
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
        "$LAB" sim --model "gdwheel-$N" --param keys="$KEYS" --param load="$LOAD" \
            --requests "$REQ" --seed "$seed" -m "$M" "${a[@]}" --json "$f" >"$f.txt"
        TAGS+=("$TAG/gdwheel-$N/$p/$seed=$f")
    done
done
$SUMMARIZE runs --warmup "$WARM" --out "$OUT" "${TAGS[@]}"
$SUMMARIZE table "$OUT" --base lru-delay

# Real servers (REPLAY=1, seed 1): `replay --backend-us-per-cost US` holds
# every fill SET back by the key's cost times US microseconds (the key stays
# busy meanwhile, as for an application waiting on its backend) and sends no
# cost; cachalot learns the gap it sees between the GET miss and the SET
# (which includes the network and the client's scheduling, tens of
# microseconds here: hence US = 10, so that the cheapest keys wait 100 us).
# Against cachalot with lru, and with gdwheel learning.
if [ "${REPLAY:-1}" = 1 ]; then
    US=${US:-10}
    TAGS=()
    src=(--model "gdwheel-$N" --param keys="$KEYS" --param load="$LOAD" --requests "$REQ" --seed 1
        --connections 16 --pipeline 4 --backend-us-per-cost "$US")
    for p in lru gdwheel-learn; do
        case $p in
            lru) flags="-o eviction=lru" ;;
            gdwheel-learn) flags="-o eviction=gdwheel,learn_costs=1" ;;
        esac
        f=$RAW/$TAG-replay-$p.json
        replay_srv cachalot "$M" "$flags" "$f" "${src[@]}"
        TAGS+=("$TAG-replay/gdwheel-$N/cachalot-$p-delay/1=$f")
    done
    $SUMMARIZE runs --warmup "$WARM" --out "$DATA/cost-$TAG-replay.json" "${TAGS[@]}"
    $SUMMARIZE table "$DATA/cost-$TAG-replay.json" --base cachalot-lru-delay
fi

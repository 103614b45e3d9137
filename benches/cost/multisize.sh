#!/usr/bin/env bash
# Issue 4, criterion 2: GD-Wheel's multi-size workloads 10-12 (Li, GD-Wheel
# thesis, Table 6.2: values of 192/256/320 B by cost group) with rebalancing
# between slab classes. In cachalot's engine (`cachalot-lab sim`, seeds 1-3):
# lru + memcached's automove, and gdwheel with each rebalancer (off,
# memcached, sas = Carra & Michiardi Algorithm 3, cost-per-byte = GD-Wheel
# chapter 5). Then real servers with `cachalot-lab replay` (seed 1):
# memcached 1.6.18 (its default slab_automove=1) and cachalot with gdwheel and
# the rebalancer BEST (default cost-per-byte, the best in sim). Same scale and warm-up as gdwheel.sh:
# KEYS keys (default 100 000, a tenth of the thesis's), load phase, 10 x KEYS
# GETs, the first KEYS of them warm-up; memory where LRU hits ~95%.
set -euo pipefail
# SIM=0 skips the sim runs (keeps the stored summary), for the servers only.
# shellcheck source=benches/cost/lib.sh
. "$(dirname "$0")/lib.sh"

KEYS=${KEYS:-300000}
WORKLOADS=${WORKLOADS:-"10 11 12"}
POLICIES=${POLICIES:-"lru:memcached gdwheel:off gdwheel:memcached gdwheel:sas gdwheel:cost-per-byte"}
BEST=${BEST:-cost-per-byte}
REPLAY=${REPLAY:-1}
REQ=$((11 * KEYS))
WARM=$((2 * KEYS))
RAW=${RAW_DIR:-$(mktemp -d /tmp/cost-multisize.XXXXXX)}
mkdir -p "$RAW"
OUT=$DATA/cost-multisize.json
cost_machine_line
echo "keys $KEYS, requests $REQ, warm-up $WARM; raw runs in $RAW"

memory_for() {
    local fp
    read -ra fp <<<"$(lru95_footprint "$1")"
    # chunks + a 10 B/item index, to the nearest MB (sim checks LRU hits ~95%)
    awk -v b="${fp[0]}" -v n="${fp[1]}" 'BEGIN { m = (b + 10 * n) / 1048576; printf "%d", int(m + 0.5) }'
}

TAGS=()
declare -A MEM
for n in $WORKLOADS; do
    MEM[$n]=$(memory_for "$n")
    echo "gdwheel-$n: -m ${MEM[$n]}"
    [ "${SIM:-1}" = 1 ] || continue
    for seed in $SEEDS; do
        for p in $POLICIES; do
            ev=${p%%:*} rb=${p#*:}
            f=$RAW/gdwheel-$n-$ev-$rb-s$seed.json
            "$LAB" sim --model "gdwheel-$n" --param keys="$KEYS" --param load="$KEYS" \
                --requests "$REQ" --seed "$seed" -m "${MEM[$n]}" --eviction "$ev" \
                --rebalance "$rb" --json "$f" >"$f.txt"
            TAGS+=("multi/gdwheel-$n/sim-$ev-$rb/$seed=$f")
        done
    done
done
[ ${#TAGS[@]} -eq 0 ] || $SUMMARIZE runs --warmup "$WARM" --out "$OUT" "${TAGS[@]}"
$SUMMARIZE table "$OUT" --base sim-lru-memcached

if [ "$REPLAY" = 1 ]; then
    TAGS=()
    for n in $WORKLOADS; do
        src=(--model "gdwheel-$n" --param keys="$KEYS" --param load="$KEYS" --requests "$REQ" --seed 1)
        f=$RAW/gdwheel-$n-replay-memcached.json
        replay_srv memcached "${MEM[$n]}" "" "$f" "${src[@]}"
        TAGS+=("multi-replay/gdwheel-$n/memcached/1=$f")
        f=$RAW/gdwheel-$n-replay-cachalot.json
        replay_srv cachalot "${MEM[$n]}" "-o eviction=gdwheel,rebalance=$BEST" "$f" "${src[@]}"
        TAGS+=("multi-replay/gdwheel-$n/cachalot-gdwheel-$BEST/1=$f")
    done
    $SUMMARIZE runs --warmup "$WARM" --out "$DATA/cost-multisize-replay.json" "${TAGS[@]}"
    $SUMMARIZE table "$DATA/cost-multisize-replay.json" --base memcached
fi

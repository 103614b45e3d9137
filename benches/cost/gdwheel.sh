#!/usr/bin/env bash
# Issue 4, criterion 1: GD-Wheel's single-size workloads 1-9 (Li, GD-Wheel
# thesis, Table 6.1), gdwheel against lru in cachalot's engine (`cachalot-lab
# sim`, deterministic: one run per seed), with the cache sized so that LRU
# hits about 95% after the warm-up (thesis Table 6.3), then memcached 1.6 and
# a cachalot server side by side on a few of them (`cachalot-lab replay`).
#
# Scale: KEYS keys (default 300 000, 3/10 of the thesis's 1 M so the 4 KB
# workload needs 1.1 GB instead of 3.5 GB, and a run takes seconds); YCSB's load phase of all keys,
# then 10 x KEYS GETs of which the first KEYS only warm up: measured = the
# last 9 x KEYS GETs. The memory per workload comes from `cachalot-lab mrc
# --target-hit 0.95 --bytes-of chunk` (LRU by stack distance) plus the hash
# index (about 10 B per item), as in docs/lab.md.
#
# Usage: benches/cost/gdwheel.sh   (WORKLOADS="1 2 ..." SEEDS="1 2 3" KEYS=100000
#        EVICTIONS="lru gdwheel gdwheel-lazy"
#        REPLAY_WORKLOADS="1 4" to choose; REPLAY_WORKLOADS="" skips the servers)
set -euo pipefail
# SIM=0 skips the sim runs (keeps the stored summary), for the servers only.
# shellcheck source=benches/cost/lib.sh
. "$(dirname "$0")/lib.sh"

KEYS=${KEYS:-300000}
WORKLOADS=${WORKLOADS:-"1 2 3 4 5 6 7 8 9"}
REPLAY_WORKLOADS=${REPLAY_WORKLOADS-"1 3 4"}
REQ=$((11 * KEYS))
WARM=$((2 * KEYS))
RAW=${RAW_DIR:-$(mktemp -d /tmp/cost-gdwheel.XXXXXX)}
mkdir -p "$RAW"
OUT=$DATA/cost-gdwheel.json
cost_machine_line
echo "keys $KEYS, requests $REQ (load $KEYS + $((10 * KEYS)) GETs), warm-up $WARM; raw runs in $RAW"

# memory_for N -> -m (MB) at which LRU hits 95% on gdwheel-N after the warm-up
memory_for() {
    local fp
    read -ra fp <<<"$(lru95_footprint "$1")"
    # chunks + an 11 B/item index + the default rebalancer's 1/256 of -m,
    # rounded up to a whole MB (sim checks that LRU hits ~95%)
    awk -v b="${fp[0]}" -v n="${fp[1]}" \
        'BEGIN { m = (b + 11 * n) / 1048576 * 256 / 255; printf "%d", (m == int(m)) ? m : int(m) + 1 }'
}

TAGS=()
declare -A MEM
for n in $WORKLOADS; do
    MEM[$n]=$(memory_for "$n")
    echo "gdwheel-$n: -m ${MEM[$n]}"
    [ "${SIM:-1}" = 1 ] || continue
    for seed in $SEEDS; do
        for ev in ${EVICTIONS:-lru gdwheel}; do
            f=$RAW/gdwheel-$n-$ev-s$seed.json
            "$LAB" sim --model "gdwheel-$n" --param keys="$KEYS" --param load="$KEYS" \
                --requests "$REQ" --seed "$seed" -m "${MEM[$n]}" --eviction "$ev" \
                --json "$f" >"$f.txt"
            TAGS+=("single/gdwheel-$n/sim-$ev/$seed=$f")
        done
    done
done
[ ${#TAGS[@]} -eq 0 ] || $SUMMARIZE runs --warmup "$WARM" --out "$OUT" "${TAGS[@]}"
$SUMMARIZE table "$OUT" --base sim-lru --exclude gdwheel-4

# Real servers: memcached 1.6 (no costs: it evicts by recency) and cachalot
# with -o eviction=gdwheel (costs sent as cost=), seed 1, same -m.
TAGS=()
for n in $REPLAY_WORKLOADS; do
    m=${MEM[$n]:-$(memory_for "$n")}
    for server in memcached cachalot-lru cachalot-gdwheel; do
        f=$RAW/gdwheel-$n-replay-$server.json
        case $server in
            memcached) replay_srv memcached "$m" "" "$f" --model "gdwheel-$n" --param keys="$KEYS" --param load="$KEYS" --requests "$REQ" --seed 1 ;;
            cachalot-*) replay_srv cachalot "$m" "-o eviction=${server#cachalot-}" "$f" --model "gdwheel-$n" --param keys="$KEYS" --param load="$KEYS" --requests "$REQ" --seed 1 ;;
        esac
        TAGS+=("single-replay/gdwheel-$n/$server/1=$f")
    done
done
if [ ${#TAGS[@]} -gt 0 ]; then
    $SUMMARIZE runs --warmup "$WARM" --out "$DATA/cost-gdwheel-replay.json" "${TAGS[@]}"
    $SUMMARIZE table "$DATA/cost-gdwheel-replay.json" --base memcached
fi

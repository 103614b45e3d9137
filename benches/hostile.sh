#!/usr/bin/env bash
# Hostile clients, full size: every probe of `cachalot-lab hostile`
# (crates/lab/src/hostile.rs, the same code the suite's scaled-down
# crates/lab/tests/hostile.rs runs) against target/release/cachalot and
# /usr/bin/memcached side by side, each probe against a freshly started
# server, while a watching client asks for a small key every 20 ms.
#
#   benches/hostile.sh                     # all probes at -m 64
#   MEM_MB=128 benches/hostile.sh          # another -m
#   PROBES="multiget-big slowloris" benches/hostile.sh
#
# Prints one markdown row per probe and server: RSS before the attack, peak
# RSS (VmHWM, or the highest VmRSS sampled every 5 ms), RSS a second after
# the attacking clients left, how the watching client was served, and what
# the attacking clients saw. Fails if cachalot goes over -m + 16 MB or leaves
# the watching client unanswered. Environment: MEM_MB (64), THREADS (4),
# PROBES (all), REPEAT (3 runs of each probe per server, alternating which
# goes first; medians), LAB_BIN, CACHALOT_BIN, MEMCACHED_BIN.
set -euo pipefail
# shellcheck source=benches/lib.sh
source "$(dirname "$0")/lib.sh"

MEM_MB=${MEM_MB:-64}
THREADS=${THREADS:-4}
REPEAT=${REPEAT:-3}
LAB=${LAB_BIN:-$BENCH_ROOT/target/release/cachalot-lab}
[ -x "$LAB" ] || { echo "cachalot-lab not found at $LAB (cargo build --release)" >&2; exit 1; }
check_bins
# memcached is found by the lab in PATH; put the chosen one first.
PATH="$(dirname "$MEMCACHED_BIN"):$PATH"

probe_args=()
for p in ${PROBES:-}; do
    probe_args+=(--probe "$p")
done

machine_line
echo "command: cachalot-lab hostile -m $MEM_MB -t $THREADS --repeat $REPEAT --servers cachalot,memcached ${probe_args[*]}"
echo
"$LAB" hostile -m "$MEM_MB" -t "$THREADS" --repeat "$REPEAT" --servers cachalot,memcached \
    --cachalot-bin "$CACHALOT_BIN" "${probe_args[@]}"

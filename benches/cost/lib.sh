# shellcheck shell=bash
# Shared settings for the issue-4 cost benchmarks (benches/cost/*.sh): where
# the binaries are, where results go, the machine line. Sourced, not run.
#
# The binaries are the release builds of `cachalot` and `cachalot-lab`
# (CARGO_TARGET_DIR, default the workspace's target/); LAB_BIN / CACHALOT_BIN
# override them. Results: docs/data/cost-*.json and docs/img/cost-*.{png,svg}.

COST_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$COST_ROOT/target}
LAB=${LAB_BIN:-$TARGET/release/cachalot-lab}
CACHALOT_BIN=${CACHALOT_BIN:-$TARGET/release/cachalot}
DATA=${DATA_DIR:-$COST_ROOT/docs/data}
IMG=${IMG_DIR:-$COST_ROOT/docs/img}
export SUMMARIZE="python3 $COST_ROOT/benches/cost/summarize.py"
SEEDS=${SEEDS:-"1 2 3"}
mkdir -p "$DATA" "$IMG"

for b in "$LAB" "$CACHALOT_BIN"; do
    [ -x "$b" ] || { echo "$b not found: cargo build --release -p cachalot -p cachalot-lab" >&2; exit 1; }
done

cost_machine_line() {
    echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -n1)," \
        "$(free -g | awk '/^Mem:/ {print $2}') GiB RAM; date: $(date -u '+%Y-%m-%d %H:%M UTC');" \
        "checkout $(cd "$COST_ROOT" && git rev-parse --short HEAD); memcached $(/usr/bin/memcached -V 2>/dev/null)"
}

# lru95_footprint N: "BYTES ITEMS" of the chunks LRU needs to hit 95% on
# GD-Wheel workload N after the warm-up (KEYS keys, load phase, REQ
# requests, WARM warm-up, from the calling script), from `cachalot-lab mrc`.
lru95_footprint() {
    local line
    line=$("$LAB" mrc --model "gdwheel-$1" --param keys="$KEYS" --param load="$KEYS" \
        --requests "$REQ" --warmup "$WARM" --target-hit 0.95 --bytes-of chunk --points 2 |
        grep '^LRU hit ratio')
    echo "$(sed -n 's/.* items, \([0-9]*\) B .*/\1/p' <<<"$line") $(sed -n 's/.* from \([0-9]*\) items.*/\1/p' <<<"$line")"
}

# start_srv memcached|cachalot MEM_MB [extra flags...]: a server on a free
# 127.0.0.1 port (SRV_PORT, SRV_PID); stopped by stop_srv or at exit.
SRV_PIDS=()
stop_all_srv() { local p; for p in "${SRV_PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap stop_all_srv EXIT
start_srv() {
    local kind=$1 mem=$2 bin user=()
    shift 2
    case $kind in memcached) bin=/usr/bin/memcached ;; cachalot) bin=$CACHALOT_BIN ;; esac
    [ "$(id -u)" = 0 ] && user=(-u root)
    SRV_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$bin" -p "$SRV_PORT" -l 127.0.0.1 -U 0 -m "$mem" -t 2 "${user[@]}" "$@" >/dev/null 2>&1 &
    SRV_PID=$!
    SRV_PIDS+=("$SRV_PID")
    python3 - "$SRV_PORT" <<'PY'
import socket, sys, time
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.2).close(); sys.exit(0)
    except OSError:
        time.sleep(0.05)
sys.exit("server did not start")
PY
}
stop_srv() { kill "$SRV_PID" 2>/dev/null || true; wait "$SRV_PID" 2>/dev/null || true; }

# replay_srv KIND MEM "FLAGS" OUT.json replay-args...: fresh server, one
# replay (4 connections, intervals of 100 000 requests), server stopped.
replay_srv() {
    local kind=$1 mem=$2 flags=$3 out=$4
    shift 4
    # shellcheck disable=SC2086
    start_srv "$kind" "$mem" $flags
    "$LAB" replay --server "127.0.0.1:$SRV_PORT" --interval 100000 --json "$out" "$@" >"$out.txt" 2>&1
    stop_srv
}

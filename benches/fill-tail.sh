#!/usr/bin/env bash
# The Z-zone's tail during a fill (issue 34, "Done when" 4 and 6): an empty
# cachalot is filled by an open-loop replay at a fixed offered load
# (latency from each request's intended send time), once with ON_ARGS and
# once with OFF_ARGS, alternated, REPEAT times. Each run prints the GET
# p99 and p99.9 and, from `stats locks`, the longest hold and the p99.9
# hold of each lock by background work and by requests. The medians of
# each side and their ratio close the table.
#
# The server is pinned to CPU 0 (with its maintainer and zone writer), the
# replay to CPU 1.
#
# Usage: benches/fill-tail.sh   (see docs/benchmarks.md)
# Environment: RATE (20000 req/s), REQUESTS (1000000), REPEAT (3),
# MEMORY (64), THREADS (2: -t), ON_ARGS ("-o zzone=1"), OFF_ARGS
# ("-o zzone=0"), MODEL (ycsb-b), WORKLOAD (replay flags after --model;
# default: 1 M keys of 100 B protobuf-like values), CACHALOT_BIN, OFF_BIN
# (the "off" side's binary, CACHALOT_BIN by default: two builds compared
# with the same flags), LAB_BIN, OUT_DIR.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RATE=${RATE:-20000}
REQUESTS=${REQUESTS:-1000000}
REPEAT=${REPEAT:-3}
MEMORY=${MEMORY:-64}
THREADS=${THREADS:-2}
ON_ARGS=${ON_ARGS:--o zzone=1}
OFF_ARGS=${OFF_ARGS:--o zzone=0}
MODEL=${MODEL:-ycsb-b}
WORKLOAD=${WORKLOAD:---values proto --param keys=1000000 --param value_size=100}
LAB_BIN=${LAB_BIN:-$BENCH_ROOT/target/release/cachalot-lab}
OFF_BIN=${OFF_BIN:-$CACHALOT_BIN}
OUT_DIR=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$OUT_DIR"
ensure_loadgen
[ -x "$LAB_BIN" ] || (cd "$BENCH_ROOT" && cargo build --release -q -p cachalot-lab)
[ -x "$CACHALOT_BIN" ] || (cd "$BENCH_ROOT" && cargo build --release -q -p cachalot)

machine_line
echo "command: cachalot -m $MEMORY -t $THREADS {$ON_ARGS | $OFF_ARGS} (CPU 0); cachalot-lab replay --model $MODEL $WORKLOAD --requests $REQUESTS --rate $RATE (CPU 1); results in $OUT_DIR"

# One run: prints "p99 p999 lock:holder:max:p999 ..." for side $1 ($2: flags).
run() {
    local side=$1 flags=$2 json=$OUT_DIR/$side.$3.json bin=$CACHALOT_BIN
    [ "$side" = off ] && bin=$OFF_BIN
    # shellcheck disable=SC2086
    CACHALOT_BIN=$bin start_server cachalot 0 -m "$MEMORY" -t "$THREADS" $flags
    # shellcheck disable=SC2086
    taskset -c 1 "$LAB_BIN" replay --server "127.0.0.1:$SERVER_PORT" --model "$MODEL" $WORKLOAD \
        --requests "$REQUESTS" --rate "$RATE" --json "$json" >"$OUT_DIR/$side.$3.log" 2>&1
    python3 - "$json" "127.0.0.1:$SERVER_PORT" <<'PY'
import json, socket, sys
d = json.load(open(sys.argv[1]))
lat = d["totals"]["latency"]
get = lat.get("get", lat)
host, port = sys.argv[2].rsplit(":", 1)
s = socket.create_connection((host, int(port)))
s.sendall(b"stats locks\r\n")
b = b""
while not b.endswith(b"END\r\n"):
    b += s.recv(65536)
st = dict(l.split()[1:3] for l in b.decode().split("\r\n") if l.startswith("STAT "))
locks = sorted({k[: -len("_hold_max_us")] for k in st if k.endswith("_hold_max_us")})
def over(l, us):
    # Share of the holds not under `us` (the histogram's cumulative counts).
    n = int(st[l + "_holds"])
    under = max([int(v) for k, v in st.items() if k.startswith(l + "_le_") and int(k[len(l) + 4 : -2]) <= us] or [0])
    return 100.0 * (n - under) / n
# A background holder's longest hold also on the CPU (after a "/"): wall
# time above it was the machine's stall, not the hold's work.
def longest(l):
    cpu = st.get(l + "_hold_max_cpu_us")
    return st[l + "_hold_max_us"] + (f"/{cpu}" if cpu is not None else "")
cells = [f"{l}:{longest(l)}:{st[l + '_hold_p999_us']}:{over(l, 20):.2f}%" for l in locks if int(st[l + "_holds"]) > 0]
# Each lock's holds by every holder (requests and background) over 20 us.
for lock in sorted({l.rsplit("_", 1)[0] for l in locks}):
    held = [l for l in locks if l.rsplit("_", 1)[0] == lock and int(st[l + "_holds"]) > 0]
    n = sum(int(st[l + "_holds"]) for l in held)
    if n:
        cells.append(f"{lock}:all:{sum(over(l, 20) * int(st[l + '_holds']) for l in held) / n:.3f}%")
print(get["p99_us"], get["p999_us"], " ".join(cells))
PY
    stop_server "$SERVER_PID"
}

# The machine's floor under those holds: 5 us of arithmetic timed 200,000
# times on the server's core, at the priority the Z-zone's writer holds
# its lock at (SCHED_FIFO 1, where allowed). A hold is never shorter than
# its work, and on a virtual CPU is as often as long as this.
floor() {
    local prio=(chrt -f 1)
    chrt -f 1 true 2>/dev/null || prio=()
    taskset -c 0 "${prio[@]}" "$LOADGEN" jitter --iters 200000 --work-us 5 | tr '\n' ' '
    echo
}
echo "floor before: $(floor)"

declare -A P99 P999
for rep in $(seq "$REPEAT"); do
    order="on off"
    [ $((rep % 2)) = 0 ] && order="off on"
    for side in $order; do
        flags=$ON_ARGS
        [ "$side" = off ] && flags=$OFF_ARGS
        read -r p99 p999 holds <<<"$(run "$side" "$flags" "$rep")"
        P99[$side]+="$p99 "
        P999[$side]+="$p999 "
        printf '%-3s run %d: GET p99 %8s us  p99.9 %8s us  holds (lock_holder:max us[/on CPU]:p99.9 us:share over 20 us; lock:all: share of all holders over 20 us) %s\n' \
            "$side" "$rep" "$p99" "$p999" "$holds"
    done
done
on99=$(tr ' ' '\n' <<<"${P99[on]}" | grep . | median)
off99=$(tr ' ' '\n' <<<"${P99[off]}" | grep . | median)
on999=$(tr ' ' '\n' <<<"${P999[on]}" | grep . | median)
off999=$(tr ' ' '\n' <<<"${P999[off]}" | grep . | median)
echo "medians: p99 on $on99 off $off99 (x $(awk -v a="$on99" -v b="$off99" 'BEGIN{printf "%.2f", a/b}'));" \
    "p99.9 on $on999 off $off999 (x $(awk -v a="$on999" -v b="$off999" 'BEGIN{printf "%.2f", a/b}'))"
echo "floor after: $(floor)"

# shellcheck shell=bash
# shellcheck disable=SC2034  # variables set here are used by the scripts that source it
# Shared helpers for the benches/ scripts: locate or build the load
# generator, start a server (memcached or cachalot) on a
# free 127.0.0.1 port with the flags it is given, and stop every server this
# script started when it exits. Sourced, not run.
#
# Both servers get the very same memcached command line, which is the point:
# cachalot must be a drop-in replacement, flags included.

BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MEMCACHED_BIN=${MEMCACHED_BIN:-/usr/bin/memcached}
CACHALOT_BIN=${CACHALOT_BIN:-$BENCH_ROOT/target/release/cachalot}

# memcached refuses to start as root without -u; pass the same flag to both.
if [ "$(id -u)" = 0 ]; then
    USER_FLAG="-u root"
else
    USER_FLAG=""
fi

# BENCH_NICE (default 0): scheduling priority of the servers and the load
# tools. On a machine shared with other people's builds, a negative value
# (root only) makes the benchmark win the CPU back from them, at their cost.
BENCH_NICE=${BENCH_NICE:-0}
NICE=(nice -n "$BENCH_NICE")

STARTED_PIDS=()

stop_servers() {
    local p
    for p in "${STARTED_PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${STARTED_PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    STARTED_PIDS=()
}
trap stop_servers EXIT
trap 'exit 130' INT TERM

# The load generator: $LOADGEN_BIN if given, else built (release) in
# $CARGO_TARGET_DIR (default: the workspace's target/).
ensure_loadgen() {
    if [ -n "${LOADGEN_BIN:-}" ]; then
        LOADGEN=$LOADGEN_BIN
    else
        (cd "$BENCH_ROOT" && cargo build --release -q -p cachalot-loadgen) >&2
        LOADGEN=${CARGO_TARGET_DIR:-$BENCH_ROOT/target}/release/loadgen
    fi
    [ -x "$LOADGEN" ] || { echo "loadgen not found at $LOADGEN" >&2; exit 1; }
}

check_bins() {
    local b
    for b in "$MEMCACHED_BIN" "$CACHALOT_BIN"; do
        [ -x "$b" ] || {
            echo "server binary $b not found (set MEMCACHED_BIN / CACHALOT_BIN;" \
                "cachalot: cargo build --release)" >&2
            exit 1
        }
    done
}

# server_bin NAME -> path of that server's binary
server_bin() {
    case "$1" in
        memcached) echo "$MEMCACHED_BIN" ;;
        cachalot) echo "$CACHALOT_BIN" ;;
        *) echo "unknown server $1" >&2; return 1 ;;
    esac
}

# start_server NAME CPU_LIST FLAGS... : starts the server on a free port,
# pinned with taskset when CPU_LIST is not "-"; sets SERVER_PORT, SERVER_PID.
start_server() {
    local name=$1 cpus=$2
    shift 2
    local bin port
    bin=$(server_bin "$name")
    for _ in 1 2 3; do
        port=$("$LOADGEN" free-port)
        if [ "$cpus" = "-" ]; then
            "${NICE[@]}" "$bin" -p "$port" "$@" >"$OUT_DIR/$name-$port.log" 2>&1 &
        else
            "${NICE[@]}" taskset -c "$cpus" "$bin" -p "$port" "$@" >"$OUT_DIR/$name-$port.log" 2>&1 &
        fi
        SERVER_PID=$!
        STARTED_PIDS+=("$SERVER_PID")
        if "$LOADGEN" wait --addr "127.0.0.1:$port" >/dev/null 2>&1; then
            SERVER_PORT=$port
            return 0
        fi
        # Most likely the port was taken between free-port and bind: retry.
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    done
    echo "$name did not start; last log:" >&2
    cat "$OUT_DIR/$name-$port.log" >&2
    exit 1
}

# stop_server PID
stop_server() {
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    local keep=() p
    for p in "${STARTED_PIDS[@]}"; do
        [ "$p" = "$1" ] || keep+=("$p")
    done
    STARTED_PIDS=("${keep[@]}")
}

# kv FILE NAME -> the value of NAME=... in a loadgen output file
kv() {
    sed -n "s/^$2=//p" "$1" | head -n1
}

# lg_result FILE NAME -> the value of NAME=... on the result line of
# `loadgen load` (one line of space-separated fields, from ops=)
lg_result() {
    grep '^ops=' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1
}

# median of the numbers on stdin (mean of the middle two for an even count)
median() {
    sort -g | awk '{a[NR]=$1} END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'
}

machine_line() {
    echo "machine: $(nproc) CPUs, $(lscpu | sed -n 's/^Model name: *//p' | head -n1)," \
        "$(free -g | awk '/^Mem:/ {print $2}') GiB RAM, $(uname -sr); date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "memcached: $("$MEMCACHED_BIN" -V 2>/dev/null) ($MEMCACHED_BIN)"
    echo "cachalot:  $CACHALOT_BIN (built $(date -u -r "$CACHALOT_BIN" '+%Y-%m-%d %H:%M UTC'); checkout at $(cd "$BENCH_ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?'))"
    echo "priority: nice $BENCH_NICE"
}

# Percentage of the machine's CPU time (all cores) that was busy over half a
# second, from /proc/stat. Our own servers are idle between runs, so this is
# mostly other people's work on this shared machine.
cpu_busy_pct() {
    local a b
    a=$(awk '/^cpu / { print $2+$3+$4+$7+$8+$9, $5+$6 }' /proc/stat)
    sleep 0.5
    b=$(awk '/^cpu / { print $2+$3+$4+$7+$8+$9, $5+$6 }' /proc/stat)
    awk -v a="$a" -v b="$b" 'BEGIN {
        split(a, x, " "); split(b, y, " ");
        busy = y[1] - x[1]; idle = y[2] - x[2];
        if (busy + idle > 0) printf "%.0f", 100 * busy / (busy + idle); else print 0 }'
}

# Waits (at most QUIET_WAIT seconds, default 60) until the machine is mostly
# idle (busy <= QUIET_PCT %, default 15), so a run does not start in the
# middle of someone else's build. Prints the busy % it finally saw.
wait_quiet() {
    local limit=${QUIET_WAIT:-60} max=${QUIET_PCT:-15} start=$SECONDS busy
    while :; do
        busy=$(cpu_busy_pct)
        if [ "$busy" -le "$max" ] || [ $((SECONDS - start)) -ge "$limit" ]; then
            echo "$busy"
            return 0
        fi
        sleep 1
    done
}

# server_stats ADDR GROUP NAME... -> the values of those stats, space
# separated, from `stats GROUP` ("" for plain `stats`) of the server at ADDR
# ("-" for one it does not have, all "-" for a group it answers ERROR to).
server_stats() {
    python3 - "$@" <<'PY'
import socket, sys
addr, group, names = sys.argv[1], sys.argv[2], sys.argv[3:]
host, port = addr.rsplit(":", 1)
s = socket.create_connection((host, int(port)))
s.sendall(("stats %s\r\n" % group).replace("stats \r", "stats\r").encode())
b = b""
while not b.endswith(b"END\r\n") and not b.endswith(b"ERROR\r\n"):
    b += s.recv(65536)
st = dict(l.split()[1:3] for l in b.decode().split("\r\n") if l.startswith("STAT "))
print(" ".join(st.get(n, "-") for n in names))
PY
}

#!/usr/bin/env bash
# Throughput benchmark: memcached 1.6 and cachalot side by side under the
# same load, as the issue asks: get-heavy (90% get / 10% set) and set-heavy
# (10% get / 90% set) mixes of small values over a key space that fits in
# memory, 50 connections, with pipelining off (one request in flight per
# connection) and on (batches of DEPTH requests), every run repeated REPS
# times with the two servers alternating, medians and their ratio reported.
#
# Two load tools: our own `loadgen load` (benches/loadgen; latency p50/p99
# from an HdrHistogram) and Debian's `memcaslap` (libmemcached-tools; its
# throughput only), so that a quirk of one tool cannot decide the result.
#
# The machine has 2 cores. With PIN=1 (default) both servers are pinned to
# CPU 0 and the load tools to CPU 1 with taskset, so server and client do not
# steal each other's core; both servers get the same `-t` (THREADS, default
# 1: one worker thread per pinned core). With PIN=0 nothing is pinned.
#
# The server's cost per request is also reported: CPU time from /proc
# (the threads' run time in ns, /proc/PID/task/*/schedstat), system calls
# per request (`perf stat` on the raw_syscalls tracepoint) and, where the
# CPU exposes them, instructions per request (user + kernel). On a machine
# shared with other work these are steadier than requests/s.
#
# With RATE set, every loadgen workload is an open loop at RATE requests/s
# (below saturation): the CPU per request is then what each server spends
# at the same offered load (issue 35's measure), and requests/s is RATE.
# Workloads besides the mixes: lg-hit-d1 (GETs that hit), lg-miss-d1 (GETs
# of keys never set), lg-set-d1 (SETs), lg-hit-dN (GET hits pipelined
# DEPTH deep), lg-mget10 (10-key multi-gets, counted as one request).
#
# Usage: benches/throughput.sh   (see docs/benchmarks.md)
# Environment: CACHALOT_BIN, MEMCACHED_BIN, LOADGEN_BIN, DURATION (s, 10),
# REPS (3), CONNS (50), THREADS (-t, 1), KEYS (100000), KEY_LEN (20: memcaslap
# needs keys longer than 16 bytes, and both tools use the same length),
# VALUE_SIZE (32), DEPTH (16), MEM_MB (64), PIN (1), WORKLOADS (subset of
# "lg-get90-d1 lg-get90-dN lg-set90-d1 lg-set90-dN mcs-get90 mcs-set90"),
# BENCH_NICE (priority, default 0), QUIET_WAIT / QUIET_PCT (before each run,
# wait up to QUIET_WAIT s, default 60, for the machine to be at most QUIET_PCT
# %, default 15, busy), PERF (1: count system calls and instructions with
# perf stat), RATE (requests/s of an open loop; 0, the default, is closed),
# OUT_DIR (raw outputs; default a new temp directory).
set -euo pipefail
# shellcheck source=benches/lib.sh
. "$(dirname "$0")/lib.sh"

DURATION=${DURATION:-10}
REPS=${REPS:-3}
CONNS=${CONNS:-50}
THREADS=${THREADS:-1}
KEYS=${KEYS:-100000}
KEY_LEN=${KEY_LEN:-20}
VALUE_SIZE=${VALUE_SIZE:-32}
DEPTH=${DEPTH:-16}
MEM_MB=${MEM_MB:-64}
PIN=${PIN:-1}
WORKLOADS=${WORKLOADS:-"lg-get90-d1 lg-get90-dN lg-set90-d1 lg-set90-dN mcs-get90 mcs-set90"}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cachalot-throughput.XXXXXX)}
mkdir -p "$OUT_DIR"
MEMCASLAP=${MEMCASLAP:-$(command -v memcaslap || true)}

check_bins
ensure_loadgen

if [ "$PIN" = 1 ]; then
    SERVER_CPUS=0
    CLIENT=("${NICE[@]}" taskset -c 1)
else
    SERVER_CPUS=-
    CLIENT=("${NICE[@]}")
fi

# shellcheck disable=SC2206
FLAGS=(-l 127.0.0.1 -m "$MEM_MB" -t "$THREADS" -U 0 -c 1024 $USER_FLAG)
machine_line
echo "server flags: -p <free port> ${FLAGS[*]}; pinning: $([ "$PIN" = 1 ] && echo 'servers on CPU 0, load tool on CPU 1' || echo none)"
echo "load: $CONNS connections, ${DURATION}s per run, $REPS runs per server, keys $KEYS x ${KEY_LEN}B, values ${VALUE_SIZE}B, pipelined depth $DEPTH, $([ "${RATE:-0}" = 0 ] && echo 'closed loop' || echo "open loop at $RATE requests/s")"
echo "raw outputs: $OUT_DIR"
echo

start_server memcached "$SERVER_CPUS" "${FLAGS[@]}"
declare -A PORT PID
PORT[memcached]=$SERVER_PORT
PID[memcached]=$SERVER_PID
start_server cachalot "$SERVER_CPUS" "${FLAGS[@]}"
PORT[cachalot]=$SERVER_PORT
PID[cachalot]=$SERVER_PID

# memcaslap's workload file: fixed key and value sizes, get/set proportions.
mcs_cfg() { # get_ratio -> path
    local f=$OUT_DIR/memcaslap-$1.cfg
    printf 'key\n%s %s 1\nvalue\n%s %s 1\ncmd\n0 %s\n1 %s\n' \
        "$KEY_LEN" "$KEY_LEN" "$VALUE_SIZE" "$VALUE_SIZE" \
        "$(awk -v g="$1" 'BEGIN { print 1 - g }')" "$1" >"$f"
    echo "$f"
}

# CPU time (ns) the server process's threads have run so far.
cpu_ns() {
    cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ t += $1 } END { printf "%.0f", t }'
}

# Counters of the server process during a run (perf stat -p), when perf
# works here: system calls, and instructions and cycles where the CPU
# exposes them (a virtual machine often does not: "-"). Per request they do
# not depend on how much CPU other people's work left us, unlike ops/s.
# PERF=0 turns this off.
PERF_OK=0
if [ "${PERF:-1}" = 1 ] && command -v perf >/dev/null &&
    perf stat -e raw_syscalls:sys_enter -x, -o /dev/null -- true >/dev/null 2>&1; then
    PERF_OK=1
fi

perf_start() { # pid outfile
    PERF_PID=
    if [ "$PERF_OK" = 1 ]; then
        perf stat -x, -e raw_syscalls:sys_enter,instructions,cycles -p "$1" -o "$2" >/dev/null 2>&1 &
        PERF_PID=$!
    fi
}

perf_stop() {
    if [ -n "$PERF_PID" ]; then
        kill -INT "$PERF_PID" 2>/dev/null || true
        wait "$PERF_PID" 2>/dev/null || true
    fi
}

# perf_per_op FILE EVENT OPS SCALE -> EVENT per request / SCALE, or -
perf_per_op() {
    [ -s "$1" ] || { echo -; return; }
    awk -F, -v e="$2" -v n="$3" -v k="${4:-1000}" '$3 ~ "^"e && $1 ~ /^[0-9]+$/ && n > 0 { printf "%.2f", $1 / n / k; found = 1 }
        END { if (!found) print "-" }' "$1"
}

# run_one WORKLOAD SERVER REP: one timed run; appends a line to results.tsv:
# workload server rep ops_per_sec p50_us p99_us cpu_us_per_op busy% kinstr/op kcycles/op syscalls/op
run_one() {
    local w=$1 s=$2 rep=$3
    local addr=127.0.0.1:${PORT[$s]} raw=$OUT_DIR/$w-$s-$rep.txt perf_out=$OUT_DIR/$w-$s-$rep.perf
    local ratio depth c0 c1 ops p50=- p99=- ops_total busy key_len=$KEY_LEN multiget=1
    case $w in
        *get90*) ratio=0.9 ;;
        *set90*) ratio=0.1 ;;
        *-hit-* | *-mget10) ratio=1 ;;
        # Keys one byte shorter than any key set: every GET misses.
        *-miss-*) ratio=1 key_len=$((KEY_LEN - 1)) ;;
        *-set-*) ratio=0 ;;
        *) echo "unknown workload $w" >&2; exit 1 ;;
    esac
    case $w in *-dN) depth=$DEPTH ;; *) depth=1 ;; esac
    case $w in *-mget10) multiget=10 ;; esac
    if [[ $w == lg-* ]]; then
        # Warm the key space first (not timed), so gets measure hits.
        "${CLIENT[@]}" "$LOADGEN" fill --addr "$addr" --items "$KEYS" \
            --value-size "$VALUE_SIZE" --key-len "$KEY_LEN" >"$raw.warm"
    fi
    busy=$(wait_quiet)
    echo "loadavg before: $(cat /proc/loadavg); machine busy before: ${busy}%" >"$raw"
    # The load, once for the CPU time (nothing else watching the server),
    # and, where perf works, a shorter second time under perf stat for the
    # system calls: its tracepoint slows every system call down, which
    # would count in the first run's CPU time.
    local secs=$DURATION
    load() {
        case $w in
            lg-*)
                "${CLIENT[@]}" "$LOADGEN" load --addr "$addr" --conns "$CONNS" --threads 1 \
                    --duration "$secs" --get-ratio "$ratio" --keys "$KEYS" \
                    --key-len "$key_len" --value-size "$VALUE_SIZE" --depth "$depth" \
                    --multiget "$multiget" --rate "${RATE:-0}" --warm 0 --seed "$rep"
                ;;
            mcs-*)
                [ -n "$MEMCASLAP" ] || { echo "memcaslap not installed" >&2; exit 1; }
                # -w: 2k keys per connection keeps the key space near KEYS.
                "${CLIENT[@]}" "$MEMCASLAP" -s "$addr" -T 1 -c "$CONNS" -t "${secs}s" \
                    -w 2k -F "$(mcs_cfg "$ratio")" 2>&1
                ;;
        esac
    }
    c0=$(cpu_ns "${PID[$s]}")
    load >>"$raw"
    c1=$(cpu_ns "${PID[$s]}")
    PERF_PID=
    local perf_ops=0
    if [ "$PERF_OK" = 1 ]; then
        secs=$(((DURATION + 1) / 2))
        perf_start "${PID[$s]}" "$perf_out"
        load >"$raw.perf-run"
        perf_stop
        perf_ops=$(sed -n 's/^ops=\([0-9]*\).*/\1/p; s/.* Ops: \([0-9]*\) .*/\1/p' "$raw.perf-run" | tail -n1)
    fi
    case $w in
        lg-*)
            local errors
            ops=$(lg_result "$raw" ops_per_sec)
            ops_total=$(lg_result "$raw" ops)
            p50=$(lg_result "$raw" p50_us)
            p99=$(lg_result "$raw" p99_us)
            errors=$(lg_result "$raw" errors)
            [ "$errors" = 0 ] || echo "warning: $s answered $errors requests with errors in $w run $rep" >&2
            ;;
        mcs-*)
            ops=$(sed -n 's/.*TPS: \([0-9]*\).*/\1/p' "$raw" | tail -n1)
            ops_total=$(sed -n 's/.* Ops: \([0-9]*\) .*/\1/p' "$raw" | tail -n1)
            ;;
    esac
    if [ -z "$ops" ] || [ -z "$ops_total" ]; then
        echo "no result in $raw:" >&2
        cat "$raw" >&2
        exit 1
    fi
    local cpu_us kins kcyc sysc
    cpu_us=$(awk -v t=$((c1 - c0)) -v n="$ops_total" \
        'BEGIN { if (n > 0) printf "%.2f", t / 1e3 / n; else print "-" }')
    kins=$(perf_per_op "$perf_out" instructions "${perf_ops:-0}")
    kcyc=$(perf_per_op "$perf_out" cycles "${perf_ops:-0}")
    sysc=$(perf_per_op "$perf_out" raw_syscalls:sys_enter "${perf_ops:-0}" 1)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$w" "$s" "$rep" "$ops" "$p50" "$p99" \
        "$cpu_us" "$busy" "$kins" "$kcyc" "$sysc" >>"$OUT_DIR/results.tsv"
    printf '  %-12s %-10s run %s: %8s ops/s  p50 %7s us  p99 %8s us  server %6s us/op %6s syscalls/op %6s kinstr/op  (machine %s%% busy before)\n' \
        "$w" "$s" "$rep" "$ops" "$p50" "$p99" "$cpu_us" "$sysc" "$kins" "$busy" >&2
}

: >"$OUT_DIR/results.tsv"
for w in $WORKLOADS; do
    for rep in $(seq 1 "$REPS"); do
        # Alternate which server goes first, so drift (other load on the
        # machine, thermal state) does not favour one side.
        if [ $((rep % 2)) = 1 ]; then order="memcached cachalot"; else order="cachalot memcached"; fi
        for s in $order; do
            run_one "$w" "$s" "$rep"
        done
    done
done

col() { # workload server column -> median of that column
    awk -F'\t' -v w="$1" -v s="$2" -v c="$3" '$1 == w && $2 == s && $c != "-" { print $c }' \
        "$OUT_DIR/results.tsv" | median
}

# Median over repetitions of cachalot/memcached for one column, taken within
# the same repetition: the two runs of a pair are back to back, so they saw
# about the same background load.
paired() { # workload column -> median of per-repetition ratios
    awk -F'\t' -v w="$1" -v c="$2" '
        $1 == w && $c != "-" { v[$3, $2] = $c; reps[$3] = 1 }
        END { for (r in reps) if (v[r, "memcached"] > 0 && v[r, "cachalot"] != "")
                  printf "%.4f\n", v[r, "cachalot"] / v[r, "memcached"] }' \
        "$OUT_DIR/results.tsv" | median
}

fmt() { # number [decimals] -> formatted, or - for a missing value
    awk -v x="$1" -v d="${2:-2}" 'BEGIN { if (x == "nan" || x == "" || x == "-") print "-"; else printf "%." d "f", x }'
}

name() { echo "${1/dN/d$DEPTH}"; }

echo
echo "Medians of $REPS runs per server. x = cachalot / memcached of the medians;"
echo "pair x = median over repetitions of the ratio within each back-to-back pair."
echo
echo "throughput (requests/s, higher is better):"
printf '  %-12s %10s %10s %6s %7s\n' workload memcached cachalot x "pair x"
for w in $WORKLOADS; do
    m=$(col "$w" memcached 4); c=$(col "$w" cachalot 4)
    printf '  %-12s %10s %10s %6s %7s\n' "$(name "$w")" "$(fmt "$m" 0)" "$(fmt "$c" 0)" \
        "$(awk -v a="$c" -v b="$m" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')" \
        "$(fmt "$(paired "$w" 4)")"
done
echo
echo "latency per request (us, loadgen only; p50 / p99):"
printf '  %-12s %21s %21s\n' workload memcached cachalot
for w in $WORKLOADS; do
    [[ $w == lg-* ]] || continue
    printf '  %-12s %21s %21s\n' "$(name "$w")" \
        "$(fmt "$(col "$w" memcached 5)" 0) / $(fmt "$(col "$w" memcached 6)" 0)" \
        "$(fmt "$(col "$w" cachalot 5)" 0) / $(fmt "$(col "$w" cachalot 6)" 0)"
done
echo
echo "server cost per request (lower is better): CPU time in us (from /proc), system"
echo "calls, and thousands of instructions (user + kernel; perf stat -p, '-' where"
echo "perf or the counter is unavailable):"
printf '  %-12s %8s %8s %7s | %8s %8s | %9s %9s %7s\n' workload "memc us" "cach us" "pair x" \
    "memc sys" "cach sys" "memc kins" "cach kins" "pair x"
for w in $WORKLOADS; do
    printf '  %-12s %8s %8s %7s | %8s %8s | %9s %9s %7s\n' "$(name "$w")" \
        "$(fmt "$(col "$w" memcached 7)")" "$(fmt "$(col "$w" cachalot 7)")" "$(fmt "$(paired "$w" 7)")" \
        "$(fmt "$(col "$w" memcached 11)")" "$(fmt "$(col "$w" cachalot 11)")" \
        "$(fmt "$(col "$w" memcached 9)" 1)" "$(fmt "$(col "$w" cachalot 9)" 1)" "$(fmt "$(paired "$w" 9)")"
done
echo
echo "machine busy % (all cores) in the half second before each run, median $(awk -F'\t' '{ print $8 }' "$OUT_DIR/results.tsv" | median), max $(awk -F'\t' '{ print $8 }' "$OUT_DIR/results.tsv" | sort -n | tail -n1)"

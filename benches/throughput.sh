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
# Usage: benches/throughput.sh   (see docs/benchmarks.md)
# Environment: CACHALOT_BIN, MEMCACHED_BIN, LOADGEN_BIN, DURATION (s, 10),
# REPS (3), CONNS (50), THREADS (-t, 1), KEYS (100000), KEY_LEN (20: memcaslap
# needs keys longer than 16 bytes, and both tools use the same length),
# VALUE_SIZE (32), DEPTH (16), MEM_MB (64), PIN (1), WORKLOADS (subset of
# "lg-get90-d1 lg-get90-dN lg-set90-d1 lg-set90-dN mcs-get90 mcs-set90"),
# BENCH_NICE (priority, default 0), QUIET_WAIT / QUIET_PCT (before each run,
# wait up to QUIET_WAIT s, default 60, for the machine to be at most QUIET_PCT
# %, default 15, busy), OUT_DIR (raw outputs; default a new temp directory).
set -euo pipefail
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
echo "load: $CONNS connections, ${DURATION}s per run, $REPS runs per server, keys $KEYS x ${KEY_LEN}B, values ${VALUE_SIZE}B, pipelined depth $DEPTH"
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

# CPU time (clock ticks) the server process has used so far.
cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# run_one WORKLOAD SERVER REP: one timed run; appends a line to results.tsv:
# workload server rep ops_per_sec p50_us p99_us server_cpu_us_per_op
run_one() {
    local w=$1 s=$2 rep=$3
    local addr=127.0.0.1:${PORT[$s]} raw=$OUT_DIR/$w-$s-$rep.txt
    local ratio depth c0 c1 ops p50=- p99=- ops_total
    case $w in
        *get90*) ratio=0.9 ;;
        *set90*) ratio=0.1 ;;
        *) echo "unknown workload $w" >&2; exit 1 ;;
    esac
    case $w in *-dN) depth=$DEPTH ;; *) depth=1 ;; esac
    local busy
    busy=$(wait_quiet)
    echo "loadavg before: $(cat /proc/loadavg); machine busy before: ${busy}%" >"$raw"
    case $w in
        lg-*)
            # Warm the key space first (not timed), so gets measure hits.
            "${CLIENT[@]}" "$LOADGEN" fill --addr "$addr" --items "$KEYS" \
                --value-size "$VALUE_SIZE" --key-len "$KEY_LEN" >>"$raw"
            c0=$(cpu_ticks "${PID[$s]}")
            "${CLIENT[@]}" "$LOADGEN" load --addr "$addr" --conns "$CONNS" --threads 1 \
                --duration "$DURATION" --get-ratio "$ratio" --keys "$KEYS" \
                --key-len "$KEY_LEN" --value-size "$VALUE_SIZE" --depth "$depth" \
                --warm 0 --seed "$rep" >>"$raw"
            c1=$(cpu_ticks "${PID[$s]}")
            local line
            line=$(grep '^ops=' "$raw" | tr ' ' '\n')
            ops=$(sed -n 's/^ops_per_sec=//p' <<<"$line")
            ops_total=$(sed -n 's/^ops=//p' <<<"$line")
            p50=$(sed -n 's/^p50_us=//p' <<<"$line")
            p99=$(sed -n 's/^p99_us=//p' <<<"$line")
            local errors
            errors=$(sed -n 's/^errors=//p' <<<"$line")
            [ "$errors" = 0 ] || echo "warning: $s answered $errors requests with errors in $w run $rep" >&2
            ;;
        mcs-*)
            [ -n "$MEMCASLAP" ] || { echo "memcaslap not installed" >&2; exit 1; }
            c0=$(cpu_ticks "${PID[$s]}")
            # -w: 2k keys per connection keeps the key space near KEYS.
            "${CLIENT[@]}" "$MEMCASLAP" -s "$addr" -T 1 -c "$CONNS" -t "${DURATION}s" \
                -w 2k -F "$(mcs_cfg "$ratio")" >>"$raw" 2>&1
            c1=$(cpu_ticks "${PID[$s]}")
            ops=$(sed -n 's/.*TPS: \([0-9]*\).*/\1/p' "$raw" | tail -n1)
            ops_total=$(sed -n 's/.* Ops: \([0-9]*\) .*/\1/p' "$raw" | tail -n1)
            ;;
    esac
    [ -n "$ops" ] || { echo "no result in $raw:" >&2; cat "$raw" >&2; exit 1; }
    local cpu_us
    cpu_us=$(awk -v t=$((c1 - c0)) -v hz="$(getconf CLK_TCK)" -v n="$ops_total" \
        'BEGIN { if (n > 0) printf "%.2f", t / hz * 1e6 / n; else print "-" }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$w" "$s" "$rep" "$ops" "$p50" "$p99" "$cpu_us" \
        "$busy" >>"$OUT_DIR/results.tsv"
    printf '  %-12s %-10s run %s: %8s ops/s  p50 %7s us  p99 %8s us  server CPU %6s us/op  (machine %s%% busy before)\n' \
        "$w" "$s" "$rep" "$ops" "$p50" "$p99" "$cpu_us" "$busy" >&2
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

# Median over repetitions of cachalot/memcached for column 4 (ops/s) or 7
# (CPU per request) taken within the same repetition: the two runs of a pair
# are back to back, so they saw about the same background load.
paired() { # workload column -> median of per-repetition ratios
    awk -F'\t' -v w="$1" -v c="$2" '
        $1 == w && $c != "-" { v[$3, $2] = $c; reps[$3] = 1 }
        END { for (r in reps) if (v[r, "memcached"] > 0 && v[r, "cachalot"] != "")
                  printf "%.4f\n", v[r, "cachalot"] / v[r, "memcached"] }' \
        "$OUT_DIR/results.tsv" | median
}

fmt2() { awk -v x="$1" 'BEGIN { if (x == "nan" || x == "") print "-"; else printf "%.2f", x }'; }

echo
echo "medians of $REPS runs (ops/s; latency p50/p99 in us; server CPU time in us per request);"
echo "x = cachalot/memcached of the medians; pair x = median of the per-repetition ratios"
printf '%-12s | %9s %9s %5s %6s | %15s %15s | %5s %5s %6s\n' workload memcached cachalot x "pair x" \
    "memc p50/p99" "cach p50/p99" "m cpu" "c cpu" "pair x"
for w in $WORKLOADS; do
    m=$(col "$w" memcached 4)
    c=$(col "$w" cachalot 4)
    r=$(awk -v a="$c" -v b="$m" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
    if [[ $w == lg-* ]]; then
        ml="$(col "$w" memcached 5)/$(col "$w" memcached 6)"
        cl="$(col "$w" cachalot 5)/$(col "$w" cachalot 6)"
    else
        ml=-; cl=-
    fi
    printf '%-12s | %9.0f %9.0f %5s %6s | %15s %15s | %5s %5s %6s\n' "${w/dN/d$DEPTH}" "$m" "$c" "$r" \
        "$(fmt2 "$(paired "$w" 4)")" "$ml" "$cl" \
        "$(fmt2 "$(col "$w" memcached 7)")" "$(fmt2 "$(col "$w" cachalot 7)")" \
        "$(fmt2 "$(paired "$w" 7)")"
done
echo
echo "machine busy % before each run (others' work), median: $(awk -F'\t' '{ print $8 }' "$OUT_DIR/results.tsv" | median), max: $(awk -F'\t' '{ print $8 }' "$OUT_DIR/results.tsv" | sort -n | tail -n1)"

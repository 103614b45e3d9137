#!/usr/bin/env bash
# Trace capture (issue 36): does a captured trace replay to the live hit
# ratio, and what does capturing cost?
#
# Part 1, fidelity. For each capture form (oracleGeneral, every key; the
# lab's CSV, every key; oracleGeneral sampled at SAMPLE) a release server
# with -o trace_file=... serves a lab workload driven look-aside by
# `cachalot-lab replay`; the live GET hit ratio is read from `stats`
# (get_hits / (get_hits + get_misses)); the server is stopped (the file is
# ended then), and the trace is replayed by `cachalot-lab sim` at the same
# -m (at SAMPLE x -m for the sampled one) and by libCacheSim's LRU at the
# same bytes (oracleGeneral files; libCacheSim counts key + value bytes, no
# item header or slab slack, so its figure is a reference, not a target).
# A sampled trace's figures are also given SHARDS-adjusted (Waldspurger et
# al., FAST'15, section 3.3): the requests the sample is short of (R x the
# full capture's records, less its own) counted as hits, since the keys a
# sample misses or over-takes are mostly the hottest.
#
# Part 2, cost. The same closed-loop GET-heavy replay against a server
# with capture off and on, alternated RUNS times each (off first, then on,
# ...); the medians of requests/s and of the server's CPU time per request
# (utime + stime from /proc, less noisy on a shared machine).
#
# Usage: benches/trace-capture.sh   (see docs/benchmarks.md)
# Environment: CACHALOT_BIN, LAB_BIN (default target/release/...),
# CACHALOT_PYTHON (with libcachesim; default .venv/bin/python, else python3),
# MODEL_ARGS (the workload; default YCSB-B over 200 000 keys, 2 M requests),
# MEM (-m, MB; default 64), SAMPLES (default "0.1 0.25"), THREADS (-t; default 2),
# RUNS (cost runs per side; default 3), COST_ARGS (the cost workload),
# OUT_DIR (default a new temporary directory).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ROOT=$BENCH_ROOT
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
LAB=${LAB_BIN:-$TARGET/release/cachalot-lab}
if [ -n "${CACHALOT_PYTHON:-}" ]; then
    PY=$CACHALOT_PYTHON
elif [ -x "$ROOT/.venv/bin/python" ]; then
    PY=$ROOT/.venv/bin/python
else
    PY=python3
fi
MODEL_ARGS=${MODEL_ARGS:-"--model ycsb-b --param keys=200000 --requests 2000000 --seed 1"}
COST_ARGS=${COST_ARGS:-"--model ycsb-c --param keys=20000 --requests 2000000 --seed 2"}
MEM=${MEM:-64}
SAMPLES=${SAMPLES:-"0.1 0.25"}
THREADS=${THREADS:-2}
RUNS=${RUNS:-3}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cachalot-trace-capture.XXXXXX)}
mkdir -p "$OUT_DIR"
for b in "$CACHALOT_BIN" "$LAB"; do
    [ -x "$b" ] || { echo "$b not found (cargo build --release -p cachalot -p cachalot-lab)" >&2; exit 1; }
done
ensure_loadgen

machine_line
echo "libCacheSim: $("$PY" -c 'import libcachesim as l; print(getattr(l, "__version__", "?"))') ($PY)"
echo "workload: $MODEL_ARGS; -m $MEM -t $THREADS; out: $OUT_DIR"

# serve ARGS...: a cachalot on a free port (PORT) with these flags.
serve() {
    # shellcheck disable=SC2086
    start_server cachalot - -l 127.0.0.1 -U 0 $USER_FLAG -m "$MEM" -t "$THREADS" "$@"
    PORT=$SERVER_PORT
}

# mcstat GROUP NAME: one figure of `stats GROUP`.
mcstat() {
    server_stats "127.0.0.1:$PORT" "$1" "$2"
}

hit_ratio_json() {
    "$PY" -c 'import json, sys; print("%.4f" % json.load(open(sys.argv[1]))["totals"]["hit_ratio"])' "$1"
}

# libCacheSim's LRU over an oracleGeneral file at BYTES.
lcs_lru() {
    "$PY" - "$1" "$2" <<'EOF'
import sys
import libcachesim as lcs
r = lcs.TraceReader(sys.argv[1], lcs.TraceType.ORACLE_GENERAL_TRACE)
# Our clock_time is seconds since the capture began: no object expires.
miss, _ = lcs.LRU(int(float(sys.argv[2])), default_ttl=2**62).process_trace(r)
print("%.4f" % (1 - miss))
EOF
}

mb_bytes() { "$PY" -c "print(int(float('$1') * 1048576))"; }

printf '\n%-30s %9s %8s %8s %9s %9s %8s\n' form records live sim sim-live "lcs LRU" dropped
# form | file name | extra -o options | sim -m
FORMS=(
    "oracleGeneral, every key|full.oracleGeneral||$MEM|1"
    "CSV, every key|full.csv||$MEM|1"
)
for r in $SAMPLES; do
    FORMS+=("oracleGeneral, sample $r|sampled-$r.oracleGeneral|,trace_sample=$r|$("$PY" -c "print(round($MEM * $r, 3))")|$r")
done
full_records=
for f in "${FORMS[@]}"; do
    IFS='|' read -r name file extra simmem rate <<<"$f"
    trace=$OUT_DIR/$file
    serve -o "trace_file=$trace$extra"
    # shellcheck disable=SC2086
    "$LAB" replay $MODEL_ARGS --server "127.0.0.1:$PORT" --connections 4 \
        --json "$OUT_DIR/$file.replay.json" >"$OUT_DIR/$file.replay.txt"
    hits=$(mcstat "" get_hits)
    misses=$(mcstat "" get_misses)
    dropped=$(mcstat trace trace_dropped)
    live=$("$PY" -c "print('%.4f' % ($hits / ($hits + $misses)))")
    stop_server "$SERVER_PID"
    case $file in
        *.csv) records=$(($(wc -l <"$trace") - 1)) ;;
        *) records=$(($(wc -c <"$trace") / 24)) ;;
    esac
    "$LAB" sim --trace "$trace" -m "${simmem}MB" --json "$OUT_DIR/$file.sim.json" >"$OUT_DIR/$file.sim.txt"
    sim=$(hit_ratio_json "$OUT_DIR/$file.sim.json")
    case $file in
        *.oracleGeneral) lcs=$(lcs_lru "$trace" "$(mb_bytes "$simmem")") ;;
        *) lcs=- ;;
    esac
    diff=$("$PY" -c "print('%+.4f' % ($sim - $live))")
    printf '%-30s %9s %8s %8s %9s %9s %8s\n' "$name" "$records" "$live" "$sim" "$diff" "$lcs" "$dropped"
    items=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["meta"]["server_stats"]["curr_items"])' \
        "$OUT_DIR/$file.sim.json")
    echo "  (sim -m ${simmem}MB: $items items at the end)"
    if [ "$file" = full.oracleGeneral ]; then
        full_records=$records
    elif [ "$rate" != 1 ] && [ -n "$full_records" ]; then
        # SHARDS_adj: the expected sample is rate x the full capture.
        adj() { "$PY" -c "e = $rate * $full_records; print('%.4f' % (($1 * $records + e - $records) / e))"; }
        sa=$(adj "$sim")
        la=$(adj "$lcs")
        printf '%-30s %9s %8s %8s %9s %9s\n' "  SHARDS-adjusted" "" "" "$sa" \
            "$("$PY" -c "print('%+.4f' % ($sa - $live))")" "$la"
    fi
done

# Part 2: the cost, capture off and on alternated.
echo
echo "cost: $COST_ARGS, replay --connections 8 --pipeline 16 (closed loop), -m $MEM -t $THREADS"
off=()
on=()
off_cpu=()
on_cpu=()
for i in $(seq 1 "$RUNS"); do
    for side in off on; do
        if [ "$side" = on ]; then
            serve -o "trace_file=$OUT_DIR/cost.oracleGeneral"
        else
            serve
        fi
        # shellcheck disable=SC2086
        "$LAB" replay $COST_ARGS --server "127.0.0.1:$PORT" --connections 8 --pipeline 16 \
            --json "$OUT_DIR/cost-$side-$i.json" >/dev/null
        rps=$("$PY" -c 'import json, sys; print("%.0f" % json.load(open(sys.argv[1]))["totals"]["throughput_rps"])' \
            "$OUT_DIR/cost-$side-$i.json")
        extra=
        if [ "$side" = on ]; then
            extra=" (events $(mcstat trace trace_events), dropped $(mcstat trace trace_dropped))"
        fi
        # The server's CPU time (clock ticks) per request, in microseconds.
        ticks=$(awk '{print $14 + $15}' "/proc/$SERVER_PID/stat")
        cpu=$("$PY" -c "import os; print('%.2f' % ($ticks * 1e6 / os.sysconf('SC_CLK_TCK') / $(echo "$COST_ARGS" | sed 's/.*--requests \([0-9]*\).*/\1/')))")
        if [ "$side" = on ]; then
            on+=("$rps")
            on_cpu+=("$cpu")
        else
            off+=("$rps")
            off_cpu+=("$cpu")
        fi
        stop_server "$SERVER_PID"
        echo "  run $i capture $side: $rps requests/s, server CPU $cpu us/request$extra"
    done
done
mo=$(printf '%s\n' "${off[@]}" | median)
mn=$(printf '%s\n' "${on[@]}" | median)
echo "median requests/s: off $mo, on $mn ($("$PY" -c "print('%.3f' % ($mn / $mo))") x)"
co=$(printf '%s\n' "${off_cpu[@]}" | median)
cn=$(printf '%s\n' "${on_cpu[@]}" | median)
echo "median server CPU us/request: off $co, on $cn ($("$PY" -c "print('%.3f' % ($cn / $co))") x)"

#!/usr/bin/env bash
# The current benchmark summary (issue 32): every headline figure of
# cachalot beside memcached 1.6.18, measured now, at the checkout's commit,
# each by the command printed in its row. It runs the other scripts of
# benches/ and `cachalot-lab compare` with short settings, reads their raw
# outputs and prints one markdown table with a header that names the
# machine, the date, the commit and how busy the machine was.
#
# Usage: benches/summary.sh            the table on stdout
#        benches/summary.sh --write    also put it in docs/benchmarks.md,
#                                      between the summary markers
# Environment: QUICK=1 (fewer repetitions and requests: about 15 minutes
# instead of about 30 on 2 cores; the commands in the table say what ran),
# ONLY ("capacity zzone lab cost flash throughput warm errors": the
# sections to run; the others are left out of the table, for trying one
# out, not for the page), OUT_DIR (raw outputs of every section; default a
# new temporary directory), CACHALOT_BIN, MEMCACHED_BIN (as the other
# scripts). Each section's command line is run from the repository's root
# with OUT_DIR (DATA_DIR, IMG_DIR, RAW_DIR for benches/cost) pointing into
# OUT_DIR, so nothing in the checkout is written except by --write.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
WRITE=0
[ "${1:-}" = --write ] && WRITE=1
QUICK=${QUICK:-0}
ONLY=${ONLY:-capacity zzone lab cost flash throughput warm errors}
OUT_DIR=${OUT_DIR:-$(mktemp -d /tmp/cachalot-summary.XXXXXX)}
mkdir -p "$OUT_DIR"
MEMCACHED_BIN=${MEMCACHED_BIN:-/usr/bin/memcached}
export MEMCACHED_BIN
ROWS=$OUT_DIR/rows.md
: >"$ROWS"
DOC=$ROOT/docs/benchmarks.md
BEGIN_MARK='<!-- summary:begin (benches/summary.sh --write replaces this part) -->'
END_MARK='<!-- summary:end -->'

log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

# The commit and the state of the tree, then the binaries of this checkout,
# built first (so the figures are the commit's).
COMMIT=$(git rev-parse --short HEAD)
DIRTY=""
[ -z "$(git status --porcelain --untracked-files=no)" ] || DIRTY=" (with uncommitted changes)"
log "building (cargo build --release)"
cargo build --release -q -p cachalot -p cachalot-lab -p cachalot-loadgen >&2
# The scripts below use these builds instead of building again on their own
# (a build of one package alone unifies features differently and recompiles).
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
export LOADGEN_BIN=${LOADGEN_BIN:-$TARGET/release/loadgen}
export LAB_BIN=${LAB_BIN:-$TARGET/release/cachalot-lab}
BIN_NOTE="built from that commit by the script"
[ -z "${CACHALOT_BIN:-}" ] || BIN_NOTE="given by CACHALOT_BIN, not built by the script"
export CACHALOT_BIN=${CACHALOT_BIN:-$TARGET/release/cachalot}
START=$SECONDS
START_DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
LOADS=()

# fmt NUMBER [DECIMALS] -> 1,234,567 (anything not a number is kept as is)
fmt() {
    awk -v x="$1" -v d="${2:-0}" 'BEGIN {
        if (x !~ /^-?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/) { print x; exit }
        s = sprintf("%." d "f", x); n = split(s, p, "."); i = p[1]; neg = ""
        if (substr(i, 1, 1) == "-") { neg = "-"; i = substr(i, 2) }
        o = ""
        while (length(i) > 3) { o = "," substr(i, length(i) - 2) o; i = substr(i, 1, length(i) - 3) }
        o = neg i o
        if (n > 1) o = o "." p[2]
        print o }'
}

# ratio A B [DECIMALS] -> A / B, or - when either is not a positive number
ratio() {
    awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN {
        if (a ~ /^[0-9.eE+-]+$/ && b ~ /^[0-9.eE+-]+$/ && b + 0 > 0) printf "%." d "f ×", a / b
        else print "-" }'
}

# row FIGURE MEMCACHED CACHALOT RATIO BETTER COMMAND
row() {
    # shellcheck disable=SC2016  # the backticks are markdown's
    printf '| %s | %s | %s | %s | %s | `%s` |\n' "$1" "$2" "$3" "$4" "$5" "$6" >>"$ROWS"
}

# not_run FIGURE REASON COMMAND
not_run() {
    # shellcheck disable=SC2016  # the backticks are markdown's
    printf '| %s | not run: %s | | | | `%s` |\n' "$1" "$2" "$3" >>"$ROWS"
}

# section NAME COMMAND: runs COMMAND (a shell command line, as shown in the
# table) from the root with its outputs in $OUT_DIR/NAME ($D); its stdout
# goes to $D/stdout.txt, its stderr to $D/stderr.txt. Sets RC.
section() {
    D=$OUT_DIR/$1
    mkdir -p "$D"
    local busy
    busy=$(awk '{ print $1 }' /proc/loadavg)
    LOADS+=("$busy")
    log "$1 (load average $busy): $2"
    local t0=$SECONDS
    RC=0
    # The command is one of the fixed strings below; OUT_DIR and the cost
    # scripts' directories point into $D.
    local dir=$D
    OUT_DIR=$dir DATA_DIR=$dir IMG_DIR=$dir RAW_DIR=$dir/raw D=$dir \
        bash -c "$2" >"$D/stdout.txt" 2>"$D/stderr.txt" || RC=$?
    log "$1: exit $RC after $((SECONDS - t0)) s"
}

wants() { [[ " $ONLY " == *" $1 "* ]]; }

# kv FILE NAME -> the value of NAME=... in a loadgen output file
kv() { sed -n "s/^$2=//p" "$1" 2>/dev/null | head -n1; }

# json_summary FILE METRIC -> "memcached cachalot" medians from a compare JSON
json_summary() {
    python3 - "$1" "$2" <<'PY'
import json, sys
try:
    doc = json.load(open(sys.argv[1]))
    r = next(r for r in doc["summary"] if r["metric"] == sys.argv[2])
    print(r["memcached"], r["cachalot"])
except Exception:
    print("- -")
PY
}

# max_rss_mib FILE -> the larger of the sampled VmRSS maximum and VmHWM, MiB
max_rss_mib() {
    local r h
    r=$(kv "$1" rss_max_sampled_kb)
    h=$(kv "$1" vm_hwm_kb)
    if [ -z "$r" ] || [ -z "$h" ]; then
        echo -
        return
    fi
    awk -v r="$r" -v h="$h" 'BEGIN { printf "%.1f", (r > h ? r : h) / 1024 }'
}

# One row of benches/capacity.sh's items kept (its outputs for value size
# $2 in $D), with the values read back wrong named.
items_row() {
    local fig=$1 vs=$2 cmd=$3 m c bad
    m=$(kv "$D/memcached-$vs.txt" curr_items)
    c=$(kv "$D/cachalot-$vs.txt" curr_items)
    if [ -n "$m" ] && [ -n "$c" ]; then
        bad=$(kv "$D/cachalot-$vs.txt" reread_corrupt)
        [ "$bad" = 0 ] || fig="$fig (cachalot: $bad values read back wrong)"
        row "$fig" "$(fmt "$m")" "$(fmt "$c")" "$(ratio "$c" "$m")" higher "$cmd"
    else
        not_run "$fig" "no figure in its output (exit $RC, see the raw outputs)" "$cmd"
    fi
}

# ---------------------------------------------------------------- capacity
if wants capacity; then
    cmd='benches/capacity.sh'
    section capacity "$cmd"
    for vs in 10 100; do
        items_row "items kept in \`-m 64\`, 1.5 M writes, 14 B keys, $vs B random values" "$vs" "$cmd"
    done
    mr=$(max_rss_mib "$D/memcached-100.txt")
    cr=$(max_rss_mib "$D/cachalot-100.txt")
    row "peak resident memory, MiB, of the \`-m 64\` fill with 100 B values" \
        "$mr" "$cr" "$(ratio "$cr" "$mr")" lower "$cmd"
fi

# ------------------------------------------------------------ Z-zone items
if wants zzone; then
    items=2000000
    [ "$QUICK" = 1 ] && items=1500000
    cmd="VALUES=json VALUE_SIZES=100 ITEMS=$items CACHALOT_ARGS=\"-o zzone=1\" benches/capacity.sh"
    section zzone "$cmd"
    items_row "items kept in \`-m 64\`, 100 B JSON values, cachalot with \`-o zzone=1\` (zExpander's compressed zone)" 100 "$cmd"
fi

# ------------------------------------------------- the lab's hit ratios
if wants lab; then
    rep=3 etc_req=2000000 ycsb_req=1000000
    [ "$QUICK" = 1 ] && rep=1 etc_req=1000000 ycsb_req=500000
    lab=target/release/cachalot-lab
    for model in etc ycsb-b; do
        case $model in
            etc) params="--param keys=5000000 --requests $etc_req"; name="Facebook ETC model" ;;
            ycsb-b) params="--param keys=200000 --requests $ycsb_req"; name="YCSB-B, 1,000 B values" ;;
        esac
        cmd="$lab compare --model $model $params --memory 64 --threads 2 --repeat $rep --json \$D/$model.json"
        section "lab-$model" "$cmd"
        shown=${cmd//\$D\//}
        read -r m c <<<"$(json_summary "$D/$model.json" "hit ratio")"
        fig="hit ratio, $name look-aside, \`-m 64\` (median of $rep)"
        if [ "$m" != - ]; then
            row "$fig" "$(fmt "$m" 4)" "$(fmt "$c" 4)" "$(ratio "$c" "$m" 3)" higher "$shown"
        else
            not_run "$fig" "no figure in its output (exit $RC, see the raw outputs)" "$shown"
        fi
        if [ "$model" = etc ] && [ "$m" != - ]; then
            read -r m c <<<"$(json_summary "$D/$model.json" "p99 latency (us)")"
            row "p99 latency, µs, of the ETC run above (every miss a SET that evicts; \`-t 2\`, unpinned)" \
                "$(fmt "$m" 0)" "$(fmt "$c" 0)" "$(ratio "$c" "$m")" lower "$shown"
        fi
    done
fi

# ------------------------------------------------- cost-aware eviction
if wants cost; then
    cmd='KEYS=100000 WORKLOADS=1 SEEDS=1 REPLAY_WORKLOADS=1 benches/cost/gdwheel.sh'
    section cost "$cmd"
    # The replay table's rows: | gdwheel-1 | <server> | seeds | hits | mean hit | costs | mean cost | ...
    get() { awk -F'|' -v s="$1" -v c="$2" '$2 ~ /gdwheel-1/ && $3 ~ "^ *"s" *$" { gsub(/[ ,]/, "", $c); print $c }' "$D/stdout.txt"; }
    m=$(get memcached 8)
    c=$(get cachalot-gdwheel 8)
    fig="recomputation cost of the misses, GD-Wheel workload 1 (Baseline costs), cachalot \`-o eviction=gdwheel\`, costs sent with each SET"
    if [ -n "$m" ] && [ -n "$c" ]; then
        row "$fig" "$(fmt "$m")" "$(fmt "$c")" "$(ratio "$c" "$m" 3)" lower "$cmd"
        m=$(get memcached 6)
        c=$(get cachalot-gdwheel 6)
        row "hit ratio of the same run" "$(fmt "$m" 4)" "$(fmt "$c" 4)" "$(ratio "$c" "$m" 3)" higher "$cmd"
    else
        not_run "$fig" "no figure in its output (exit $RC, see the raw outputs)" "$cmd"
    fi
fi

# ------------------------------------------------------- the flash tier
if wants flash; then
    req=2000000
    [ "$QUICK" = 1 ] && req=1000000
    cmd="target/release/cachalot-lab compare --model ycsb-b --values json --param keys=200000 --param value_size=1000 --requests $req --memory 20 --flash 200 --threads 2 --repeat 1 --json \$D/flash.json"
    section flash "$cmd"
    shown=${cmd//\$D\//}
    read -r m c <<<"$(json_summary "$D/flash.json" "hit ratio")"
    fig="miss ratio, YCSB-B over 200 MB of 1,000 B JSON values, \`-m 20\` and a 200 MB flash tier (memcached: extstore; cachalot: SlimCache's compressed tier)"
    if [ "$m" != - ]; then
        mm=$(awk -v h="$m" 'BEGIN { print 1 - h }')
        cm=$(awk -v h="$c" 'BEGIN { print 1 - h }')
        row "$fig" "$(fmt "$mm" 4)" "$(fmt "$cm" 4)" "$(ratio "$cm" "$mm" 3)" lower "$shown"
        read -r m c <<<"$(json_summary "$D/flash.json" "throughput (req/s)")"
        row "requests/s of the same run" "$(fmt "$m")" "$(fmt "$c")" "$(ratio "$c" "$m")" higher "$shown"
    else
        not_run "$fig" "no figure in its output (exit $RC, see the raw outputs)" "$shown"
    fi
fi

# -------------------------------------------------------- calcification
# Carra & Michiardi's calcification workload: its replay needs tens of
# millions of requests per server at a scale that does not distort it
# (benches/cost/calcification.sh), more than this script's budget.
if wants cost; then
    not_run "hit ratio in the last phase of Carra & Michiardi's calcification workload, cachalot \`-o rebalance=mrc\`" \
        "its replays need tens of millions of requests per server (the notebook's run took about 30 min)" \
        'REQ=50000000 REBALANCERS="off memcached sas cost-per-byte mrc" REAL_REBALANCE=mrc benches/cost/calcification.sh'
fi

# ----------------------------------------------------------- throughput
if wants throughput; then
    reps=3 dur=5
    [ "$QUICK" = 1 ] && dur=3
    cmd="WORKLOADS=\"lg-get90-d1 lg-set90-d1 lg-get90-dN\" REPS=$reps DURATION=$dur QUIET_WAIT=10 benches/throughput.sh"
    section throughput "$cmd"
    tsv=$D/results.tsv
    med() { # workload server column -> median
        awk -F'\t' -v w="$1" -v s="$2" -v c="$3" '$1 == w && $2 == s && $c != "-" { print $c }' "$tsv" 2>/dev/null |
            sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
    }
    common="50 connections, 100,000 keys of 20 B, 32 B values, \`-t 1\` on one core, the client on the other; median of $reps runs of ${dur} s"
    if [ -s "$tsv" ]; then
        busy=$(awk -F'\t' '{ print $8 }' "$tsv" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
        for spec in "lg-get90-d1|requests/s, 90% GET, 1 request in flight per connection" \
            "lg-set90-d1|requests/s, 90% SET, 1 in flight" \
            "lg-get90-dN|requests/s, 90% GET, 16 in flight (pipelined)"; do
            w=${spec%%|*}
            m=$(med "$w" memcached 4)
            c=$(med "$w" cachalot 4)
            fig=${spec#*|}
            [ "$w" = lg-get90-d1 ] && fig="$fig; $common; machine ${busy}% busy (median) just before a run"
            row "$fig" "$(fmt "$m")" "$(fmt "$c")" "$(ratio "$c" "$m")" higher "$cmd"
        done
        m=$(med lg-get90-d1 memcached 6)
        c=$(med lg-get90-d1 cachalot 6)
        row "p99 latency, µs, 90% GET, 1 in flight (loadgen, per request)" "$(fmt "$m")" "$(fmt "$c")" "$(ratio "$c" "$m")" lower "$cmd"
        m=$(med lg-get90-d1 memcached 7)
        c=$(med lg-get90-d1 cachalot 7)
        row "server CPU time per request, µs, 90% GET, 1 in flight (/proc/PID/task/*/schedstat)" "$(fmt "$m" 2)" "$(fmt "$c" 2)" "$(ratio "$c" "$m")" lower "$cmd"
        m=$(med lg-get90-d1 memcached 11)
        c=$(med lg-get90-d1 cachalot 11)
        if [ "$m" != - ] && [ "$c" != - ]; then
            row "server system calls per request, 90% GET, 1 in flight (perf stat, a second run)" \
                "$(fmt "$m" 2)" "$(fmt "$c" 2)" "$(ratio "$c" "$m")" lower "$cmd"
        fi
        m=$(med lg-get90-d1 memcached 9)
        c=$(med lg-get90-d1 cachalot 9)
        if [ "$m" != - ] && [ "$c" != - ]; then
            row "server instructions per request, thousands, 90% GET, 1 in flight (perf stat, user + kernel)" \
                "$(fmt "$m" 1)" "$(fmt "$c" 1)" "$(ratio "$c" "$m")" lower "$cmd"
        else
            not_run "server instructions per request (perf stat)" "perf stat reports the hardware counters as not supported in this virtual machine" "$cmd"
        fi
    else
        not_run "requests/s, 90% GET and 90% SET" "no figure in its output (exit $RC, see the raw outputs)" "$cmd"
    fi
fi

# ---------------------------------------------------------- warm restart
if wants warm; then
    cmd='ITEMS=1000000 MEM_MB=256 REPEAT=3 benches/warm-restart.sh'
    section warm "$cmd"
    # stdout rows: rep server before after stop_s start_s ("sum": stop_s +
    # start_s, since memcached saves at the stop and cachalot loads at the
    # start)
    wmed() {
        awk -v s="$1" -v c="$2" '$2 == s && $1 ~ /^[0-9]+$/ { print (c == "sum" ? $5 + $6 : $c) }' "$D/stdout.txt" |
            sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
    }
    m=$(wmed memcached 6)
    c=$(wmed cachalot 6)
    fig="warm restart (\`-e\` on /dev/shm, \`-m 256\`), 1 M JSON items of 100 B: seconds from start to answering, median of 3 alternated rounds"
    if [ "$m" != - ] && [ "$c" != - ]; then
        row "$fig" "$(fmt "$m" 2)" "$(fmt "$c" 2)" "$(ratio "$c" "$m")" lower "$cmd"
        m=$(wmed memcached sum)
        c=$(wmed cachalot sum)
        row "the same restart, seconds from the stop's signal to answering again (stop and start), median" "$(fmt "$m" 2)" "$(fmt "$c" 2)" "$(ratio "$c" "$m")" lower "$cmd"
        m=$(wmed memcached 4)
        c=$(wmed cachalot 4)
        row "items back after that restart (of 1,000,000 written), median" "$(fmt "$m")" "$(fmt "$c")" "$(ratio "$c" "$m" 3)" higher "$cmd"
    else
        not_run "$fig" "no figure in its output (exit $RC, see the raw outputs)" "$cmd"
    fi
fi

# ---------------------------------------------------------------- errors
if wants errors; then
    cmd='benches/errors.sh'
    mems="8, 16, 32 and 64"
    [ "$QUICK" = 1 ] && cmd='MEMORY="8 64" benches/errors.sh' mems="8 and 64"
    section errors "$cmd"
    # stdout rows: model m mode "mc errors" "ca errors" "hit x" result
    read -r cells me ce bad <<<"$(awk '$3 == "default" || $3 == "zzone" {
        n++; me += $4; ce += $5; if ($7 != "ok") bad++ } END { print n + 0, me + 0, ce + 0, bad + 0 }' "$D/stdout.txt")"
    fig="error replies, the lab's ETC, APP, USR and YCSB-B models look-aside (300,000 requests) at \`-m\` $mems, default and \`-o zzone=1\`: $cells runs each"
    if [ "$cells" -gt 0 ]; then
        [ "$bad" = 0 ] || fig="$fig; $bad runs with errors memcached had not"
        row "$fig" "$(fmt "$me")" "$(fmt "$ce")" "-" "fewer (0 is the target)" "$cmd"
        # The hit ratio of those runs, cachalot / memcached: lowest and median.
        read -r lo lo_at mid <<<"$(awk '($3 == "default" || $3 == "zzone") && $6 ~ /^[0-9.]+$/ {
            print $6, $1 "_-m_" $2 "_" $3 }' "$D/stdout.txt" | sort -g |
            awk '{ v[NR] = $1; w[NR] = $2 } END {
                if (NR == 0) { print "- - -"; exit }
                m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                printf "%.3f %s %.3f\n", v[1], w[1], m }')"
        row "hit ratio of the same runs, cachalot / memcached: lowest (${lo_at//_/ }) and median" \
            "-" "-" "$lo × and $mid ×" higher "$cmd"
    else
        not_run "$fig" "no figure in its output (exit $RC, see the raw outputs)" "$cmd"
    fi
fi

# ------------------------------------------------------------- the table
TOTAL=$((SECONDS - START))
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n1)
ram=$(awk '/^MemTotal:/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)
table=$OUT_DIR/summary.md
{
    echo "Measured $START_DATE, at commit \`$COMMIT\`$DIRTY, by \`benches/summary.sh$([ "$QUICK" = 1 ] && echo ' (QUICK=1)')\` in $((TOTAL / 60)) min $((TOTAL % 60)) s."
    echo "Machine: $(nproc) CPUs ($cpu), $ram GiB RAM, $(uname -sr)."
    echo "memcached: $("$MEMCACHED_BIN" -V 2>/dev/null) (\`$MEMCACHED_BIN\`); cachalot: \`${CACHALOT_BIN#"$ROOT"/}\`, $BIN_NOTE."
    echo "Load average (1, 5, 15 min) before: $LOAD_BEFORE; at the start of each section: ${LOADS[*]}; after: $LOAD_AFTER."
    echo
    echo "| figure | memcached 1.6.18 | cachalot | cachalot / memcached | better | command |"
    echo "| --- | ---: | ---: | ---: | --- | --- |"
    cat "$ROWS"
} >"$table"
cat "$table"
log "raw outputs in $OUT_DIR"

if [ "$WRITE" = 1 ]; then
    python3 - "$DOC" "$table" "$BEGIN_MARK" "$END_MARK" <<'PY'
import sys
doc, table, begin, end = sys.argv[1:]
text = open(doc).read()
if begin not in text or end not in text:
    sys.exit("the summary markers are missing from " + doc)
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
open(doc, "w").write(head + begin + "\n" + open(table).read() + end + tail)
PY
    log "written into docs/benchmarks.md"
fi

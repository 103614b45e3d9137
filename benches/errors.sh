#!/usr/bin/env bash
# Errors beside memcached (issue 32, "Done when" 1): the lab's ETC, APP, USR
# and YCSB-B models replayed look-aside (`cachalot-lab compare`) at several
# `-m`, with default flags and with `-o zzone=1`. `compare` fails when a run
# of cachalot has error replies that memcached's run of the same repetition
# has not; this script runs the whole matrix, prints one line per cell and
# exits non-zero if any cell failed.
#
# Usage: benches/errors.sh   (see docs/benchmarks.md)
# Environment: MODELS ("etc app usr ycsb-b"), MEMORY ("8 16 32 64"),
# MODES ("default zzone"), REQUESTS (300000), REPEAT (1), THREADS (2),
# CACHALOT_BIN, LAB_BIN (default target/release/cachalot-lab),
# OUT_DIR (the compare outputs; default a new temporary directory).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LAB_BIN=${LAB_BIN:-$ROOT/target/release/cachalot-lab}
export CACHALOT_BIN=${CACHALOT_BIN:-$ROOT/target/release/cachalot}
MODELS=${MODELS:-etc app usr ycsb-b}
MEMORY=${MEMORY:-8 16 32 64}
MODES=${MODES:-default zzone}
REQUESTS=${REQUESTS:-300000}
REPEAT=${REPEAT:-1}
THREADS=${THREADS:-2}
OUT_DIR=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$OUT_DIR"
[ -x "$LAB_BIN" ] || (cd "$ROOT" && cargo build --release -p cachalot-lab -p cachalot)

failed=0
printf '%-8s %4s %-8s %10s %10s %8s  %s\n' model m mode "mc errors" "ca errors" "hit x" result
for model in $MODELS; do
    for mb in $MEMORY; do
        for mode in $MODES; do
            extra=()
            [ "$mode" = zzone ] && extra=(--cachalot-arg=-o --cachalot-arg=zzone=1)
            out="$OUT_DIR/$model-$mb-$mode"
            if "$LAB_BIN" compare --model "$model" --memory "$mb" --requests "$REQUESTS" \
                --repeat "$REPEAT" --threads "$THREADS" "${extra[@]}" --json "$out.json" \
                >"$out.txt" 2>&1; then
                result=ok
            else
                result=FAILED
                failed=$((failed + 1))
            fi
            row() { awk -v k="$1" '$0 ~ "^"k" " {print $(NF-2), $(NF-1), $NF}' "$out.txt"; }
            read -r me ce _ <<<"$(row errors)"
            read -r _ _ hx <<<"$(row 'hit ratio')"
            printf '%-8s %4s %-8s %10s %10s %8s  %s\n' "$model" "$mb" "$mode" "${me:-?}" "${ce:-?}" "${hx:-?}" "$result"
        done
    done
done
echo "outputs in $OUT_DIR"
[ "$failed" = 0 ]

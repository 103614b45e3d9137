#!/usr/bin/env bash
# Does the Z-zone ever cost hits? (issue 34, "Done when" 2.) The lab's
# workloads run in process (`cachalot-lab sim`, deterministic: the same
# seed gives the same figures on any machine) with the Z-zone on and off at
# several `-m`, and each cell prints both miss ratios and their difference.
# A cell where the zone's miss ratio is more than SLACK (0.005) above the
# zone-off one is marked LOSS, and the script exits non-zero if any is.
#
# Usage: benches/zone-split.sh   (see docs/benchmarks.md)
# Environment: MODELS ("etc ycsb-b app usr twitter"), MEMORY ("8 16 64
# 256"), VALUES ("json random"), REQUESTS (2000000), SLACK (0.005),
# ON ("--zzone true"), OFF ("--zzone false"), EXTRA (more sim flags for
# both sides), JOBS (2: runs at once), LAB_BIN, OUT_DIR (the JSON results).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LAB_BIN=${LAB_BIN:-$ROOT/target/release/cachalot-lab}
MODELS=${MODELS:-etc ycsb-b app usr twitter}
MEMORY=${MEMORY:-8 16 64 256}
VALUES=${VALUES:-json random}
REQUESTS=${REQUESTS:-2000000}
SLACK=${SLACK:-0.005}
ON=${ON:---zzone true}
OFF=${OFF:---zzone false}
EXTRA=${EXTRA:-}
JOBS=${JOBS:-2}
OUT_DIR=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$OUT_DIR"
[ -x "$LAB_BIN" ] || (cd "$ROOT" && cargo build --release -p cachalot-lab)

echo "machine: $(nproc) CPUs; date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit: $(git -C "$ROOT" rev-parse --short HEAD)"
echo "command: $LAB_BIN sim --model M --memory MB --values V --requests $REQUESTS $EXTRA {$ON | $OFF}; results in $OUT_DIR"

# Every run, JOBS at a time; each writes its JSON result.
runs=()
for model in $MODELS; do
    for m in $MEMORY; do
        for v in $VALUES; do
            for side in on off; do
                runs+=("$model $m $v $side")
            done
        done
    done
done
export LAB_BIN REQUESTS ON OFF EXTRA OUT_DIR
printf '%s\n' "${runs[@]}" | xargs -P "$JOBS" -L 1 bash -c '
    model=$0 m=$1 v=$2 side=$3
    flags=$ON; [ "$side" = off ] && flags=$OFF
    # shellcheck disable=SC2086
    "$LAB_BIN" sim --model "$model" --memory "$m" --values "$v" \
        --requests "$REQUESTS" $EXTRA $flags \
        --json "$OUT_DIR/$model-$m-$v-$side.json" >/dev/null
' 2>&1

python3 - "$OUT_DIR" "$SLACK" $MODELS -- $MEMORY -- $VALUES <<'EOF'
import json, sys
out, slack = sys.argv[1], float(sys.argv[2])
rest = sys.argv[3:]
i = rest.index("--"); models = rest[:i]; rest = rest[i + 1:]
i = rest.index("--"); memory = rest[:i]; values = rest[i + 1:]
print(f"{'model':8} {'-m':>4} {'values':7} {'miss on':>8} {'miss off':>8} {'on-off':>8} "
      f"{'zone pages':>10} {'zone items':>10} {'refused':>9}  verdict")
losses = 0
for model in models:
    for m in memory:
        for v in values:
            d = {s: json.load(open(f"{out}/{model}-{m}-{v}-{s}.json")) for s in ("on", "off")}
            miss = {s: 1 - d[s]["totals"]["hit_ratio"] for s in d}
            st = d["on"]["meta"]["server_stats"]
            diff = miss["on"] - miss["off"]
            loss = diff > slack
            losses += loss
            print(f"{model:8} {m:>4} {v:7} {miss['on']:8.4f} {miss['off']:8.4f} {diff:+8.4f} "
                  f"{st.get('zzone_pages', '-'):>10} {st.get('zzone_items', '-'):>10} "
                  f"{st.get('zzone_refused', '-'):>9}  {'LOSS' if loss else 'ok'}")
print(f"{losses} cells where the zone costs more than {slack} of miss ratio")
sys.exit(1 if losses else 0)
EOF

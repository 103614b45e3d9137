#!/usr/bin/env bash
# Regenerates the charts in docs/img/ (shown in docs/lab.md and
# docs/benchmarks-history.md) with `cachalot-lab plot`:
#   - the miss-ratio curves from `cachalot-lab mrc` runs made here (their JSON
#     goes to docs/data/mrc-*.json; each takes a few seconds);
#   - hit ratio over time and latency from the `compare` results in
#     docs/data/compare-*-64m.json (made by the commands in docs/benchmarks-history.md;
#     this script only plots them, it does not rerun the servers).
# Usage: docs/img/make.sh [path/to/cachalot-lab]   (default: target/release)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
LAB=${1:-${CARGO_TARGET_DIR:-target}/release/cachalot-lab}
DATA=docs/data
IMG=docs/img

# Both formats of one chart: PNG for any viewer, SVG for sharp scaling.
plot() {
	local name=$1
	shift
	for ext in png svg; do
		"$LAB" plot --out "$IMG/$name.$ext" "$@" >/dev/null
	done
	echo "$IMG/$name.{png,svg}"
}

# Miss-ratio curves: YCSB-B as in the compare run (200k keys, 2M requests;
# sizes in slab chunks, what a server's -m pays for, so 64 MB here is close to
# the compare run's 64 MB),
# and a GD-Wheel cost workload whose value sizes follow the cost groups, so
# the cost-miss ratio parts from the miss ratio and the slab classes differ.
"$LAB" mrc --model ycsb-b --param keys=200000 --requests 2000000 --seed 1 \
	--points 40 --bytes-of chunk --json "$DATA/mrc-ycsb-b.json" >/dev/null
"$LAB" mrc --model gdwheel-multi-tpcw --param keys=100000 --requests 2000000 --seed 1 \
	--points 40 -m 16 --json "$DATA/mrc-gdwheel-multi-tpcw.json" >/dev/null
plot mrc-ycsb-b --kind mrc "$DATA/mrc-ycsb-b.json"
plot mrc-gdwheel-multi-tpcw --kind mrc --per-class 3 "$DATA/mrc-gdwheel-multi-tpcw.json"

# The compare runs: repetition 1 of each server. Their intervals are 1 s of
# wall time, and the servers ran at different speeds, so the x axis counts
# requests to line the two up.
for w in etc ycsb-b; do
	f=$DATA/compare-$w-64m.json
	if [[ ! -f $f ]]; then
		echo "skipping $f: not there (see docs/benchmarks-history.md to make it)" >&2
		continue
	fi
	plot "hit-ratio-$w-64m" --kind hit-ratio-over-time --x requests --repetition 1 \
		--title "Hit ratio over time: $w, 64 MB, memcached vs cachalot" "$f"
	plot "latency-cdf-$w-64m" --kind latency-cdf --repetition 1 \
		--title "Latency CDF: $w, 64 MB (all requests)" "$f"
	plot "latency-tail-$w-64m" --kind latency-cdf --style tail --repetition 1 \
		--title "Latency by percentile: $w, 64 MB (all requests)" "$f"
done

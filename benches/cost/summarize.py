#!/usr/bin/env python3
"""Summaries for the issue-4 cost benchmarks (benches/cost/*.sh).

Reads cachalot-lab result documents (sim, replay, compare: metrics::RunResult)
and adds up the intervals after a warm-up, as the GD-Wheel thesis measures
(section 6.4: YCSB warm-up first, then the measured run). Per run it prints
and stores: GETs, hits, hit ratio, recomputation cost (sum of the costs of
the GETs that missed) over the measured intervals only.

  summarize.py runs --warmup N --out summary.json TAG=FILE ...
      TAG is "experiment/workload/policy/seed"; N counts requests (sim and
      replay intervals of --interval <requests>).
  summarize.py table summary.json --base POLICY [--exclude W,...]
      per workload: each policy's mean over seeds, its ratio to POLICY's
      recomputation cost and hit-ratio difference in points.
  summarize.py phases --warmup N FILE ...   hit ratio from request N on.
  summarize.py phase-table --bounds A,B,... [--tail T] [--optimum H] FILE ...
      a markdown row per run: hit ratio between consecutive bounds (in
      requests; the last phase runs to the end), over the last T requests,
      pages moved, and the last phase's ratio to the optimum H.
"""
import json
import sys
from collections import defaultdict


def measured(path, warmup, end=None):
    doc = json.load(open(path))
    if "runs" in doc:  # a compare document: not used here
        raise SystemExit(f"{path}: a compare document, pass replay/sim runs")
    gets = hits = creq = chit = 0
    for iv in doc["intervals"]:
        if iv["start"] < warmup or (end is not None and iv["start"] >= end):
            continue
        c = iv["counts"]
        gets += c["gets"]
        hits += c["hits"]
        creq += c["cost_requested"]
        chit += c["cost_hit"]
    st = doc["meta"].get("server_stats", {})
    return {
        "file": path,
        "gets": gets,
        "hits": hits,
        "hit_ratio": hits / gets if gets else float("nan"),
        "recomputation_cost": creq - chit,
        "total_hit_ratio": doc["totals"]["hit_ratio"],
        "total_recomputation_cost": doc["totals"]["recomputation_cost"],
        "slabs_moved": st.get("slabs_moved"),
        "curr_items": st.get("curr_items"),
        "label": doc["meta"].get("label"),
    }


def cmd_runs(args):
    warmup = 0
    out = None
    tags = []
    i = 0
    while i < len(args):
        if args[i] == "--warmup":
            warmup = int(args[i + 1]); i += 2
        elif args[i] == "--out":
            out = args[i + 1]; i += 2
        else:
            tags.append(args[i]); i += 1
    runs = []
    for t in tags:
        tag, path = t.split("=", 1)
        exp, wl, pol, seed = tag.split("/")
        r = measured(path, warmup)
        r.update(experiment=exp, workload=wl, policy=pol, seed=seed, warmup=warmup)
        r["file"] = path.split("/")[-1]
        runs.append(r)
        print(f"{exp:12} {wl:24} {pol:28} seed {seed}: hit {r['hit_ratio']:.4f} "
              f"recompute {r['recomputation_cost']:>12,}  ({r['gets']} GETs measured)")
    if out:
        old = []
        try:
            old = json.load(open(out))["runs"]
        except (OSError, ValueError, KeyError):
            pass
        keep = {(r["experiment"], r["workload"], r["policy"], r["seed"]) for r in runs}
        old = [r for r in old if (r["experiment"], r["workload"], r["policy"], r["seed"]) not in keep]
        json.dump({"warmup_requests": warmup, "runs": old + runs}, open(out, "w"), indent=1)


def cmd_table(args):
    path = args[0]
    base = args[args.index("--base") + 1]
    exclude = set(args[args.index("--exclude") + 1].split(",")) if "--exclude" in args else set()
    runs = json.load(open(path))["runs"]
    by = defaultdict(lambda: defaultdict(dict))
    pols = []
    for r in runs:
        by[r["workload"]][r["policy"]][r["seed"]] = r
        if r["policy"] not in pols:
            pols.append(r["policy"])
    print("| workload | policy | seeds | hit ratio per seed | mean hit | recompute per seed | mean recompute | vs " + base + " | hit diff (points) |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = defaultdict(list)
    for wl in sorted(by, key=lambda w: (len(w), w)):
        b = by[wl].get(base, {})
        bh = sum(r["hit_ratio"] for r in b.values()) / len(b) if b else float("nan")
        bc = sum(r["recomputation_cost"] for r in b.values()) / len(b) if b else float("nan")
        for p in pols:
            rs = by[wl].get(p)
            if not rs:
                continue
            seeds = sorted(rs)
            h = sum(rs[s]["hit_ratio"] for s in seeds) / len(seeds)
            c = sum(rs[s]["recomputation_cost"] for s in seeds) / len(seeds)
            # The ratio of the means over seeds (same seeds for both policies).
            ratio = c / bc if bc else float("nan")
            if wl not in exclude:
                ratios[p].append(ratio)
            print(f"| {wl} | {p} | {','.join(seeds)} | "
                  + " / ".join(f"{rs[s]['hit_ratio']:.4f}" for s in seeds)
                  + f" | {h:.4f} | "
                  + " / ".join(f"{rs[s]['recomputation_cost']:,}" for s in seeds)
                  + f" | {c:,.0f} | {ratio:.3f}x | {100 * (h - bh):+.2f} |")
    print()
    for p, rs in ratios.items():
        if p != base:
            print(f"mean ratio of {p} to {base} over {len(rs)} workloads"
                  f"{' (excluding ' + ','.join(sorted(exclude)) + ')' if exclude else ''}: "
                  f"{sum(rs) / len(rs):.3f}x")


def cmd_phases(args):
    warmup = int(args[args.index("--warmup") + 1])
    files = [a for a in args if a.endswith(".json")]
    for f in files:
        r = measured(f, warmup)
        print(f"{r['label'] or f}: hit ratio from request {warmup}: {r['hit_ratio']:.4f} "
              f"({r['hits']}/{r['gets']}), slabs_moved {r['slabs_moved']}  [{f}]")


def cmd_phase_table(args):
    bounds = [int(b) for b in args[args.index("--bounds") + 1].split(",")]
    opt = float(args[args.index("--optimum") + 1]) if "--optimum" in args else None
    tail = int(args[args.index("--tail") + 1]) if "--tail" in args else None
    files = [a for a in args if a.endswith(".json")]
    edges = [0] + bounds + [None]
    for f in files:
        cells = [measured(f, lo, hi)["hit_ratio"] for lo, hi in zip(edges, edges[1:])]
        if tail:
            total = json.load(open(f))["totals"]["counts"]["requests"]
            cells.append(measured(f, total - tail)["hit_ratio"])
        last = measured(f, bounds[-1])
        name = f.rsplit("/", 1)[-1].removesuffix(".json")
        row = [name] + [f"{h:.4f}" for h in cells] + [str(last["slabs_moved"])]
        if opt:
            row.append(f"{last['hit_ratio'] / opt:.3f} x")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    {"runs": cmd_runs, "table": cmd_table, "phases": cmd_phases,
     "phase-table": cmd_phase_table}[sys.argv[1]](sys.argv[2:])

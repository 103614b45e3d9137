#!/usr/bin/env python3
"""Build some packages' tests with cargo, then run their test binaries two at a time.

    scripts/run-tests.py [--release] [--jobs N] [--keep-going]
                         [--again LABEL VAR=VALUE ...] [--again-skip FILTER ...]
                         -p PKG [-p PKG ...]

The packages' tests are built in one `cargo test --no-run`. Every test
binary, and the packages' doc tests, then runs as `cargo test` would run it:
from its package's directory, with CARGO_MANIFEST_DIR and CARGO set.

Why not `cargo test`: it runs one binary at a time. Most of the server's
and the lab's test time is waiting on servers, timeouts and restarts
(auth's tests: 14 s of wall time, 0.1 s of CPU), so on 2 cores the
server's binary of integration tests runs while the lab's binaries run
beside it: 128 s, where one binary after another took 192 s
(docs/testing.md). The engine's tests compute on both cores already; two
of them at a time only take twice as long each.

`--again LABEL VAR=VALUE` runs the binary labelled LABEL (as the summary
names it, e.g. "cachalot-server tests/it.rs") a second time with VAR set:
the server's tests once on each network path (issue 35). `--again-skip
FILTER` leaves the tests whose names contain FILTER out of those second
runs (libtest's `--skip`).

Order: longest first, by the times the last run left in
$CARGO_TARGET_DIR/test-times.tsv; without them (a clean clone), most tests
first.
Fails fast: after a failure nothing new starts (--keep-going: everything
runs). Exits 1 if anything failed.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

CARGO = os.environ.get("CARGO", "cargo")


def package_names():
    """Each workspace package's name by its manifest path."""
    out = subprocess.run([CARGO, "metadata", "--no-deps", "--format-version", "1"],
                         stdout=subprocess.PIPE, text=True, check=True)
    return {p["manifest_path"]: p["name"] for p in json.loads(out.stdout)["packages"]}


def cargo_test(packages, release, *args):
    """`cargo test ARGS` for the packages, in the build's profile."""
    cmd = [CARGO, "test", *args] + (["--release"] if release else [])
    for pkg in packages:
        cmd += ["-p", pkg]
    return cmd


def build(packages, release, names):
    """Run `cargo test --no-run` for the packages; return their jobs."""
    cmd = cargo_test(packages, release, "--no-run", "--message-format=json-render-diagnostics")
    print("==> " + " ".join(cmd), file=sys.stderr, flush=True)
    # cargo's progress goes to stderr as usual; stdout carries the JSON.
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        sys.exit(f"run-tests: the build failed ({' '.join(cmd)})")
    jobs, with_lib = [], []
    for line in out.stdout.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") != "compiler-artifact":
            continue
        target = msg["target"]
        name = names.get(msg["manifest_path"], "")
        if "lib" in target["kind"] and name in packages and target.get("doctest") and name not in with_lib:
            with_lib.append(name)
        if msg.get("executable") and msg["profile"]["test"]:
            pkg_dir = str(Path(msg["manifest_path"]).parent)
            if target["kind"] == ["test"]:
                label = f"{name} tests/{target['name']}.rs"
            else:
                label = f"{name} {target['kind'][0]} {target['name']}"
            # What cargo sets when it runs a test. Not for the doc tests'
            # cargo: a CARGO_MANIFEST_DIR in its environment reaches the
            # build scripts' checks and builds ring and the server again.
            env = {"CARGO_MANIFEST_DIR": pkg_dir, "CARGO": CARGO}
            jobs.append({"label": label, "cmd": [msg["executable"]], "cwd": pkg_dir, "env": env,
                         "binary": True})
    if with_lib:
        # Doc tests are compiled by rustdoc when they run; cargo does that.
        # The same packages as the build, so that cargo resolves the same
        # features and builds nothing again; it skips those with no library.
        jobs.append({"label": "doc tests " + ",".join(with_lib),
                     "cmd": cargo_test(packages, release, "--doc"), "cwd": os.getcwd(),
                     "env": {}, "binary": False})
    return jobs


def count_tests(job):
    """How many tests a job's binary lists (0 for the doc tests)."""
    if not job["binary"]:
        return 0
    out = subprocess.run(job["cmd"][:1] + ["--list", "--format", "terse"], cwd=job["cwd"],
                         env=dict(os.environ, **job["env"]), stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    return sum(line.endswith(": test") for line in out.stdout.splitlines())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", action="store_true")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("TEST_JOBS", "2")))
    ap.add_argument("--keep-going", action="store_true")
    ap.add_argument("-p", "--package", action="append", required=True, dest="packages")
    ap.add_argument("--again", nargs=2, action="append", default=[], metavar=("LABEL", "VAR=VALUE"))
    ap.add_argument("--again-skip", action="append", default=[], metavar="FILTER")
    args = ap.parse_args()

    target_dir = Path(os.environ.get("CARGO_TARGET_DIR", "target"))
    times_file = target_dir / "test-times.tsv"

    started = time.monotonic()
    jobs = build(args.packages, args.release, package_names())
    skips = [arg for f in args.again_skip for arg in ("--skip", f)]
    for label, assignment in args.again:
        var, _, value = assignment.partition("=")
        same = [j for j in jobs if j["label"] == label]
        if not same or not var:
            sys.exit(f"run-tests: --again {label!r} {assignment!r}: no such binary or no VAR=")
        jobs.append(dict(same[0], label=f"{label} ({assignment})", env=dict(same[0]["env"], **{var: value}),
                         cmd=same[0]["cmd"] + skips))
    built = time.monotonic()

    last = {}
    if times_file.exists():
        for line in times_file.read_text().splitlines():
            label, _, secs = line.rpartition("\t")
            try:
                last[label] = float(secs)
            except ValueError:
                pass
    if all(j["label"] in last for j in jobs):
        jobs.sort(key=lambda j: -last[j["label"]])
    else:
        # No times for some (a clean clone, a new binary): most tests first,
        # which puts the server's one binary of integration tests in a
        # slot from the start.
        jobs.sort(key=lambda j: -count_tests(j))

    lock = threading.Lock()
    queue = list(jobs)
    results = []
    failed = threading.Event()

    def worker():
        while True:
            with lock:
                if not queue or (failed.is_set() and not args.keep_going):
                    return
                job = queue.pop(0)
            env = dict(os.environ, **job["env"])
            t0 = time.monotonic()
            proc = subprocess.run(job["cmd"], cwd=job["cwd"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            secs = time.monotonic() - t0
            ok = proc.returncode == 0
            if not ok:
                failed.set()
            with lock:
                results.append((job["label"], ok, secs))
                status = "ok" if ok else f"FAILED (exit {proc.returncode})"
                sys.stdout.write(f"\n==> {job['label']}: {status} in {secs:.1f} s\n")
                sys.stdout.write(proc.stdout.decode("utf-8", "replace"))
                sys.stdout.flush()

    threads = [threading.Thread(target=worker) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    done = time.monotonic()
    times_file.parent.mkdir(parents=True, exist_ok=True)
    times_file.write_text("".join(f"{label}\t{secs:.2f}\n" for label, _, secs in results))
    busy = sum(secs for _, _, secs in results)
    print(f"\nrun-tests: built in {built - started:.0f} s; {len(results)} of {len(jobs)} "
          f"binaries ran in {done - built:.0f} s ({busy:.0f} s one after another, "
          f"{args.jobs} at a time)")
    for label, _, secs in sorted(results, key=lambda r: -r[2])[:8]:
        print(f"  {secs:6.1f} s  {label}")
    bad = [label for label, ok, _ in results if not ok]
    if bad:
        print("run-tests: failed: " + "; ".join(bad))
        if len(results) < len(jobs):
            print(f"run-tests: {len(jobs) - len(results)} binaries not run after the failure "
                  "(--keep-going runs them all)")
        sys.exit(1)


if __name__ == "__main__":
    main()

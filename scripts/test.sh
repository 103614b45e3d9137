#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls exactly this), on a fresh
# Debian machine with the Rust toolchain, python3+pip, node+npm, Java 17+maven
# and gcc; everything else is installed by scripts/install-deps.sh.
#
#   1. prerequisites (apt packages, rustfmt/clippy, .venv, node_modules)
#   2. cargo fmt --check, cargo clippy -D warnings, scripts/layers.py (no
#      import circles, the engine's files within their size)
#   3. cargo build --release, the tests in two runs: the crates above the
#      engine (two binaries at a time, scripts/run-tests.py), then the
#      engine and the protocol with their test features (cargo test);
#      integration tests find the server through CACHALOT_BIN, and run
#      again with CACHALOT_NET_IO=epoll (the network path's fallback)
#   4. scripts/conformance.sh: memccapable, pymemcache's integration tests and
#      the Python / Node / Java client round trips against target/release/cachalot
#   5. a summary with timings, closing with "steps: N passed, M failed"
#
# Fails fast on the first failing step (KEEP_GOING=1: run all, report all).
# docs/testing.md says how to run one part alone.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

# test.sh always checks cachalot; TARGET_SERVER=memcached is for
# scripts/conformance.sh alone.
export TARGET_SERVER=cachalot
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export CACHALOT_BIN="$CARGO_TARGET_DIR/release/cachalot"
# Plain, non-interactive output in CI logs.
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

summary_init
servers_init
trap 'servers_stop_all; summary_print' EXIT

step "install deps" scripts/install-deps.sh
step "cargo fmt --check" cargo fmt --all --check
step "cargo clippy" cargo clippy --workspace --all-targets -- -D warnings
# No two modules of the engine or the server import each other, and no
# engine file outgrows its room (issue 33).
step "module layers" python3 scripts/layers.py
step "cargo build --release" cargo build --release
# The tests in two runs: the engine's and the protocol's own tests turn on
# their `testing` and `fuzzing` features (validate(), the model, the corpus
# replay), and one run over the workspace would build every crate above
# them again with those features. Apart, the server, lab and binaries'
# tests reuse the release build above. Those mostly wait on the servers
# they start, so they run two binaries at a time (scripts/run-tests.py);
# the engine's compute on both cores, one binary at a time.
# Under KEEP_GOING, every test binary runs instead of stopping at the
# first one that fails.
run_tests_args=(--release)
cargo_test_args=(--release)
if [[ "${KEEP_GOING:-0}" == 1 ]]; then
    run_tests_args+=(--keep-going)
    cargo_test_args+=(--no-fail-fast)
fi
# The server's integration tests run twice: on the default network path
# (io_uring where the kernel allows it) and on the epoll fallback. The
# fallback's run leaves out the tests whose subject is what a restart, a
# damaged file or a dump finds (warm restarts, flash's restarts, the
# package, the flash file's owner, metadump's listings, prefix and aging
# accounts): their requests take the paths the rest already cover, and
# they were half of its time (120 of 243 s), which the suite's 15 minutes
# could no longer hold.
step "cargo test --release (server, lab, tools)" scripts/run-tests.py "${run_tests_args[@]}" \
    --again "cachalot-server tests/it.rs" CACHALOT_NET_IO=epoll \
    --again-skip warm:: --again-skip flash::a_clean_stop --again-skip flash::restarts_after \
    --again-skip flash::a_damaged --again-skip one_owner:: --again-skip package:: \
    --again-skip tools::metadump_lists --again-skip prefixes:: --again-skip ext_item_age:: \
    -p cachalot-server -p cachalot-lab -p cachalot -p cachalot-loadgen
step "cargo test --release (engine, protocol)" cargo test "${cargo_test_args[@]}" \
    -p cachalot-engine -p cachalot-protocol
# With KEEP_GOING=1 (a developer switch) every step runs and all failures
# are reported; the exit status is still non-zero if any failed.
conformance_rc=0
SKIP_INSTALL=1 scripts/conformance.sh || conformance_rc=$?
[[ $STEP_FAILURES == 0 && $conformance_rc == 0 ]] || exit 1

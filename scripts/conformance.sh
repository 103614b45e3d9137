#!/usr/bin/env bash
# Conformance and real-client suites against a freshly started server.
#
#   scripts/conformance.sh [SUITE...]     SUITE: memccapable pymemcache python node java
#                                         (default: all, in that order)
#
# Each suite gets its own server on a free 127.0.0.1 port, stopped afterwards
# (and by the EXIT trap if anything goes wrong); a server that dies during a
# suite fails it.  The server is cachalot ($CACHALOT_BIN, default
# target/release/cachalot, built if missing) unless TARGET_SERVER=memcached,
# the developer switch to check the suites themselves against memcached 1.6.
#
# Environment: TARGET_SERVER=cachalot|memcached, CACHALOT_BIN, SERVER_ARGS
# (extra server flags), KEEP_GOING=1 (run every suite, report all failures),
# SKIP_INSTALL=1 (skip scripts/install-deps.sh; test.sh already ran it).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VENV="$ROOT/.venv"
PY_TESTS="$ROOT/tests/clients/python"
ALL_SUITES=(memccapable pymemcache python node java)
# memccapable 1.1 runs 27 ASCII and 27 binary tests.
MEMCCAPABLE_TESTS=54

# memccapable: libmemcached's protocol checker, ASCII and binary.  It prints
# "<name> [pass]" per test ("[FAIL]"/"[skip]" otherwise); all 54 must pass.
suite_memccapable() {
	local out rc=0 passed failed
	out=$(mktemp)
	timeout 180 memccapable -h "$MC_HOST" -p "$MC_PORT" -t 3 >"$out" 2>&1 || rc=$?
	cat "$out"
	passed=$(grep -c '\[pass\]' "$out" || true)
	failed=$(grep -ciE '\[(fail|skip)\]' "$out" || true)
	rm -f "$out"
	echo "memccapable: $passed passed, $failed failed"
	[[ $rc == 0 ]] || die "memccapable exited with status $rc"
	[[ $failed == 0 && $passed == "$MEMCCAPABLE_TESTS" ]] ||
		die "memccapable: expected $MEMCCAPABLE_TESTS passes and no failures or skips"
}

# pymemcache's own integration tests (from its sdist, see install-deps.sh).
# test_tls needs a TLS listener and is marked skip upstream anyway, so it is
# deselected rather than counted as a skip.
suite_pymemcache() {
	local dir
	dir=$(echo "$VENV"/pymemcache-suite-*)
	[[ -f "$dir/test_integration.py" ]] || die "pymemcache suite missing: run scripts/install-deps.sh"
	cd "$dir"
	PYTHONPATH="$PY_TESTS" timeout 600 "$VENV/bin/python" -m pytest -p no:cacheprovider -p noskip \
		-m integration --server "$MC_HOST" --port "$MC_PORT" \
		--deselect test_integration.py::test_tls test_integration.py
}

# Our round trips through pymemcache and pylibmc (text and binary).
suite_python() {
	cd "$PY_TESTS"
	PYTHONPATH="$PY_TESTS" timeout 600 "$VENV/bin/python" -m pytest -p noskip -v .
}

# memjs (binary protocol) under node's built-in test runner.
suite_node() {
	cd "$ROOT/tests/clients/node"
	timeout 600 node --test test/
}

# spymemcached, text and binary, under Maven Surefire.
suite_java() {
	cd "$ROOT/tests/clients/java"
	timeout 900 mvn -B -ntp -Dstyle.color=never test -Dmc.host="$MC_HOST" -Dmc.port="$MC_PORT"
}

main() {
	local suites=("$@") s
	[[ ${#suites[@]} -gt 0 ]] || suites=("${ALL_SUITES[@]}")
	for s in "${suites[@]}"; do
		declare -F "suite_$s" >/dev/null || die "unknown suite '$s' (known: ${ALL_SUITES[*]})"
	done

	summary_init
	servers_init
	trap 'servers_stop_all; summary_print' EXIT

	[[ "${SKIP_INSTALL:-0}" == 1 ]] || step "install deps" "$ROOT/scripts/install-deps.sh"

	if [[ "$TARGET_SERVER" == cachalot ]]; then
		CACHALOT_BIN="${CACHALOT_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/cachalot}"
		export CACHALOT_BIN
		if [[ ! -x "$CACHALOT_BIN" ]]; then
			step "cargo build --release" cargo build --release --manifest-path "$ROOT/Cargo.toml" -p cachalot
		fi
	fi
	log "conformance suites against $TARGET_SERVER: ${suites[*]}"

	for s in "${suites[@]}"; do
		step "$s ($TARGET_SERVER)" with_server "suite_$s"
	done
	[[ $STEP_FAILURES == 0 ]] || exit 1
}

main "$@"

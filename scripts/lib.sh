# shellcheck shell=bash
# Helpers shared by scripts/test.sh, scripts/conformance.sh and
# scripts/install-deps.sh: timed steps with a summary table, a free port, and
# starting/stopping the server under test (cachalot or, for cross-checking,
# memcached 1.6).  Sourced, never run.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ROOT

log() { printf '%s\n' "$*" >&2; }
die() {
	log "error: $*"
	exit 1
}

now_ms() { date +%s%3N; }

# Steps append "name<TAB>status<TAB>milliseconds" to $CACHALOT_TEST_SUMMARY.
# The outermost script creates the file and prints it at exit; nested scripts
# (test.sh -> conformance.sh) inherit it through the environment, so one table
# covers the whole run.
summary_init() {
	if [[ -z "${CACHALOT_TEST_SUMMARY:-}" ]]; then
		CACHALOT_TEST_SUMMARY="$(mktemp "${TMPDIR:-/tmp}/cachalot-summary.XXXXXX")"
		export CACHALOT_TEST_SUMMARY
		SUMMARY_OWNER=1
	else
		SUMMARY_OWNER=0
	fi
	RUN_START_MS=$(now_ms)
}

# Print the table and the closing "steps: N passed, M failed" line.  Only the
# script that created the summary prints it.
summary_print() {
	[[ "${SUMMARY_OWNER:-0}" == 1 ]] || return 0
	local file="$CACHALOT_TEST_SUMMARY" passed=0 failed=0 name status ms
	[[ -f "$file" ]] || return 0
	log ""
	log "==================== summary ===================="
	while IFS=$'\t' read -r name status ms; do
		printf '  %-28s %-5s %8.1fs\n' "$name" "$status" "$(awk "BEGIN{print $ms/1000}")" >&2
		if [[ "$status" == ok ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
	done <"$file"
	printf '  %-28s %-5s %8.1fs\n' "total" "" "$(awk "BEGIN{print ($(now_ms)-$RUN_START_MS)/1000}")" >&2
	rm -f "$file"
	# The plain closing line (stdout, last line of the run).
	echo "steps: $passed passed, $failed failed"
}

# step NAME CMD...: run CMD in a subshell with errexit on, time it, record it.
# On failure the run stops (fail fast) unless KEEP_GOING=1, in which case the
# failure is remembered in STEP_FAILURES and the run goes on.
STEP_FAILURES=0
step() {
	local name="$1" start rc
	shift
	log ""
	log "==> $name"
	start=$(now_ms)
	# errexit is ignored inside `if`/`||` contexts, so run the step as a plain
	# command with errexit switched on inside its own subshell.
	set +e
	(
		set -euo pipefail
		"$@"
	)
	rc=$?
	set -e
	local status=ok
	[[ $rc == 0 ]] || status=FAIL
	printf '%s\t%s\t%s\n' "$name" "$status" "$(($(now_ms) - start))" >>"$CACHALOT_TEST_SUMMARY"
	if [[ $rc != 0 ]]; then
		log "==> $name FAILED (exit $rc)"
		if [[ "${KEEP_GOING:-0}" == 1 ]]; then
			STEP_FAILURES=$((STEP_FAILURES + 1))
		else
			exit "$rc"
		fi
	fi
}

# Run a command as root: directly when we are root, else through sudo.
as_root() {
	if [[ $(id -u) == 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null; then
		sudo "$@"
	else
		die "need root (or sudo) to run: $*"
	fi
}

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ---- the server under test -------------------------------------------------

# TARGET_SERVER=cachalot (default) runs $CACHALOT_BIN; TARGET_SERVER=memcached
# runs the system memcached, to check that the tests themselves are right.
TARGET_SERVER="${TARGET_SERVER:-cachalot}"

# Every server started is listed here, so the outermost EXIT trap can stop
# any that a failing step left behind.
SERVER_PIDS_DIR="${SERVER_PIDS_DIR:-}"
servers_init() {
	if [[ -z "$SERVER_PIDS_DIR" ]]; then
		SERVER_PIDS_DIR="$(mktemp -d "${TMPDIR:-/tmp}/cachalot-servers.XXXXXX")"
		export SERVER_PIDS_DIR
		SERVERS_OWNER=1
	else
		SERVERS_OWNER=0
	fi
}

servers_stop_all() {
	[[ -n "$SERVER_PIDS_DIR" && -d "$SERVER_PIDS_DIR" ]] || return 0
	local f pid
	for f in "$SERVER_PIDS_DIR"/*.pid; do
		[[ -e "$f" ]] || continue
		pid=$(cat "$f")
		kill "$pid" 2>/dev/null || true
		rm -f "$f"
	done
	if [[ "${SERVERS_OWNER:-0}" == 1 ]]; then
		rm -rf "$SERVER_PIDS_DIR"
	fi
}

# start_server: start a fresh server on a free 127.0.0.1 port and wait until
# it accepts connections.  Sets SERVER_PID, SERVER_LOG and exports MC_HOST,
# MC_PORT for the client tests.  Extra flags can be given in SERVER_ARGS.
start_server() {
	local port cmd
	port=$(free_port)
	case "$TARGET_SERVER" in
	cachalot)
		[[ -x "${CACHALOT_BIN:-}" ]] || die "CACHALOT_BIN=${CACHALOT_BIN:-} is not an executable"
		cmd=("$CACHALOT_BIN" -p "$port" -l 127.0.0.1 -U 0)
		;;
	memcached)
		cmd=(memcached -p "$port" -l 127.0.0.1 -U 0)
		;;
	*) die "TARGET_SERVER must be cachalot or memcached, not '$TARGET_SERVER'" ;;
	esac
	# memcached (and cachalot, like it) refuses to run as root without -u.
	[[ $(id -u) != 0 ]] || cmd+=(-u root)
	# shellcheck disable=SC2206 # SERVER_ARGS is a plain word list on purpose
	cmd+=(${SERVER_ARGS:-})
	SERVER_LOG="$(mktemp "${TMPDIR:-/tmp}/cachalot-server-log.XXXXXX")"
	"${cmd[@]}" >"$SERVER_LOG" 2>&1 &
	SERVER_PID=$!
	echo "$SERVER_PID" >"$SERVER_PIDS_DIR/$SERVER_PID.pid"
	for _ in $(seq 1 100); do
		if ! server_alive; then
			log "server exited at start: ${cmd[*]}"
			cat "$SERVER_LOG" >&2
			return 1
		fi
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			export MC_HOST=127.0.0.1 MC_PORT="$port"
			log "started $TARGET_SERVER (pid $SERVER_PID) on 127.0.0.1:$port: ${cmd[*]}"
			return 0
		fi
		sleep 0.1
	done
	log "server did not accept connections on port $port within 10s"
	return 1
}

# True while the server process runs.  kill -0 is not enough: a server that
# crashed stays a zombie (still signalable) until we reap it.
server_alive() {
	local stat
	stat=$(cat "/proc/$SERVER_PID/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[[ ${stat:0:1} != Z ]]
}

stop_server() {
	[[ -n "${SERVER_PID:-}" ]] || return 0
	kill "$SERVER_PID" 2>/dev/null || true
	# Give it a moment to go, then make sure.
	for _ in $(seq 1 50); do
		server_alive || break
		sleep 0.1
	done
	kill -9 "$SERVER_PID" 2>/dev/null || true
	wait "$SERVER_PID" 2>/dev/null || true
	rm -f "$SERVER_PIDS_DIR/$SERVER_PID.pid" "${SERVER_LOG:-}"
	SERVER_PID=
}

# with_server CMD...: run CMD against a fresh server, then check the server
# survived it (a crash is a failure even if the client did not notice), and
# stop it.  On failure the end of the server's log is shown.
with_server() {
	start_server
	local rc
	# Run the command with errexit on in a subshell of its own: under `||`
	# errexit would be off for everything the command runs.
	set +e
	(
		set -euo pipefail
		"$@"
	)
	rc=$?
	set -e
	if ! server_alive; then
		log "the $TARGET_SERVER server (pid $SERVER_PID) died during: $*"
		rc=1
	fi
	if [[ $rc != 0 && -s "$SERVER_LOG" ]]; then
		log "---- last lines of the server log ----"
		tail -n 40 "$SERVER_LOG" >&2
	fi
	stop_server
	return "$rc"
}

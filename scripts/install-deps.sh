#!/usr/bin/env bash
# Installs what the test suite needs beyond rustup's stable toolchain, gcc
# and git, idempotently and quickly on re-runs (as root, or with sudo):
#   - the toolchain rust-toolchain.toml pins: where rustup's stable is that
#     very version it is registered under the pinned name (no download),
#     else `rustup toolchain install`;
#   - Debian packages: python3 (+venv, pip), nodejs + npm, a JDK and maven
#     where missing; libmemcached-tools (memccapable), and what pylibmc
#     needs when pip has to build it (libmemcached-dev, zlib1g-dev), and
#     memcached itself (the oracle tests run it side by side with cachalot;
#     installed with a policy-rc.d that refuses to start services, and its
#     service then disabled: the suite starts its own memcacheds, and
#     leaves no memcached.service running or enabled on 11211),
#     nutcracker (the pool test) and openssl (the TLS tests' certificates);
#     dpkg-dev, adduser and systemd (the package test: dpkg-shlibdeps,
#     the postinst's adduser, systemd-analyze, deb-systemd-helper);
#   - rustfmt and clippy, if the toolchain lacks them;
#   - cargo-deb (the package test), with cargo install, once (about a minute);
#   - a Python venv in .venv with tests/clients/python/requirements.txt, and
#     the pymemcache sdist whose test_integration.py conformance.sh runs;
#   - memjs under tests/clients/node (npm ci from the committed lock file).
# Maven fetches the Java client's dependencies into ~/.m2 on its first run.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VENV="$ROOT/.venv"
PY_REQS="$ROOT/tests/clients/python/requirements.txt"
NODE_DIR="$ROOT/tests/clients/node"

install_debian_packages() {
	local want=(libmemcached-tools libmemcached-dev zlib1g-dev memcached nutcracker openssl
		dpkg-dev adduser systemd)
	# The suites' own tools, where missing (a fresh machine may have only
	# rustup, a C compiler and git).
	local -A tool_packages=([python3]="python3 python3-venv python3-pip" [node]=nodejs [npm]=npm
		[java]=default-jdk-headless [mvn]=maven)
	local tool
	for tool in "${!tool_packages[@]}"; do
		# shellcheck disable=SC2206 # word splitting wanted
		command -v "$tool" >/dev/null || want+=(${tool_packages[$tool]})
	done
	# The venv module is split out of Debian's python3.
	python3 -c 'import ensurepip, venv' 2>/dev/null || want+=(python3-venv)
	# pylibmc ships wheels for CPython <= 3.11 only; elsewhere pip compiles
	# it, which needs the Python headers too.
	if ! python3 -c 'import sys; sys.exit(sys.version_info[:2] > (3, 11))' &&
		! python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
		want+=(python3-dev)
	fi
	local missing=() p
	for p in "${want[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
	done
	if [[ ${#missing[@]} == 0 ]]; then
		log "debian packages: all present (${want[*]})"
		return 0
	fi
	log "debian packages: installing ${missing[*]}"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	# No package may start a service meanwhile (memcached's postinst starts
	# memcached.service on 11211): a policy-rc.d answering 101 ("action
	# forbidden", invoke-rc.d and deb-systemd-invoke ask it), unless the
	# machine already has one (Docker images do).
	local policy=/usr/sbin/policy-rc.d own_policy=0
	if [[ ! -e $policy ]]; then
		printf '#!/bin/sh\n# scripts/install-deps.sh: no service starts while it installs.\nexit 101\n' |
			as_root tee "$policy" >/dev/null
		as_root chmod 755 "$policy"
		own_policy=1
	fi
	local rc=0
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
	[[ $own_policy == 0 ]] || as_root rm -f "$policy"
	[[ $rc == 0 ]] || die "apt-get install ${missing[*]} failed ($rc)"
	# A memcached installed here is only the oracle binary: its service
	# stays stopped and disabled (a memcached the machine had is left as
	# it was).
	if [[ " ${missing[*]} " == *" memcached "* ]]; then
		disable_service memcached
	fi
}

# Stop and disable a service a package enabled, with or without systemd
# running (on CI containers systemd is not PID 1: nothing ran, but the
# unit is still enabled for the next boot).
disable_service() {
	local name=$1
	if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
		as_root systemctl disable --now "$name.service" >/dev/null 2>&1 || true
	else
		command -v deb-systemd-helper >/dev/null && as_root deb-systemd-helper disable "$name.service" >/dev/null 2>&1 || true
		command -v update-rc.d >/dev/null && as_root update-rc.d "$name" disable >/dev/null 2>&1 || true
		[[ -x /etc/init.d/$name ]] && as_root /etc/init.d/"$name" stop >/dev/null 2>&1 || true
	fi
	log "debian packages: $name.service stopped and disabled (the suite starts its own $name)"
}

# rust-toolchain.toml pins the toolchain. rustup installs it on the first
# cargo command (unless RUSTUP_AUTO_INSTALL=0); here, where rustup's stable
# is that very version, the stable toolchain is registered under the pinned
# name instead (rustup refuses `toolchain link` for a release name, hence
# the link in its toolchains directory), so nothing is downloaded.
install_rust_toolchain() {
	local want host home stable
	want=$(sed -n 's/^channel *= *"\(.*\)"$/\1/p' "$ROOT/rust-toolchain.toml")
	[[ -n $want ]] || die "no channel in rust-toolchain.toml"
	if ! command -v rustup >/dev/null; then
		log "rust toolchain: no rustup; using $(rustc --version) (rust-toolchain.toml pins $want)"
		return 0
	fi
	if [[ "$(rustup run "$want" rustc --version 2>/dev/null)" == "rustc $want "* ]]; then
		log "rust toolchain: $want present"
		return 0
	fi
	host=$(rustup run stable rustc -vV 2>/dev/null | sed -n 's/^host: //p')
	home=${RUSTUP_HOME:-$HOME/.rustup}
	stable="$home/toolchains/stable-$host"
	# A link left from an older stable names the wrong version: replace it.
	[[ -L "$home/toolchains/$want-$host" ]] && rm -f "$home/toolchains/$want-$host"
	if [[ -n $host && "$(rustup run stable rustc --version 2>/dev/null)" == "rustc $want "* &&
		! -e "$home/toolchains/$want-$host" ]]; then
		ln -s "$stable" "$home/toolchains/$want-$host"
		log "rust toolchain: $want is rustup's stable, linked ($home/toolchains/$want-$host)"
	else
		log "rust toolchain: rustup toolchain install $want"
		rustup toolchain install "$want" --profile minimal --component rustfmt,clippy
	fi
}

install_rust_components() {
	if cargo fmt --version >/dev/null 2>&1 && cargo clippy --version >/dev/null 2>&1; then
		return 0
	fi
	command -v rustup >/dev/null || die "cargo fmt / cargo clippy missing and no rustup to add them"
	rustup component add rustfmt clippy
}

# cargo-deb builds the .deb (crates/cachalot/Cargo.toml's [package.metadata.deb]).
CARGO_DEB_VERSION=3.8.0
install_cargo_deb() {
	if command -v cargo-deb >/dev/null || [[ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo-deb" ]]; then
		log "cargo-deb: present"
		return 0
	fi
	log "cargo-deb: cargo install cargo-deb $CARGO_DEB_VERSION"
	cargo install --quiet --locked cargo-deb --version "$CARGO_DEB_VERSION"
}

# The requirements file's hash is kept in the venv, so an unchanged venv is
# left alone and a changed requirements file reinstalls.
install_python() {
	local stamp="$VENV/.requirements.sha256" want
	want=$(sha256sum "$PY_REQS" | cut -d' ' -f1)
	if [[ -x "$VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
		log "python venv: up to date ($VENV)"
	else
		log "python venv: installing $PY_REQS into $VENV"
		[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
		"$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$PY_REQS"
		echo "$want" >"$stamp"
	fi
	install_pymemcache_suite
}

# pymemcache's own integration tests are not in its wheel: take them from the
# sdist of the exact version installed, once.
install_pymemcache_suite() {
	local version dir
	version=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("pymemcache"))')
	dir="$VENV/pymemcache-suite-$version"
	if [[ -f "$dir/test_integration.py" && -f "$dir/conftest.py" ]]; then
		log "pymemcache $version integration suite: present ($dir)"
		return 0
	fi
	local tmp
	tmp=$(mktemp -d)
	"$VENV/bin/python" -m pip download -q --disable-pip-version-check \
		--no-binary :all: --no-deps -d "$tmp" "pymemcache==$version"
	tar -xzf "$tmp"/pymemcache-"$version".tar.gz -C "$tmp"
	mkdir -p "$dir.partial"
	cp "$tmp/pymemcache-$version/pymemcache/test/test_integration.py" \
		"$tmp/pymemcache-$version/pymemcache/test/conftest.py" "$dir.partial/"
	# pymemcache's setup.cfg holds its pytest settings (coverage, `-m unit`);
	# the run needs only its markers.
	printf '[pytest]\nmarkers =\n    unit\n    integration\n    benchmark\n' >"$dir.partial/pytest.ini"
	rm -rf "$dir" "$tmp"
	mv "$dir.partial" "$dir"
	log "pymemcache $version integration suite: extracted to $dir"
}

install_node() {
	# npm records what it installed in node_modules/.package-lock.json; when
	# that matches the committed lock file there is nothing to do.
	if [[ -f "$NODE_DIR/node_modules/.package-lock.json" ]] &&
		[[ "$NODE_DIR/node_modules/.package-lock.json" -nt "$NODE_DIR/package-lock.json" ]]; then
		log "node modules: up to date"
		return 0
	fi
	log "node modules: npm ci in $NODE_DIR"
	(cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error)
}

check_tools() {
	local t
	for t in cargo python3 node npm java mvn; do
		command -v "$t" >/dev/null || die "$t is required but not installed"
	done
}

main() {
	install_rust_toolchain
	install_debian_packages
	check_tools
	install_rust_components
	install_cargo_deb
	install_python
	install_node
}

main "$@"

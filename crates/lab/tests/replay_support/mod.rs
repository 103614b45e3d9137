//! Shared by the lab's replay tests: the cachalot binary to start.
//!
//! `$CACHALOT_BIN` (scripts/test.sh sets it to the release build), else
//! `target/<profile>/cachalot` next to the test or `target/release/cachalot`
//! (servers.rs's defaults), else it is built here with the cargo running the
//! test, in this test's profile (into `target/replay-test-cachalot/`), so
//! `cargo test -p cachalot-lab` works alone.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn cachalot_bin() -> PathBuf {
    if let Ok(p) = cachalot_lab::servers::cachalot_bin(None) {
        return p;
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<this test>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    // A target dir of its own: the `cargo test` running us still holds the
    // lock on ours, so building there would wait forever.
    let target_dir = profile_dir
        .parent()
        .expect("target dir")
        .join("replay-test-cachalot");
    let profile = profile_dir.file_name().expect("profile name");
    let release = profile == "release";
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "-p", "cachalot"])
        .env("CARGO_TARGET_DIR", &target_dir);
    if release {
        cmd.arg("--release");
    }
    let status = cmd.status().expect("running cargo build -p cachalot");
    assert!(status.success(), "cargo build -p cachalot failed");
    let bin = target_dir.join(profile).join("cachalot");
    assert!(bin.is_file(), "{} missing after the build", bin.display());
    bin
}

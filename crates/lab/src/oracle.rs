//! The oracle's version. cachalot is checked against memcached 1.6.18
//! (Debian 12's package): the differential tester, the side-by-side suite
//! tests and `compare` expect its replies and figures, and docs/protocol.md
//! names its behaviours. Another release may differ for reasons that are
//! not cachalot's, so whoever starts the oracle says so, loudly, once per
//! process.
//!
//! The one place for this check: the lab's `servers::memcached_bin` calls
//! it, and the server's suite tests include this file
//! (`crates/server/tests/it/common.rs`, `#[path]`) and call it from theirs. Std
//! only, for that reason.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::Once;

/// The memcached release the tests and documents compare against.
pub const ORACLE_VERSION: &str = "1.6.18";

/// The version `bin -V` prints (`memcached 1.6.18`), if it prints one.
pub fn memcached_version(bin: &Path) -> Option<String> {
    let out = Command::new(bin).arg("-V").output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.trim().strip_prefix("memcached ")?;
    Some(version.trim().to_string())
}

/// A warning when `bin` is not memcached [`ORACLE_VERSION`], else `None`.
pub fn oracle_mismatch(bin: &Path) -> Option<String> {
    match memcached_version(bin) {
        Some(v) if v == ORACLE_VERSION => None,
        found => Some(format!(
            "WARNING: the oracle {} is memcached {}, not {ORACLE_VERSION}: the tests and \
             figures that compare cachalot with it were written against memcached \
             {ORACLE_VERSION} (Debian 12's package), and a difference may be the other \
             release's, not cachalot's. Install memcached {ORACLE_VERSION} or point \
             MEMCACHED_BIN at it.",
            bin.display(),
            found
                .as_deref()
                .unwrap_or("of unknown version (`-V` printed no version)")
        )),
    }
}

/// Check `bin` once per process; a mismatch is written to stderr directly,
/// past the test harness's output capture, so a passing run shows it too.
pub fn check_oracle(bin: &Path) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Some(warning) = oracle_mismatch(bin) {
            let _ = writeln!(std::io::stderr(), "\n{warning}\n");
        }
    });
}

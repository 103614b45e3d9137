//! The check 1: `cachalot-lab mrc` on a trace of at least 1 M
//! requests gives an LRU miss ratio within 0.005 of libCacheSim's LRU at
//! three cache sizes, in items and in bytes.
//!
//! The trace comes from `cachalot-lab gen` (the Twitter-like model, read-only,
//! Zipf 0.9 over 300 000 keys, values of a few hundred bytes to 1.2 KB),
//! written as CSV; `cachalot-lab mrc` computes its curves from stack distances
//! in one pass, and libCacheSim (PyPI `libcachesim`, run by
//! tests/libcachesim_lru.py) simulates an LRU cache of each size over the
//! same file. Python is `$CACHALOT_PYTHON`, else the workspace's
//! `.venv/bin/python`, else `python3`; the test fails (it does not skip) when
//! libcachesim is missing: scripts/test.sh installs it.

use std::path::{Path, PathBuf};
use std::process::Command;

const TOLERANCE: f64 = 0.005;
const ITEM_SIZES: [u64; 3] = [5_000, 50_000, 120_000];
const BYTE_SIZES: [u64; 3] = [4_000_000, 40_000_000, 100_000_000];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("CACHALOT_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let venv = workspace_root().join(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn list(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// (size, miss ratio, byte miss ratio) from a JSON curve.
fn points(v: &serde_json::Value) -> Vec<(u64, f64, f64)> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected a list of points, got {v}"))
        .iter()
        .map(|p| {
            (
                p["size"].as_u64().expect("size"),
                p["miss_ratio"].as_f64().expect("miss_ratio"),
                p["byte_miss_ratio"].as_f64().expect("byte_miss_ratio"),
            )
        })
        .collect()
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn mrc_lru_miss_ratio_matches_libcachesim() {
    let dir = TempDir(std::env::temp_dir().join(format!(
        "cachalot-mrc-vs-libcachesim-{}",
        std::process::id()
    )));
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let trace = dir.0.join("trace.csv");
    let json = dir.0.join("mrc.json");
    let lab = env!("CARGO_BIN_EXE_cachalot-lab");

    run(Command::new(lab)
        .args([
            "gen",
            "--model",
            "twitter",
            "--param",
            "write=0",
            "--param",
            "alpha=0.9",
            "--param",
            "keys=300000",
            "--requests",
            "1000000",
            "--seed",
            "7",
            "--quiet",
            "--out",
        ])
        .arg(&trace));
    let text = std::fs::read_to_string(&trace).expect("trace written");
    let requests = text.lines().skip(1).filter(|l| !l.is_empty()).count();
    assert!(requests >= 1_000_000, "trace has {requests} requests");
    drop(text);

    run(Command::new(lab)
        .args(["mrc", "--trace"])
        .arg(&trace)
        .args(["--items", &list(&ITEM_SIZES), "--sizes", &list(&BYTE_SIZES)])
        .arg("--json")
        .arg(&json));
    let ours: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("mrc json"))
            .expect("mrc json parses");
    assert_eq!(ours["gets"].as_u64(), Some(requests as u64));

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/libcachesim_lru.py");
    let py = python();
    let out = Command::new(&py)
        .arg(&script)
        .arg(&trace)
        .args(["--items", &list(&ITEM_SIZES), "--bytes", &list(&BYTE_SIZES)])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", py.display()));
    assert!(
        out.status.success(),
        "libCacheSim run failed with {} (python {}; is libcachesim installed? \
         scripts/test.sh installs it):\n{}",
        out.status,
        py.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON from the libCacheSim script: {stdout}"));
    let theirs: serde_json::Value = serde_json::from_str(line).expect("script JSON parses");

    let mut report = Vec::new();
    for (name, ours, theirs, want) in [
        (
            "items",
            &ours["by_items"],
            &theirs["items"],
            &ITEM_SIZES[..],
        ),
        (
            "bytes",
            &ours["by_bytes"],
            &theirs["bytes"],
            &BYTE_SIZES[..],
        ),
    ] {
        let (a, b) = (points(ours), points(theirs));
        assert_eq!(
            a.iter().map(|p| p.0).collect::<Vec<_>>(),
            want,
            "{name} sizes"
        );
        assert_eq!(
            b.iter().map(|p| p.0).collect::<Vec<_>>(),
            want,
            "{name} sizes"
        );
        for (x, y) in a.iter().zip(&b) {
            report.push(format!(
                "{name} {}: mrc {:.6} libCacheSim {:.6}",
                x.0, x.1, y.1
            ));
            assert!(
                (x.1 - y.1).abs() <= TOLERANCE,
                "{name} cache of {}: mrc miss ratio {} vs libCacheSim {}",
                x.0,
                x.1,
                y.1
            );
            if name == "bytes" {
                assert!(
                    (x.2 - y.2).abs() <= TOLERANCE,
                    "byte cache of {}: mrc byte miss ratio {} vs libCacheSim {}",
                    x.0,
                    x.2,
                    y.2
                );
            }
        }
        // The three sizes sit on different parts of the curve (not all cold
        // misses or all hits), so agreement means something.
        assert!(
            a[0].1 > a[1].1 + 0.05 && a[1].1 > a[2].1 + 0.05,
            "{name}: {a:?}"
        );
        assert!(a[2].1 > 0.0 && a[0].1 < 1.0, "{name}: {a:?}");
    }
    eprintln!("{}", report.join("\n"));
}

//! Replays the committed corpus of the operation fuzzer
//! (crates/engine/fuzz/corpus/engine_ops) through the same body the
//! cargo-fuzz target runs (`testing::fuzz_ops`: model check and validate()
//! after every step), on stable Rust in CI. A missing or empty corpus fails.

use std::path::PathBuf;

use crate::testing;
use cachalot_protocol::fuzzing::replay_corpus;

#[test]
fn engine_ops_corpus() {
    let dir: PathBuf = [env!("CARGO_MANIFEST_DIR"), "fuzz", "corpus", "engine_ops"]
        .iter()
        .collect();
    replay_corpus(&dir, testing::fuzz_ops);
}

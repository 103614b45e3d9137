//! Fuzz the engine with operation sequences checked against the reference
//! model after every step (`cachalot_engine::testing::fuzz_ops`, which
//! tests/fuzz_corpus.rs also runs on every file of the committed corpus).
//!
//! Run: `cargo +nightly fuzz run engine_ops corpus/engine_ops` from
//! crates/engine/fuzz (see docs/testing.md, "Fuzzing").

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cachalot_engine::testing::fuzz_ops(data));

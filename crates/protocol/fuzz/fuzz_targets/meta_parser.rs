//! Fuzz the meta command parser (`mg ms md ma mn me`) and its base64 key
//! helpers: no input may panic, and decoding never writes past its buffer.
//! The body is `cachalot_protocol::fuzzing::meta_parser`, which tests/fuzz_corpus.rs
//! also runs on every file of the committed corpus.
//!
//! Run: `cargo +nightly fuzz run meta_parser corpus/meta_parser -- -dict=dict/protocol.dict`
//! from crates/protocol/fuzz (see docs/testing.md, "Fuzzing").

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cachalot_protocol::fuzzing::meta_parser(data));

//! Fuzz the classic text protocol parser: every line of the input, framed as the
//! server frames it, must parse or fail with a typed error, never panic, and
//! respect memcached's limits (key length, token rules, data length range).
//! The body is `cachalot_protocol::fuzzing::text_parser`, which tests/fuzz_corpus.rs
//! also runs on every file of the committed corpus.
//!
//! Run: `cargo +nightly fuzz run text_parser corpus/text_parser -- -dict=dict/protocol.dict`
//! from crates/protocol/fuzz (see docs/testing.md, "Fuzzing").

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cachalot_protocol::fuzzing::text_parser(data));

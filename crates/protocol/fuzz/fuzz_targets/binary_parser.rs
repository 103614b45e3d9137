//! Fuzz the binary protocol request parser: the input is a stream of
//! requests walked as the server walks it; heads are found at the same length
//! whatever prefix has arrived, and decode consistently with their lengths.
//! The body is `cachalot_protocol::fuzzing::binary_parser`, which tests/fuzz_corpus.rs
//! also runs on every file of the committed corpus.
//!
//! Run: `cargo +nightly fuzz run binary_parser corpus/binary_parser -- -dict=dict/protocol.dict`
//! from crates/protocol/fuzz (see docs/testing.md, "Fuzzing").

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| cachalot_protocol::fuzzing::binary_parser(data));

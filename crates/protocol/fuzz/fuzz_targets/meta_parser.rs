//! Fuzz the meta command parser (`mg ms md ma mn me`) and its base64 key
//! helpers: no input may panic, and decoding never writes past its buffer.
//!
//! Run: `cargo +nightly fuzz run meta_parser -- -dict=dict/protocol.dict`
//! from crates/protocol/fuzz.

#![no_main]

use cachalot_protocol::meta;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let line = match data.iter().position(|&b| b == b'\n') {
        Some(p) => &data[..p],
        None => data,
    };
    let _ = meta::parse(line);

    // Binary keys: decode into buffers of every interesting size.
    for size in [0usize, 1, 3, 250, line.len()] {
        let mut out = vec![0u8; size];
        if let Some(n) = meta::base64_decode_lenient(line, &mut out) {
            assert!(n <= size);
        }
    }
    // Encoding then decoding gives the bytes back.
    let mut enc = Vec::new();
    meta::base64_encode(line, &mut enc);
    let mut dec = vec![0u8; line.len() + 3];
    let n = meta::base64_decode_lenient(&enc, &mut dec);
    if !line.is_empty() {
        assert_eq!(n.map(|n| &dec[..n]), Some(line));
    }
});

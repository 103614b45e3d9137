//! Fuzz the classic text protocol parser: any line must parse or fail with a
//! typed error, never panic, and what it returns must respect memcached's
//! limits (key length, token rules, data length range).
//!
//! Run: `cargo +nightly fuzz run text_parser -- -dict=dict/protocol.dict`
//! from crates/protocol/fuzz.

#![no_main]

use cachalot_protocol::text::{self, TextCommand, KEY_MAX_LENGTH};
use libfuzzer_sys::fuzz_target;

fn check_key(key: &[u8]) {
    assert!(key.len() <= KEY_MAX_LENGTH, "key over 250 bytes accepted");
    assert!(!key.is_empty(), "empty key");
    assert!(!key.contains(&b' ') && !key.contains(&0), "separator inside a key");
}

fuzz_target!(|data: &[u8]| {
    // The server hands the parser one line without its '\n'.
    let line = match data.iter().position(|&b| b == b'\n') {
        Some(p) => &data[..p],
        None => data,
    };
    match text::parse(line) {
        Ok(TextCommand::Get { keys, .. }) | Ok(TextCommand::Gat { keys, .. }) => {
            for k in keys {
                // Retrieval keys may be long (the handler rejects them one by
                // one, as memcached does), but never contain separators.
                assert!(!k.is_empty() && !k.contains(&b' ') && !k.contains(&0));
            }
        }
        Ok(TextCommand::Store { key, bytes, .. }) => {
            check_key(key);
            assert!(bytes <= (i32::MAX - 2) as usize);
        }
        Ok(TextCommand::Arith { key, .. })
        | Ok(TextCommand::Delete { key, .. })
        | Ok(TextCommand::Touch { key, .. }) => check_key(key),
        Ok(_) => {}
        Err(e) => {
            // Every error has memcached's reply text (or closes silently).
            assert_eq!(e.error.message().is_empty(), e.error.closes());
        }
    }
    // The number helpers see arbitrary tokens too.
    let _ = text::strtoull(line);
    let _ = text::strtol32(line);
    let _ = text::strtoul32(line);
});

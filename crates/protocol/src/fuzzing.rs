//! The bodies of the parser fuzz targets (crates/protocol/fuzz) and the
//! replay of their saved corpora as ordinary tests (tests/fuzz_corpus.rs),
//! so both run the same checks and CI needs no nightly toolchain. Built for
//! tests and fuzzing only (feature `fuzzing`).
//!
//! Each body takes arbitrary bytes: no input may panic, and what a parser
//! returns must respect memcached's limits and the parser's own contract.

use std::path::Path;

use crate::binary::{self, Command, Parsed, HEADER_LEN, KEY_MAX_LEN, REQ_MAGIC};
use crate::meta;
use crate::text::{self, TextCommand, KEY_MAX_LENGTH};

/// The request lines of `data`, framed as the server frames them: up to
/// each '\n', one '\r' stripped (not from a lone "\r"), cut at a NUL.
fn lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (mut line, after) = match text::find_newline(rest) {
            Some(nl) => (&rest[..nl], &rest[nl + 1..]),
            None => (rest, &[][..]),
        };
        rest = after;
        if line.len() > 1 && line[line.len() - 1] == b'\r' {
            line = &line[..line.len() - 1];
        }
        Some(text::until_nul(line))
    })
}

fn check_key(key: &[u8]) {
    assert!(key.len() <= KEY_MAX_LENGTH, "key over 250 bytes accepted");
    assert!(!key.is_empty(), "empty key");
    assert!(
        !key.contains(&b' ') && !key.contains(&0),
        "separator inside a key"
    );
}

/// Target `text_parser`: every line of the input through the classic text
/// parser and the number helpers.
pub fn text_parser(data: &[u8]) {
    for line in lines(data) {
        match text::parse(line) {
            Ok(TextCommand::Get { keys, .. }) | Ok(TextCommand::Gat { keys, .. }) => {
                for k in keys {
                    // Retrieval keys may be long (the handler rejects them one
                    // by one, as memcached does), but never contain separators.
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
        let _ = text::strtoull(line);
        let _ = text::strtol32(line);
        let _ = text::strtoul32(line);
    }
}

/// Target `meta_parser`: every line through the meta parser, and the
/// base64 key helpers into buffers of every interesting size.
pub fn meta_parser(data: &[u8]) {
    for line in lines(data) {
        let _ = meta::parse(line);
        for size in [0usize, 1, 3, 250, line.len()] {
            let mut out = vec![0u8; size];
            if let Some(n) = meta::base64_decode_lenient(line, &mut out) {
                assert!(n <= size, "base64 decoded past its buffer");
            }
        }
        // Encoding then decoding gives the bytes back.
        let mut enc = Vec::new();
        meta::base64_encode(line, &mut enc);
        let mut dec = vec![0u8; line.len() + 3];
        let n = meta::base64_decode_lenient(&enc, &mut dec);
        if !line.is_empty() {
            assert_eq!(n.map(|n| &dec[..n]), Some(line), "base64 round trip");
        }
    }
}

/// Target `binary_parser`: the input as a stream of binary requests, walked
/// as the server walks it (`parse_frame`, `Command::decode`, then the value
/// or the swallowed body). Each head must be found at the same length
/// whichever prefix of the stream has arrived, borrow exactly the bytes its
/// header announces, and decode to a command consistent with those lengths.
pub fn binary_parser(data: &[u8]) {
    let mut input = data;
    loop {
        let frame = match binary::parse_frame(input) {
            Parsed::Incomplete => {
                assert!(incomplete(input), "Incomplete on a complete head");
                return;
            }
            Parsed::BadMagic => {
                assert!(input.len() >= HEADER_LEN && input[0] != REQ_MAGIC);
                return;
            }
            Parsed::Frame(f) => f,
        };
        let h = frame.header;
        let head = frame.head_len();
        assert!(head <= input.len(), "head past the input");
        assert_eq!(h.magic, REQ_MAGIC);
        assert_eq!(frame.extras.len(), h.extras_len as usize);
        assert_eq!(frame.key.len(), h.key_len as usize);
        assert_eq!(
            frame.extras,
            &input[HEADER_LEN..HEADER_LEN + frame.extras.len()]
        );
        assert_eq!(frame.key, &input[HEADER_LEN + frame.extras.len()..head]);
        let mut enc = Vec::with_capacity(HEADER_LEN);
        h.encode(&mut enc);
        assert_eq!(enc, &input[..HEADER_LEN], "header round trip");
        // Partial input: every shorter prefix is incomplete, and the head
        // alone already gives the same frame.
        for len in 0..head {
            assert_eq!(binary::parse_frame(&input[..len]), Parsed::Incomplete);
        }
        assert_eq!(binary::parse_frame(&input[..head]), Parsed::Frame(frame));

        let (key, ext, body) = (h.key_len as u64, h.extras_len as u64, h.body_len as u64);
        let cmd = match Command::decode(&frame) {
            Ok(cmd) => cmd,
            Err(e) => {
                let bad_length = key + ext > body;
                assert_eq!(e == binary::ProtocolError::BadBodyLength, bad_length);
                return; // the server replies and closes
            }
        };
        assert!(key + ext <= body && frame.key.len() <= KEY_MAX_LEN);
        // Bytes after the head that belong to this request.
        let tail = match cmd {
            Command::Get { key: k, .. }
            | Command::Gat { key: k, .. }
            | Command::Touch { key: k, .. }
            | Command::Delete { key: k, .. }
            | Command::Arith { key: k, .. } => {
                assert!(!k.is_empty() && k == frame.key);
                0
            }
            Command::Store {
                key: k, value_len, ..
            }
            | Command::Concat {
                key: k, value_len, ..
            } => {
                assert!(!k.is_empty() && k == frame.key);
                assert_eq!(key + ext + value_len as u64, body, "value length");
                value_len as u64
            }
            Command::Unknown { swallow } => {
                assert!(swallow <= body);
                swallow
            }
            Command::Quit { .. } => return,
            Command::Flush { .. } | Command::Noop | Command::Version | Command::Stat { .. } => 0,
        };
        // Each request consumes at least its header, so the walk ends.
        let next = usize::try_from(head as u64 + tail).unwrap_or(usize::MAX);
        match input.get(next..) {
            Some(rest) => input = rest,
            None => return,
        }
    }
}

/// Whether `input` really holds less than one head.
fn incomplete(input: &[u8]) -> bool {
    match binary::Header::parse(input) {
        None => input.len() < HEADER_LEN,
        Some(h) => input.len() < HEADER_LEN + h.extras_len as usize + h.key_len as usize,
    }
}

/// Run `body` on every file of the corpus in `dir`; returns how many ran.
/// Panics naming the file whose input fails, and if the directory is
/// missing or empty (a replay that checks nothing must not pass). The
/// files are shared among a thread per core: a corpus is one test, which
/// would otherwise leave the other cores idle.
pub fn replay_corpus(dir: &Path, body: impl Fn(&[u8]) + Sync) -> usize {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("fuzz corpus {} is missing: {e}", dir.display()));
    let mut files: Vec<_> = entries
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "fuzz corpus {} is empty", dir.display());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(path) = files.get(i) else {
                    return;
                };
                let data = std::fs::read(path).expect("corpus file");
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&data)));
                if let Err(e) = run {
                    eprintln!("fuzz corpus input {} fails", path.display());
                    std::panic::resume_unwind(e);
                }
            });
        }
    });
    files.len()
}

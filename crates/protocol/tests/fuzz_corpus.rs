//! Replays the committed fuzz corpora (crates/protocol/fuzz/corpus/<target>)
//! through the same bodies the cargo-fuzz targets run, so every input the
//! fuzzer found interesting stays checked on stable Rust in CI. A missing or
//! empty corpus fails the test.

use std::path::PathBuf;

use cachalot_protocol::fuzzing;

fn corpus(target: &str) -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "fuzz", "corpus", target]
        .iter()
        .collect()
}

#[test]
fn text_parser_corpus() {
    fuzzing::replay_corpus(&corpus("text_parser"), fuzzing::text_parser);
}

#[test]
fn meta_parser_corpus() {
    fuzzing::replay_corpus(&corpus("meta_parser"), fuzzing::meta_parser);
}

#[test]
fn binary_parser_corpus() {
    fuzzing::replay_corpus(&corpus("binary_parser"), fuzzing::binary_parser);
}

/// A replay with nothing to replay must fail, not pass vacuously.
#[test]
#[should_panic(expected = "is missing")]
fn missing_corpus_fails() {
    fuzzing::replay_corpus(&corpus("no_such_target"), fuzzing::text_parser);
}

#[test]
#[should_panic(expected = "is empty")]
fn empty_corpus_fails() {
    let dir = std::env::temp_dir().join(format!("cachalot-empty-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    fuzzing::replay_corpus(&dir, fuzzing::text_parser);
}

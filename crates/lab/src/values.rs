//! Value contents with realistic compressibility (being written; the
//! interface is fixed).

/// What values look like.
#[derive(
    clap::ValueEnum,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum ValueKind {
    /// Incompressible random bytes.
    #[default]
    Random,
    /// Text like short messages (zExpander's tweets, ~92 B).
    Text,
    /// Protobuf-like records (zExpander's "Places", ~100 B).
    Proto,
    /// JSON-like documents.
    Json,
}

/// Fill `out` with exactly `size` bytes of value for object `key`:
/// deterministic in (kind, key, size), so a reader can verify what it gets.
pub fn value_bytes(kind: ValueKind, key: u64, size: usize, out: &mut Vec<u8>) {
    let _ = kind;
    out.clear();
    let mut x = key.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while out.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(size);
}

//! The request record every workload model produces and every driver consumes,
//! and its two file forms: CSV with a header row `time,key,size,cost,op,ttl`
//! (libCacheSim's csv reader takes it with `time-col=1,obj-id-col=2,
//! obj-size-col=3`) and a compact little-endian binary form.

use serde::{Deserialize, Serialize};

/// What the application does with the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Read; on a miss the look-aside application recomputes and SETs it.
    Get,
    /// Write (update) the value.
    Set,
    Delete,
}

/// One request of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// Microseconds since the start of the trace.
    pub time_us: u64,
    /// Object id; the key bytes are derived from it with [`key_bytes`].
    pub key: u64,
    /// Key length in bytes (the id is rendered to exactly this many bytes).
    pub key_size: u16,
    /// Value length in bytes.
    pub value_size: u32,
    /// Cost of recomputing the value on a miss (GD-Wheel's cost; microseconds
    /// in our models), 1 when the model has none.
    pub cost: u32,
    pub op: Op,
    /// Time to live in seconds, 0 = none.
    pub ttl: u32,
}

/// Render object id `key` as exactly `size` key bytes (at least 1): the id in
/// hexadecimal, left-padded with 'k' characters, truncated from the left if the
/// size is too small to hold it (so distinct ids may collide only below 16 bytes
/// of hex, which a model must then avoid by using large enough sizes).
pub fn key_bytes(key: u64, size: usize, out: &mut Vec<u8>) {
    out.clear();
    let size = size.max(1);
    let hex = format!("{key:x}");
    if hex.len() >= size {
        out.extend_from_slice(&hex.as_bytes()[hex.len() - size..]);
    } else {
        out.resize(size - hex.len(), b'k');
        out.extend_from_slice(hex.as_bytes());
    }
}

//! The item layout inside a slab chunk.
//!
//! memcached spends 48 bytes of header plus 8 bytes of CAS on every item
//! (`struct _stritem`), plus a NUL after the key and "\r\n" after the value.
//! cachalot needs no LRU links (eviction is a CLOCK over the chunks, see
//! `evict`), no hash-chain pointer (the index holds locations, see `index`),
//! no refcount (the engine is locked while an item is read) and no slab id (the
//! page knows its class), so the header is 16 bytes:
//!
//! ```text
//! byte  0..5   CAS unique, 40 bits (wraps after 2^40 stores; 0 is never issued)
//! byte  5      last access, minutes modulo 256 (meta `l`; see `ATIME_*`)
//! byte  6      recomputation cost, log-quantised (see `quantize_cost`)
//! byte  7      bits: flags width (2 bits), LIVE, REF, FETCHED, STALE, WIN,
//!              GUESSED
//! byte  8..12  expiry: relative seconds, 0 = never
//! byte 12      key length (1..=250)
//! byte 13..16  value length, 24 bits
//! then: client flags (0, 1, 2 or 4 bytes: most clients send small flags),
//!       key, value (no terminators stored).
//! ```
//! All multi-byte fields are little-endian and read with `from_le_bytes`, so
//! chunks need no alignment.

pub const HEADER_LEN: usize = 16;

/// Bits in byte 7.
pub const FLAGS_WIDTH_MASK: u8 = 0b0000_0011;
pub const LIVE: u8 = 0b0000_0100;
/// CLOCK reference bit: set on access, cleared by the passing hand.
pub const REF: u8 = 0b0000_1000;
pub const FETCHED: u8 = 0b0001_0000;
pub const STALE: u8 = 0b0010_0000;
pub const WIN: u8 = 0b0100_0000;
/// The cost byte is a guess (`-o learn_costs=1` and nothing learned for the
/// key yet): the engine re-costs the item with the mean learned cost when it
/// is hit (docs/cost.md).
pub const GUESSED: u8 = 0b1000_0000;

/// Largest value of the 40-bit CAS field.
pub const CAS_MASK: u64 = (1 << 40) - 1;

/// Bytes used to store client flags.
#[inline]
pub fn flags_width(flags: u32) -> usize {
    match flags {
        0 => 0,
        1..=0xff => 1,
        0x100..=0xffff => 2,
        _ => 4,
    }
}

#[inline]
fn width_code(width: usize) -> u8 {
    match width {
        0 => 0,
        1 => 1,
        2 => 2,
        _ => 3,
    }
}

#[inline]
fn code_width(code: u8) -> usize {
    [0, 1, 2, 4][(code & FLAGS_WIDTH_MASK) as usize]
}

/// Total bytes an item occupies.
#[inline]
pub fn total_len(key_len: usize, value_len: usize, flags: u32) -> usize {
    HEADER_LEN + flags_width(flags) + key_len + value_len
}

/// Costs are stored on one byte, logarithmically: q = 0 for cost 0, otherwise
/// q = 1 + round(8 * log2(cost)), so each step is 2^(1/8) (about 9%) and the
/// range reaches 2^31.75. GreedyDual only needs costs up to such a ratio.
pub fn quantize_cost(cost: u32) -> u8 {
    if cost == 0 {
        return 0;
    }
    let q = 1.0 + 8.0 * (cost as f64).log2();
    q.round().min(255.0) as u8
}

pub fn dequantize_cost(q: u8) -> u32 {
    // Every GET reports its item's cost (`ItemRef::cost`): a table lookup,
    // not a `powf`.
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (q, c) in t.iter_mut().enumerate().skip(1) {
            *c = (2f64.powf((q as f64 - 1.0) / 8.0)).round() as u32;
        }
        t
    })[q as usize]
}

/// Last-access time is kept in minutes modulo 256 (memcached itself only
/// refreshes an item's time once a minute). The reclaimer rewrites times older
/// than `ATIME_SATURATE` minutes so that the modulo never wraps: ages beyond
/// that read as "at least ATIME_SATURATE minutes".
pub const ATIME_SATURATE: u32 = 192;

#[inline]
pub fn atime_code(now: u32) -> u8 {
    (now / 60) as u8
}

/// Age in seconds of an access recorded as `code`, seen at `now`.
#[inline]
pub fn atime_age(code: u8, now: u32) -> u32 {
    let minutes = (atime_code(now).wrapping_sub(code)) as u32;
    if minutes == 0 {
        0
    } else {
        minutes * 60 - 30
    }
}

/// A parsed header (a copy; writes go through [`Header::write`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub cas: u64,
    pub atime: u8,
    pub cost: u8,
    pub bits: u8,
    pub exptime: u32,
    pub key_len: u8,
    pub value_len: u32,
}

impl Header {
    #[inline]
    pub fn read(chunk: &[u8]) -> Header {
        let h: &[u8; HEADER_LEN] = chunk[..HEADER_LEN].try_into().expect("chunk >= header");
        Header {
            cas: u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], 0, 0, 0]),
            atime: h[5],
            cost: h[6],
            bits: h[7],
            exptime: u32::from_le_bytes([h[8], h[9], h[10], h[11]]),
            key_len: h[12],
            value_len: u32::from_le_bytes([h[13], h[14], h[15], 0]),
        }
    }

    #[inline]
    pub fn write(&self, chunk: &mut [u8]) {
        let cas = (self.cas & CAS_MASK).to_le_bytes();
        let exp = self.exptime.to_le_bytes();
        let vlen = self.value_len.to_le_bytes();
        chunk[..HEADER_LEN].copy_from_slice(&[
            cas[0],
            cas[1],
            cas[2],
            cas[3],
            cas[4],
            self.atime,
            self.cost,
            self.bits,
            exp[0],
            exp[1],
            exp[2],
            exp[3],
            self.key_len,
            vlen[0],
            vlen[1],
            vlen[2],
        ]);
    }

    #[inline]
    pub fn flags_width(&self) -> usize {
        code_width(self.bits)
    }

    #[inline]
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.flags_width() + self.key_len as usize + self.value_len as usize
    }
}

/// Read the bits byte only (hot path of CLOCK scans).
#[inline]
pub fn bits(chunk: &[u8]) -> u8 {
    chunk[7]
}

#[inline]
pub fn set_bits(chunk: &mut [u8], bits: u8) {
    chunk[7] = bits;
}

#[inline]
pub fn exptime(chunk: &[u8]) -> u32 {
    u32::from_le_bytes([chunk[8], chunk[9], chunk[10], chunk[11]])
}

#[inline]
pub fn set_exptime(chunk: &mut [u8], exptime: u32) {
    chunk[8..12].copy_from_slice(&exptime.to_le_bytes());
}

#[inline]
pub fn set_cas(chunk: &mut [u8], cas: u64) {
    chunk[..5].copy_from_slice(&(cas & CAS_MASK).to_le_bytes()[..5]);
}

#[inline]
pub fn set_atime(chunk: &mut [u8], code: u8) {
    chunk[5] = code;
}

/// The parts of a stored item.
pub struct Parts<'a> {
    pub header: Header,
    pub flags: u32,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

#[inline]
pub fn parts(chunk: &[u8]) -> Parts<'_> {
    let header = Header::read(chunk);
    let fw = header.flags_width();
    let mut fbytes = [0u8; 4];
    fbytes[..fw].copy_from_slice(&chunk[HEADER_LEN..HEADER_LEN + fw]);
    let key_start = HEADER_LEN + fw;
    let value_start = key_start + header.key_len as usize;
    Parts {
        header,
        flags: u32::from_le_bytes(fbytes),
        key: &chunk[key_start..value_start],
        value: &chunk[value_start..value_start + header.value_len as usize],
    }
}

/// Bytes the item in `chunk` occupies (header + flags + key + value), read
/// straight from the header bytes (hot path of GD-Wheel's trailer lookup).
#[inline]
pub fn stored_len(chunk: &[u8]) -> usize {
    HEADER_LEN
        + code_width(chunk[7])
        + chunk[12] as usize
        + u32::from_le_bytes([chunk[13], chunk[14], chunk[15], 0]) as usize
}

/// The one-byte quantised cost of a stored item.
#[inline]
pub fn cost_code(chunk: &[u8]) -> u8 {
    chunk[6]
}

#[inline]
pub fn set_cost_code(chunk: &mut [u8], q: u8) {
    chunk[6] = q;
}

/// The key of a stored item (for index matches and rehashing).
#[inline]
pub fn key(chunk: &[u8]) -> &[u8] {
    let fw = code_width(chunk[7]);
    let start = HEADER_LEN + fw;
    &chunk[start..start + chunk[12] as usize]
}

/// Write a whole item into `chunk`; `value` is given in pieces so append and
/// prepend need no temporary concatenation.
#[allow(clippy::too_many_arguments)]
pub fn write(
    chunk: &mut [u8],
    cas: u64,
    atime: u8,
    cost: u8,
    bits: u8,
    exptime: u32,
    flags: u32,
    key: &[u8],
    value: &[&[u8]],
) {
    let fw = flags_width(flags);
    let value_len: usize = value.iter().map(|v| v.len()).sum();
    Header {
        cas,
        atime,
        cost,
        bits: (bits & !FLAGS_WIDTH_MASK) | width_code(fw),
        exptime,
        key_len: key.len() as u8,
        value_len: value_len as u32,
    }
    .write(chunk);
    chunk[HEADER_LEN..HEADER_LEN + fw].copy_from_slice(&flags.to_le_bytes()[..fw]);
    let mut at = HEADER_LEN + fw;
    chunk[at..at + key.len()].copy_from_slice(key);
    at += key.len();
    for piece in value {
        chunk[at..at + piece.len()].copy_from_slice(piece);
        at += piece.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header {
            cas: CAS_MASK,
            atime: 7,
            cost: 200,
            bits: LIVE | REF | 2,
            exptime: 0xdead_beef,
            key_len: 250,
            value_len: (1 << 24) - 1,
        };
        let mut buf = [0u8; 16];
        h.write(&mut buf);
        assert_eq!(Header::read(&buf), h);
    }

    #[test]
    fn item_round_trip_all_flag_widths() {
        for flags in [0u32, 1, 255, 256, 65535, 65536, u32::MAX] {
            let key = b"some:key";
            let mut chunk = vec![0u8; 64];
            write(
                &mut chunk,
                42,
                3,
                9,
                LIVE,
                100,
                flags,
                key,
                &[b"hello ", b"world"],
            );
            let p = parts(&chunk);
            assert_eq!(p.flags, flags);
            assert_eq!(p.key, key);
            assert_eq!(p.value, b"hello world");
            assert_eq!(p.header.cas, 42);
            assert_eq!(p.header.exptime, 100);
            assert_eq!(p.header.total_len(), total_len(8, 11, flags));
            assert_eq!(stored_len(&chunk), total_len(8, 11, flags));
            assert_eq!(cost_code(&chunk), 9);
            assert_eq!(super::key(&chunk), key);
        }
    }

    #[test]
    fn cost_quantisation_is_monotonic_and_close() {
        assert_eq!(quantize_cost(0), 0);
        assert_eq!(dequantize_cost(quantize_cost(1)), 1);
        let mut last = 0;
        for c in [
            1u32,
            2,
            3,
            10,
            100,
            1000,
            123_456,
            10_000_000,
            3_000_000_000,
        ] {
            let q = quantize_cost(c);
            assert!(q >= last);
            last = q;
            let back = dequantize_cost(q) as f64;
            assert!((back / c as f64 - 1.0).abs() < 0.05, "{c} -> {back}");
        }
        // Beyond 2^31.75 costs saturate.
        assert_eq!(quantize_cost(u32::MAX), 255);
    }

    #[test]
    fn atime_age_is_coarse_minutes() {
        let now = 10_000;
        assert_eq!(atime_age(atime_code(now), now), 0);
        assert_eq!(atime_age(atime_code(now - 600), now), 600 - 30);
    }
}

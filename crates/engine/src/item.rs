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
//! byte  5      last access, low byte (seconds modulo 65536; see `ATIME_*`)
//! byte  6      recomputation cost, log-quantised (see `quantize_cost`)
//! byte  7      bits: flags width (2 bits), LIVE, REF, FETCHED, STALE, WIN,
//!              GUESSED
//! byte  8..12  expiry: relative seconds, 0 = never
//! byte 12      key length (1..=250)
//! byte 13      last access, high byte
//! byte 14..16  value length, 16 bits; `LONG_VALUE` (0xffff) means the length
//!              is the u32 in the 4 bytes that follow the header
//! then: the long length (values of 64 KB and more only), client flags (0, 1,
//!       2 or 4 bytes: most clients send small flags), key, value (no
//!       terminators stored).
//! ```
//! All multi-byte fields are little-endian and read with `from_le_bytes`, so
//! chunks need no alignment. Values of 64 KB and more pay 4 bytes for their
//! length (under 0.01%), so that the header has room for a last-access time
//! in seconds (meta `l`, `me la=`: memcached reports seconds).

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
/// The whole bits byte of a chained item's segment chunk (`chain`): LIVE is
/// clear, so no scan over items takes it for one. Here rather than in
/// `chain` because the slabs, below `chain`, tell segments from free chunks.
pub const SEGMENT: u8 = 0x80;

/// Largest value of the 40-bit CAS field.
pub const CAS_MASK: u64 = (1 << 40) - 1;

/// Issue the next CAS unique from the shared counter: unique across
/// threads (never 0, wrapping after 2^40 like the field).
#[inline]
pub fn next_cas(counter: &std::sync::atomic::AtomicU64) -> u64 {
    loop {
        let cas = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & CAS_MASK;
        if cas != 0 {
            return cas;
        }
    }
}

/// The 16-bit value length field's marker for a length stored after the header.
pub const LONG_VALUE: u32 = 0xffff;

/// Bytes between the header and the client flags: the long length, if any.
#[inline]
fn len_ext(value_len: usize) -> usize {
    if value_len >= LONG_VALUE as usize {
        4
    } else {
        0
    }
}

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
pub(crate) fn code_width(code: u8) -> usize {
    [0, 1, 2, 4][(code & FLAGS_WIDTH_MASK) as usize]
}

/// Total bytes an item occupies.
#[inline]
pub fn total_len(key_len: usize, value_len: usize, flags: u32) -> usize {
    HEADER_LEN + len_ext(value_len) + flags_width(flags) + key_len + value_len
}

/// The size memcached 1.6 gives an item (`ITEM_ntotal`): its 48-byte header,
/// the key and its NUL, the value and its `\r\n`, 4 bytes of client flags
/// when not 0 and 8 bytes of CAS unless `-C`. `-I` bounds this size, so the
/// same items fit as in memcached (cachalot's own layout is smaller), and
/// meta `me` reports it.
pub fn memcached_size(key_len: usize, value_len: usize, flags: u32, cas: bool) -> usize {
    48 + key_len + 1 + value_len + 2 + if flags != 0 { 4 } else { 0 } + if cas { 8 } else { 0 }
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

/// Last-access time is kept in seconds modulo 2^16, as memcached reports it
/// (meta `l`, `me la=`, `stats items` ages). The reclaimer rewrites times older
/// than `ATIME_SATURATE` seconds (13.6 hours) so that the modulo never wraps:
/// older ages read as `ATIME_SATURATE`. Each item must therefore be visited
/// within 2^16 - `ATIME_SATURATE` seconds (4.5 hours) of crossing it.
pub const ATIME_SATURATE: u32 = 3 << 14;

#[inline]
pub fn atime_code(now: u32) -> u16 {
    now as u16
}

/// Age in seconds of an access recorded as `code`, seen at `now`: exact up
/// to `ATIME_SATURATE`.
#[inline]
pub fn atime_age(code: u16, now: u32) -> u32 {
    u32::from(atime_code(now).wrapping_sub(code))
}

/// A parsed header (a copy; writes go through [`Header::write`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub cas: u64,
    pub atime: u16,
    pub cost: u8,
    pub bits: u8,
    pub exptime: u32,
    pub key_len: u8,
    pub value_len: u32,
}

impl Header {
    /// Read the header at the start of `chunk` (and the long length after
    /// it, for long values).
    #[inline]
    pub fn read(chunk: &[u8]) -> Header {
        let h: &[u8; HEADER_LEN] = chunk[..HEADER_LEN].try_into().expect("chunk >= header");
        Header {
            cas: u64::from_le_bytes([h[0], h[1], h[2], h[3], h[4], 0, 0, 0]),
            atime: u16::from_le_bytes([h[5], h[13]]),
            cost: h[6],
            bits: h[7],
            exptime: u32::from_le_bytes([h[8], h[9], h[10], h[11]]),
            key_len: h[12],
            value_len: value_len(chunk),
        }
    }

    /// Write the header (and the long length, for long values).
    #[inline]
    pub fn write(&self, chunk: &mut [u8]) {
        let cas = (self.cas & CAS_MASK).to_le_bytes();
        let exp = self.exptime.to_le_bytes();
        let atime = self.atime.to_le_bytes();
        let vlen = self.value_len.min(LONG_VALUE).to_le_bytes();
        chunk[..HEADER_LEN].copy_from_slice(&[
            cas[0],
            cas[1],
            cas[2],
            cas[3],
            cas[4],
            atime[0],
            self.cost,
            self.bits,
            exp[0],
            exp[1],
            exp[2],
            exp[3],
            self.key_len,
            atime[1],
            vlen[0],
            vlen[1],
        ]);
        if self.value_len >= LONG_VALUE {
            chunk[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(&self.value_len.to_le_bytes());
        }
    }

    #[inline]
    pub fn flags_width(&self) -> usize {
        code_width(self.bits)
    }

    /// Where the client flags start (after the header and the long length).
    #[inline]
    pub fn body_start(&self) -> usize {
        HEADER_LEN + len_ext(self.value_len as usize)
    }

    #[inline]
    pub fn total_len(&self) -> usize {
        self.body_start() + self.flags_width() + self.key_len as usize + self.value_len as usize
    }
}

/// The value length of the item in `chunk` (reads the long length if any).
#[inline]
fn value_len(chunk: &[u8]) -> u32 {
    match u32::from(u16::from_le_bytes([chunk[14], chunk[15]])) {
        LONG_VALUE => u32::from_le_bytes([
            chunk[HEADER_LEN],
            chunk[HEADER_LEN + 1],
            chunk[HEADER_LEN + 2],
            chunk[HEADER_LEN + 3],
        ]),
        n => n,
    }
}

/// Where the client flags start in `chunk`.
#[inline]
fn body_start(chunk: &[u8]) -> usize {
    if u16::from_le_bytes([chunk[14], chunk[15]]) == LONG_VALUE as u16 {
        HEADER_LEN + 4
    } else {
        HEADER_LEN
    }
}

/// Read the bits byte only (hot path of CLOCK scans).
#[inline]
pub fn bits(chunk: &[u8]) -> u8 {
    chunk[7]
}

/// Whether `chunk` is a chained item's segment.
#[inline]
pub fn is_segment(chunk: &[u8]) -> bool {
    bits(chunk) == SEGMENT
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
pub fn set_atime(chunk: &mut [u8], code: u16) {
    let [lo, hi] = code.to_le_bytes();
    chunk[5] = lo;
    chunk[13] = hi;
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
    let start = header.body_start();
    let mut fbytes = [0u8; 4];
    fbytes[..fw].copy_from_slice(&chunk[start..start + fw]);
    let key_start = start + fw;
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
    body_start(chunk) + code_width(chunk[7]) + chunk[12] as usize + value_len(chunk) as usize
}

/// The length of the item whose image starts `bytes`, if its header is
/// all there and sound (a key; the long length present when named),
/// checked before anything in it is trusted: for item images read back
/// from a compressed block, where they are stored back to back.
pub fn image_len(bytes: &[u8]) -> Option<usize> {
    if bytes.len() < HEADER_LEN || bytes[12] == 0 {
        return None;
    }
    let long = u16::from_le_bytes([bytes[14], bytes[15]]) as u32 == LONG_VALUE;
    if long && bytes.len() < HEADER_LEN + 4 {
        return None;
    }
    Some(stored_len(bytes))
}

/// Whether `image` is exactly one whole item (header, flags, key, value).
pub fn is_whole(image: &[u8]) -> bool {
    image_len(image) == Some(image.len())
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

/// The client flags of a stored item.
#[inline]
pub fn flags(chunk: &[u8]) -> u32 {
    let start = body_start(chunk);
    let fw = code_width(chunk[7]);
    let mut fbytes = [0u8; 4];
    fbytes[..fw].copy_from_slice(&chunk[start..start + fw]);
    u32::from_le_bytes(fbytes)
}

/// The key of a stored item (for index matches and rehashing).
#[inline]
pub fn key(chunk: &[u8]) -> &[u8] {
    let start = body_start(chunk) + code_width(chunk[7]);
    &chunk[start..start + chunk[12] as usize]
}

/// Where the value of the item in `chunk` starts (in-place rewrites).
#[inline]
pub fn value_start(chunk: &[u8]) -> usize {
    body_start(chunk) + code_width(chunk[7]) + chunk[12] as usize
}

/// What [`write`] puts before the key: the header, the long length if
/// any and the client flags, in a buffer (the length used is returned).
/// For writers that must store the access byte (byte 7) last and
/// atomically (`crate::cache`).
pub fn head_bytes(h: &Header, flags: u32) -> ([u8; 24], usize) {
    let fw = flags_width(flags);
    let mut buf = [0u8; 24];
    let h = Header {
        bits: (h.bits & !FLAGS_WIDTH_MASK) | width_code(fw),
        ..*h
    };
    h.write(&mut buf);
    let start = h.body_start();
    buf[start..start + fw].copy_from_slice(&flags.to_le_bytes()[..fw]);
    (buf, start + fw)
}

/// Write a whole item into `chunk`; `value` is given in pieces so append and
/// prepend need no temporary concatenation. A value too long for the chunk
/// is left out: `chain::write` spreads it over the head and its segments.
#[allow(clippy::too_many_arguments)]
pub fn write(
    chunk: &mut [u8],
    cas: u64,
    atime: u16,
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
    let start = HEADER_LEN + len_ext(value_len);
    chunk[start..start + fw].copy_from_slice(&flags.to_le_bytes()[..fw]);
    let mut at = start + fw;
    chunk[at..at + key.len()].copy_from_slice(key);
    at += key.len();
    if at + value_len > chunk.len() {
        return;
    }
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
        for (value_len, body) in [
            (0, HEADER_LEN),
            (LONG_VALUE - 1, HEADER_LEN),
            (LONG_VALUE, HEADER_LEN + 4),
            (1 << 30, HEADER_LEN + 4),
        ] {
            let h = Header {
                cas: CAS_MASK,
                atime: 0xbeef,
                cost: 200,
                bits: LIVE | REF | 2,
                exptime: 0xdead_beef,
                key_len: 250,
                value_len,
            };
            let mut buf = [0u8; 20];
            h.write(&mut buf);
            assert_eq!(Header::read(&buf), h);
            assert_eq!(h.body_start(), body);
        }
    }

    #[test]
    fn long_values_keep_their_length_after_the_header() {
        let value = vec![7u8; LONG_VALUE as usize + 3];
        let mut chunk = vec![0u8; total_len(3, value.len(), 300)];
        assert_eq!(chunk.len(), HEADER_LEN + 4 + 2 + 3 + value.len());
        write(&mut chunk, 9, 5, 1, LIVE, 0, 300, b"key", &[&value]);
        let p = parts(&chunk);
        assert_eq!((p.flags, p.key, p.value), (300, &b"key"[..], &value[..]));
        assert_eq!(stored_len(&chunk), chunk.len());
        assert_eq!(super::key(&chunk), b"key");
        assert_eq!(value_start(&chunk), chunk.len() - value.len());
        set_atime(&mut chunk, 0x1234);
        assert_eq!(Header::read(&chunk).atime, 0x1234);
        assert_eq!(parts(&chunk).value, &value[..]);
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
    fn atime_age_is_exact_to_the_second() {
        // Across the 16-bit wrap of the code too.
        for now in [ATIME_SATURATE, 65_530, 65_536 + 20, 100_000, 1 << 31] {
            for age in (0..=ATIME_SATURATE)
                .step_by(7)
                .chain([1, 59, 60, 601, ATIME_SATURATE])
            {
                assert_eq!(
                    atime_age(atime_code(now - age), now),
                    age,
                    "now {now} age {age}"
                );
            }
        }
    }
}

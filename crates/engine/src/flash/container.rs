//! A compression container: the unit the flash tier writes and reads back
//! (SlimCache §3.3: items are packed into containers of about one flash
//! page times the running compression ratio, compressed as a whole).
//!
//! Its payload is a block (`crate::block`, the Z-zone's format: items
//! sorted by key hash, with an offset index), stored raw or compressed with one of the
//! [`Codec`]s. Flash can hand back any bytes at all (a torn write, a bit
//! flip, a truncated file, another file's data), so the header and payload
//! are covered by a CRC-32, and a container is only ever read through
//! [`read`], which checks the magic, the lengths, the checksum, the
//! decoded length and the block's own structure before anything inside is
//! trusted: a fault is an error (a miss for the tier), never wrong bytes
//! and never a panic.
//!
//! Layout, little-endian:
//!
//! ```text
//! 0   magic      4  b"CCT1"
//! 4   codec      1  Codec::code
//! 5   reserved   1  0
//! 6   dictionary 2  the zstd dictionary's id (0: none)
//! 8   count      4  items
//! 12  raw        4  decoded payload length
//! 16  stored     4  payload length
//! 20  crc        4  CRC-32 of bytes 0..20 and the payload
//! 24  payload    stored bytes
//! ```

use crate::block;
use crate::codec::{Codec, CodecError, Coder, Dictionary};

pub const MAGIC: [u8; 4] = *b"CCT1";
pub const HEADER: usize = 24;

/// The flash page a compressed container should fill (SlimCache §3.3).
pub const FLASH_PAGE: usize = 4096;
/// Raw container sizes are the page times the running ratio, within these.
pub(super) const MIN_CONTAINER_RAW: usize = FLASH_PAGE;
pub(super) const MAX_CONTAINER_RAW: usize = 16 * FLASH_PAGE;
/// Most containers in a slab (the index's container field).
pub(super) const MAX_CONTAINERS: usize = 1 << super::index::CONTAINER_BITS;

/// The largest decoded payload a header may claim: a reader sizes its
/// buffer from it, so a damaged header must not ask for gigabytes.
pub const MAX_RAW: usize = 16 << 20;

/// A container's header, once checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub codec: Codec,
    pub dictionary: u16,
    pub count: u32,
    pub raw: u32,
    pub stored: u32,
}

impl Header {
    /// Bytes the whole container takes.
    pub fn bytes(&self) -> usize {
        HEADER + self.stored as usize
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ContainerError {
    #[error("container truncated")]
    Truncated,
    #[error("not a container")]
    Magic,
    #[error("container header out of range")]
    Header,
    #[error("container checksum mismatch")]
    Checksum,
    #[error("container names dictionary {0}, which is not known")]
    Dictionary(u16),
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("container payload is not a well-formed block")]
    Block,
}

/// Append to `out` a container of the block
/// `block::encode` built: `used` is
/// the codec it chose (`dict` the dictionary it was given), `count` the
/// items, `raw_len` the block's decoded length and `packed` its stored
/// bytes. Returns its header.
pub fn write(
    used: Codec,
    dict: Option<&Dictionary>,
    count: usize,
    raw_len: usize,
    packed: &[u8],
    out: &mut Vec<u8>,
) -> Header {
    let header = Header {
        codec: used,
        dictionary: match (used, dict) {
            (Codec::Zstd, Some(d)) => {
                u16::try_from(d.id).expect("dictionary ids fit a container's 16 bits")
            }
            _ => 0,
        },
        count: count as u32,
        raw: raw_len as u32,
        stored: packed.len() as u32,
    };
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.push(used.code());
    out.push(0);
    out.extend_from_slice(&header.dictionary.to_le_bytes());
    out.extend_from_slice(&header.count.to_le_bytes());
    out.extend_from_slice(&header.raw.to_le_bytes());
    out.extend_from_slice(&header.stored.to_le_bytes());
    let crc = checksum(&out[start..start + 20], packed);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(packed);
    header
}

/// Check the header at the start of `bytes` (not the checksum: that needs
/// the payload, see [`read`]). Enough to know how many bytes to read.
pub fn header(bytes: &[u8]) -> Result<Header, ContainerError> {
    let b = bytes.get(..HEADER).ok_or(ContainerError::Truncated)?;
    if b[..4] != MAGIC {
        return Err(ContainerError::Magic);
    }
    let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    let codec = Codec::from_code(b[4]).ok_or(ContainerError::Header)?;
    let h = Header {
        codec,
        dictionary: u16::from_le_bytes([b[6], b[7]]),
        count: u32_at(8),
        raw: u32_at(12),
        stored: u32_at(16),
    };
    let (raw, stored) = (h.raw as usize, h.stored as usize);
    let lengths_ok = match codec {
        Codec::Raw => raw == stored,
        _ => stored < raw,
    };
    if b[5] != 0 || raw > MAX_RAW || !lengths_ok || (codec != Codec::Zstd && h.dictionary != 0) {
        return Err(ContainerError::Header);
    }
    Ok(h)
}

/// Check and decode the container at the start of `bytes` into `raw` (a
/// block: read it with `block::find` or `block::entries`). `dict` gives
/// the dictionary a zstd container names.
pub fn read<'d>(
    bytes: &[u8],
    coder: &mut Coder,
    dict: impl Fn(u16) -> Option<&'d Dictionary>,
    raw: &mut Vec<u8>,
) -> Result<Header, ContainerError> {
    raw.clear();
    let h = header(bytes)?;
    let payload = bytes
        .get(HEADER..h.bytes())
        .ok_or(ContainerError::Truncated)?;
    let crc = u32::from_le_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]);
    if checksum(&bytes[..20], payload) != crc {
        return Err(ContainerError::Checksum);
    }
    let d = match h.dictionary {
        0 => None,
        id => Some(dict(id).ok_or(ContainerError::Dictionary(id))?),
    };
    coder.decompress(h.codec, d, payload, h.raw as usize, raw)?;
    // The checksum vouches for the bytes, not for the writer: the block
    // must still walk cleanly, to exactly the count the header gives.
    let walked = block::entries(raw)
        .map_err(|_| ContainerError::Block)?
        .try_fold(0u32, |n, e| e.map(|_| n + 1))
        .map_err(|_| ContainerError::Block)?;
    if walked != h.count {
        raw.clear();
        return Err(ContainerError::Block);
    }
    Ok(h)
}

fn checksum(header: &[u8], payload: &[u8]) -> u32 {
    let mut c = crc32fast::Hasher::new();
    c.update(header);
    c.update(payload);
    c.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::encode;
    use crate::codec::Recognizer;
    use crate::hash::hash;
    use crate::item;
    use proptest::prelude::*;

    /// Item images of `n` keys with `len`-byte values, JSON-like or
    /// pseudo-random.
    fn images(n: usize, len: usize, random: bool) -> Vec<Vec<u8>> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|k| {
                let key = format!("key:{k}").into_bytes();
                let value: Vec<u8> = (0..len)
                    .map(|i| {
                        if random {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            x as u8
                        } else {
                            b"{\"name\":\"user\",\"id\":12345,\"ok\":true}"[(i + k) % 36]
                        }
                    })
                    .collect();
                let mut v = vec![0u8; item::total_len(key.len(), len, 4)];
                item::write(
                    &mut v,
                    k as u64 + 1,
                    0,
                    1,
                    item::LIVE,
                    0,
                    4,
                    &key,
                    &[&value],
                );
                v
            })
            .collect()
    }

    fn pack(codec: Codec, dict: Option<&Dictionary>, ims: &[Vec<u8>]) -> (Vec<u8>, Header) {
        let mut items: Vec<(u64, &[u8])> = ims
            .iter()
            .map(|im| (hash(item::key(im)), &im[..]))
            .collect();
        let (mut raw, mut packed, mut out) = (Vec::new(), Vec::new(), Vec::new());
        let mut recognizer = Recognizer::new(4096, 1.1, 1024);
        let (used, _, _) = encode(
            &mut Coder::default(),
            &mut recognizer,
            codec,
            dict,
            &mut items,
            &mut raw,
            &mut packed,
        );
        let h = write(used, dict, items.len(), raw.len(), &packed, &mut out);
        (out, h)
    }

    /// Every item comes back byte for byte, through `block::find`.
    fn check_all(bytes: &[u8], dict: Option<&Dictionary>, ims: &[Vec<u8>]) -> Header {
        let mut raw = Vec::new();
        let h = read(
            bytes,
            &mut Coder::default(),
            |id| dict.filter(|d| d.id == id as u32),
            &mut raw,
        )
        .expect("a container as written reads back");
        for im in ims {
            let key = item::key(im);
            let found = block::find(&raw, hash(key), key).expect("well formed");
            assert_eq!(found, Some(&im[..]));
        }
        h
    }

    #[test]
    fn every_codec_round_trips() {
        let ims = images(40, 100, false);
        let samples: Vec<Vec<u8>> = images(400, 100, false);
        let bytes = crate::codec::train_dictionary(&samples, 4096).expect("trains");
        let dict = Dictionary::new(7, bytes);
        for (codec, d) in [
            (Codec::Raw, None),
            (Codec::Lz4, None),
            (Codec::Zstd, None),
            (Codec::Zstd, Some(&dict)),
        ] {
            let (out, h) = pack(codec, d, &ims);
            assert_eq!(h.codec, codec, "JSON-like items compress");
            assert_eq!(h.bytes(), out.len());
            assert_eq!(h.count, 40);
            assert_eq!(check_all(&out, d, &ims), h);
        }
        // Random values: never stored larger than they are (their keys
        // and headers may still compress a little).
        let noise = images(20, 100, true);
        let (out, h) = pack(Codec::Zstd, None, &noise);
        assert!(h.stored <= h.raw, "{h:?}");
        check_all(&out, None, &noise);
    }

    #[test]
    fn an_unknown_dictionary_is_an_error() {
        let samples = images(400, 100, false);
        let dict = Dictionary::new(
            9,
            crate::codec::train_dictionary(&samples, 4096).expect("trains"),
        );
        let (out, _) = pack(Codec::Zstd, Some(&dict), &images(30, 100, false));
        let r = read(&out, &mut Coder::default(), |_| None, &mut Vec::new());
        assert_eq!(r, Err(ContainerError::Dictionary(9)));
    }

    #[test]
    fn every_truncation_is_an_error() {
        let (out, _) = pack(Codec::Lz4, None, &images(30, 100, false));
        for n in 0..out.len() {
            let r = read(&out[..n], &mut Coder::default(), |_| None, &mut Vec::new());
            assert!(r.is_err(), "{n} of {} bytes read as a container", out.len());
        }
    }

    #[test]
    fn every_flipped_bit_is_an_error() {
        for codec in [Codec::Raw, Codec::Zstd] {
            let (out, _) = pack(codec, None, &images(12, 60, false));
            for i in 0..out.len() {
                for bit in 0..8 {
                    let mut bad = out.clone();
                    bad[i] ^= 1 << bit;
                    let mut raw = Vec::new();
                    let r = read(&bad, &mut Coder::default(), |_| None, &mut raw);
                    assert!(
                        r.is_err(),
                        "{codec:?}: bit {bit} of byte {i} went unnoticed"
                    );
                }
            }
        }
    }

    proptest! {
        /// Whatever the bytes, reading never panics, and a container that
        /// reads is one that `write` could have made (its block walks).
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512), fix in any::<bool>()) {
            let mut bytes = bytes;
            if fix && bytes.len() >= HEADER {
                // Give the fuzz a valid magic and checksum, so the codec
                // and the block parser see its payload.
                bytes[..4].copy_from_slice(&MAGIC);
                let stored = bytes.len() - HEADER;
                bytes[16..20].copy_from_slice(&(stored as u32).to_le_bytes());
                let crc = checksum(&bytes[..20], &bytes[HEADER..]);
                bytes[20..24].copy_from_slice(&crc.to_le_bytes());
            }
            let mut raw = Vec::new();
            if let Ok(h) = read(&bytes, &mut Coder::default(), |_| None, &mut raw) {
                prop_assert_eq!(raw.len(), h.raw as usize);
                let walked = block::entries(&raw).unwrap().count();
                prop_assert_eq!(walked, h.count as usize);
            }
        }
    }
}

//! Block codecs for the compressed tiers: zExpander's Z-zone (issue 11) and
//! later the flash tier. Whole blocks of items are compressed together
//! (zExpander §2.2: a 100-byte item alone hardly compresses, a 2 KB block of
//! them does), with zstd and a dictionary trained on sampled values, or with
//! LZ4 (zExpander's codec) where speed matters more than the ratio.
//!
//! Blocks whose bytes look random are not compressed at all: their
//! normalized byte entropy is compared with a threshold that SlimCache's
//! Dynamic Compressibility Recognition (§3.7, Algorithm 2) tunes from the
//! ratios actually achieved ([`Recognizer`]).
//!
//! Decompression never trusts its input: a block that does not decode to
//! exactly the length its descriptor records is an error, never a panic
//! and never a short or padded result.

use zstd::zstd_safe::{self, CCtx, CDict, DCtx, DDict};

/// How a block's bytes are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Codec {
    /// As they are (incompressible, or compression did not pay).
    #[default]
    Raw,
    /// LZ4 block format.
    Lz4,
    /// zstd, with the dictionary the block names (or none).
    Zstd,
}

impl Codec {
    /// The byte that names the codec in a block's descriptor or a flash
    /// container's header.
    pub fn code(self) -> u8 {
        match self {
            Codec::Raw => 0,
            Codec::Lz4 => 1,
            Codec::Zstd => 2,
        }
    }

    /// The codec a byte names; None for a byte no codec writes.
    pub fn from_code(c: u8) -> Option<Codec> {
        match c {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Lz4),
            2 => Some(Codec::Zstd),
            _ => None,
        }
    }
}

/// zstd's level for blocks. In the engine, with a trained dictionary,
/// level 3 stored the Z-zone's blocks only 0.7% smaller than level 1
/// (YCSB-B over protobuf-like records in `cachalot-lab sim`, 2.85 x
/// against 2.83 x), for a fifth more CPU in the whole run and a digested
/// dictionary of 424 KB instead of 64 KB (counted in `-m`, docs/benchmarks-history.md).
pub const ZSTD_LEVEL: i32 = 1;

/// A zstd dictionary, digested once for compression and decompression.
pub struct Dictionary {
    /// The number blocks record to name it (never 0: 0 is "no dictionary").
    pub id: u32,
    bytes: Vec<u8>,
    cdict: CDict<'static>,
    ddict: DDict<'static>,
}

impl Dictionary {
    pub fn new(id: u32, bytes: Vec<u8>) -> Dictionary {
        Dictionary::with_level(id, bytes, ZSTD_LEVEL)
    }

    /// A dictionary that compresses at zstd `level` (digested at it: a
    /// higher level makes larger tables).
    pub fn with_level(id: u32, bytes: Vec<u8>, level: i32) -> Dictionary {
        assert_ne!(id, 0, "dictionary id 0 means none");
        Dictionary {
            id,
            cdict: CDict::create(&bytes, level),
            ddict: DDict::create(&bytes),
            bytes,
        }
    }

    /// Bytes the dictionary holds, its digested forms included (they count
    /// in `-m`): the raw bytes, and zstd's tables, estimated from its
    /// own sizeof functions.
    pub fn memory_bytes(&self) -> usize {
        self.bytes.len() + self.cdict.sizeof() + self.ddict.sizeof()
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Train a dictionary of at most `max_bytes` on sample values. None when
/// zstd finds too little in common (too few or too small samples).
pub fn train_dictionary<S: AsRef<[u8]>>(samples: &[S], max_bytes: usize) -> Option<Vec<u8>> {
    let sizes: Vec<usize> = samples.iter().map(|s| s.as_ref().len()).collect();
    let mut flat = Vec::with_capacity(sizes.iter().sum());
    for s in samples {
        flat.extend_from_slice(s.as_ref());
    }
    train_flat(&flat, &sizes, max_bytes)
}

/// log2 of the buckets of zstd's fastCover trainer. It takes 6 × 2^f bytes
/// while it runs, outside the cache's structures: zstd's default (20) is
/// 6 MB; 18 (1.5 MB, [`TRAINER_BYTES`]) stored the lab's tweets as small
/// (2.687 × against 2.689 × at level 3), 16 2% larger.
const TRAINER_LOG: u32 = 18;
/// Bytes a training takes besides its samples and the dictionary.
pub const TRAINER_BYTES: usize = 6 << TRAINER_LOG;

/// [`train_dictionary`] on samples laid end to end in `flat`, `sizes`
/// giving their lengths in order, as zstd wants them (no copy).
pub fn train_flat(flat: &[u8], sizes: &[usize], max_bytes: usize) -> Option<Vec<u8>> {
    use zstd_safe::zstd_sys as sys;
    if sizes.iter().sum::<usize>() != flat.len() || max_bytes == 0 {
        return None;
    }
    let count = std::ffi::c_uint::try_from(sizes.len()).ok()?;
    // zstd's own choices (ZDICT_trainFromBuffer's) but for f: k searched,
    // d 8, 4 steps, one thread.
    let mut params = sys::ZDICT_fastCover_params_t {
        k: 0,
        d: 8,
        f: TRAINER_LOG,
        steps: 4,
        nbThreads: 1,
        splitPoint: 0.0,
        accel: 1,
        shrinkDict: 0,
        shrinkDictMaxRegression: 0,
        zParams: sys::ZDICT_params_t {
            compressionLevel: 0,
            notificationLevel: 0,
            dictID: 0,
        },
    };
    let mut out = vec![0u8; max_bytes];
    // SAFETY: `out` is writable for `out.len()` bytes; `flat` is readable
    // for the sum of `sizes` (checked above), and `sizes` holds `count`
    // lengths; `params` is a valid, exclusively borrowed struct. zstd keeps
    // none of the pointers after it returns.
    let n = unsafe {
        sys::ZDICT_optimizeTrainFromBuffer_fastCover(
            out.as_mut_ptr().cast(),
            out.len(),
            flat.as_ptr().cast(),
            sizes.as_ptr(),
            count,
            &mut params,
        )
    };
    // SAFETY: ZDICT_isError only inspects the number it is given.
    if unsafe { sys::ZDICT_isError(n) } != 0 || n > out.len() {
        return None;
    }
    out.truncate(n);
    Some(out)
}

/// Why a block did not decode.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CodecError {
    #[error("corrupt block")]
    Corrupt,
    #[error("block decoded to {got} bytes, its descriptor says {want}")]
    Length { want: usize, got: usize },
    #[error("block names dictionary {0}, which is gone")]
    MissingDictionary(u32),
}

/// A thread's compression and decompression contexts (zstd's are costly to
/// create, so each worker keeps its own).
pub struct Coder {
    cctx: CCtx<'static>,
    dctx: DCtx<'static>,
}

impl Default for Coder {
    fn default() -> Self {
        Coder {
            cctx: CCtx::create(),
            dctx: DCtx::create(),
        }
    }
}

impl Coder {
    /// Compress `src` with `codec` (and `dict` for zstd) into `dst`
    /// (cleared first). Returns false if the codec failed or the result is
    /// not smaller than `src`: then store the block raw.
    pub fn compress(
        &mut self,
        codec: Codec,
        dict: Option<&Dictionary>,
        src: &[u8],
        dst: &mut Vec<u8>,
    ) -> bool {
        dst.clear();
        let n = match codec {
            Codec::Raw => return false,
            Codec::Lz4 => {
                dst.resize(lz4_flex::block::get_maximum_output_size(src.len()), 0);
                match lz4_flex::block::compress_into(src, dst) {
                    Ok(n) => n,
                    Err(_) => return false,
                }
            }
            Codec::Zstd => {
                dst.reserve(zstd_safe::compress_bound(src.len()));
                let r = match dict {
                    Some(d) => self.cctx.compress_using_cdict(dst, src, &d.cdict),
                    None => self.cctx.compress(dst, src, ZSTD_LEVEL),
                };
                match r {
                    Ok(n) => n,
                    Err(_) => return false,
                }
            }
        };
        dst.truncate(n);
        n < src.len()
    }

    /// Decode `src`, stored with `codec` (and `dict`), into `dst` (cleared
    /// first), which must come to exactly `raw_len` bytes.
    pub fn decompress(
        &mut self,
        codec: Codec,
        dict: Option<&Dictionary>,
        src: &[u8],
        raw_len: usize,
        dst: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        dst.clear();
        let got = match codec {
            Codec::Raw => {
                dst.extend_from_slice(src);
                Ok(src.len())
            }
            Codec::Lz4 => {
                dst.resize(raw_len, 0);
                lz4_flex::block::decompress_into(src, dst).map_err(|_| CodecError::Corrupt)
            }
            Codec::Zstd => {
                dst.reserve(raw_len);
                match dict {
                    Some(d) => self.dctx.decompress_using_ddict(dst, src, &d.ddict),
                    None => self.dctx.decompress(dst, src),
                }
                .map_err(|_| CodecError::Corrupt)
            }
        };
        match got {
            Ok(n) if n == raw_len => {
                dst.truncate(n);
                Ok(())
            }
            Ok(n) => {
                dst.clear();
                Err(CodecError::Length {
                    want: raw_len,
                    got: n,
                })
            }
            Err(e) => {
                dst.clear();
                Err(e)
            }
        }
    }
}

/// Shannon entropy of `data`'s bytes in bits per byte, divided by 8 (its
/// largest value): near 1 for random bytes, about 0.5–0.7 for text and
/// structured records (SlimCache §3.7's normalized entropy).
pub fn normalized_entropy(data: &[u8]) -> f64 {
    if data.is_empty() {
        return 0.0;
    }
    // Four histograms, merged at the end: consecutive equal bytes would
    // otherwise wait on each other's increment (a store-to-load chain),
    // and this runs on every block the Z-zone writes.
    let mut counts = [[0u32; 256]; 4];
    let mut quads = data.chunks_exact(4);
    for q in &mut quads {
        counts[0][q[0] as usize] += 1;
        counts[1][q[1] as usize] += 1;
        counts[2][q[2] as usize] += 1;
        counts[3][q[3] as usize] += 1;
    }
    for &b in quads.remainder() {
        counts[0][b as usize] += 1;
    }
    let n = data.len() as f64;
    let bits: f64 = (0..256)
        .map(|i| counts[0][i] + counts[1][i] + counts[2][i] + counts[3][i])
        .filter(|&c| c > 0)
        .map(|c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum();
    bits / 8.0
}

/// The normalized entropy of random bytes, `len` of them: the starting
/// threshold (a short sample of random bytes shows less than 1.0, as most
/// byte values occur once or never).
fn random_entropy(len: usize) -> f64 {
    // A fixed xorshift stream: the same threshold on every start.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let sample: Vec<u8> = (0..len.max(1))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    normalized_entropy(&sample)
}

/// SlimCache's Dynamic Compressibility Recognition (§3.7, Algorithm 2):
/// blocks whose entropy is at or above the threshold are stored raw without
/// trying; the threshold starts at random data's entropy and moves down to
/// the entropy of the worst block that still compressed acceptably (its
/// ratio above `min_ratio`). Every `window` blocks it starts again from
/// random data's, so that it can rise when the data changes.
#[derive(Clone, Debug)]
pub struct Recognizer {
    /// Compress only below this normalized entropy.
    pub threshold: f64,
    /// The lowest acceptable ratio seen this window (original / stored).
    best_ok: f64,
    /// The lowest entropy of a block that did not compress acceptably.
    worst_bad: f64,
    /// Ratios at or below this are not worth compressing.
    min_ratio: f64,
    window: u32,
    seen: u32,
    /// Blocks refused so far (for probes).
    refused: u32,
}

/// One refused block in this many is compressed anyway, to learn from.
pub const PROBE: u32 = 8;

impl Recognizer {
    /// For blocks of about `block_bytes`, accepting ratios above
    /// `min_ratio` (SlimCache's global_min_cmpr).
    pub fn new(block_bytes: usize, min_ratio: f64, window: u32) -> Recognizer {
        let start = random_entropy(block_bytes);
        Recognizer {
            threshold: start,
            best_ok: 0.0,
            worst_bad: f64::INFINITY,
            min_ratio,
            window: window.max(1),
            seen: 0,
            refused: 0,
        }
    }

    /// Whether a block of this entropy is worth compressing. One block in
    /// [`PROBE`] above the threshold is tried anyway: Algorithm 2 only
    /// learns from blocks it compresses, so without probes a threshold
    /// set by an early block could never rise to admit a block of higher
    /// entropy that still compresses acceptably.
    pub fn worth_trying(&mut self, entropy: f64) -> bool {
        if entropy < self.threshold {
            return true;
        }
        self.refused += 1;
        self.refused.is_multiple_of(PROBE)
    }

    /// A block of `entropy` was compressed from `raw` to `stored` bytes.
    /// The threshold is learned over a window and applied for the next:
    /// the highest entropy of a block that still compressed acceptably
    /// (or, if none did, the lowest entropy of one that did not).
    /// Algorithm 2 takes the entropy of the block with the lowest
    /// acceptable ratio instead; within one kind of data, entropy and
    /// ratio vary together only loosely, so that block's entropy is a
    /// random one of the kind's, and about half of the blocks, which
    /// compress well, went uncompressed (measured on the lab's records).
    pub fn record(&mut self, entropy: f64, raw: usize, stored: usize) {
        let ratio = raw as f64 / stored.max(1) as f64;
        if ratio > self.min_ratio {
            self.best_ok = self.best_ok.max(entropy);
        } else {
            self.worst_bad = self.worst_bad.min(entropy);
        }
        self.seen += 1;
        if self.seen == self.window {
            self.seen = 0;
            self.threshold = if self.best_ok > 0.0 {
                self.best_ok + MARGIN
            } else {
                self.worst_bad.min(self.threshold)
            };
            self.best_ok = 0.0;
            self.worst_bad = f64::INFINITY;
        }
    }
}

/// Blocks up to this much above the learned entropy are still tried.
const MARGIN: f64 = 0.01;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// JSON-like records, as the lab's value models make them.
    fn records(n: usize, seed: u64) -> Vec<Vec<u8>> {
        (0..n as u64)
            .map(|i| {
                let k = i.wrapping_mul(seed | 1).wrapping_add(seed);
                format!(
                    r#"{{"id":{k},"name":"user{}","email":"user{}@example.com","active":{},"score":{}}}"#,
                    k % 10_000,
                    k % 977,
                    k % 2 == 0,
                    k % 1000
                )
                .into_bytes()
            })
            .collect()
    }

    fn block(n: usize, seed: u64) -> Vec<u8> {
        records(n, seed).concat()
    }

    #[test]
    fn every_codec_round_trips_a_block() {
        let dict = Dictionary::new(7, train_dictionary(&records(2000, 3), 4096).unwrap());
        let mut c = Coder::default();
        let raw = block(24, 99);
        for (codec, d) in [
            (Codec::Lz4, None),
            (Codec::Zstd, None),
            (Codec::Zstd, Some(&dict)),
        ] {
            let mut z = Vec::new();
            assert!(c.compress(codec, d, &raw, &mut z), "{codec:?} compresses");
            let mut out = Vec::new();
            c.decompress(codec, d, &z, raw.len(), &mut out).unwrap();
            assert_eq!(out, raw, "{codec:?}");
        }
    }

    #[test]
    fn a_trained_dictionary_compresses_small_blocks_better() {
        let dict = Dictionary::new(1, train_dictionary(&records(2000, 3), 8192).unwrap());
        let mut c = Coder::default();
        let raw = block(12, 12345);
        let (mut plain, mut with) = (Vec::new(), Vec::new());
        assert!(c.compress(Codec::Zstd, None, &raw, &mut plain));
        assert!(c.compress(Codec::Zstd, Some(&dict), &raw, &mut with));
        assert!(
            with.len() * 4 < plain.len() * 3,
            "dictionary {} vs none {} of {}",
            with.len(),
            plain.len(),
            raw.len()
        );
        assert!(dict.memory_bytes() > dict.bytes().len());
    }

    #[test]
    fn random_bytes_are_not_stored_compressed() {
        let mut x = 1u64;
        let raw: Vec<u8> = (0..2048)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 56) as u8
            })
            .collect();
        let mut c = Coder::default();
        let mut z = Vec::new();
        for codec in [Codec::Raw, Codec::Lz4, Codec::Zstd] {
            assert!(!c.compress(codec, None, &raw, &mut z), "{codec:?}");
        }
        assert!(normalized_entropy(&raw) > 0.9);
        assert!(normalized_entropy(&block(20, 5)) < 0.75);
    }

    #[test]
    fn a_missing_or_wrong_dictionary_is_an_error() {
        let d1 = Dictionary::new(1, train_dictionary(&records(2000, 3), 4096).unwrap());
        let d2 = Dictionary::new(2, train_dictionary(&records(2000, 77), 4096).unwrap());
        let mut c = Coder::default();
        let raw = block(20, 1);
        let mut z = Vec::new();
        assert!(c.compress(Codec::Zstd, Some(&d1), &raw, &mut z));
        let mut out = Vec::new();
        // zstd frames name their dictionary: decoding with another fails.
        assert!(c
            .decompress(Codec::Zstd, Some(&d2), &z, raw.len(), &mut out)
            .is_err());
        assert!(c
            .decompress(Codec::Zstd, None, &z, raw.len(), &mut out)
            .is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn the_recognizer_learns_a_threshold_per_window() {
        let mut r = Recognizer::new(2048, 1.1, 4);
        let start = r.threshold;
        assert!(start > 0.85 && start < 1.0, "{start}");
        assert!(r.worth_trying(0.6));
        r.record(0.6, 2000, 500); // 4x: acceptable
        r.record(0.5, 2000, 400); // acceptable, lower entropy
        r.record(0.55, 2000, 1900); // 1.05x: not acceptable
        assert_eq!(r.threshold, start, "learned, applied at the window's end");
        r.record(0.58, 2000, 1000); // the window ends
        assert_eq!(r.threshold, 0.6 + MARGIN, "the highest acceptable entropy");
        // Above the threshold: refused, except one probe in PROBE.
        let tried = (0..PROBE).filter(|_| r.worth_trying(0.7)).count();
        assert_eq!(tried, 1);
        // A probe that compressed acceptably raises it for the next window.
        r.record(0.7, 2000, 1500);
        for _ in 0..3 {
            r.record(0.4, 2000, 200);
        }
        assert_eq!(r.threshold, 0.7 + MARGIN);
        // A window where nothing compressed acceptably: only blocks below
        // the lowest failure are tried.
        for e in [0.69, 0.65, 0.68, 0.66] {
            r.record(e, 2000, 1990);
        }
        assert_eq!(r.threshold, 0.65);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Whatever the bytes, a stored block decodes to exactly its raw
        /// bytes or is refused: never a panic, never other bytes.
        #[test]
        fn damaged_blocks_are_refused_not_misread(
            seed in any::<u64>(),
            n in 4usize..40,
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
            lz4 in any::<bool>(),
        ) {
            let raw = block(n, seed);
            let codec = if lz4 { Codec::Lz4 } else { Codec::Zstd };
            let mut c = Coder::default();
            let mut z = Vec::new();
            prop_assert!(c.compress(codec, None, &raw, &mut z));
            let mut out = Vec::new();
            c.decompress(codec, None, &z, raw.len(), &mut out).unwrap();
            prop_assert_eq!(&out, &raw);
            for (at, x) in flips {
                let i = at % z.len();
                z[i] ^= x | 1;
            }
            // A damaged block may still decode (LZ4 has no checksum; the
            // tiers above keep their own), but only to raw_len bytes.
            match c.decompress(codec, None, &z, raw.len(), &mut out) {
                Ok(()) => prop_assert_eq!(out.len(), raw.len()),
                Err(_) => prop_assert!(out.is_empty()),
            }
        }
    }
}

//! Keys and values for the benchmarks, and the small PRNG that makes them.
//!
//! Keys follow the "key:0000000001" style: a fixed prefix and a
//! zero-padded decimal index, so every key has exactly the requested length
//! (14 bytes by default) and the n-th key written is known without storing it.
//! Values are pseudo-random bytes derived from the key index, so a re-read can
//! check that what comes back is exactly what was written, and no server can
//! shrink them by compression (random bytes carry 8 bits of entropy per byte;
//! a repeated or lettered pattern would flatter a compressing store).
//! `--values json|proto|text` asks for the lab's realistic contents instead,
//! to measure what compression gains on them.
//!
//! The generator is SplitMix64 (Steele, Lea, Flood: "Fast splittable
//! pseudorandom number generators", OOPSLA 2014): tiny, fast and good enough
//! for load generation; it is not meant to be cryptographic.

use cachalot_lab::values::value_bytes;
pub use cachalot_lab::values::ValueKind;

/// Prefix of every benchmark key.
pub const KEY_PREFIX: &[u8] = b"key:";

/// SplitMix64: one 64-bit state word, one output per step.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0). Lemire's multiply-shift; its bias is below
    /// 2^-32 for the key-space sizes used here, far under measurement noise.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn fill_bytes(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let word = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
    }
}

/// Builds fixed-length keys: `key:` followed by `len - 4` zero-padded digits.
#[derive(Clone, Debug)]
pub struct KeyMaker {
    digits: usize,
}

impl KeyMaker {
    /// `len` must leave room for the prefix and at least one digit.
    pub fn new(len: usize) -> Result<Self, String> {
        if len < KEY_PREFIX.len() + 1 || len > 250 {
            return Err(format!(
                "key length {len} must be between {} and 250",
                KEY_PREFIX.len() + 1
            ));
        }
        Ok(KeyMaker {
            digits: len - KEY_PREFIX.len(),
        })
    }

    pub fn len(&self) -> usize {
        KEY_PREFIX.len() + self.digits
    }

    /// How many distinct keys this length can name (saturating at u64::MAX).
    pub fn capacity(&self) -> u64 {
        10u64.checked_pow(self.digits as u32).unwrap_or(u64::MAX)
    }

    /// Appends key number `index` to `out`. Indexes beyond `capacity()` keep
    /// only their low digits (callers check the range up front).
    pub fn write(&self, index: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(KEY_PREFIX);
        let start = out.len();
        out.resize(start + self.digits, b'0');
        let mut n = index;
        for pos in (start..start + self.digits).rev() {
            out[pos] = b'0' + (n % 10) as u8;
            n /= 10;
        }
    }

    #[cfg(test)]
    pub fn key(&self, index: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        self.write(index, &mut out);
        out
    }
}

/// What values look like: random bytes ([`value_for`]) or one of the lab's
/// value models (JSON rows, protobuf-like records, text; `docs/lab.md`),
/// `size` bytes each, a pure function of the key number and the run salt
/// so a reader can regenerate and compare them.
#[derive(Clone, Copy, Debug)]
pub struct Values {
    pub kind: ValueKind,
    pub size: usize,
    pub salt: u64,
}

impl Values {
    pub fn write(&self, index: u64, out: &mut Vec<u8>) {
        match self.kind {
            ValueKind::Random => {
                out.resize(self.size, 0);
                value_for(index, self.salt, out);
            }
            kind => value_bytes(kind, index ^ self.salt, self.size, out),
        }
    }
}

/// The value stored under key number `index`: `len` random bytes seeded by
/// the index (and a run salt), so a reader can regenerate and compare it.
pub fn value_for(index: u64, salt: u64, out: &mut [u8]) {
    let mut rng = Rng::new(index.wrapping_mul(0xA076_1D64_78BD_642F) ^ salt);
    // One warm-up step so that neighbouring indexes do not share a prefix.
    rng.next_u64();
    rng.fill_bytes(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_have_exact_length_and_style() {
        let k = KeyMaker::new(14).unwrap();
        assert_eq!(k.key(1), b"key:0000000001".to_vec());
        assert_eq!(k.key(1_499_999), b"key:0001499999".to_vec());
        assert_eq!(k.key(0).len(), 14);
        assert_eq!(k.capacity(), 10_000_000_000);
        let k20 = KeyMaker::new(20).unwrap();
        assert_eq!(k20.key(42), b"key:0000000000000042".to_vec());
    }

    #[test]
    fn key_length_is_validated() {
        assert!(KeyMaker::new(4).is_err());
        assert!(KeyMaker::new(251).is_err());
        assert!(KeyMaker::new(5).is_ok());
    }

    #[test]
    fn values_are_deterministic_per_key_and_differ_between_keys() {
        let mut a = [0u8; 100];
        let mut b = [0u8; 100];
        let mut c = [0u8; 100];
        value_for(7, 1, &mut a);
        value_for(7, 1, &mut b);
        value_for(8, 1, &mut c);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut d = [0u8; 100];
        value_for(7, 2, &mut d);
        assert_ne!(a, d, "the salt must change the value");
    }

    #[test]
    fn values_look_random_not_patterned() {
        // Over many values every byte value should occur, and no byte should
        // dominate: a crude check that nothing compressible slipped in.
        let mut counts = [0u32; 256];
        let mut buf = [0u8; 100];
        for i in 0..1000 {
            value_for(i, 0, &mut buf);
            for &b in &buf {
                counts[b as usize] += 1;
            }
        }
        let max = counts.iter().copied().max().unwrap();
        let min = counts.iter().copied().min().unwrap();
        assert!(min > 250 && max < 560, "min {min} max {max}");
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = Rng::new(3);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            let v = r.below(10);
            assert!(v < 10);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        let u = r.unit();
        assert!((0.0..1.0).contains(&u));
    }
}

//! The key hash every structure uses, the stripe a hash falls in, and the
//! prefetch hint: the engine's lowest floor, which imports nothing of the
//! crate.

/// The key hash every structure uses.
#[inline]
pub fn hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// A `Hasher` for the engine's own maps: a key that is already a key
/// hash (`u64`) is remixed with one multiply, bytes are hashed with
/// [`hash`]; several times cheaper than the default SipHash, which guards
/// against keys chosen to collide (a hash of a key, or a prefix from a
/// table bounded in size, cannot make a map degrade beyond its bound).
#[derive(Clone, Copy, Default)]
pub struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.0 = self.0.rotate_left(17) ^ hash(bytes);
    }
    #[inline]
    fn write_u64(&mut self, h: u64) {
        self.0 = (self.0 ^ h).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.0 ^= n as u64;
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map built with [`KeyHasher`].
pub type KeyMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<KeyHasher>>;

/// The stripe of key hash `h` for stripes of shift `shift` (64 minus the log2
/// of their number; `Stripes::of`): the top bits of a multiplicative remix,
/// independent of the bits the index routes by.
#[inline]
pub fn stripe_of(h: u64, shift: u32) -> usize {
    (h.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .checked_shr(shift)
        .unwrap_or(0) as usize
}

/// Ask the CPU to start loading the cache line at `p` (no effect on other
/// targets). A hint only: `p` need not be valid and nothing is read.
#[inline(always)]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is an SSE instruction (part of x86-64's baseline)
    // that never faults and reads nothing into the program; any address is
    // allowed.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

//! The key hash every structure uses, the stripe a hash falls in, and the
//! prefetch hint: the engine's lowest floor, which imports nothing of the
//! crate.

/// The key hash every structure uses.
#[inline]
pub fn hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

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
pub(crate) fn prefetch(p: *const u8) {
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

//! Page memory: one reserved address range per `region`, pages at fixed
//! offsets in it, optionally backed by transparent huge pages.
//!
//! Cavast (`../shared/seeds/004_*`, section 6.1) allocates its slabs from
//! 2 MB huge pages so that a GET over a data set far larger than the CPU
//! caches does not also miss the TLB: with 4 KB pages every item read from
//! a cold line costs a page walk too (two-dimensional under a hypervisor).
//! Here a region is one anonymous `MAP_NORESERVE` mapping, 2 MB aligned, of a
//! power-of-two number of 1 MB pages; page `id` lives at
//! `regions[id >> shift] + (id & mask) * page_size`, so finding a chunk needs
//! no per-page pointer. With `hugepages` on, each region is advised
//! `MADV_HUGEPAGE` (this machine's THP mode is `madvise`: without the advice
//! a process never gets huge pages). `MAP_HUGETLB` is not used: it needs
//! hugepages reserved by the administrator and fails otherwise.
//!
//! Memory is only resident once written: the kernel maps zero pages lazily,
//! as with the `calloc`'d pages this replaces. Releasing a page
//! (`cache_memlimit` lowered) gives its memory back with `MADV_DONTNEED`,
//! which also splits a huge page around it.
//!
//! With `prefetch` (lib.rs), this is the engine's only `unsafe` code: the mapping,
//! the advice, and turning a page's address into a slice. The borrow rules
//! of [`Arena::page`] / [`Arena::page_mut`] are those of a `Vec` of pages:
//! shared access through `&self`, exclusive through `&mut self`.

use std::ptr::NonNull;

/// Huge page size on x86-64 and the alignment of every region.
const HUGE: usize = 2 << 20;

struct Region {
    /// The whole mapping (with the slack used to align `base`), for munmap.
    map: NonNull<u8>,
    map_len: usize,
    /// 2 MB aligned start of the pages.
    base: NonNull<u8>,
}

// SAFETY: a Region is an owned anonymous mapping; nothing in it is tied to
// the thread that created it, and all access goes through the Arena's
// `&self` / `&mut self` methods, which follow the usual borrow rules.
unsafe impl Send for Region {}
// SAFETY: as above; shared access only hands out shared slices.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `map`/`map_len` are exactly what mmap returned in
        // `Region::new`, and no slice into the region outlives the Arena
        // (slices borrow it).
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), self.map_len);
        }
    }
}

impl Region {
    fn new(len: usize, hugepages: bool) -> std::io::Result<Region> {
        let map_len = len + HUGE;
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing; it aliases nothing. MAP_NORESERVE: address space only,
        // memory is committed page by page as items are written.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let map = NonNull::new(p.cast::<u8>()).ok_or_else(std::io::Error::last_os_error)?;
        let skip = (HUGE - (p as usize) % HUGE) % HUGE;
        // SAFETY: skip < HUGE and the mapping is len + HUGE long, so base
        // and the len bytes after it lie inside it.
        let base = unsafe { map.add(skip) };
        if hugepages {
            // SAFETY: advice on a range of our own mapping; MADV_HUGEPAGE
            // changes no contents. A kernel without THP answers EINVAL:
            // ignored, the pages are then ordinary 4 KB ones.
            unsafe {
                libc::madvise(base.as_ptr().cast(), len, libc::MADV_HUGEPAGE);
            }
        }
        Ok(Region { map, map_len, base })
    }
}

/// The memory of every page the engine can address.
pub struct Arena {
    page_size: usize,
    /// log2 of the pages per region.
    shift: u32,
    regions: Vec<Region>,
    hugepages: bool,
}

impl Arena {
    /// An arena of `page_size` pages whose first region covers `expected`
    /// bytes (rounded up to a power of two of pages, at least one huge
    /// page). Later regions, for a raised `cache_memlimit`, are the same size.
    pub fn new(page_size: usize, expected: usize, hugepages: bool) -> Arena {
        let pages = expected.div_ceil(page_size).max(HUGE / page_size).max(1);
        Arena {
            page_size,
            shift: pages.next_power_of_two().trailing_zeros(),
            regions: Vec::new(),
            hugepages,
        }
    }

    pub fn hugepages(&self) -> bool {
        self.hugepages
    }

    fn region_len(&self) -> usize {
        self.page_size << self.shift
    }

    /// Make page `id` addressable (reserving another region if needed).
    /// Fails only if the kernel refuses the address space.
    pub fn reserve(&mut self, id: u32) -> std::io::Result<()> {
        let r = (id >> self.shift) as usize;
        while self.regions.len() <= r {
            self.regions
                .push(Region::new(self.region_len(), self.hugepages)?);
        }
        Ok(())
    }

    #[inline]
    fn addr(&self, id: u32) -> *mut u8 {
        let region = &self.regions[(id >> self.shift) as usize];
        let off = (id as usize & ((1 << self.shift) - 1)) * self.page_size;
        // SAFETY: off + page_size <= region_len, inside the region.
        unsafe { region.base.as_ptr().add(off) }
    }

    /// The memory of page `id` (reserved earlier).
    #[inline]
    pub fn page(&self, id: u32) -> &[u8] {
        // SAFETY: the page lies inside a live mapping owned by self (see
        // `addr`), mapped readable and writable; the slice borrows self, so
        // no `page_mut` of any page can exist at the same time.
        unsafe { std::slice::from_raw_parts(self.addr(id), self.page_size) }
    }

    #[inline]
    pub fn page_mut(&mut self, id: u32) -> &mut [u8] {
        // SAFETY: as in `page`, and the slice borrows self mutably, so it is
        // the only reference into the arena while it lives.
        unsafe { std::slice::from_raw_parts_mut(self.addr(id), self.page_size) }
    }

    /// Give a page's memory back to the kernel; it reads as zeros after.
    pub fn release(&mut self, id: u32) {
        // SAFETY: MADV_DONTNEED on a page of our private anonymous mapping
        // drops its frames; the range stays mapped and reads back as zeros.
        // No slice into it is alive (we hold `&mut self`).
        unsafe {
            libc::madvise(self.addr(id).cast(), self.page_size, libc::MADV_DONTNEED);
        }
    }

    /// Bytes of address space reserved (not memory used).
    pub fn reserved_bytes(&self) -> usize {
        self.regions.len() * self.region_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 1 << 20;

    #[test]
    fn pages_are_distinct_zeroed_and_keep_their_bytes() {
        for huge in [false, true] {
            let mut a = Arena::new(PAGE, 3 * PAGE, huge);
            // 3 pages round up to 4 per region: ids 0..9 span three regions.
            for id in 0..9 {
                a.reserve(id).unwrap();
                assert!(a.page(id).iter().all(|&b| b == 0), "fresh page {id}");
                let p = a.page_mut(id);
                p[0] = id as u8 + 1;
                p[PAGE - 1] = id as u8 + 101;
            }
            assert_eq!(a.reserved_bytes(), 12 * PAGE);
            for id in 0..9 {
                assert_eq!(a.page(id)[0], id as u8 + 1);
                assert_eq!(a.page(id)[PAGE - 1], id as u8 + 101);
            }
            assert_eq!(a.addr(0) as usize % HUGE, 0, "regions are 2 MB aligned");
            assert_eq!(a.addr(4) as usize % HUGE, 0);
            a.release(5);
            assert!(
                a.page(5).iter().all(|&b| b == 0),
                "released page reads zeros"
            );
            assert_eq!(a.page(4)[0], 5, "the neighbour keeps its bytes");
            assert_eq!(a.page(6)[PAGE - 1], 107);
        }
    }

    #[test]
    fn small_arenas_still_cover_a_huge_page() {
        let mut a = Arena::new(PAGE, 1, true);
        a.reserve(1).unwrap();
        assert_eq!(a.reserved_bytes(), HUGE);
        a.page_mut(1)[7] = 9;
        assert_eq!(a.page(1)[7], 9);
    }
}

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
//! Concurrency (issue 10): the arena is shared, through an `Arc`, by the
//! engine (behind its lock) and by the lock-free GET path of
//! `crate::Cache`, which holds only the lock of the item's index stripe. So
//! every method takes `&self`: the region table is a fixed array of atomic
//! pointers (written under the engine lock only), each page's geometry
//! (class, chunk size) an atomic word, and bytes are reached through raw
//! pointers, one chunk range at a time, never as a whole page. Who may read
//! or write which bytes is the engine's lock protocol (`crate::stripe`); the
//! `unsafe` accessors below state what their callers promise.
//!
//! A warm restart may map a page from its file instead (`map_file`, shared,
//! from a RAM disk): the saved page becomes the page, with nothing copied and
//! no fresh memory to zero, which is how memcached's restart is fast. Such a
//! page is released with `MADV_REMOVE`, which frees the file's memory under
//! it, and becomes anonymous memory again.
//!
//! With `prefetch` (hash.rs), `stripe` and the warm restart's (the file
//! system calls of `warm.rs`, the index thread of `engine/restore.rs`), this
//! is the engine's only `unsafe` code: the mapping, the advice, and turning a
//! chunk's address into a slice or an atomic byte.

use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU16, AtomicU32, AtomicU8, Ordering};

/// Huge page size on x86-64 and the alignment of every region.
const HUGE: usize = 2 << 20;

/// Regions an arena can reserve. A region covers at least the memory
/// limit the engine started with, so `cache_memlimit` can raise the limit
/// to this many times that.
pub const MAX_REGIONS: usize = 4096;

struct Region {
    /// The whole mapping (with the slack used to align `base`), for munmap.
    map: NonNull<u8>,
    map_len: usize,
    /// 2 MB aligned start of the pages.
    base: NonNull<u8>,
    /// Per page: `(class + 1) << 24 | chunk_size`, 0 when in no class.
    geometry: Box<[AtomicU32]>,
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `map`/`map_len` are exactly what mmap returned in
        // `Region::new`, and regions are dropped only with the Arena, when no
        // reference into them is left (slices borrow the Arena).
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), self.map_len);
        }
    }
}

impl Region {
    fn new(len: usize, pages: usize, hugepages: bool) -> std::io::Result<Region> {
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
        Ok(Region {
            map,
            map_len,
            base,
            geometry: (0..pages).map(|_| AtomicU32::new(0)).collect(),
        })
    }
}

/// The memory of every page the engine can address.
pub struct Arena {
    page_size: usize,
    /// log2 of the pages per region.
    shift: u32,
    /// Reserved regions, in order; null past the last one. Written only
    /// under the engine lock (one writer), read by anyone.
    regions: Box<[AtomicPtr<Region>]>,
    hugepages: bool,
    /// Some page was mapped from a file (`map_file`): releasing a page
    /// must then also free the file's memory under it.
    file_backed: AtomicBool,
    /// Pages whose memory [`Arena::release_later`] dropped after the
    /// engine lock was let go, for the engine to reuse
    /// (`Slabs::release_page`).
    released: std::sync::Mutex<Vec<u32>>,
}

// SAFETY: the regions are owned anonymous mappings reached through atomic
// pointers; nothing in them is tied to a thread. Shared access follows the
// engine's lock protocol (module doc).
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Drop for Arena {
    fn drop(&mut self) {
        for r in self.regions.iter() {
            let p = r.swap(std::ptr::null_mut(), Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: p came from Box::into_raw in `reserve` and is
                // taken out of the table here, once.
                drop(unsafe { Box::from_raw(p) });
            }
        }
    }
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
            regions: (0..MAX_REGIONS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            hugepages,
            file_backed: AtomicBool::new(false),
            released: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// [`Arena::release`] each of `ids`, pages the engine gave back under
    /// its lock, then hand them back to it ([`Arena::take_released`]).
    /// Called without the engine lock: dropping a page's memory is two
    /// system calls that took 100-280 µs with the lock held (issue 34).
    pub fn release_later(&self, ids: Vec<u32>) {
        for &id in &ids {
            self.release(id);
        }
        let mut released = self.released.lock().unwrap_or_else(|e| e.into_inner());
        released.extend(ids);
    }

    /// What [`Arena::take_released`] would take (validation).
    pub fn released_now(&self) -> Vec<u32> {
        self.released
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The pages [`Arena::release_later`] has released since the last call.
    pub fn take_released(&self) -> Vec<u32> {
        let mut released = self.released.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *released)
    }

    pub fn hugepages(&self) -> bool {
        self.hugepages
    }

    fn region_len(&self) -> usize {
        self.page_size << self.shift
    }

    /// The most memory the arena can address.
    pub fn capacity_bytes(&self) -> usize {
        MAX_REGIONS * self.region_len()
    }

    /// Make page `id` addressable (reserving another region if needed).
    /// Fails if the kernel refuses the address space or the table is full.
    /// Engine lock only (one writer).
    pub fn reserve(&self, id: u32) -> std::io::Result<()> {
        let r = (id >> self.shift) as usize;
        if r >= MAX_REGIONS {
            return Err(std::io::Error::other("arena region table full"));
        }
        for slot in &self.regions[..=r] {
            if slot.load(Ordering::Acquire).is_null() {
                let region = Region::new(self.region_len(), 1 << self.shift, self.hugepages)?;
                slot.store(Box::into_raw(Box::new(region)), Ordering::Release);
            }
        }
        Ok(())
    }

    #[inline]
    fn region(&self, id: u32) -> &Region {
        let p = self.regions[(id >> self.shift) as usize].load(Ordering::Acquire);
        assert!(!p.is_null(), "page {id} was never reserved");
        // SAFETY: a non-null slot points at a Region boxed by `reserve` and
        // freed only when the Arena drops, which this borrow outlives not.
        unsafe { &*p }
    }

    #[inline]
    fn slot(&self, id: u32) -> usize {
        id as usize & ((1 << self.shift) - 1)
    }

    /// Address of byte `offset` of page `id` (reserved earlier).
    #[inline]
    pub fn ptr(&self, id: u32, offset: usize) -> *mut u8 {
        debug_assert!(offset <= self.page_size);
        let off = self.slot(id) * self.page_size + offset;
        // SAFETY: off <= region_len, inside the region's mapping.
        unsafe { self.region(id).base.as_ptr().add(off) }
    }

    /// Prefetch the first lines of chunk `chunk` of page `id` (header, key
    /// and the start of the value; up to four lines). A hint: nothing is
    /// read, and a page in no class is skipped.
    #[inline]
    pub fn prefetch_chunk(&self, id: u32, chunk: u32) {
        if let Some((_, cs)) = self.geometry(id) {
            let start = chunk as usize * cs as usize;
            for off in (0..cs as usize).step_by(64).take(4) {
                crate::hash::prefetch(self.ptr(id, start + off));
            }
        }
    }

    /// Prefetch the header line of chunk `chunk` of page `id` (a hint, as
    /// [`Arena::prefetch_chunk`]).
    #[inline]
    pub fn prefetch_line(&self, id: u32, chunk: u32) {
        if let Some((_, cs)) = self.geometry(id) {
            crate::hash::prefetch(self.ptr(id, chunk as usize * cs as usize));
        }
    }

    /// Set the class (None: no class) and chunk size readers of page `id`
    /// see. Engine lock only, and only while the page holds no item.
    pub fn set_geometry(&self, id: u32, class: Option<usize>, chunk_size: u32) {
        debug_assert!(chunk_size < 1 << 24);
        let word = class.map_or(0, |c| (c as u32 + 1) << 24 | chunk_size);
        self.region(id).geometry[self.slot(id)].store(word, Ordering::Release);
    }

    /// The class and chunk size of page `id` (None: in no class).
    #[inline]
    pub fn geometry(&self, id: u32) -> Option<(usize, u32)> {
        let w = self.region(id).geometry[self.slot(id)].load(Ordering::Acquire);
        (w != 0).then(|| ((w >> 24) as usize - 1, w & 0xff_ffff))
    }

    /// `len` bytes of page `id` from `start`.
    ///
    /// # Safety
    /// No thread writes these bytes (other than through [`Arena::atomic`])
    /// while the slice lives: the engine's lock protocol.
    #[inline]
    pub unsafe fn bytes(&self, id: u32, start: usize, len: usize) -> &[u8] {
        assert!(start + len <= self.page_size);
        // SAFETY: the range lies inside a live mapping (assert above and
        // `ptr`); the caller rules out concurrent writers.
        unsafe { std::slice::from_raw_parts(self.ptr(id, start), len) }
    }

    /// `len` bytes of page `id` from `start`, to write.
    ///
    /// # Safety
    /// No other reference to these bytes exists while the slice lives, and
    /// no other thread reads or writes them: the engine's lock protocol.
    #[allow(clippy::mut_from_ref)]
    #[inline]
    pub unsafe fn bytes_mut(&self, id: u32, start: usize, len: usize) -> &mut [u8] {
        assert!(start + len <= self.page_size);
        // SAFETY: as in `bytes`, and the caller guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(id, start), len) }
    }

    /// Byte `offset` of page `id` as an atomic: the item header bytes that a
    /// GET under its stripe lock and the engine may touch at once (access
    /// bits and time) are only ever accessed this way when shared.
    #[inline]
    pub fn atomic(&self, id: u32, offset: usize) -> &AtomicU8 {
        assert!(offset < self.page_size);
        // SAFETY: AtomicU8 has the size and alignment of u8; the byte lies
        // in a live mapping that outlives `&self`; concurrent accesses to
        // it are atomic by the lock protocol.
        unsafe { AtomicU8::from_ptr(self.ptr(id, offset)) }
    }

    /// The little-endian u32 at `offset` of page `id`, read atomically:
    /// whole when aligned (an in-place SET writes it whole, `store_u32`),
    /// else byte by byte (only chunks of an unaligned size, which are
    /// never rewritten in place).
    #[inline]
    pub fn load_u32(&self, id: u32, offset: usize) -> u32 {
        let p = self.ptr(id, offset);
        if p.align_offset(4) == 0 {
            assert!(offset + 4 <= self.page_size);
            // SAFETY: aligned, inside a live mapping (assert and `ptr`);
            // shared accesses to these bytes are atomic (crate::stripe).
            u32::from_le(unsafe { AtomicU32::from_ptr(p.cast()) }.load(Ordering::Relaxed))
        } else {
            u32::from_le_bytes(std::array::from_fn(|i| {
                self.atomic(id, offset + i).load(Ordering::Relaxed)
            }))
        }
    }

    /// As `load_u32`, for a u16.
    #[inline]
    pub fn load_u16(&self, id: u32, offset: usize) -> u16 {
        let p = self.ptr(id, offset);
        if p.align_offset(2) == 0 {
            assert!(offset + 2 <= self.page_size);
            // SAFETY: as in `load_u32`.
            u16::from_le(unsafe { AtomicU16::from_ptr(p.cast()) }.load(Ordering::Relaxed))
        } else {
            u16::from_le_bytes(std::array::from_fn(|i| {
                self.atomic(id, offset + i).load(Ordering::Relaxed)
            }))
        }
    }

    /// Store a little-endian u32 at the 4-aligned `offset` of page `id`
    /// atomically (read by `load_u32`).
    #[inline]
    pub fn store_u32(&self, id: u32, offset: usize, v: u32) {
        let p = self.ptr(id, offset);
        assert!(p.align_offset(4) == 0 && offset + 4 <= self.page_size);
        // SAFETY: as in `load_u32`.
        unsafe { AtomicU32::from_ptr(p.cast()) }.store(v.to_le(), Ordering::Relaxed);
    }

    /// As `store_u32`, for a u16 at a 2-aligned offset.
    #[inline]
    pub fn store_u16(&self, id: u32, offset: usize, v: u16) {
        let p = self.ptr(id, offset);
        assert!(p.align_offset(2) == 0 && offset + 2 <= self.page_size);
        // SAFETY: as in `load_u32`.
        unsafe { AtomicU16::from_ptr(p.cast()) }.store(v.to_le(), Ordering::Relaxed);
    }

    /// Make page `id` the page-sized range of `file` at `offset` (a
    /// multiple of 4 KB), mapped shared: a warm restart's saved page, on a
    /// RAM disk, becomes the page itself with no copy and no fresh memory
    /// to zero (memcached's restart maps its memory onto its file so).
    /// Writes go to the file's memory, which outlives the file's name.
    /// Engine lock only, and only for a page in no class (no item, no
    /// reader). The page reads as the file's bytes after.
    pub fn map_file(&self, id: u32, file: &std::fs::File, offset: u64) -> std::io::Result<()> {
        let offset = libc::off_t::try_from(offset)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        self.file_backed.store(true, Ordering::Relaxed);
        let at = self.ptr(id, 0);
        // SAFETY: MAP_FIXED over exactly one page of our own mapping (the
        // page lies inside its region, `ptr`), which no reference points
        // into: the page is in no class, so nothing indexes it and no
        // thread reads it. The kernel checks the file and offset; on an
        // error the old mapping stays as it was.
        let p = unsafe {
            libc::mmap(
                at.cast(),
                self.page_size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED | libc::MAP_POPULATE,
                file.as_raw_fd(),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        debug_assert_eq!(p.cast::<u8>(), at);
        Ok(())
    }

    /// Give a page's memory back to the kernel; it reads as zeros after.
    /// Engine lock only, and only for a page in no class (no item, no reader).
    pub fn release(&self, id: u32) {
        if self.hugepages {
            // Its 2 MB huge page loses the advice first: khugepaged would
            // otherwise collapse the half still in use back into a whole
            // huge page, making the released half resident again
            // (max_ptes_none is 511 by default), and `-m` would no longer
            // bound the resident memory (measured: 17 MB over at -m 64 as
            // the flash index grew page by page).
            self.advise_huge(id, false);
        }
        if self.file_backed.load(Ordering::Relaxed) {
            let at = self.ptr(id, 0);
            // SAFETY: on a page `map_file` mapped, MADV_REMOVE frees the
            // file's memory under it; on an anonymous private page it fails
            // (EINVAL) and does nothing. No reference into the page is
            // alive: it holds no item.
            let removed = unsafe { libc::madvise(at.cast(), self.page_size, libc::MADV_REMOVE) };
            if removed == 0 {
                // Anonymous memory again, as the region's: written later,
                // the file's hole would take memory from the RAM disk,
                // and a full one would fault.
                // SAFETY: MAP_FIXED over exactly this page of our mapping,
                // which nothing references (above).
                let p = unsafe {
                    libc::mmap(
                        at.cast(),
                        self.page_size,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE
                            | libc::MAP_ANONYMOUS
                            | libc::MAP_NORESERVE
                            | libc::MAP_FIXED,
                        -1,
                        0,
                    )
                };
                debug_assert_ne!(p, libc::MAP_FAILED);
            }
        }
        // SAFETY: MADV_DONTNEED on a page of our private anonymous mapping
        // drops its frames; the range stays mapped and reads back as zeros.
        // No reference into the page is alive: it holds no item.
        unsafe {
            libc::madvise(self.ptr(id, 0).cast(), self.page_size, libc::MADV_DONTNEED);
        }
    }

    /// Pages `id` and `id ^ 1` (the rest of its 2 MB block) are both in use
    /// again: their block may be a huge page again.
    pub fn rejoin_huge(&self, id: u32) {
        if self.hugepages {
            self.advise_huge(id, true);
        }
    }

    fn advise_huge(&self, id: u32, on: bool) {
        if self.page_size * 2 != HUGE {
            return;
        }
        let block = self.ptr(id & !1, 0);
        let advice = match on {
            true => libc::MADV_HUGEPAGE,
            false => libc::MADV_NOHUGEPAGE,
        };
        // SAFETY: advice on the 2 MB block of two of our pages, inside the
        // region's mapping (regions hold whole, 2 MB-aligned blocks); it
        // changes no contents.
        unsafe {
            libc::madvise(block.cast(), HUGE, advice);
        }
    }

    /// Bytes of address space reserved (not memory used).
    pub fn reserved_bytes(&self) -> usize {
        self.regions
            .iter()
            .take_while(|r| !r.load(Ordering::Acquire).is_null())
            .count()
            * self.region_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 1 << 20;

    fn page(a: &Arena, id: u32) -> &[u8] {
        // SAFETY: single-threaded test, no writer while the slice lives.
        unsafe { a.bytes(id, 0, PAGE) }
    }

    fn write(a: &Arena, id: u32, at: usize, b: u8) {
        // SAFETY: single-threaded test, the slice is the only reference.
        unsafe { a.bytes_mut(id, at, 1)[0] = b }
    }

    #[test]
    fn pages_are_distinct_zeroed_and_keep_their_bytes() {
        for huge in [false, true] {
            let a = Arena::new(PAGE, 3 * PAGE, huge);
            // 3 pages round up to 4 per region: ids 0..9 span three regions.
            for id in 0..9 {
                a.reserve(id).unwrap();
                assert!(page(&a, id).iter().all(|&b| b == 0), "fresh page {id}");
                write(&a, id, 0, id as u8 + 1);
                write(&a, id, PAGE - 1, id as u8 + 101);
            }
            assert_eq!(a.reserved_bytes(), 12 * PAGE);
            for id in 0..9 {
                assert_eq!(page(&a, id)[0], id as u8 + 1);
                assert_eq!(page(&a, id)[PAGE - 1], id as u8 + 101);
            }
            assert_eq!(a.ptr(0, 0) as usize % HUGE, 0, "regions are 2 MB aligned");
            assert_eq!(a.ptr(4, 0) as usize % HUGE, 0);
            a.release(5);
            assert!(
                page(&a, 5).iter().all(|&b| b == 0),
                "released page reads zeros"
            );
            assert_eq!(page(&a, 4)[0], 5, "the neighbour keeps its bytes");
            assert_eq!(page(&a, 6)[PAGE - 1], 107);
            // Atomic bytes and plain bytes are the same memory.
            a.atomic(6, 3).fetch_or(0x81, Ordering::Relaxed);
            assert_eq!(page(&a, 6)[3], 0x81);
        }
    }

    #[test]
    fn a_page_mapped_from_a_file_is_the_file_until_released() {
        let dir = std::path::Path::new("/dev/shm");
        if !dir.is_dir() {
            return;
        }
        let path = dir.join(format!("cachalot-arena-{}", std::process::id()));
        let bytes: Vec<u8> = (0..2 * PAGE).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let a = Arena::new(PAGE, 4 * PAGE, true);
        a.reserve(2).unwrap();
        write(&a, 1, 0, 7);
        a.map_file(2, &file, PAGE as u64).unwrap();
        assert_eq!(page(&a, 2), &bytes[PAGE..], "the file's second page");
        assert_eq!(page(&a, 1)[0], 7, "the neighbour is untouched");
        // Shared: a write lands in the file.
        write(&a, 2, 10, 0xee);
        assert_eq!(std::fs::read(&path).unwrap()[PAGE + 10], 0xee);
        a.release(2);
        assert!(page(&a, 2).iter().all(|&b| b == 0), "zeros once released");
        let now = std::fs::read(&path).unwrap();
        assert!(
            now[PAGE..].iter().all(|&b| b == 0),
            "the file's memory freed"
        );
        assert_eq!(now[..PAGE], bytes[..PAGE]);
        // Anonymous again: writes no longer reach the file.
        write(&a, 2, 10, 0x11);
        assert_eq!(std::fs::read(&path).unwrap()[PAGE + 10], 0);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn small_arenas_still_cover_a_huge_page() {
        let a = Arena::new(PAGE, 1, true);
        a.reserve(1).unwrap();
        assert_eq!(a.reserved_bytes(), HUGE);
        write(&a, 1, 7, 9);
        assert_eq!(page(&a, 1)[7], 9);
    }

    #[test]
    fn geometry_and_limits() {
        let a = Arena::new(PAGE, 2 * PAGE, false);
        a.reserve(3).unwrap();
        assert_eq!(a.geometry(3), None);
        a.set_geometry(3, Some(41), 1184);
        assert_eq!(a.geometry(3), Some((41, 1184)));
        a.set_geometry(3, None, 0);
        assert_eq!(a.geometry(3), None);
        assert_eq!(a.capacity_bytes(), MAX_REGIONS * 2 * PAGE);
        assert!(
            a.reserve((MAX_REGIONS * 2) as u32).is_err(),
            "past the table"
        );
    }
}

//! Pages and slab classes (memcached's `slabs.c`).
//!
//! Memory is an arena of fixed-size pages (1 MB). A page belongs to at most
//! one slab class and is cut into equal chunks of the class's size; class
//! sizes grow by `-f` from the smallest chunk up to `slab_chunk_max`, as in
//! memcached (larger items are chained over several chunks: `chain`). Pages are identified by number and items by
//! (page, chunk), never by pointer, so a page can be emptied and handed to
//! another class (`slabs reassign`, automove, rebalancing) and the index
//! rewritten (`Index::relocate`) without chasing pointers.
//!
//! Free chunks form an intrusive list per page (the next free chunk number is
//! stored in the chunk itself), and chunks at the end of a page that were never
//! handed out are counted by a bump cursor, so emptying a page never needs a
//! scan of a class-wide free list.
//!
//! A chunk holds a live item iff its number is below the page's bump cursor and
//! its LIVE bit is set; flushing everything is therefore O(pages).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::arena::Arena;
use crate::item;

/// No chunk / end of a free list.
pub const NONE: u32 = u32::MAX;
/// Chunk sizes are multiples of this (items are read with unaligned loads).
pub const CHUNK_ALIGN: usize = 4;
/// memcached allows at most 63 classes; we allow more for small factors.
pub const MAX_CLASSES: usize = 200;

pub type PageId = u32;

/// A page's bookkeeping; its memory is in the [`Arena`].
pub struct Page {
    /// Class index + 1; 0 = not in any class.
    pub class: u8,
    pub chunk_size: u32,
    pub nchunks: u32,
    /// Chunks [0, bump) have been handed out at least once.
    pub bump: u32,
    pub free_head: u32,
    pub free_count: u32,
    /// Whether the page is on its class's `with_free` list.
    pub listed: bool,
}

/// One slab class.
pub struct Class {
    pub chunk_size: u32,
    pub per_page: u32,
    pub pages: Vec<PageId>,
    /// Pages that may have a free chunk (free list or bump space).
    pub with_free: Vec<PageId>,
    /// Live items and their requested bytes.
    pub used: u64,
    /// Chunks holding segments of chained items (`chain`).
    pub segments: u64,
    pub requested: u64,
    /// CLOCK hand: position in `pages` and chunk number.
    pub hand_page: usize,
    pub hand_chunk: u32,
    pub stats: SlabClassStats,
}

/// Per slab class counters for `stats slabs` and `stats items`.
#[derive(Clone, Debug, Default)]
pub struct SlabClassStats {
    pub id: u32,
    pub chunk_size: u32,
    pub chunks_per_page: u32,
    pub total_pages: u64,
    pub total_chunks: u64,
    pub used_chunks: u64,
    pub free_chunks: u64,
    /// Chunks at the end of the newest page never handed out yet.
    pub free_chunks_end: u64,
    /// Bytes requested by the items in this class.
    pub mem_requested: u64,
    pub get_hits: u64,
    pub cmd_set: u64,
    pub delete_hits: u64,
    pub incr_hits: u64,
    pub decr_hits: u64,
    pub cas_hits: u64,
    pub cas_badval: u64,
    pub touch_hits: u64,
    // `stats items` fields.
    pub number: u64,
    /// Age (seconds) of the oldest item the CLOCK hand is about to visit.
    pub age: u64,
    pub evicted: u64,
    pub evicted_nonzero: u64,
    /// Seconds since the last access of the most recently evicted item.
    pub evicted_time: u64,
    pub outofmemory: u64,
    pub reclaimed: u64,
    pub expired_unfetched: u64,
    pub evicted_unfetched: u64,
    pub crawler_reclaimed: u64,
    /// Pages moved into / out of this class.
    pub pages_in: u64,
    pub pages_out: u64,
    /// Mean cost of the live items (the client's units, or microseconds when
    /// learned), rounded; 0 when the class is empty.
    pub avg_cost: u64,
    /// Sum of the costs of the items this class evicted.
    pub evicted_cost: u64,
    /// GET misses on keys this class evicted recently (ghost set, `sas`).
    pub capacity_misses: u64,
    /// Their cost (that of the SETs that refilled them).
    pub cost_capacity_misses: u64,
}

pub struct Slabs {
    pub page_size: usize,
    /// log2 of the number of chunk numbers a location reserves per page.
    pub chunk_bits: u32,
    pub pages: Vec<Option<Page>>,
    /// The pages' memory, by page number; shared with the GET path of
    /// `crate::Cache` (see `crate::stripe` for who may touch what).
    pub arena: Arc<Arena>,
    /// Numbers of `pages` entries that are None (memory released), reusable.
    pub vacant: Vec<PageId>,
    /// With [`Slabs::defer_release`]: pages given back whose memory the
    /// engine lock's holder drops once it has let the lock go
    /// ([`Slabs::take_releasing`], [`Arena::release_later`]); and how many
    /// pages are given back but not yet vacant again.
    releasing: Vec<PageId>,
    in_release: usize,
    defer: bool,
    /// Allocated pages that belong to no class.
    pub spare: Vec<PageId>,
    pub classes: Vec<Class>,
    /// Which index stripes the engine has acquired (`Engine::hold`; empty
    /// for slabs used alone, as in unit tests).
    pub held: Vec<bool>,
    /// Debug builds: the stripes' shift, to check the lock protocol on
    /// every whole-chunk access against `held` (None: no check).
    pub check_stripes: Option<u32>,
}

/// The page and chunk number of location `loc` (`Slabs::split`, for the
/// GET path that has only the arena and `chunk_bits`).
#[inline]
pub fn split_loc(loc: u64, chunk_bits: u32) -> (PageId, u32) {
    (
        (loc >> chunk_bits) as PageId,
        (loc & ((1 << chunk_bits) - 1)) as u32,
    )
}

/// Compute class chunk sizes: memcached's rule (`slabs_init`), each class
/// `factor` times the previous, rounded up to `CHUNK_ALIGN`, the last one the
/// largest item.
pub fn class_sizes(smallest: usize, factor: f64, item_size_max: usize) -> Vec<u32> {
    let align = |n: usize| n.div_ceil(CHUNK_ALIGN) * CHUNK_ALIGN;
    let mut sizes = Vec::new();
    let mut size = align(smallest.max(item::HEADER_LEN + 8));
    while size < item_size_max && sizes.len() < MAX_CLASSES - 1 {
        sizes.push(size as u32);
        let next = align((size as f64 * factor) as usize);
        size = next.max(size + CHUNK_ALIGN);
    }
    sizes.push(item_size_max as u32);
    sizes
}

impl Slabs {
    /// Slab classes of these chunk sizes over `page_size` pages, whose
    /// memory is reserved `expected` bytes at a time (`arena`).
    pub fn new(page_size: usize, sizes: &[u32], expected: usize, hugepages: bool) -> Slabs {
        let smallest = sizes.first().copied().unwrap_or(64) as usize;
        let chunk_bits = (page_size / smallest).next_power_of_two().trailing_zeros();
        let classes = sizes
            .iter()
            .enumerate()
            .map(|(i, &s)| Class {
                chunk_size: s,
                per_page: (page_size / s as usize) as u32,
                pages: Vec::new(),
                with_free: Vec::new(),
                used: 0,
                segments: 0,
                requested: 0,
                hand_page: 0,
                hand_chunk: 0,
                stats: SlabClassStats {
                    id: i as u32 + 1,
                    chunk_size: s,
                    chunks_per_page: (page_size / s as usize) as u32,
                    ..Default::default()
                },
            })
            .collect();
        Slabs {
            page_size,
            chunk_bits,
            pages: Vec::new(),
            arena: Arc::new(Arena::new(page_size, expected, hugepages)),
            vacant: Vec::new(),
            releasing: Vec::new(),
            in_release: 0,
            defer: false,
            spare: Vec::new(),
            classes,
            held: Vec::new(),
            check_stripes: None,
        }
    }

    /// The smallest class whose chunks hold `size` bytes.
    #[inline]
    pub fn class_for(&self, size: usize) -> Option<usize> {
        let i = self
            .classes
            .partition_point(|c| (c.chunk_size as usize) < size);
        (i < self.classes.len()).then_some(i)
    }

    #[inline]
    pub fn loc(&self, page: PageId, chunk: u32) -> u64 {
        ((page as u64) << self.chunk_bits) | chunk as u64
    }

    #[inline]
    pub fn split(&self, loc: u64) -> (PageId, u32) {
        split_loc(loc, self.chunk_bits)
    }

    /// Pages holding memory (assigned to a class or spare); a page given
    /// back counts no more, though its memory is dropped a moment later
    /// ([`Slabs::defer_release`]).
    pub fn pages_allocated(&self) -> usize {
        self.pages.len() - self.vacant.len() - self.in_release
    }

    /// From now on the memory of a page given back is dropped by whoever
    /// holds the engine lock, after letting it go ([`Slabs::take_releasing`]):
    /// `crate::Cache` does this.
    pub fn defer_release(&mut self) {
        self.defer = true;
    }

    /// The pages given back since the last call, whose memory the caller
    /// drops with [`Arena::release_later`] once it holds no lock.
    pub fn take_releasing(&mut self) -> Vec<PageId> {
        std::mem::take(&mut self.releasing)
    }

    /// Pages released since, reusable again.
    fn absorb_released(&mut self) {
        let ids = self.arena.take_released();
        self.in_release -= ids.len();
        self.vacant.extend(ids);
    }

    #[inline]
    fn page(&self, id: PageId) -> &Page {
        self.pages[id as usize].as_ref().expect("live page id")
    }

    #[inline]
    pub fn page_mut(&mut self, id: PageId) -> &mut Page {
        self.pages[id as usize].as_mut().expect("live page id")
    }

    /// Where the chunk at `loc` starts in its page, and its size.
    #[inline]
    fn place(&self, loc: u64) -> (PageId, usize, usize) {
        let (p, c) = self.split(loc);
        let cs = self.page(p).chunk_size as usize;
        (p, c as usize * cs, cs)
    }

    /// The bytes of the chunk at `loc`. The caller holds the engine lock
    /// and, if the chunk holds a live item, the item's stripe (checked in
    /// debug builds), so no GET reads it meanwhile.
    #[inline]
    pub fn chunk(&self, loc: u64) -> &[u8] {
        debug_assert!(self.check_held(loc), "chunk {loc} read without its stripe");
        let (p, start, cs) = self.place(loc);
        // SAFETY: the engine lock excludes every other writer but a GET,
        // and a GET of this item needs its stripe, which the engine holds
        // (or the chunk holds no live item a GET could find).
        unsafe { self.arena.bytes(p, start, cs) }
    }

    #[inline]
    pub fn chunk_mut(&mut self, loc: u64) -> &mut [u8] {
        debug_assert!(
            self.check_held(loc),
            "chunk {loc} written without its stripe"
        );
        let (p, start, cs) = self.place(loc);
        // SAFETY: as in `chunk`; `&mut self` makes this the engine's only
        // reference into the arena.
        unsafe { self.arena.bytes_mut(p, start, cs) }
    }

    /// Whether the lock protocol lets the engine take the chunk at `loc`
    /// whole: it holds no live item, or the item's stripe is held.
    pub fn check_held(&self, loc: u64) -> bool {
        let Some(shift) = self.check_stripes else {
            return true;
        };
        if !self.is_live(loc) {
            return true;
        }
        self.held[crate::hash::stripe_of(crate::hash::hash(self.key_of(loc)), shift)]
    }

    /// The access byte of the chunk at `loc`, read atomically: a GET may
    /// set REF or FETCHED in it at any time (`crate::stripe`). Acquire: a
    /// SET without the engine lock writes a new item whole before it sets
    /// LIVE with a release store (`crate::cache`), so whoever sees LIVE
    /// sees the key.
    #[inline]
    pub fn bits(&self, loc: u64) -> u8 {
        let (p, start, _) = self.place(loc);
        self.arena.atomic(p, start + 7).load(Ordering::Acquire)
    }

    /// Clear bits of the access byte atomically (CLOCK's hand, without the
    /// item's stripe); returns the byte as it was.
    #[inline]
    pub fn clear_bits(&self, loc: u64, mask: u8) -> u8 {
        let (p, start, _) = self.place(loc);
        self.arena
            .atomic(p, start + 7)
            .fetch_and(!mask, Ordering::Relaxed)
    }

    /// The access time of the item at `loc`, read atomically.
    #[inline]
    pub fn atime(&self, loc: u64) -> u16 {
        let (p, start, _) = self.place(loc);
        let lo = self.arena.atomic(p, start + 5).load(Ordering::Relaxed);
        let hi = self.arena.atomic(p, start + 13).load(Ordering::Relaxed);
        u16::from_le_bytes([lo, hi])
    }

    /// Header byte `at` of the linked item at `loc`, which nobody changes
    /// while it is linked (the key length, the cost: `crate::stripe`).
    #[inline]
    fn fixed_byte(&self, loc: u64, at: usize) -> u8 {
        debug_assert!(at == 6 || at == 12);
        let (p, start, _) = self.place(loc);
        // SAFETY: written only before the item is linked (above).
        unsafe { self.arena.bytes(p, start + at, 1)[0] }
    }

    /// The expiry of the item at `loc`, without its stripe (read
    /// atomically: an in-place SET may be rewriting it). Read it again
    /// with the stripe before acting on it.
    #[inline]
    pub fn exptime(&self, loc: u64) -> u32 {
        let (p, start, _) = self.place(loc);
        self.arena.load_u32(p, start + 8)
    }

    /// The cost byte of the item at `loc`, without its stripe.
    #[inline]
    pub fn cost_code(&self, loc: u64) -> u8 {
        self.fixed_byte(loc, 6)
    }

    /// The key of the live item at `loc`, without its stripe: a linked
    /// item's key never changes, and its chunk is reused only by the
    /// engine lock's holder.
    pub fn key_of(&self, loc: u64) -> &[u8] {
        let (p, start, _) = self.place(loc);
        let klen = self.fixed_byte(loc, 12);
        // An in-place SET may change the length, but not whether it is long.
        let ext = if self.arena.load_u16(p, start + 14) == item::LONG_VALUE as u16 {
            4
        } else {
            0
        };
        let fw = item::code_width(self.bits(loc));
        // SAFETY: key bytes are written only before the item is linked.
        unsafe {
            self.arena
                .bytes(p, start + item::HEADER_LEN + ext + fw, klen as usize)
        }
    }

    /// The last `len` bytes of the chunk at `loc` (GD-Wheel's trailer,
    /// which only the engine lock's holder touches and a GET never reads).
    #[inline]
    pub fn tail(&self, loc: u64, len: usize) -> &[u8] {
        let (p, start, cs) = self.place(loc);
        // SAFETY: only the engine lock's holder accesses these bytes.
        unsafe { self.arena.bytes(p, start + cs - len, len) }
    }

    #[inline]
    pub fn tail_mut(&mut self, loc: u64, len: usize) -> &mut [u8] {
        let (p, start, cs) = self.place(loc);
        // SAFETY: as in `tail`, and `&mut self` makes it the only reference.
        unsafe { self.arena.bytes_mut(p, start + cs - len, len) }
    }

    /// Whether `loc` holds a live item.
    #[inline]
    pub fn is_live(&self, loc: u64) -> bool {
        let (p, c) = self.split(loc);
        match self.pages.get(p as usize) {
            Some(Some(page)) if page.class != 0 && c < page.bump => {
                self.bits(loc) & item::LIVE != 0
            }
            _ => false,
        }
    }

    /// Class index of the page holding `loc`.
    #[inline]
    pub fn class_of(&self, loc: u64) -> usize {
        let (p, _) = self.split(loc);
        self.page(p).class as usize - 1
    }

    /// Allocate memory for a new page (the caller checked the budget);
    /// None only if the kernel refused more address space.
    pub fn new_page(&mut self) -> Option<PageId> {
        if let Some(id) = self.spare.pop() {
            return Some(id);
        }
        if self.in_release > 0 {
            self.absorb_released();
        }
        // The arena's memory is mapped lazily, so an unused page costs no
        // resident memory until items are written into it.
        let id = match self.vacant.last() {
            Some(&id) => id,
            None => self.pages.len() as PageId,
        };
        self.arena.reserve(id).ok()?;
        let page = Page {
            class: 0,
            chunk_size: 0,
            nchunks: 0,
            bump: 0,
            free_head: NONE,
            free_count: 0,
            listed: false,
        };
        if self.vacant.pop().is_some() {
            self.pages[id as usize] = Some(page);
            if matches!(self.pages.get((id ^ 1) as usize), Some(Some(_))) {
                self.arena.rejoin_huge(id);
            }
        } else {
            self.pages.push(Some(page));
        }
        Some(id)
    }

    /// Give back the memory of a page that belongs to no class.
    pub fn release_page(&mut self, id: PageId) {
        debug_assert_eq!(self.page(id).class, 0);
        self.pages[id as usize] = None;
        if self.defer {
            self.releasing.push(id);
            self.in_release += 1;
        } else {
            self.arena.release(id);
            self.vacant.push(id);
        }
    }

    /// Hand an empty page to a class.
    pub fn assign(&mut self, id: PageId, class: usize) {
        let cs = self.classes[class].chunk_size;
        let per = self.classes[class].per_page;
        let page = self.page_mut(id);
        page.class = class as u8 + 1;
        page.chunk_size = cs;
        page.nchunks = per;
        page.bump = 0;
        page.free_head = NONE;
        page.free_count = 0;
        page.listed = true;
        self.arena.set_geometry(id, Some(class), cs);
        let c = &mut self.classes[class];
        c.pages.push(id);
        c.with_free.push(id);
        c.stats.total_pages += 1;
    }

    /// Take a free chunk of `class` if one exists.
    pub fn take_free(&mut self, class: usize) -> Option<u64> {
        while let Some(&id) = self.classes[class].with_free.last() {
            let page = self.pages[id as usize].as_mut().expect("live page id");
            let chunk = if page.free_head != NONE {
                let c = page.free_head;
                page.free_head = Self::free_link(&self.arena, page, id, c);
                page.free_count -= 1;
                Some(c)
            } else if page.bump < page.nchunks {
                page.bump += 1;
                // Below the cursor now, so its bits byte counts: whatever
                // an earlier class or a flushed item left there is no item.
                let at = (page.bump - 1) as usize * page.chunk_size as usize + 7;
                self.arena.atomic(id, at).store(0, Ordering::Relaxed);
                Some(page.bump - 1)
            } else {
                None
            };
            match chunk {
                Some(c) => return Some(self.loc(id, c)),
                None => {
                    page.listed = false;
                    self.classes[class].with_free.pop();
                }
            }
        }
        None
    }

    /// Return a chunk (its item already unlinked) to its page's free list.
    pub fn free(&mut self, loc: u64) {
        let (p, c) = self.split(loc);
        let page = self.pages[p as usize].as_mut().expect("live page id");
        let cs = page.chunk_size as usize;
        // SAFETY: the item was unlinked (under its stripe), so no GET reads
        // the chunk, and the engine lock excludes every other writer.
        let chunk = unsafe { self.arena.bytes_mut(p, c as usize * cs, cs) };
        item::set_bits(chunk, 0);
        chunk[8..12].copy_from_slice(&page.free_head.to_le_bytes());
        page.free_head = c;
        page.free_count += 1;
        if !page.listed {
            page.listed = true;
            let class = page.class as usize - 1;
            self.classes[class].with_free.push(p);
        }
    }

    /// The free chunk after free chunk `c` of `page` (page number `id`).
    #[inline]
    fn free_link(arena: &Arena, page: &Page, id: PageId, c: u32) -> u32 {
        let cs = page.chunk_size as usize;
        // SAFETY: a free chunk's link is touched only by the engine lock's
        // holder (no GET finds a free chunk), which the caller is.
        let link = unsafe { arena.bytes(id, c as usize * cs + 8, 4) };
        u32::from_le_bytes(link.try_into().expect("4 bytes"))
    }

    /// Give page `id`, in transit until now, back to its class: the chunks
    /// below `drained` that the move emptied (no item, no segment, not on
    /// the free list) are freed, and the page is listed if it has room.
    pub fn call_off_move(&mut self, id: PageId, drained: u32) {
        let page = self.page(id);
        let mut free = vec![false; page.nchunks as usize];
        let mut next = page.free_head;
        while next != NONE {
            free[next as usize] = true;
            next = Self::free_link(&self.arena, page, id, next);
        }
        self.page_mut(id).listed = false;
        for c in 0..drained {
            let loc = self.loc(id, c);
            let bits = self.bits(loc);
            if !free[c as usize] && bits & item::LIVE == 0 && bits != item::SEGMENT {
                self.free(loc);
            }
        }
        let page = self.page_mut(id);
        if !page.listed && (page.free_head != NONE || page.bump < page.nchunks) {
            page.listed = true;
            let class = page.class as usize - 1;
            self.classes[class].with_free.push(id);
        }
    }

    /// Detach an emptied page from its class (all its items already gone).
    pub fn unassign(&mut self, id: PageId) {
        let class = self.page(id).class as usize - 1;
        let c = &mut self.classes[class];
        if let Some(pos) = c.pages.iter().position(|&p| p == id) {
            c.pages.remove(pos);
            if c.hand_page > pos {
                c.hand_page -= 1;
            } else if c.hand_page == pos {
                c.hand_chunk = 0;
            }
            if c.hand_page >= c.pages.len() {
                c.hand_page = 0;
            }
        }
        c.with_free.retain(|&p| p != id);
        c.stats.total_pages -= 1;
        self.arena.set_geometry(id, None, 0);
        let page = self.page_mut(id);
        page.class = 0;
        page.bump = 0;
        page.free_head = NONE;
        page.free_count = 0;
        page.listed = false;
    }

    /// Forget every item: all pages stay with their classes, emptied.
    pub fn clear_items(&mut self) {
        for class in &mut self.classes {
            class.with_free.clear();
            class.used = 0;
            class.segments = 0;
            class.requested = 0;
            class.hand_page = 0;
            class.hand_chunk = 0;
        }
        for (id, page) in self.pages.iter_mut().enumerate() {
            if let Some(page) = page {
                page.bump = 0;
                page.free_head = NONE;
                page.free_count = 0;
                page.listed = page.class != 0;
                if page.class != 0 {
                    self.classes[page.class as usize - 1]
                        .with_free
                        .push(id as PageId);
                }
            }
        }
    }

    /// The whole memory of page `id`, which belongs to no class, to fill:
    /// a warm restart reads a saved page straight into it
    /// (`Engine::adopt_page`) before handing it to its class.
    pub fn classless_page_mut(&mut self, id: PageId) -> &mut [u8] {
        assert_eq!(self.page(id).class, 0, "page {id} is in a class");
        // SAFETY: a page in no class holds no item and no reserved chunk:
        // no index entry or magazine leads a GET or another thread to its
        // bytes, and `&mut self` makes this the engine's only reference
        // into the arena while the slice lives.
        unsafe { self.arena.bytes_mut(id, 0, self.page_size) }
    }

    /// The whole memory of page `id`, to read (a warm restart's save).
    /// The caller holds the engine lock and every stripe (checked), so no
    /// SET or GET touches any chunk meanwhile.
    pub fn page_bytes(&self, id: PageId) -> &[u8] {
        assert!(
            self.held.iter().all(|&h| h),
            "page {id} read without every stripe"
        );
        // SAFETY: with every stripe acquired and the engine lock held,
        // nobody else writes any chunk (readers and lock-free SETs need a
        // stripe; everything else the engine lock), and `&self` keeps the
        // engine from writing while the slice lives.
        unsafe { self.arena.bytes(id, 0, self.page_size) }
    }

    /// Hand page `id`, filled by `classless_page_mut`, to `class` with its
    /// first `bump` chunks handed out and `free_count` of them free, linked
    /// from `free_head` through their chunks as `free` links them (every
    /// other chunk below `bump` holds an item, linked by the caller).
    pub fn adopt(&mut self, id: PageId, class: usize, bump: u32, free_head: u32, free_count: u32) {
        self.assign(id, class);
        let page = self.page_mut(id);
        debug_assert!(bump <= page.nchunks && free_count <= bump);
        page.bump = bump;
        page.free_head = free_head;
        page.free_count = free_count;
        if free_head == NONE && bump == page.nchunks {
            page.listed = false;
            // `assign` listed it last.
            let listed = self.classes[class].with_free.pop();
            debug_assert_eq!(listed, Some(id));
        }
    }

    /// Locations of the live items of a page.
    pub fn live_in_page(&self, id: PageId) -> Vec<u64> {
        (0..self.page(id).bump)
            .map(|c| self.loc(id, c))
            .filter(|&l| self.bits(l) & item::LIVE != 0)
            .collect()
    }

    /// Whether a page may hold a live item (or a segment or reserved
    /// chunk): fewer of its handed-out chunks are free than were handed
    /// out. A cheap test before [`Slabs::live_in_page`] walks it.
    pub fn may_hold_items(&self, id: PageId) -> bool {
        let p = self.page(id);
        p.free_count < p.bump
    }

    /// Segments of chained items in a page (`chain`).
    pub fn segments_in_page(&self, id: PageId) -> Vec<u64> {
        (0..self.page(id).bump)
            .map(|c| self.loc(id, c))
            .filter(|&l| self.bits(l) == item::SEGMENT)
            .collect()
    }

    /// Per-class stats with the occupancy fields filled in.
    pub fn class_stats(&self, class: usize) -> SlabClassStats {
        let c = &self.classes[class];
        let mut s = c.stats.clone();
        s.total_chunks = c.pages.len() as u64 * c.per_page as u64;
        s.used_chunks = c.used + c.segments;
        s.number = c.used;
        s.mem_requested = c.requested;
        let mut free = 0u64;
        let mut end = 0u64;
        for &p in &c.pages {
            let page = self.page(p);
            free += page.free_count as u64 + (page.nchunks - page.bump) as u64;
            end += (page.nchunks - page.bump) as u64;
        }
        s.free_chunks = free;
        s.free_chunks_end = end;
        s
    }
}

#[cfg(any(test, feature = "testing"))]
impl Slabs {
    /// Check the page table and every class (tests and fuzzing; panics):
    /// vacant and spare lists, page ownership and geometry, per-page free
    /// lists (distinct free chunks below the bump cursor, none live, every
    /// other chunk below it live), `with_free` exactly the listed pages and
    /// every page with a free chunk listed, the CLOCK hand in range, the
    /// per-class page and item counts. `draining`: the page in transit,
    /// which stays `listed` off its class's `with_free` so no new item lands
    /// in its free chunks (`engine/pages.rs`), and whose chunks behind the
    /// drain's cursor (the second number) are emptied without being freed.
    pub fn validate(&self, draining: Option<(PageId, u32)>, reserved: &[(usize, u64)]) {
        // Chunks reserved for threads (`crate::magazine`): distinct, of
        // their class, handed out, neither free nor live.
        let mut reserved_at = std::collections::HashSet::new();
        for &(class, loc) in reserved {
            assert!(reserved_at.insert(loc), "chunk {loc} reserved twice");
            let (p, c) = self.split(loc);
            let page = self.page(p);
            assert_eq!(
                page.class as usize,
                class + 1,
                "reserved chunk {loc}'s class"
            );
            assert!(c < page.bump, "reserved chunk {loc} past the cursor");
            // The drain passes chunks that are no item: it would move the
            // page with this one still held.
            assert!(
                draining.is_none_or(|(d, _)| d != p),
                "reserved chunk {loc} on the page in transit"
            );
            assert_eq!(
                self.bits(loc) & item::LIVE,
                0,
                "reserved chunk {loc} is live"
            );
        }
        let mut vacant = self.vacant.clone();
        vacant.sort_unstable();
        vacant.dedup();
        assert_eq!(vacant.len(), self.vacant.len(), "vacant ids unique");
        let mut spare = self.spare.clone();
        spare.sort_unstable();
        spare.dedup();
        assert_eq!(spare.len(), self.spare.len(), "spare ids unique");
        let mut pages_of = vec![0u64; self.classes.len()];
        // Pages given back and not yet vacant again: those still to
        // release, those released, and those between the two (a holder
        // that has just let the engine lock go).
        let mut given_back = self.releasing.clone();
        given_back.extend(self.arena.released_now());
        given_back.sort_unstable();
        assert!(
            given_back.len() <= self.in_release,
            "pages given back counted"
        );
        let (mut none, mut between) = (0, 0);
        for (id, page) in self.pages.iter().enumerate() {
            let id = id as PageId;
            let Some(page) = page else {
                none += 1;
                if vacant.binary_search(&id).is_err() && given_back.binary_search(&id).is_err() {
                    between += 1;
                }
                continue;
            };
            assert!(
                vacant.binary_search(&id).is_err(),
                "live page {id} not vacant"
            );
            // SAFETY: validation runs with the engine lock and every stripe
            // held (or on slabs used alone): nobody writes meanwhile.
            let mem = unsafe { self.arena.bytes(id, 0, self.page_size) };
            let geometry = self.arena.geometry(id);
            if page.class == 0 {
                assert_eq!(geometry, None, "classless page {id} geometry");
                assert!(
                    spare.binary_search(&id).is_ok(),
                    "classless page {id} is spare"
                );
                continue;
            }
            assert!(
                spare.binary_search(&id).is_err(),
                "page {id} both spare and assigned"
            );
            let class = page.class as usize - 1;
            let c = &self.classes[class];
            assert!(c.pages.contains(&id), "class {class} owns its page {id}");
            pages_of[class] += 1;
            assert_eq!(page.chunk_size, c.chunk_size, "page {id} chunk size");
            assert_eq!(
                geometry,
                Some((class, c.chunk_size)),
                "page {id} geometry as GETs see it"
            );
            assert_eq!(page.nchunks, c.per_page, "page {id} chunks");
            assert!(page.bump <= page.nchunks, "page {id} bump cursor");
            // Free list: distinct chunks below the cursor, none live.
            let cs = page.chunk_size as usize;
            let mut free = vec![false; page.bump as usize];
            let mut n = 0;
            let mut next = page.free_head;
            while next != NONE {
                assert!(
                    next < page.bump,
                    "page {id}: free chunk {next} past the cursor"
                );
                assert!(!free[next as usize], "page {id}: free list loops at {next}");
                free[next as usize] = true;
                n += 1;
                let at = next as usize * cs;
                assert_eq!(item::bits(&mem[at..]) & item::LIVE, 0, "free chunk is live");
                next = u32::from_le_bytes(mem[at + 8..at + 12].try_into().unwrap());
            }
            assert_eq!(n, page.free_count, "page {id} free count");
            // Every chunk below the cursor is live, a chain segment, or on the
            // free list (a chunk that is none of these is lost memory).
            let drained = match draining {
                Some((p, next)) if p == id => next as usize,
                _ => 0,
            };
            for (c, &f) in free.iter().enumerate().skip(drained) {
                let chunk = &mem[c * cs..];
                let held = item::bits(chunk) & item::LIVE != 0
                    || item::is_segment(chunk)
                    || reserved_at.contains(&self.loc(id, c as u32));
                assert!(held != f, "page {id}: chunk {c} must be held or free");
            }
            let has_free = page.free_head != NONE || page.bump < page.nchunks;
            assert!(
                !has_free || page.listed,
                "page {id} has free chunks, unlisted"
            );
            let on_list = c.with_free.contains(&id);
            if draining.is_some_and(|(p, _)| p == id) {
                assert!(!on_list, "draining page {id} is off the free lists");
            } else {
                assert_eq!(page.listed, on_list, "page {id} listed flag");
            }
        }
        assert_eq!(
            none,
            self.vacant.len() + self.in_release,
            "pages without memory are vacant or given back"
        );
        assert!(
            between <= self.in_release - given_back.len(),
            "released pages unaccounted for"
        );
        for (i, c) in self.classes.iter().enumerate() {
            assert_eq!(c.pages.len() as u64, pages_of[i], "class {i} page list");
            assert_eq!(c.stats.total_pages, pages_of[i], "class {i} total_pages");
            let mut listed = c.with_free.clone();
            listed.sort_unstable();
            listed.dedup();
            assert_eq!(
                listed.len(),
                c.with_free.len(),
                "class {i} with_free unique"
            );
            assert!(
                listed.iter().all(|p| c.pages.contains(p)),
                "class {i} lists foreign pages"
            );
            // CLOCK's hand (evict/clock.rs) points into the class.
            assert!(
                c.hand_page < c.pages.len().max(1) && c.hand_chunk < c.per_page.max(1),
                "class {i} CLOCK hand ({}, {}) out of range",
                c.hand_page,
                c.hand_chunk
            );
            let (mut used, mut requested) = (0, 0);
            for &p in &c.pages {
                for loc in self.live_in_page(p) {
                    used += 1;
                    requested += item::Header::read(self.chunk(loc)).total_len() as u64;
                }
            }
            assert_eq!(c.used, used, "class {i} used");
            assert_eq!(c.requested, requested, "class {i} requested");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memcached_like_class_sizes() {
        let sizes = class_sizes(32, 1.25, 1 << 20);
        assert_eq!(&sizes[..6], &[32, 40, 52, 68, 88, 112]);
        assert_eq!(*sizes.last().unwrap(), 1 << 20);
        assert!(sizes.windows(2).all(|w| w[0] < w[1]));
        assert!(sizes.iter().all(|s| s % CHUNK_ALIGN as u32 == 0));
        // A small factor still terminates and stays under the class cap.
        let many = class_sizes(32, 1.01, 1 << 20);
        assert!(many.len() <= MAX_CLASSES);
    }

    #[test]
    fn alloc_free_and_move_pages() {
        let sizes = class_sizes(32, 1.25, 1 << 16);
        let mut s = Slabs::new(1 << 16, &sizes, 1 << 20, false);
        let class = s.class_for(40).unwrap();
        assert_eq!(s.classes[class].chunk_size, 40);
        assert!(s.take_free(class).is_none());
        let p = s.new_page().unwrap();
        s.assign(p, class);
        let per = s.classes[class].per_page as usize;
        let mut locs = Vec::new();
        while let Some(l) = s.take_free(class) {
            locs.push(l);
        }
        assert_eq!(locs.len(), per);
        let mut seen = locs.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), per, "chunks are distinct");
        s.free(locs[3]);
        s.free(locs[7]);
        assert_eq!(s.take_free(class), Some(locs[7]));
        assert_eq!(s.take_free(class), Some(locs[3]));
        assert_eq!(s.take_free(class), None);
        s.unassign(p);
        s.assign(p, class + 1);
        assert_eq!(s.class_stats(class).total_pages, 0);
        assert_eq!(s.class_stats(class + 1).total_pages, 1);
        assert!(s.take_free(class + 1).is_some());
    }

    #[test]
    fn a_page_given_back_is_reused_only_once_its_memory_is_dropped() {
        let sizes = class_sizes(32, 1.25, 1 << 16);
        let mut s = Slabs::new(1 << 16, &sizes, 1 << 20, false);
        s.defer_release();
        let class = s.class_for(40).unwrap();
        let (a, b) = (s.new_page().unwrap(), s.new_page().unwrap());
        s.assign(b, class);
        s.release_page(a);
        assert_eq!(s.pages_allocated(), 1, "a no longer counts");
        s.validate(None, &[]);
        // Not reusable yet: its memory is still to drop.
        let c = s.new_page().unwrap();
        assert_ne!(c, a);
        s.release_page(c);
        let ids = s.take_releasing();
        assert_eq!(ids, vec![a, c]);
        s.validate(None, &[]);
        s.arena.release_later(ids);
        s.validate(None, &[]);
        let d = s.new_page().unwrap();
        assert!(d == a || d == c, "a released page is reused");
        s.spare.push(d);
        assert_eq!(s.pages_allocated(), 2);
        s.validate(None, &[]);
    }
}

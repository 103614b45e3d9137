//! Where the Z-zone's compressed blocks live: 1 MB pages written as a log.
//!
//! zExpander allocates each block with malloc (§3.2); a block's size
//! changes with every rewrite, so malloc's free lists fragment, and what
//! the process holds can drift far above what the zone counts. Here a
//! block is appended at the head page's cursor (16-byte aligned) and its
//! old copy becomes garbage; when the head is full, the page with the
//! most garbage is compacted in place (its live blocks slid to its start)
//! and becomes the head, a few blocks at a time (`compact_step`: a page's
//! compaction at once held the zone's lock up to some 400 µs, issue 34).
//! The zone keeps its live bytes below a share of
//! its pages (`Zone`), so a compaction always gains room. Memory is whole
//! pages, counted exactly, and a page given back is unmapped at once.
//!
//! A block's location is one `u32`: page number × 2^16 + offset / 16.

/// Blocks start on this alignment (and their sizes are rounded up to it).
pub const ALIGN: usize = 16;

/// A location no block has (an empty block has no bytes).
pub const NOWHERE: u32 = u32::MAX;

/// Page `p`'s compaction: its block list's entries before `next` are
/// done, the live ones among them moved down below `cursor` and listed
/// again as the first `kept`.
struct Compacting {
    p: u32,
    next: usize,
    kept: usize,
    cursor: usize,
}

struct Page {
    buf: Box<[u8]>,
    /// Bytes appended so far.
    cursor: u32,
    /// Bytes of live blocks in the page.
    live: u32,
    /// Blocks appended since the page was last compacted, in offset order:
    /// (block id, offset). An entry is stale once its block moved; the
    /// zone tells which are live.
    blocks: Vec<(u32, u32)>,
}

pub struct Log {
    page_size: usize,
    pages: Vec<Option<Page>>,
    /// Unused page numbers.
    vacant: Vec<u32>,
    /// The page blocks are appended to.
    head: Option<u32>,
    count: usize,
    live: usize,
    /// Entries the pages' block lists have room for (their memory, kept
    /// as they change: `-m` is checked on every store).
    listed: usize,
    /// The compaction in progress, if any.
    compacting: Option<Compacting>,
    /// Buffers of released pages, kept for [`Log::take_retired`] when
    /// `defer` is set: unmapping a written megabyte takes 0.1-0.3 ms,
    /// which the zone's writer spends after it leaves the lock.
    retired: Vec<Box<[u8]>>,
    defer: bool,
}

#[inline]
pub fn round(len: usize) -> usize {
    len.div_ceil(ALIGN) * ALIGN
}

impl Log {
    pub fn new(page_size: usize) -> Log {
        assert!(page_size / ALIGN <= 1 << 16, "offsets fit in 16 bits");
        Log {
            page_size,
            pages: Vec::new(),
            vacant: Vec::new(),
            head: None,
            count: 0,
            live: 0,
            listed: 0,
            compacting: None,
            retired: Vec::new(),
            defer: false,
        }
    }

    /// Released pages' buffers are kept until taken (a writer thread
    /// frees them without the zone's lock), not freed at once.
    pub fn defer_frees(&mut self) {
        self.defer = true;
    }

    /// The buffers of pages released since the last call, to be dropped
    /// by the caller once it has left the zone's lock.
    pub fn take_retired(&mut self) -> Vec<Box<[u8]>> {
        std::mem::take(&mut self.retired)
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Pages held.
    pub fn pages(&self) -> usize {
        self.count
    }

    /// Bytes of live blocks (rounded to [`ALIGN`]).
    pub fn live_bytes(&self) -> usize {
        self.live
    }

    /// Memory held: the pages, and the bookkeeping (counted in `-m`).
    pub fn memory_bytes(&self) -> usize {
        self.count * self.page_size
            + self.pages.capacity() * std::mem::size_of::<Option<Page>>()
            + self.listed * std::mem::size_of::<(u32, u32)>()
    }

    fn split(loc: u32) -> (usize, usize) {
        ((loc >> 16) as usize, (loc & 0xffff) as usize * ALIGN)
    }

    fn page(&self, p: usize) -> &Page {
        self.pages[p].as_ref().expect("a block's page is held")
    }

    fn page_mut(&mut self, p: usize) -> &mut Page {
        self.pages[p].as_mut().expect("a block's page is held")
    }

    /// The `len` bytes at `loc`.
    pub fn read(&self, loc: u32, len: usize) -> &[u8] {
        let (p, off) = Self::split(loc);
        &self.page(p).buf[off..off + len]
    }

    /// Append block `id`'s bytes at the head, if they fit there.
    pub fn append(&mut self, id: u32, data: &[u8]) -> Option<u32> {
        let cap = round(data.len());
        let p = self.head? as usize;
        let page_size = self.page_size;
        let page = self.pages[p].as_mut().expect("the head page is held");
        let off = page.cursor as usize;
        if off + cap > page_size {
            return None;
        }
        page.buf[off..off + data.len()].copy_from_slice(data);
        page.cursor += cap as u32;
        page.live += cap as u32;
        let listed = page.blocks.capacity();
        page.blocks.push((id, off as u32));
        self.listed += page.blocks.capacity() - listed;
        self.live += cap;
        Some(((p as u32) << 16) | (off / ALIGN) as u32)
    }

    /// The room left at the head.
    pub fn head_room(&self) -> usize {
        self.head.map_or(0, |p| {
            self.page_size - self.page(p as usize).cursor as usize
        })
    }

    /// A new, empty page becomes the head.
    pub fn add_page(&mut self) {
        let page = Page {
            // A zeroed allocation this large is its own mapping, touched
            // (resident) only as blocks are written into it.
            buf: vec![0u8; self.page_size].into_boxed_slice(),
            cursor: 0,
            live: 0,
            blocks: Vec::new(),
        };
        let p = match self.vacant.pop() {
            Some(p) => {
                self.pages[p as usize] = Some(page);
                p
            }
            None => {
                self.pages.push(Some(page));
                (self.pages.len() - 1) as u32
            }
        };
        self.count += 1;
        self.head = Some(p);
    }

    /// The block of `len` bytes at `loc` is dead.
    pub fn kill(&mut self, loc: u32, len: usize) {
        let cap = round(len) as u32;
        let (p, _) = Self::split(loc);
        let page = self.page_mut(p);
        debug_assert!(page.live >= cap);
        page.live -= cap;
        self.live -= cap as usize;
    }

    /// The page with the fewest live bytes other than the head, and its
    /// live bytes.
    pub fn emptiest(&self) -> Option<(u32, usize)> {
        self.emptiest_except(u32::MAX)
    }

    /// The page a compaction leaves the most room in: the one with the
    /// fewest live bytes, the head included (a zone of one page has only
    /// its head, which fills with the garbage of rewritten blocks).
    pub fn roomiest(&self) -> Option<(u32, usize)> {
        self.least_live(|_| true)
    }

    /// [`Log::emptiest`], also passing over page `skip` (and the page being
    /// compacted).
    pub fn emptiest_except(&self, skip: u32) -> Option<(u32, usize)> {
        self.least_live(|p| Some(p) != self.head && p != skip)
    }

    /// The held page with the fewest live bytes among those `choose`
    /// takes, never the one being compacted.
    fn least_live(&self, choose: impl Fn(u32) -> bool) -> Option<(u32, usize)> {
        let busy = self.compacting();
        self.pages
            .iter()
            .enumerate()
            .map(|(p, pg)| (p as u32, pg))
            .filter(|&(p, _)| Some(p) != busy && choose(p))
            .filter_map(|(p, pg)| pg.as_ref().map(|pg| (p, pg.live as usize)))
            .min_by_key(|&(_, live)| live)
    }

    /// Write `data` at `loc`, where a block that was killed lay and which
    /// it fits (a block rewritten smaller in place).
    pub fn revive(&mut self, loc: u32, data: &[u8]) {
        let cap = round(data.len());
        let (p, off) = Self::split(loc);
        let page = self.page_mut(p);
        debug_assert!(off + cap <= page.cursor as usize);
        page.buf[off..off + data.len()].copy_from_slice(data);
        page.live += cap as u32;
        self.live += cap;
    }

    /// Begin sliding page `p`'s live blocks to its start, in order
    /// ([`Log::compact_step`]). Until that is done the page takes no
    /// appends (it stops being the head), and the page choices pass it by.
    pub fn begin_compact(&mut self, p: u32) {
        debug_assert!(self.compacting.is_none(), "one compaction at a time");
        if self.head == Some(p) {
            self.head = None;
        }
        self.compacting = Some(Compacting {
            p,
            next: 0,
            kept: 0,
            cursor: 0,
        });
    }

    /// The page being compacted, if any.
    pub fn compacting(&self) -> Option<u32> {
        self.compacting.as_ref().map(|c| c.p)
    }

    /// Move the compaction's next blocks down, about `bytes` of them.
    /// `live(id, loc)` gives the length of block `id` if it still lives at
    /// `loc`; the blocks that moved are added to `moved` with their new
    /// locations. True once the page is compacted: it is then the head,
    /// unless a page added meanwhile has more room.
    pub fn compact_step(
        &mut self,
        bytes: usize,
        live: impl Fn(u32, u32) -> Option<usize>,
        moved: &mut Vec<(u32, u32)>,
    ) -> bool {
        let Some(mut c) = self.compacting.take() else {
            return true;
        };
        let p = c.p;
        let page = self.pages[p as usize]
            .as_mut()
            .expect("compacting a held page");
        let mut done = 0;
        while c.next < page.blocks.len() && done < bytes {
            let (id, off) = page.blocks[c.next];
            c.next += 1;
            let loc = (p << 16) | (off / ALIGN as u32);
            let Some(len) = live(id, loc) else { continue };
            let cap = round(len);
            let off = off as usize;
            if off != c.cursor {
                page.buf.copy_within(off..off + cap, c.cursor);
                moved.push((id, (p << 16) | (c.cursor / ALIGN) as u32));
                done += cap;
            }
            // Entries before `next` are done; the kept ones are rewritten
            // over them, in order.
            page.blocks[c.kept] = (id, c.cursor as u32);
            c.kept += 1;
            c.cursor += cap;
        }
        if c.next < page.blocks.len() {
            self.compacting = Some(c);
            return false;
        }
        // Blocks kept and killed since are garbage below the cursor.
        debug_assert!(c.cursor >= page.live as usize, "live bytes are kept");
        page.cursor = c.cursor as u32;
        page.blocks.truncate(c.kept);
        let room = self.page_size - c.cursor;
        if self.head_room() < room {
            self.head = Some(p);
        }
        true
    }

    /// The blocks of page `p` that `live` says are there, with lengths.
    pub fn blocks_of(&self, p: u32, live: impl Fn(u32, u32) -> Option<usize>) -> Vec<(u32, usize)> {
        self.page(p as usize)
            .blocks
            .iter()
            .filter_map(|&(id, off)| live(id, (p << 16) | (off / ALIGN as u32)).map(|l| (id, l)))
            .collect()
    }

    /// Give page `p` back (it holds no live block).
    pub fn release(&mut self, p: u32) {
        let page = self.pages[p as usize]
            .take()
            .expect("releasing a held page");
        debug_assert_eq!(page.live, 0, "released page holds no live block");
        debug_assert_ne!(
            self.compacting(),
            Some(p),
            "releasing a page being compacted"
        );
        self.listed -= page.blocks.capacity();
        if self.defer {
            self.retired.push(page.buf);
        }
        self.vacant.push(p);
        self.count -= 1;
        if self.head == Some(p) {
            self.head = None;
        }
    }

    /// Every page given back.
    pub fn clear(&mut self) {
        self.pages.clear();
        self.vacant.clear();
        self.head = None;
        self.count = 0;
        self.live = 0;
        self.listed = 0;
        self.compacting = None;
    }

    /// Check the log's own counts against the blocks the zone says are
    /// live: `(loc, len)` of each.
    #[cfg(any(test, feature = "testing"))]
    pub fn validate(&self, blocks: &[(u32, usize)]) {
        let mut live = vec![0usize; self.pages.len()];
        for &(loc, len) in blocks {
            let (p, off) = Self::split(loc);
            let page = self.page(p);
            assert!(
                off + round(len) <= page.cursor as usize,
                "block within its page"
            );
            // Mid-compaction, the entries between the kept and the next
            // are stale.
            let listed = match &self.compacting {
                Some(c) if c.p as usize == p => {
                    let (kept, rest) = (&page.blocks[..c.kept], &page.blocks[c.next..]);
                    assert!(kept.iter().all(|&(_, o)| (o as usize) < c.cursor));
                    assert!(rest.iter().all(|&(_, o)| o as usize >= c.cursor));
                    kept.iter().chain(rest).any(|&(_, o)| o as usize == off)
                }
                _ => page.blocks.iter().any(|&(_, o)| o as usize == off),
            };
            assert!(listed, "block listed in its page");
            live[p] += round(len);
        }
        let mut total = 0;
        for (p, page) in self.pages.iter().enumerate() {
            match page {
                Some(pg) => {
                    assert_eq!(pg.live as usize, live[p], "page {p}'s live bytes");
                    assert!(pg.cursor as usize <= self.page_size);
                    total += live[p];
                }
                None => assert_eq!(live[p], 0),
            }
        }
        assert_eq!(total, self.live, "live bytes");
        let listed: usize = self
            .pages
            .iter()
            .flatten()
            .map(|p| p.blocks.capacity())
            .sum();
        assert_eq!(listed, self.listed, "block list room");
        assert_eq!(self.pages.iter().flatten().count(), self.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer frees released pages outside the zone's lock: with frees
    /// deferred, a released page's buffer waits to be taken (once), and
    /// the log counts it gone at once; without, nothing waits.
    #[test]
    fn released_pages_wait_for_the_writer_only_when_deferred() {
        for defer in [false, true] {
            let mut log = Log::new(64 << 10);
            if defer {
                log.defer_frees();
            }
            log.add_page();
            log.add_page();
            let loc = log.append(7, &[1u8; 100]).expect("room");
            log.kill(loc, 100);
            let (p, _) = Log::split(loc);
            log.release(p as u32);
            log.validate(&[]);
            assert_eq!(log.pages(), 1);
            let retired = log.take_retired();
            assert_eq!(retired.len(), usize::from(defer));
            assert!(retired.iter().all(|b| b.len() == 64 << 10));
            assert!(log.take_retired().is_empty(), "taken once");
        }
    }
}

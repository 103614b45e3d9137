//! Warm restart (memcached's `-e FILE`): at a clean shutdown the slab
//! pages in memory are written to a file as they are, and the next start
//! with the same `-e` brings their items back before it listens, with their
//! keys, values, flags, CAS values, TTLs (as absolute times, so the time
//! spent down counts), last access times, costs and stale marks.
//!
//! memcached 1.6 maps its item memory onto the file and re-links the items
//! at start, which ties the file to the same `-m` and layout, needs a RAM
//! disk, and is turned off with extstore. Here the file holds the pages
//! rather than being them: at start, with the same page layout (`-n`, `-f`,
//! `-I`, `slab_chunk_max`) and room for the pages, each saved page is read
//! with one `read` straight into a new page of the arena and adopted where
//! it lies (`Engine::adopt_page`: times moved to the new clock, expired
//! items dropped, free chunks linked, the index and the eviction policy
//! rebuilt from the items). No item is stored again; that is what makes
//! the start as fast as memcached's (docs/benchmarks.md).
//!
//! Otherwise (another layout, a smaller `-m`, the Z-zone on) the items are
//! taken out of the saved pages and stored one by one, in passes over bands
//! of last-access age, coldest first, so that a smaller cache keeps the
//! hottest ones and eviction order resumes roughly where it was. Chained
//! items (larger than the largest chunk) are always stored one by one, from
//! records after the pages. Files written by the item stream of earlier
//! versions (`v1`) still load.
//!
//! ```text
//! "cachalot-warm\0v2"
//! header: u32 length, then page size u32, chunk bits u32, -I u64, classes
//!         u32 and their chunk sizes (u32 each), -m u64, the clock's unix
//!         start i64 and its time u32, items u64, pages u64; CRC-32 u32
//! table:  per page, class u32, bump cursor u32, CRC-32 u32 of the page;
//!         CRC-32 u32 of the table; zeros to a multiple of 4 KB
//! pages:  each page's bytes, back to back (so a damaged page is skipped
//!         and the next one found, and a page can be mapped in place)
//! then the chained items as v1 blocks: u32 length, CRC-32, records; a
//! length of u32::MAX, and the item count u64
//! then, if the Z-zone held items, "zzone\0v2", its header (u32 length,
//! the split's share of memory f64, CRC-32 u32), its items as v1 blocks
//! with their records in key-hash order, a length of u32::MAX, and their
//! count u64 ("zzone\0v1" and records in any order: still loaded)
//! ```
//!
//! The Z-zone's items (zExpander's compressed blocks, `crate::zzone`) are
//! decoded at the save, a few blocks at a time under the zone's lock, and
//! sorted by key hash and written without it, as records of the chained
//! items' format; older loaders stop at the chained items' end and load
//! the rest. At load they are put back first (they were all evicted from
//! the N-zone: a smaller cache keeps the N-zone's), straight into the
//! zone in bulk (`crate::zzone::Refill`): a dictionary is trained on
//! samples of the first blocks, then each leaf's items, gathered in hash
//! order, are compressed once into their block by the zone's own flush
//! job, the zone granted a page of free memory whenever it needs one to
//! take them without sweeping. Stored one by one through the N-zone, as
//! before, each demotion rewrote its block (a million items took
//! seconds), and the N-zone they passed through ran over `-m` by a few
//! bytes now and then and gave up a whole page of items each time (1.7%
//! of them at `-m 64`). Once the pages' items are in, the split's share
//! of memory for the zone is the last run's again, the zone taking the
//! rest of it from the N-zone as the server runs. The pages' items are
//! stored one by one after them, with the maintainer's steps every
//! [`MAINTAIN_EVERY`] stores, as are a `zzone\0v1` section's items; a
//! Z-zone's engine never adopts pages (they share `-m` with the zone); an
//! engine without one adopts the pages, then stores the zone's items one
//! by one.
//!
//! On a RAM disk (tmpfs, where memcached's file must be too) the pages are
//! not even read: each is mapped shared from the file into its place in the
//! arena (`Arena::map_file`), so the file's memory becomes the cache's and
//! nothing is copied or zeroed; the file's name is removed once loaded (its
//! memory lives on in the mapping, and the rest of it is freed). Elsewhere
//! each page is read with one `read` into fresh memory.
//!
//! Every page and block is checked against its CRC-32 before anything in it
//! is trusted, and each chunk's header against the chunk: a damaged page
//! loads nothing (its items are misses, the other pages load), a damaged
//! block stops the chained items (or the Z-zone's) there; never wrong
//! bytes. The file is written beside its final name and renamed, and
//! removed once loaded: a crash after that start must not bring back items
//! that were deleted or changed meanwhile.
//!
//! Items on the flash tier are not written here: the tier keeps them in
//! its own file and restarts from it (`crate::flash`'s recovery).

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, BufWriter, ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::api::{
    image_view, ItemRef, Lookup, PageLayout, PageSource, SavedClock, SavedPage, Store, StoreMode,
    StoreOutcome,
};
use crate::cache::Cache;
use crate::clock::Expiry;
use crate::durable;
use crate::hash::hash;
use crate::item;

/// The item stream of earlier versions (still loaded).
const MAGIC_V1: &[u8; 16] = b"cachalot-warm\0v1";
const MAGIC: &[u8; 16] = b"cachalot-warm\0v2";
/// Block payloads are flushed at about this size.
const BLOCK: usize = 1 << 20;
/// The length field of the block that ends the file.
const END: u32 = u32::MAX;
/// Last-access age bands, oldest first (seconds; the last band is 0..10).
const AGE_BANDS: [u32; 5] = [3600, 600, 60, 10, 0];
/// Fixed part of a record: key length, flags, expiry, CAS, cost, bits,
/// value length.
const RECORD_HEAD: usize = 1 + 4 + 8 + 8 + 4 + 1 + 4;
const STALE: u8 = 1;
/// A page's entry in the table: class, bump cursor, CRC-32.
const PAGE_HEAD: usize = 12;
/// Pages start at a multiple of this (the kernel's page: `mmap` offsets).
const ALIGN: u64 = 4096;
/// `statfs`'s magic for tmpfs (linux/magic.h).
const TMPFS_MAGIC: i64 = 0x0102_1994;
/// Marks the Z-zone's items after the chained ones' end marker (older
/// loaders stop at that marker, so they load such a file without them).
/// `v1`: records in any order, stored one by one (still loaded); `v2`: a
/// header, then records in key-hash order, put back in bulk.
const ZONE_V1: &[u8; 8] = b"zzone\0v1";
const ZONE: &[u8; 8] = b"zzone\0v2";
/// Item bytes copied out of the Z-zone per hold of its lock at a save.
const ZONE_BATCH: usize = 64 << 10;
/// Blocks of the Z-zone's items read for dictionary samples before they
/// are put back.
const SAMPLE_BLOCKS: usize = 4;
/// Stores between two maintenance steps while items are stored one by one
/// with a Z-zone: no maintainer runs before the server starts, and the
/// zone grows only by the pages a maintenance step grants it.
const MAINTAIN_EVERY: u64 = 1024;
/// The longest header a loader accepts (a damaged length must not make it
/// allocate much).
const HEADER_MAX: u32 = 64 << 10;

/// What a save or a load did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WarmStats {
    /// Items written, or brought back at load.
    pub items: u64,
    /// Bytes of those items (at a save, as stored: headers included; at a
    /// load, keys and values).
    pub bytes: u64,
    /// At load: items whose TTL ran out while the server was down, or that
    /// the cache would not take (too large for the new `-I`, no memory).
    pub skipped: u64,
    /// At load: the file was damaged; what was sound was loaded.
    pub damaged: bool,
    /// At load: saved pages that failed their check (their items missing).
    pub bad_pages: u64,
    /// At load: whether the pages were adopted whole (else their items
    /// were stored one by one).
    pub adopted: bool,
    /// Of `items`, those of the Z-zone (written after the pages; at load,
    /// stored first).
    pub zone: u64,
}

/// The file's header.
struct Header {
    layout: PageLayout,
    memory_limit: u64,
    clock: SavedClock,
    items: u64,
    pages: u64,
}

impl Header {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(64 + 4 * self.layout.sizes.len());
        b.extend_from_slice(&self.layout.page_size.to_le_bytes());
        b.extend_from_slice(&self.layout.chunk_bits.to_le_bytes());
        b.extend_from_slice(&self.layout.item_size_max.to_le_bytes());
        b.extend_from_slice(&(self.layout.sizes.len() as u32).to_le_bytes());
        for s in &self.layout.sizes {
            b.extend_from_slice(&s.to_le_bytes());
        }
        b.extend_from_slice(&self.memory_limit.to_le_bytes());
        b.extend_from_slice(&self.clock.started_unix.to_le_bytes());
        b.extend_from_slice(&self.clock.now.to_le_bytes());
        b.extend_from_slice(&self.items.to_le_bytes());
        b.extend_from_slice(&self.pages.to_le_bytes());
        b
    }

    /// None if the bytes are not a header (short, or lengths that do not
    /// add up).
    fn decode(b: &[u8]) -> Option<Header> {
        let mut r = Bytes(b);
        let page_size = r.u32()?;
        let chunk_bits = r.u32()?;
        let item_size_max = r.u64()?;
        let n = r.u32()? as usize;
        if n > crate::slab::MAX_CLASSES || !(1..=1 << 30).contains(&page_size) {
            return None;
        }
        let sizes = (0..n).map(|_| r.u32()).collect::<Option<Vec<u32>>>()?;
        let header = Header {
            layout: PageLayout {
                page_size,
                chunk_bits,
                item_size_max,
                sizes,
            },
            memory_limit: r.u64()?,
            clock: SavedClock {
                started_unix: r.u64()? as i64,
                now: r.u32()?,
            },
            items: r.u64()?,
            pages: r.u64()?,
        };
        r.0.is_empty().then_some(header)
    }
}

/// A little-endian reader that says None at the end.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
}

/// Write every item in memory to `path` (`durable::replace`).
pub fn save(cache: &Cache, path: &Path) -> io::Result<WarmStats> {
    durable::replace(path, |file| {
        let mut out = BufWriter::with_capacity(BLOCK, file);
        let stats = write_file(cache, &mut out)?;
        out.flush()?;
        Ok(stats)
    })
}

/// Where the pages start, after the magic, a header of `header_len`
/// bytes and a table of `pages` entries.
fn pages_offset(header_len: u64, pages: u64) -> Option<u64> {
    let end = (16 + 4 + 4 + 4 + header_len).checked_add(pages.checked_mul(PAGE_HEAD as u64)?)?;
    end.checked_next_multiple_of(ALIGN)
}

fn write_file(cache: &Cache, out: &mut BufWriter<&mut File>) -> io::Result<WarmStats> {
    out.write_all(MAGIC)?;
    let clock = cache.clock();
    let (unix_now, now) = (clock.unix_now(), clock.now());
    // One hold of the lock for all pages: at a clean stop nothing else
    // runs, and the header's page count stays true.
    let mut engine = cache.lock();
    let counts = engine.stats();
    let header = Header {
        layout: engine.page_layout(),
        memory_limit: engine.memory_limit() as u64,
        clock: SavedClock {
            started_unix: clock.started_unix(),
            now,
        },
        items: counts.curr_items,
        pages: engine.class_pages() as u64,
    };
    let head = header.encode();
    out.write_all(&(head.len() as u32).to_le_bytes())?;
    out.write_all(&head)?;
    out.write_all(&crc32fast::hash(&head).to_le_bytes())?;
    // The table is written once the pages' CRCs are known.
    let table_at = out.stream_position()?;
    let pages_at = pages_offset(head.len() as u64, header.pages)
        .ok_or_else(|| io::Error::other("too many pages"))?;
    out.write_all(&vec![0u8; (pages_at - table_at) as usize])?;
    let mut table = Vec::with_capacity(header.pages as usize * PAGE_HEAD + 4);
    let written = engine.save_pages(|class, bump, bytes| {
        table.extend_from_slice(&(class as u32).to_le_bytes());
        table.extend_from_slice(&bump.to_le_bytes());
        table.extend_from_slice(&crc32fast::hash(bytes).to_le_bytes());
        out.write_all(bytes)
    })?;
    if written != header.pages {
        return Err(io::Error::other("the pages changed while they were saved"));
    }
    // Chained items, one by one.
    let mut block = Vec::with_capacity(BLOCK + 4096);
    let mut chained = 0u64;
    let mut failed = None;
    engine.export_chained(|item| {
        // Absolute expiry: the time spent down counts against the TTL.
        let exp_unix = match item.expiry {
            Expiry::Never => 0,
            Expiry::Expired => return,
            Expiry::At(t) => unix_now + i64::from(t.saturating_sub(now)),
        };
        encode(item, exp_unix, &mut block);
        chained += 1;
        if block.len() >= BLOCK {
            if failed.is_none() {
                failed = write_block(out, &block).err();
            }
            block.clear();
        }
    });
    drop(engine);
    if let Some(e) = failed {
        return Err(e);
    }
    if !block.is_empty() {
        write_block(out, &block)?;
    }
    out.write_all(&END.to_le_bytes())?;
    out.write_all(&chained.to_le_bytes())?;
    let zone = write_zone(cache, out)?;
    let crc = crc32fast::hash(&table);
    table.extend_from_slice(&crc.to_le_bytes());
    out.seek(SeekFrom::Start(table_at))?;
    out.write_all(&table)?;
    Ok(WarmStats {
        items: counts.curr_items,
        bytes: counts.bytes,
        zone,
        ..WarmStats::default()
    })
}

/// The Z-zone's items, if it holds any: [`ZONE`], its header (the
/// split's share of memory, CRC-32'd), then v1 blocks of their records in
/// key-hash order, the end marker and their count. Copied out a few
/// leaves at a time under the zone's lock (`Cache::export_zone`: decoded
/// there, live ones only, a leaf's staged items before its block's) and
/// sorted and written without it: in hash order the load builds each
/// block once (`crate::zzone::Refill`).
fn write_zone(cache: &Cache, out: &mut impl Write) -> io::Result<u64> {
    let clock = cache.clock();
    let (unix_now, now) = (clock.unix_now(), clock.now());
    let (mut images, mut block) = (Vec::new(), Vec::with_capacity(BLOCK + ZONE_BATCH));
    let mut order = Vec::new();
    let mut n = 0u64;
    let mut at = Some(0);
    while let Some(from) = at {
        images.clear();
        at = cache.export_zone(from, u64::MAX, ZONE_BATCH, &mut images);
        // Whole leaves, in hash order: sorted within, sorted throughout.
        order.clear();
        let mut offset = 0;
        for image in crate::zzone::export::images(&images) {
            order.push((hash(item::key(image)), offset, image.len()));
            offset += image.len();
        }
        order.sort_unstable_by_key(|&(h, _, _)| h);
        for &(_, offset, len) in &order {
            let item = image_view(&images[offset..offset + len], true, now);
            let exp_unix = match item.expiry {
                Expiry::Never => 0,
                Expiry::Expired => continue,
                Expiry::At(t) => unix_now + i64::from(t.saturating_sub(now)),
            };
            if n == 0 {
                out.write_all(ZONE)?;
                let head = cache.zone_share().unwrap_or(0.0).to_le_bytes();
                out.write_all(&(head.len() as u32).to_le_bytes())?;
                out.write_all(&head)?;
                out.write_all(&crc32fast::hash(&head).to_le_bytes())?;
            }
            encode(&item, exp_unix, &mut block);
            n += 1;
        }
        if block.len() >= BLOCK {
            write_block(out, &block)?;
            block.clear();
        }
    }
    if n > 0 {
        if !block.is_empty() {
            write_block(out, &block)?;
        }
        out.write_all(&END.to_le_bytes())?;
        out.write_all(&n.to_le_bytes())?;
    }
    Ok(n)
}

fn encode(item: &ItemRef<'_>, exp_unix: i64, out: &mut Vec<u8>) {
    // Keys are at most 250 bytes (`KEY_MAX_LENGTH`), so one byte holds it.
    out.push(item.key.len() as u8);
    out.extend_from_slice(&item.flags.to_le_bytes());
    out.extend_from_slice(&exp_unix.to_le_bytes());
    out.extend_from_slice(&item.cas.to_le_bytes());
    out.extend_from_slice(&item.cost.to_le_bytes());
    out.push(if item.stale { STALE } else { 0 });
    out.extend_from_slice(&(item.value.len() as u32).to_le_bytes());
    out.extend_from_slice(item.key);
    item.value.copy_to(out);
}

fn write_block(out: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    out.write_all(&(payload.len() as u32).to_le_bytes())?;
    out.write_all(&crc32fast::hash(payload).to_le_bytes())?;
    out.write_all(payload)
}

/// Load what `save` wrote, then remove the file. A missing file is no
/// items (a first start); a file that is not ours is an error, and stays.
pub fn load(cache: &Cache, path: &Path) -> io::Result<WarmStats> {
    // Read-write where allowed: pages are mapped shared from a RAM disk.
    let opened = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(e),
        // Read-only (permissions, a read-only file system): read the pages.
        Err(_) => File::open(path).map(|f| (f, false)),
    };
    let (mut file, writable) = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(WarmStats::default()),
        Err(e) => return Err(e),
    };
    let size = file.metadata()?.len();
    let mut magic = [0u8; 16];
    file.read_exact(&mut magic)?;
    let stats = match &magic {
        MAGIC => {
            let map = writable && on_ram_disk(&file);
            load_pages(cache, &mut file, size, map)?
        }
        MAGIC_V1 => load_items(cache, &mut BufReader::with_capacity(BLOCK, file), size),
        _ => {
            return Err(io::Error::new(
                ErrorKind::InvalidData,
                "not a cachalot warm restart file",
            ))
        }
    };
    std::fs::remove_file(path)?;
    Ok(stats)
}

/// Whether `file` is on tmpfs (a RAM disk), where mapping its pages costs
/// no copy and writing them no disk I/O.
fn on_ram_disk(file: &File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: fstatfs fills the zeroed struct we own; a plain query.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a pointer to that struct.
    let r = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
    r == 0 && st.f_type as i64 == TMPFS_MAGIC
}

/// Free the file's memory in `start..end` (the parts no page maps, once a
/// RAM disk's pages are mapped: the file's name goes, its memory does not
/// while mapped). Best effort.
fn punch(file: &File, start: u64, end: u64) {
    use std::os::fd::AsRawFd;
    let (Ok(at), Ok(len)) = (
        libc::off_t::try_from(start),
        libc::off_t::try_from(end.saturating_sub(start)),
    ) else {
        return;
    };
    if len > 0 {
        // SAFETY: a plain syscall on our descriptor; no memory is passed.
        unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                at,
                len,
            );
        }
    }
}

/// A page's table entry: class, bump cursor, CRC-32.
#[derive(Clone, Copy)]
struct Entry {
    class: usize,
    bump: u32,
    crc: u32,
}

impl Entry {
    fn of(b: &[u8]) -> Option<Entry> {
        let mut r = Bytes(b);
        Some(Entry {
            class: r.u32()? as usize,
            bump: r.u32()?,
            crc: r.u32()?,
        })
    }

    /// Whether `page` holds the bytes this entry was written for (the
    /// engine checks adopted pages itself).
    fn sound(&self, page: &[u8]) -> bool {
        crc32fast::hash(page) == self.crc
    }
}

/// A v2 file after its magic. Only an I/O error other than a short file
/// is an error; damage is reported in the stats. `map`: the file is on a
/// RAM disk and open for writing, so pages may be mapped.
fn load_pages(cache: &Cache, file: &mut File, size: u64, map: bool) -> io::Result<WarmStats> {
    let mut stats = WarmStats::default();
    let Some((header, head_len)) = read_header(file)? else {
        stats.damaged = true;
        return Ok(stats);
    };
    let page_size = header.layout.page_size as u64;
    let pages_at = pages_offset(head_len, header.pages);
    let chained_at = header
        .pages
        .checked_mul(page_size)
        .zip(pages_at)
        .and_then(|(b, at)| b.checked_add(at));
    let (Some(pages_at), Some(chained_at)) = (pages_at, chained_at) else {
        stats.damaged = true;
        return Ok(stats);
    };
    if chained_at > size {
        // Cut short: whatever pages are whole still load.
        stats.damaged = true;
    }
    // The table (bounded by the file's size before anything is allocated).
    let table_len = header.pages as usize * PAGE_HEAD + 4;
    let mut table = vec![0u8; table_len];
    if !read_full(file, &mut table)? {
        stats.damaged = true;
        return Ok(stats);
    }
    let (entries, crc) = table.split_at(table_len - 4);
    if crc32fast::hash(entries).to_le_bytes() != crc {
        // No page can be trusted; the chained items still can.
        stats.damaged = true;
        stats.bad_pages = header.pages;
    } else {
        let pages = usize::try_from(header.pages).unwrap_or(usize::MAX);
        // No more than the pages can hold (the count sizes the index).
        let smallest = header.layout.sizes.first().map_or(1, |&c| c.max(1));
        let most = header
            .pages
            .saturating_mul(u64::from(header.layout.page_size / smallest));
        let items = usize::try_from(header.items.min(most)).unwrap_or(usize::MAX);
        let limit = usize::try_from(header.memory_limit).unwrap_or(usize::MAX);
        let adopt = cache.lock().can_adopt(&header.layout, pages, items, limit);
        let mut max_cas = 0;
        let at = Pages {
            header: &header,
            entries,
            offset: pages_at,
            items,
        };
        let zone_at = find_zone(file, chained_at, size);
        // The Z-zone's items were evicted from the N-zone: stored first,
        // so that a smaller cache keeps the N-zone's. Adopted pages need
        // an engine with nothing stored yet: then they come after.
        let mut share = None;
        if !adopt {
            share = load_zone(cache, file, zone_at, size, &mut stats, &mut max_cas);
        }
        let mut whole = match adopt {
            true => adopt_pages(cache, file, &at, map, size, &mut stats, &mut max_cas),
            false => store_pages(cache, file, &at, &mut stats, &mut max_cas),
        };
        if adopt {
            share = load_zone(cache, file, zone_at, size, &mut stats, &mut max_cas);
        }
        if whole.is_ok() && chained_at <= size {
            whole = file
                .seek(SeekFrom::Start(chained_at))
                .map(drop)
                .map_err(drop);
        }
        if whole.is_ok() && chained_at <= size {
            let mut input = BufReader::with_capacity(BLOCK, &mut *file);
            read_blocks(cache, &mut input, size, &mut stats, &mut max_cas);
        } else {
            stats.damaged = true;
        }
        if stats.adopted && map {
            // Only the mapped pages' memory is the cache's.
            punch(file, 0, pages_at);
            punch(file, chained_at, size);
        }
        if let Some(share) = share {
            cache.raise_zone_share(share);
        }
        cache.lock().raise_cas(max_cas);
        return Ok(stats);
    }
    let zone_at = find_zone(file, chained_at, size);
    let mut max_cas = 0;
    let share = load_zone(cache, file, zone_at, size, &mut stats, &mut max_cas);
    if file.seek(SeekFrom::Start(chained_at)).is_ok() {
        let mut input = BufReader::with_capacity(BLOCK, &mut *file);
        read_blocks(cache, &mut input, size, &mut stats, &mut max_cas);
    }
    if let Some(share) = share {
        cache.raise_zone_share(share);
    }
    cache.lock().raise_cas(max_cas);
    Ok(stats)
}

/// Where the Z-zone's blocks start (after [`ZONE`]), if the file has
/// them: past the chained items' blocks, which start at `chained_at`,
/// their end marker and count. None for a file without them (written
/// before they were, or by a server without a Z-zone) or one damaged
/// before them.
fn find_zone(file: &mut File, chained_at: u64, size: u64) -> Option<ZoneAt> {
    let mut at = chained_at;
    let mut head = [0u8; 8];
    loop {
        file.seek(SeekFrom::Start(at)).ok()?;
        file.read_exact(&mut head).ok()?;
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        if len == END {
            break;
        }
        at = at.checked_add(8 + u64::from(len)).filter(|&a| a <= size)?;
    }
    // The end marker (4 bytes) and the chained items' count (8), then the
    // mark.
    let mark = at + 12;
    file.seek(SeekFrom::Start(mark)).ok()?;
    file.read_exact(&mut head).ok()?;
    match &head {
        ZONE => Some(ZoneAt::Sorted(mark + 8)),
        ZONE_V1 => Some(ZoneAt::Any(mark + 8)),
        _ => None,
    }
}

/// Where a file's Z-zone section starts, after its mark, and which it is.
#[derive(Clone, Copy)]
enum ZoneAt {
    /// `v1`: the items' blocks, in any order.
    Any(u64),
    /// `v2`: its header, then the items' blocks in key-hash order.
    Sorted(u64),
}

/// Bring back the Z-zone's items from the section at `zone_at` (if any):
/// put back in bulk into a Z-zone if the engine has one and they are in
/// hash order ([`refill_zone`]), else stored one by one. A damaged block
/// stops there, as for the chained items. Returns the last run's share of
/// memory for the zone, if the file says it: given back once the pages'
/// items are in (`Cache::raise_zone_share`), so that the N-zone's items
/// go to the N-zone first, and the zone takes the rest of its share from
/// it once the server runs, as it would have.
fn load_zone(
    cache: &Cache,
    file: &mut File,
    zone_at: Option<ZoneAt>,
    size: u64,
    stats: &mut WarmStats,
    max_cas: &mut u64,
) -> Option<f64> {
    let zone_at = zone_at?;
    let before = stats.items;
    let (at, sorted) = match zone_at {
        ZoneAt::Any(at) => (at, false),
        ZoneAt::Sorted(at) => (at, true),
    };
    if file.seek(SeekFrom::Start(at)).is_err() {
        stats.damaged = true;
        return None;
    }
    let mut input = BufReader::with_capacity(BLOCK, &mut *file);
    let share = match sorted {
        true => match read_zone_header(&mut input) {
            Some(share) => Some(share),
            None => {
                stats.damaged = true;
                return None;
            }
        },
        false => None,
    };
    if sorted && cache.has_zone() {
        refill_zone(cache, &mut input, size, stats, max_cas);
    } else {
        read_blocks(cache, &mut input, size, stats, max_cas);
    }
    stats.zone += stats.items - before;
    share
}

/// The `v2` Z-zone section's header: the split's share of memory (None if
/// damaged, or not a share).
fn read_zone_header(input: &mut impl Read) -> Option<f64> {
    let mut len = [0u8; 4];
    input.read_exact(&mut len).ok()?;
    let len = u32::from_le_bytes(len);
    if len > HEADER_MAX {
        return None;
    }
    let mut b = vec![0u8; len as usize + 4];
    input.read_exact(&mut b).ok()?;
    let (head, crc) = b.split_at(len as usize);
    if crc32fast::hash(head).to_le_bytes() != crc {
        return None;
    }
    let share = f64::from_le_bytes(Bytes(head).take::<8>()?);
    (0.0..=1.0).contains(&share).then_some(share)
}

/// Put the Z-zone's items (`v2`: in key-hash order) back into the zone in
/// bulk (`Cache::refill_zone`), before the pages' items are stored: first
/// samples from its first blocks train a dictionary, as the zone's first
/// demotions would, then each block's items go in as images; those the
/// zone does not take are stored one by one.
fn refill_zone<R: Read + Seek>(
    cache: &Cache,
    input: &mut R,
    size: u64,
    stats: &mut WarmStats,
    max_cas: &mut u64,
) {
    let mut payload = Vec::new();
    let mut images = Vec::new();
    let Ok(start) = input.stream_position() else {
        stats.damaged = true;
        return;
    };
    let mut wanting = true;
    for _ in 0..SAMPLE_BLOCKS {
        if !wanting || !matches!(read_block(input, size, &mut payload), Ok(true)) {
            break;
        }
        images.clear();
        let mut skipped = WarmStats::default();
        let _ = zone_images(cache, &payload, &mut images, &mut skipped, &mut 0);
        for image in crate::zzone::export::images(&images) {
            wanting = cache.zone_sample(image);
            if !wanting {
                break;
            }
        }
    }
    cache.train_zone();
    if input.seek(SeekFrom::Start(start)).is_err() {
        stats.damaged = true;
        return;
    }
    let mut refill = crate::zzone::Refill::default();
    let mut rejected = Vec::new();
    loop {
        if !next_block(input, size, &mut payload, stats) {
            break;
        }
        images.clear();
        let whole = zone_images(cache, &payload, &mut images, stats, max_cas);
        rejected.clear();
        stats.items += cache.refill_zone(&mut refill, &images, &mut rejected);
        for image in crate::zzone::export::images(&rejected) {
            store_image(cache, image, stats);
        }
        if whole.is_none() {
            stats.damaged = true;
            break;
        }
    }
    cache.refill_zone_done(&mut refill);
}

/// The records of a block as item images (expiry on this clock), back to
/// back in `out`; the expired ones are counted as skipped, the others'
/// key and value bytes in `stats`. None if a record runs past the block's
/// end (those before it are in `out`).
fn zone_images(
    cache: &Cache,
    mut rest: &[u8],
    out: &mut Vec<u8>,
    stats: &mut WarmStats,
    max_cas: &mut u64,
) -> Option<()> {
    let now = cache.clock().now();
    while !rest.is_empty() {
        let (it, len) = decode_record(rest)?;
        rest = &rest[len..];
        let exptime = match it.exp_unix {
            0 => 0,
            t => match cache.clock().expiry(t) {
                Expiry::Expired => {
                    stats.skipped += 1;
                    continue;
                }
                e => crate::api::exptime_of(e),
            },
        };
        let bits = item::LIVE | if it.stale { item::STALE } else { 0 };
        let at = out.len();
        out.resize(
            at + item::total_len(it.key.len(), it.value.len(), it.flags),
            0,
        );
        item::write(
            &mut out[at..],
            it.cas,
            item::atime_code(now),
            item::quantize_cost(it.cost),
            bits,
            exptime,
            it.flags,
            it.key,
            &[it.value],
        );
        stats.bytes += (it.key.len() + it.value.len()) as u64;
        *max_cas = (*max_cas).max(it.cas);
    }
    Some(())
}

/// Store an item image the Z-zone did not take, as a saved item is.
fn store_image(cache: &Cache, image: &[u8], stats: &mut WarmStats) {
    let parts = item::parts(image);
    let h = parts.header;
    stats.bytes -= (parts.key.len() + parts.value.len()) as u64;
    let saved = Saved {
        key: parts.key,
        value: parts.value,
        flags: parts.flags,
        exp_unix: match h.exptime {
            0 => 0,
            t => cache.clock().started_unix() + i64::from(t),
        },
        cas: h.cas,
        cost: item::dequantize_cost(h.cost),
        stale: h.bits & item::STALE != 0,
    };
    store(cache, &saved, stats, &mut 0);
}

/// The header and its length, None if damaged.
fn read_header(file: &mut File) -> io::Result<Option<(Header, u64)>> {
    let mut len = [0u8; 4];
    if !read_full(file, &mut len)? {
        return Ok(None);
    }
    let len = u32::from_le_bytes(len);
    if len > HEADER_MAX {
        return Ok(None);
    }
    let mut b = vec![0u8; len as usize + 4];
    if !read_full(file, &mut b)? {
        return Ok(None);
    }
    let (head, crc) = b.split_at(len as usize);
    if crc32fast::hash(head).to_le_bytes() != crc {
        return Ok(None);
    }
    // A table longer than the file is damage too.
    let size = file.metadata()?.len();
    Ok(Header::decode(head)
        .filter(|h| h.pages.saturating_mul(PAGE_HEAD as u64) < size)
        .map(|h| (h, u64::from(len))))
}

/// `read_exact`, false at a short file.
fn read_full(file: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    match file.read_exact(buf) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// The pages of a file: its header, their table entries, where they
/// start, and how many items they hold (the header's count, bounded by
/// what the pages can hold).
struct Pages<'a> {
    header: &'a Header,
    entries: &'a [u8],
    offset: u64,
    items: usize,
}

impl Pages<'_> {
    fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        self.entries.chunks_exact(PAGE_HEAD).filter_map(Entry::of)
    }
}

/// The fast path: every page mapped or read into the arena and adopted
/// (`Engine::adopt_pages`). `size`: the file's. Err(()) if the file ended
/// early (what was read is loaded).
fn adopt_pages(
    cache: &Cache,
    file: &mut File,
    at: &Pages<'_>,
    map: bool,
    size: u64,
    stats: &mut WarmStats,
    max_cas: &mut u64,
) -> Result<(), ()> {
    stats.adopted = true;
    let header = at.header;
    file.seek(SeekFrom::Start(at.offset)).map_err(drop)?;
    let page_size = u64::from(header.layout.page_size);
    let file = &*file;
    let pages = at.entries().enumerate().map(|(i, entry)| {
        let offset = at.offset + i as u64 * page_size;
        SavedPage {
            class: entry.class,
            bump: entry.bump,
            crc: entry.crc,
            // (A mapped page past the file's end would fault when read.)
            source: match map && offset + page_size <= size {
                true => PageSource::Map(file, offset),
                false => PageSource::Read(file),
            },
        }
    });
    let (out, result) = cache.lock().adopt_pages(header.clock, at.items, pages);
    *max_cas = (*max_cas).max(out.max_cas);
    stats.items += out.items;
    stats.bytes += out.bytes;
    stats.skipped += out.expired;
    stats.bad_pages += out.bad_pages;
    stats.damaged |= stats.bad_pages > 0;
    result.map_err(drop)
}

/// The other path: the pages' items stored one by one, coldest first, in
/// a pass over the pages per band of last-access age. Err(()) if the file
/// ended early.
fn store_pages(
    cache: &Cache,
    file: &mut File,
    at: &Pages<'_>,
    stats: &mut WarmStats,
    max_cas: &mut u64,
) -> Result<(), ()> {
    let header = at.header;
    let layout = &header.layout;
    let page_size = layout.page_size as usize;
    let mut page = vec![0u8; page_size];
    let mut max_age = u32::MAX;
    for (pass, min_age) in AGE_BANDS.into_iter().enumerate() {
        file.seek(SeekFrom::Start(at.offset)).map_err(|_| ())?;
        let mut input = BufReader::with_capacity(BLOCK, &mut *file);
        for entry in at.entries() {
            if !matches!(read_full(&mut input, &mut page), Ok(true)) {
                return Err(());
            }
            if !entry.sound(&page) {
                stats.bad_pages += u64::from(pass == 0);
                stats.damaged = true;
                continue;
            }
            let Some(&cs) = layout.sizes.get(entry.class) else {
                continue;
            };
            let (cs, bump) = (cs as usize, entry.bump as usize);
            if cs == 0 || bump > page_size / cs {
                continue;
            }
            for chunk in page.chunks_exact(cs).take(bump) {
                if item::bits(chunk) & item::LIVE == 0 {
                    continue;
                }
                // A chained item's head does not fit: it has a record.
                if !matches!(item::image_len(chunk), Some(n) if n <= cs) {
                    continue;
                }
                let code = u16::from_le_bytes([chunk[5], chunk[13]]);
                let age = item::atime_age(code, header.clock.now);
                if age < min_age || age >= max_age {
                    continue;
                }
                let parts = item::parts(chunk);
                let h = parts.header;
                let exp_unix = match h.exptime {
                    0 => 0,
                    t => header.clock.started_unix + i64::from(t),
                };
                let saved = Saved {
                    key: parts.key,
                    value: parts.value,
                    flags: parts.flags,
                    exp_unix,
                    cas: h.cas,
                    cost: item::dequantize_cost(h.cost),
                    stale: h.bits & item::STALE != 0,
                };
                store(cache, &saved, stats, max_cas);
            }
        }
        max_age = min_age;
    }
    Ok(())
}

/// An item as saved.
struct Saved<'a> {
    key: &'a [u8],
    value: &'a [u8],
    flags: u32,
    /// Absolute expiry (0: never).
    exp_unix: i64,
    cas: u64,
    cost: u32,
    stale: bool,
}

/// Store a saved item unless it expired meanwhile.
fn store(cache: &Cache, it: &Saved<'_>, stats: &mut WarmStats, max_cas: &mut u64) {
    let expiry = match it.exp_unix {
        0 => Expiry::Never,
        t => match cache.clock().expiry(t) {
            Expiry::Expired => {
                stats.skipped += 1;
                return;
            }
            e => e,
        },
    };
    let req = Store {
        key: it.key,
        value: it.value,
        flags: it.flags,
        expiry,
        mode: StoreMode::Set,
        cas: 0,
        new_cas: (it.cas != 0).then_some(it.cas),
        // `ItemRef::cost` reads 1 for an item stored without one.
        cost: (it.cost != 1).then_some(it.cost),
        invalidate: false,
    };
    match cache.store(&req) {
        StoreOutcome::Stored { .. } => {
            stats.items += 1;
            if stats.items.is_multiple_of(MAINTAIN_EVERY) && cache.has_zone() {
                // What the maintainer would do meanwhile: grant the zone
                // its pages, and train its dictionary once samples are in
                // (without one, blocks hold fewer items than they did).
                cache.maintain(512);
                cache.train_zone();
            }
            stats.bytes += (it.key.len() + it.value.len()) as u64;
            *max_cas = (*max_cas).max(it.cas);
            if it.stale {
                let mut engine = cache.lock();
                if let Some(id) = engine.lookup(it.key, Lookup::PEEK).map(|it| it.id) {
                    engine.set_stale(id, true);
                }
            }
        }
        _ => stats.skipped += 1,
    }
}

/// A v1 file after its magic: blocks of records to the end.
fn load_items(cache: &Cache, input: &mut impl Read, size: u64) -> WarmStats {
    // One thread: stores from several contend for the engine's page
    // allocation and were slower (measured: 4.9 s against 4.4 s for 4 M).
    let mut stats = WarmStats::default();
    let mut max_cas = 0;
    read_blocks(cache, input, size, &mut stats, &mut max_cas);
    cache.lock().raise_cas(max_cas);
    stats
}

/// Store the items of the blocks up to the end marker; a damaged block
/// stops there.
fn read_blocks(
    cache: &Cache,
    input: &mut impl Read,
    size: u64,
    stats: &mut WarmStats,
    max_cas: &mut u64,
) {
    let mut payload = Vec::new();
    loop {
        if !next_block(input, size, &mut payload, stats) {
            break;
        }
        if decode_block(cache, &payload, stats, max_cas).is_none() {
            stats.damaged = true;
            break;
        }
    }
}

/// The next block's payload into `buf`; false at the end marker.
/// [`read_block`] for a loop over blocks: false at the end marker, or
/// (the file then counted damaged) at a block that does not read.
fn next_block(input: &mut impl Read, size: u64, buf: &mut Vec<u8>, stats: &mut WarmStats) -> bool {
    match read_block(input, size, buf) {
        Ok(more) => more,
        Err(_) => {
            stats.damaged = true;
            false
        }
    }
}

fn read_block(input: &mut impl Read, file_size: u64, buf: &mut Vec<u8>) -> io::Result<bool> {
    let mut head = [0u8; 8];
    input.read_exact(&mut head)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if len == END {
        return Ok(false);
    }
    // A damaged length must not make us allocate more than the file holds.
    if u64::from(len) > file_size {
        return Err(ErrorKind::InvalidData.into());
    }
    buf.resize(len as usize, 0);
    input.read_exact(buf)?;
    if crc32fast::hash(buf) != crc {
        return Err(ErrorKind::InvalidData.into());
    }
    Ok(true)
}

/// Store a block's items; None if a record runs past the block's end.
fn decode_block(
    cache: &Cache,
    mut rest: &[u8],
    stats: &mut WarmStats,
    max_cas: &mut u64,
) -> Option<()> {
    while !rest.is_empty() {
        let (saved, len) = decode_record(rest)?;
        rest = &rest[len..];
        store(cache, &saved, stats, max_cas);
    }
    Some(())
}

/// The record at the start of `rest`, and its length; None if it runs
/// past the end.
fn decode_record(rest: &[u8]) -> Option<(Saved<'_>, usize)> {
    let mut head = Bytes(rest.get(..RECORD_HEAD)?);
    let key_len = head.take::<1>()?[0] as usize;
    let flags = head.u32()?;
    let exp_unix = head.u64()? as i64;
    let cas = head.u64()?;
    let cost = head.u32()?;
    let bits = head.take::<1>()?[0];
    let value_len = head.u32()? as usize;
    let len = RECORD_HEAD + key_len + value_len;
    let body = rest.get(RECORD_HEAD..len)?;
    let (key, value) = body.split_at(key_len);
    let saved = Saved {
        key,
        value,
        flags,
        exp_unix,
        cas,
        cost,
        stale: bits & STALE != 0,
    };
    Some((saved, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use crate::config::Config;
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Duration;

    fn cache_with(memory_mb: usize, factor: f64) -> Cache {
        let config = Config {
            memory_limit: memory_mb << 20,
            growth_factor: factor,
            // Pages adopted whole: the N-zone alone (see `can_adopt`).
            zzone: false,
            ..Config::default()
        };
        Cache::new(config, Arc::new(Clock::new())).expect("cache")
    }

    fn cache() -> Cache {
        cache_with(32, 1.25)
    }

    fn temp(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("cachalot-warm-{}-{tag}", std::process::id()))
    }

    /// Where files go: the temporary directory, and a RAM disk if there
    /// is one (pages mapped rather than read).
    fn dirs() -> Vec<PathBuf> {
        let mut d = vec![std::env::temp_dir()];
        let shm = PathBuf::from("/dev/shm");
        if shm.is_dir() {
            d.push(shm);
        }
        d
    }

    type Fields = (Vec<u8>, u32, u64, u32, bool);

    /// Every field of every item as a GET sees it, and its TTL.
    fn snapshot(cache: &Cache, keys: &[Vec<u8>]) -> Vec<Option<(Fields, i64)>> {
        keys.iter()
            .map(|k| {
                cache.get(k, Lookup::PEEK, |it| {
                    it.map(|it| {
                        let ttl = cache.clock().ttl_remaining(it.expiry);
                        let fields = (it.value.to_vec(), it.flags, it.cas, it.cost, it.stale);
                        (fields, ttl)
                    })
                })
            })
            .collect()
    }

    /// 5000 items from a few bytes to chained ones, of every kind of
    /// field; key-42 stale.
    fn fill(a: &Cache) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        for i in 0..5000u32 {
            let key = format!("key-{i}").into_bytes();
            // Values from a few bytes to long (64 KB and more) and chained
            // ones (over the 512 KB chunk).
            let len = match i % 500 {
                0 => 70_000,
                250 if i < 1500 => 600_000,
                _ => (i % 300) as usize,
            };
            let value = vec![(i % 251) as u8; len];
            let req = Store {
                flags: i,
                expiry: if i % 3 == 0 {
                    Expiry::Never
                } else {
                    a.clock().expiry(1000 + i as i64)
                },
                cost: (i % 7 == 0).then_some(40 + i),
                ..Store::set(&key, &value)
            };
            assert!(matches!(a.store(&req), StoreOutcome::Stored { .. }));
            keys.push(key);
        }
        let mut e = a.lock();
        let id = e
            .lookup(b"key-42", Lookup::PEEK)
            .map(|it| it.id)
            .expect("key-42");
        e.set_stale(id, true);
        keys
    }

    /// Save `a`, load into `b`; every item comes back as it was.
    fn round_trip(a: &Cache, b: &Cache, keys: &[Vec<u8>], path: &Path) -> WarmStats {
        let saved = save(a, path).expect("save");
        assert_eq!(saved.items, 5000);
        let loaded = load(b, path).expect("load");
        assert_eq!(
            (loaded.items, loaded.skipped, loaded.damaged),
            (5000, 0, false),
            "{loaded:?}"
        );
        assert!(!path.exists(), "the file must not outlive its load");
        assert_same(a, b, keys);
        loaded
    }

    /// `b` holds every item of `a` as it was (TTLs within a second).
    fn assert_same(a: &Cache, b: &Cache, keys: &[Vec<u8>]) {
        b.lock().validate();
        let (before, after) = (snapshot(a, keys), snapshot(b, keys));
        for (k, (x, y)) in keys.iter().zip(before.iter().zip(&after)) {
            let (x, y) = (x.as_ref().expect("saved"), y.as_ref().expect("loaded"));
            assert_eq!(x.0, y.0, "{}", String::from_utf8_lossy(k));
            // The two clocks may have started either side of a second, or
            // seconds apart (tests do not tick them: the later one's time
            // stands at the same number, later).
            let apart = (a.clock().started_unix() - b.clock().started_unix()).abs();
            assert!((x.1 - y.1).abs() <= 1 + apart, "ttl {} vs {}", x.1, y.1);
        }
        assert!(after.iter().flatten().any(|s| s.0 .4), "the stale mark");
        // New CAS values are above every restored one.
        let max = after.iter().flatten().map(|s| s.0 .2).max().unwrap_or(0);
        let fresh = b.store(&Store::set(b"new", b"v"));
        assert!(
            matches!(fresh, StoreOutcome::Stored { cas } if cas > max),
            "{fresh:?}"
        );
    }

    #[test]
    fn items_come_back_with_their_fields_and_the_file_goes() {
        let a = cache();
        let keys = fill(&a);
        for dir in dirs() {
            let path = dir.join(format!("cachalot-warm-{}-roundtrip", std::process::id()));
            let b = cache();
            let loaded = round_trip(&a, &b, &keys, &path);
            assert!(loaded.adopted, "the same layout adopts the pages");
            // Adopted (and mapped) pages are given back and reused as any.
            b.lock().set_memory_limit(8 << 20).expect("cache_memlimit");
            let value = vec![9u8; 3000];
            for i in 0..10_000u32 {
                b.store(&Store::set(format!("more-{i}").as_bytes(), &value));
            }
            b.lock().validate();
        }
        // GD-Wheel's queues are linked again (`validate` checks them).
        let config = Config {
            memory_limit: 32 << 20,
            eviction: crate::config::EvictionPolicy::GdWheel,
            zzone: false,
            ..Config::default()
        };
        let wheel = || Cache::new(config.clone(), Arc::new(Clock::new())).expect("cache");
        let g = wheel();
        let keys = fill(&g);
        assert!(round_trip(&g, &wheel(), &keys, &temp("gdwheel")).adopted);
        // A server started on the loaded cache counts the items.
        let b = cache();
        let path = temp("roundtrip-counts");
        save(&a, &path).expect("save");
        load(&b, &path).expect("load");
        let (sa, sb) = (a.lock().stats(), b.lock().stats());
        assert_eq!((sa.curr_items, sa.bytes), (sb.curr_items, sb.bytes));
    }

    #[test]
    fn another_layout_or_a_smaller_memory_stores_the_items_one_by_one() {
        let a = cache();
        let keys = fill(&a);
        // Another growth factor: other chunk sizes.
        let loaded = round_trip(&a, &cache_with(32, 1.5), &keys, &temp("layout"));
        assert!(!loaded.adopted);
        // A smaller -m: the hottest items are kept.
        let a = cache_with(8, 1.25);
        let value = vec![3u8; 1000];
        for i in 0..7000u32 {
            a.store(&Store::set(format!("k{i}").as_bytes(), &value));
            if i == 3000 {
                // Those before are 100 s older than those after.
                a.clock().advance(Duration::from_secs(100));
            }
        }
        let path = temp("smaller");
        save(&a, &path).expect("save");
        let b = cache_with(4, 1.25);
        let loaded = load(&b, &path).expect("load");
        assert!(!loaded.adopted && loaded.items > 1000, "{loaded:?}");
        b.lock().validate();
        let kept = |range: std::ops::Range<u32>| {
            range
                .filter(|i| b.get(format!("k{i}").as_bytes(), Lookup::PEEK, |it| it.is_some()))
                .count()
        };
        // Whatever of the old items stayed in `a` was written before the
        // newer ones, so the newer ones win at the smaller size.
        assert!(kept(5000..7000) > kept(0..2000), "hottest last");
    }

    #[test]
    fn ttls_and_last_access_move_to_the_new_clock() {
        let a = cache();
        let short = a.clock().expiry(35);
        let long = a.clock().expiry(1000);
        a.store(&Store {
            expiry: short,
            ..Store::set(b"short", b"v")
        });
        a.store(&Store {
            expiry: long,
            ..Store::set(b"long", b"v")
        });
        a.store(&Store::set(b"never", b"v"));
        // 30 s later, `long` is read: 970 s left, `short` 5.
        a.clock().advance(Duration::from_secs(30));
        // (The first fetch only marks the item fetched, as memcached's.)
        for _ in 0..2 {
            assert!(a.lock().lookup(b"long", Lookup::GET).is_some());
        }
        let path = temp("rebase");
        save(&a, &path).expect("save");
        // The next process's relative time 0 is 20 s later than the
        // first's (its clock reads 12 at the save), and it saw 40 s more.
        let b = cache();
        b.clock().shift_start(20);
        b.clock().advance(Duration::from_secs(40));
        let loaded = load(&b, &path).expect("load");
        assert!(loaded.adopted);
        assert_eq!((loaded.items, loaded.skipped), (2, 1), "short expired");
        let mut e = b.lock();
        let long = e.lookup(b"long", Lookup::PEEK).expect("long");
        let ttl = b.clock().ttl_remaining(long.expiry);
        // 970 s left at the save, 30 s since.
        assert!((939..=941).contains(&ttl), "ttl {ttl}");
        // Read at the first clock's 32: this clock's 12.
        assert!(
            (11..=13).contains(&long.last_access),
            "{}",
            long.last_access
        );
        assert!(long.fetched, "the fetched mark");
        let never = e.lookup(b"never", Lookup::PEEK).expect("never");
        assert_eq!(never.expiry, Expiry::Never);
        drop(e);
        b.lock().validate();
    }

    #[test]
    fn a_damaged_page_is_skipped_and_the_others_load() {
        let a = cache();
        let value = vec![7u8; 2000];
        for i in 0..2000u32 {
            let key = format!("k{i}");
            let expiry = if i < 100 {
                a.clock().expiry(5)
            } else {
                Expiry::Never
            };
            let req = Store {
                expiry,
                ..Store::set(key.as_bytes(), &value)
            };
            a.store(&req);
        }
        let path = temp("damaged");
        save(&a, &path).expect("save");
        // Ten seconds later the first hundred have expired.
        let b = cache();
        b.clock().advance(Duration::from_secs(10));
        let bytes = std::fs::read(&path).expect("read");
        let loaded = load(&b, &path).expect("load");
        assert_eq!((loaded.items, loaded.skipped), (1900, 100));
        assert!(loaded.adopted);

        // A flipped byte in the second page: its items are misses, the
        // others load, under either path, read or mapped.
        let header_len = u32::from_le_bytes(bytes[16..20].try_into().expect("4"));
        let header = Header::decode(&bytes[20..20 + header_len as usize]).expect("header");
        let pages_at = pages_offset(u64::from(header_len), header.pages).expect("offset") as usize;
        let page = crate::config::DEFAULT_PAGE_SIZE;
        assert!(header.pages >= 3, "the test wants 3 pages");
        for dir in dirs() {
            let path = dir.join(format!("cachalot-warm-{}-bad-page", std::process::id()));
            for (tag, fresh) in [("adopted", cache()), ("stored", cache_with(32, 1.5))] {
                let mut bad = bytes.clone();
                bad[pages_at + page + 5000] ^= 0x40;
                std::fs::write(&path, &bad).expect("write");
                let loaded = load(&fresh, &path).expect("load");
                assert_eq!(loaded.bad_pages, 1, "{tag}");
                assert!(
                    loaded.damaged && loaded.items > 1000 && loaded.items < 1900,
                    "{tag}: {loaded:?}"
                );
                fresh.lock().validate();
                // Whatever was loaded is exactly what was saved.
                let mut found = 0;
                for i in 0..2000u32 {
                    let key = format!("k{i}");
                    fresh.get(key.as_bytes(), Lookup::PEEK, |it| {
                        if let Some(it) = it {
                            assert_eq!(it.value, value.as_slice());
                            found += 1;
                        }
                    });
                }
                assert_eq!(found, loaded.items, "{tag}");
                // Stores go on as usual over the restored pages.
                for i in 0..3000u32 {
                    let key = format!("n{i}");
                    assert!(matches!(
                        fresh.store(&Store::set(key.as_bytes(), &value)),
                        StoreOutcome::Stored { .. }
                    ));
                }
                fresh.lock().validate();
            }
            // A file cut short: the whole pages before the cut load.
            std::fs::write(&path, &bytes[..pages_at + 2 * page + 100]).expect("write");
            let loaded = load(&cache(), &path).expect("load");
            assert!(loaded.damaged && loaded.items > 0, "{loaded:?}");
        }
        // A damaged header: nothing loads, no error, the file goes.
        let mut bad = bytes.clone();
        bad[21] ^= 1;
        std::fs::write(&path, &bad).expect("write");
        let loaded = load(&cache(), &path).expect("load");
        assert!(loaded.damaged && loaded.items == 0, "{loaded:?}");
        assert!(!path.exists());
        // Not a warm restart file at all: an error, and the file stays.
        std::fs::write(&path, b"hello").expect("write");
        assert!(load(&cache(), &path).is_err());
        assert!(path.exists());
        let _ = std::fs::remove_file(&path);
    }

    /// A cache with a Z-zone in `memory_mb` of memory.
    fn zone_cache(memory_mb: usize) -> Cache {
        let config = Config {
            memory_limit: memory_mb << 20,
            zzone: true,
            ..Config::default()
        };
        Cache::new(config, Arc::new(Clock::new())).expect("cache")
    }

    /// A JSON-like value that compresses (a few times) but differs per key.
    fn json(i: u32) -> Vec<u8> {
        format!(
            "{{\"id\":{i},\"name\":\"user{}\",\"mail\":\"user{}@example.com\",\
             \"active\":{},\"score\":{:05},\"tags\":[\"a{}\",\"b{}\"],\"pad\":\"{}\"}}",
            i % 977,
            i % 977,
            i.is_multiple_of(2),
            i % 1000,
            i % 13,
            i % 17,
            "x".repeat((i % 64) as usize)
        )
        .into_bytes()
    }

    /// Fill a zone cache past its N-zone with `n` compressible items of
    /// every kind of field, as a server's maintainer would see it.
    fn fill_zone(a: &Cache, n: u32) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        for i in 0..n {
            let key = format!("zkey:{i:08}").into_bytes();
            let value = json(i);
            let req = Store {
                flags: i,
                expiry: match i % 3 {
                    0 => Expiry::Never,
                    _ => a.clock().expiry(1000 + i64::from(i % 5000)),
                },
                cost: (i % 7 == 0).then_some(40 + i % 1000),
                ..Store::set(&key, &value)
            };
            assert!(matches!(a.store(&req), StoreOutcome::Stored { .. }));
            keys.push(key);
            if i % 1000 == 999 {
                a.maintain(512);
                a.train_zone();
            }
        }
        keys
    }

    /// Items (of `keys`) in the Z-zone and in all.
    fn zone_share(c: &Cache) -> (u64, u64) {
        let stats = c.lock().stats();
        let zone = stats.zzone.expect("zone on").zone.items;
        (zone, stats.curr_items)
    }

    #[test]
    fn the_z_zone_s_items_come_back_too() {
        let a = zone_cache(16);
        let keys = fill_zone(&a, 150_000);
        a.lock().validate();
        let (zone, all) = zone_share(&a);
        assert!(zone * 2 >= all, "the zone holds {zone} of {all} items");
        let before = snapshot(&a, &keys);
        let held = before.iter().flatten().count();
        assert_eq!(held as u64, all, "every item counted is found");
        // Peeks promote nothing: the zone still holds as many.
        assert_eq!(zone_share(&a), (zone, all));
        let path = temp("zone");
        let started = std::time::Instant::now();
        let saved = save(&a, &path).expect("save");
        let save_secs = started.elapsed().as_secs_f64();
        assert_eq!(saved.zone, zone, "{saved:?}");
        let b = zone_cache(16);
        let started = std::time::Instant::now();
        let loaded = load(&b, &path).expect("load");
        let load_secs = started.elapsed().as_secs_f64();
        assert!(!loaded.damaged && !loaded.adopted, "{loaded:?}");
        assert_eq!(loaded.zone, zone, "{loaded:?}");
        b.lock().validate();
        let after = snapshot(&b, &keys);
        let mut same = 0;
        for (k, (x, y)) in keys.iter().zip(before.iter().zip(&after)) {
            let (Some(x), Some(y)) = (x, y) else { continue };
            // Byte-exact values, flags, CAS, cost, stale; TTLs within the
            // clocks' starts (tests do not tick them: see `assert_same`).
            assert_eq!(x.0, y.0, "{}", String::from_utf8_lossy(k));
            let apart = (a.clock().started_unix() - b.clock().started_unix()).abs();
            assert!((x.1 - y.1).abs() <= 1 + apart, "ttl {} vs {}", x.1, y.1);
            same += 1;
        }
        let (zone_b, all_b) = zone_share(&b);
        eprintln!(
            "zone warm restart: {same} of {held} items back ({zone} of them in the zone before, \
             {zone_b} of {all_b} after); save {save_secs:.3} s, load {load_secs:.3} s"
        );
        assert!(same * 100 >= held * 99, "{same} of {held} came back");
        // Put back into the zone, not demoted through the N-zone: every
        // one of the zone's items is in it again, each block written once
        // (stored one by one, the zone held 9% fewer, and its blocks were
        // rewritten 4 times as often as there are blocks), none evicted.
        let z = b.lock().stats().zzone.expect("zone on");
        assert!(zone_b >= zone, "{zone_b} of {zone} back in the zone: {z:?}");
        assert_eq!(b.lock().stats().evictions, 0, "{z:?}");
        let written: u64 = z.zone.written.iter().map(|w| w.0).sum();
        assert!(written <= z.zone.blocks + z.zone.demotions, "{z:?}");
        // A metadump lists every item once, the zone's among them.
        let mut listed = std::collections::HashMap::new();
        let mut at = Some(crate::DumpAt::START);
        let mut items = Vec::new();
        while let Some(here) = at {
            items.clear();
            at = b.metadump_step(here, |_| true, &mut items);
            for it in &items {
                *listed.entry(it.key.clone()).or_insert(0) += 1;
            }
        }
        assert_eq!(listed.len() as u64, all_b, "every item listed");
        assert!(listed.values().all(|&n| n == 1), "each once");
        // The split's share of memory comes back too.
        let share_a = a.lock().stats().zzone.expect("zone on").share_percent;
        assert!(z.share_percent >= share_a, "{z:?}, {share_a}% before");
        // New CAS values are above every restored one.
        let max = after.iter().flatten().map(|s| s.0 .2).max().unwrap_or(0);
        let fresh = b.store(&Store::set(b"new", b"v"));
        assert!(matches!(fresh, StoreOutcome::Stored { cas } if cas > max));
    }

    /// JSON-like text of `len` bytes, rows of [`json`] from row `i * 1000`:
    /// compresses several times, differs per key.
    fn big_json(i: u32, len: usize) -> Vec<u8> {
        let mut v = b"[".to_vec();
        let mut row = i * 1000;
        while v.len() < len {
            v.extend_from_slice(&json(row));
            v.push(b',');
            row += 1;
        }
        v.truncate(len);
        v
    }

    /// Large compressible values (20 to 200 KB of JSON-like text, and two
    /// chained ones over the 512 KB chunk) demoted to the Z-zone are stored
    /// apart (zExpander §3.1, footnote 3) and come back whole: byte-exact
    /// through `Cache::get` (a peek, then a GET that may promote), listed by
    /// `lru_crawler metadump` as the zone's, and saved and loaded by a warm
    /// restart with their flags, CAS and TTLs.
    #[test]
    fn large_items_in_the_z_zone_come_back_whole() {
        use crate::api::Tier;
        use crate::DumpAt;
        use std::collections::HashMap;
        let a = zone_cache(16);
        let mut keys = Vec::new();
        let mut values = HashMap::new();
        for i in 0..42u32 {
            let key = format!("big:{i:04}").into_bytes();
            let len = match i {
                40 => 600 << 10,
                41 => 1000 << 10,
                _ => 20_000 + (i as usize * 4_441) % 180_000,
            };
            let value = big_json(i, len);
            let req = Store {
                flags: i * 3,
                expiry: match i % 2 {
                    0 => Expiry::Never,
                    _ => a.clock().expiry(5000 + i64::from(i)),
                },
                ..Store::set(&key, &value)
            };
            assert!(matches!(a.store(&req), StoreOutcome::Stored { .. }), "{i}");
            values.insert(key.clone(), value);
            keys.push(key);
            // The maintainer grants the zone its pages as a server's does
            // (a zone with none yet evicts what it is given: blocks and
            // records alike).
            a.maintain(512);
        }
        // Small ones beside them, in blocks.
        keys.extend(fill_zone(&a, 2_000));
        a.demote_all();
        a.lock().validate();
        let z = a.lock().stats().zzone.expect("zone on").zone;
        assert_eq!(z.large_items, 42, "every large item stored apart: {z:?}");
        assert!(z.large_bytes * 3 < z.large_raw_bytes, "compressed: {z:?}");
        let before = snapshot(&a, &keys);
        for (k, v) in &values {
            let i = keys.iter().position(|x| x == k).expect("key");
            let got = before[i].as_ref().expect("a large item read back");
            assert_eq!(&got.0 .0, v, "{}", String::from_utf8_lossy(k));
        }
        // Still in the zone (peeks promote nothing), each listed once by
        // a metadump, as the zone's.
        let mut listed = HashMap::new();
        let mut at = Some(DumpAt::START);
        let mut items = Vec::new();
        while let Some(here) = at {
            items.clear();
            at = a.metadump_step(here, |_| true, &mut items);
            for it in &items {
                *listed.entry(it.key.clone()).or_insert((0, it.tier)) = (0, it.tier);
            }
        }
        for k in values.keys() {
            let tier = listed.get(k).map(|l| l.1);
            assert_eq!(tier, Some(Tier::Zzone), "{}", String::from_utf8_lossy(k));
        }
        // A warm restart saves and loads them whole.
        let path = temp("zone-large");
        let saved = save(&a, &path).expect("save");
        assert!(saved.zone >= 42, "{saved:?}");
        let b = zone_cache(16);
        let loaded = load(&b, &path).expect("load");
        assert!(!loaded.damaged, "{loaded:?}");
        b.lock().validate();
        let after = snapshot(&b, &keys);
        for (k, v) in &values {
            let i = keys.iter().position(|x| x == k).expect("key");
            let (x, y) = (before[i].as_ref(), after[i].as_ref());
            let y = y.expect("a large item loaded back");
            assert_eq!(&y.0 .0, v, "{}", String::from_utf8_lossy(k));
            assert_eq!(
                x.map(|x| (x.0 .1, x.0 .2)),
                Some((y.0 .1, y.0 .2)),
                "flags, CAS"
            );
        }
        // GETs that may promote read them whole too.
        for (k, v) in &values {
            let got = a.get(k, Lookup::GET, |it| it.map(|it| it.value.to_vec()));
            assert_eq!(got.as_ref(), Some(v), "{}", String::from_utf8_lossy(k));
        }
        a.lock().validate();
    }

    /// A file whose Z-zone section is damaged loads what is sound and
    /// nothing wrong; one cut inside it too; a server without a Z-zone
    /// loads the zone's items into its slabs.
    #[test]
    fn a_damaged_zone_section_loads_nothing_wrong() {
        let a = zone_cache(16);
        // (Past the N-zone: the zone grows only as it runs out of room.)
        let keys = fill_zone(&a, 100_000);
        let before = snapshot(&a, &keys);
        let path = temp("zone-damaged");
        let saved = save(&a, &path).expect("save");
        assert!(saved.zone > 1000, "{saved:?}");
        let bytes = std::fs::read(&path).expect("read");
        let mark = bytes
            .windows(ZONE.len())
            .rposition(|w| w == ZONE)
            .expect("the zone's mark");
        let check = |b: &Cache, loaded: &WarmStats| {
            b.lock().validate();
            let after = snapshot(b, &keys);
            let found = after.iter().flatten().count() as u64;
            assert_eq!(found, loaded.items, "{loaded:?}");
            for (x, y) in before.iter().zip(&after) {
                if let (Some(x), Some(y)) = (x, y) {
                    assert_eq!(x.0, y.0);
                }
            }
        };
        // (A flipped byte in the first block, the file cut inside it, its
        // length made larger than the file, a flipped byte in the zone's
        // header, and in a later block.) The first block starts after the
        // mark and the header (its length, 8 bytes of share, its CRC-32).
        let first = mark + 8 + 4 + 8 + 4;
        let mut flipped = bytes.clone();
        flipped[first + 8 + 100] ^= 0x10;
        let cut = bytes[..first + 5000].to_vec();
        let mut wild = bytes.clone();
        wild[first + 3] = 0x7f;
        let mut header = bytes.clone();
        header[mark + 8 + 4 + 2] ^= 0x01;
        let second =
            first + 8 + u32::from_le_bytes(bytes[first..first + 4].try_into().expect("4")) as usize;
        let mut later = bytes.clone();
        later[second + 8 + 1000] ^= 0x01;
        let cases = [
            ("a flipped byte", flipped),
            ("a cut", cut),
            ("a wild length", wild),
            ("a damaged header", header),
            ("a damaged second block", later),
        ];
        for (tag, bad) in cases {
            std::fs::write(&path, &bad).expect("write");
            let b = zone_cache(16);
            let loaded = load(&b, &path).expect("load");
            assert!(
                loaded.damaged && loaded.zone < saved.zone,
                "{tag}: {loaded:?}"
            );
            check(&b, &loaded);
        }
        // A smaller cache with a zone: what fits comes back, within its
        // memory, nothing wrong.
        std::fs::write(&path, &bytes).expect("write");
        let b = zone_cache(2);
        let loaded = load(&b, &path).expect("load");
        assert!(!loaded.damaged && loaded.zone == saved.zone, "{loaded:?}");
        let z = b.lock().stats().zzone.expect("zone on").zone;
        assert!(z.items > 1000 && z.evictions > 0, "{z:?}");
        b.lock().validate();
        let after = snapshot(&b, &keys);
        for (x, y) in before.iter().zip(&after) {
            if let (Some(x), Some(y)) = (x, y) {
                assert_eq!(x.0, y.0);
            }
        }
        // Zone off, a larger cache: every item, in the slabs.
        std::fs::write(&path, &bytes).expect("write");
        let b = cache_with(64, 1.25);
        let loaded = load(&b, &path).expect("load");
        assert!(!loaded.damaged && loaded.zone == saved.zone, "{loaded:?}");
        assert_eq!(loaded.items, before.iter().flatten().count() as u64);
        check(&b, &loaded);
    }

    #[test]
    fn a_file_of_the_item_stream_still_loads() {
        let a = cache();
        let keys = fill(&a);
        let path = temp("v1");
        // The v1 writer: the chained items' records hold every item.
        let mut file = MAGIC_V1.to_vec();
        let mut block = Vec::new();
        let (unix_now, now) = (a.clock().unix_now(), a.clock().now());
        let mut n = 0u64;
        for k in &keys {
            a.get(k, Lookup::PEEK, |it| {
                let it = it.expect("item");
                let exp_unix = match it.expiry {
                    Expiry::At(t) => unix_now + i64::from(t - now),
                    _ => 0,
                };
                encode(&it, exp_unix, &mut block);
                n += 1;
            });
        }
        write_block(&mut file, &block).expect("block");
        file.extend_from_slice(&END.to_le_bytes());
        file.extend_from_slice(&n.to_le_bytes());
        std::fs::write(&path, &file).expect("write");
        let b = cache();
        let loaded = load(&b, &path).expect("load");
        assert_eq!((loaded.items, loaded.damaged), (5000, false));
        assert_same(&a, &b, &keys);
    }
}

//! A segment of the index: a run of primary buckets plus the pool their
//! sub-buckets are allocated from, and the sub-bucket trees themselves.
//!
//! This is Cavast's localized expansion (section 4.3): a full bucket grows a
//! small tree of 64-byte sub-buckets instead of forcing a rehash of the whole
//! table. Two departures from the paper, both for density:
//! - a primary bucket has a *single* overflow sub-bucket (Cavast creates four
//!   at once, selected by two tag bits, which leaves most of them nearly
//!   empty); only sub-buckets branch, two ways, on successive bits of the hash
//!   (bits 12..32, distinct from the tag and from the bucket choice), so keys
//!   that collide on the bucket still spread out and a lookup reads one node
//!   per level;
//! - the pool is per segment rather than a global 255-node array, so it is
//!   addressed with 16-bit indices, and it is freed with the segment when an
//!   incremental resize has moved the segment's entries away: no global pool
//!   ever needs compacting.
//!
//! Invariants kept here (checked by `validate`):
//! - a node with a child is full (removals pull an entry up from a leaf), so
//!   sub-buckets exist only while needed and a lookup can stop at the first
//!   missing child;
//! - every entry lies on the path its hash selects (an entry may sit in any
//!   ancestor of the node where its path ends, never in another branch);
//! - a primary bucket's 16-bit filter has the bit of every tag stored below it,
//!   so most misses on an overflowing bucket never read the sub-bucket line.

use super::bucket::{filter_bit, tag_of, Bucket, Loc, TAG_BITS};

/// Hash bits (above the tag) that choose a sub-bucket's child, one per level.
/// Deeper than this, nodes only chain through child 0 (reached only by hashes
/// that agree on all 64 bits that place them, i.e. practically never).
pub(super) const TREE_BITS: u32 = 20;
/// How many sub-buckets a filter recomputation may read before it gives up and
/// keeps the old (superset) filter; bounds the cost of a removal in a hot tree.
const REFILTER_BUDGET: usize = 8;
/// Meta halves of a primary bucket.
const OVERFLOW: usize = 0;
const FILTER: usize = 1;
/// Largest pool a segment can have: pool indices are stored plus one in 16 bits.
pub(super) const MAX_POOL: usize = u16::MAX as usize;

/// What a segment needs from a key hash.
#[derive(Clone, Copy, Debug)]
pub(super) struct Key {
    pub tag: u16,
    /// The 20 hash bits above the tag, one per tree level.
    pub path: u32,
}

impl Key {
    #[inline]
    pub(super) fn of(hash: u64) -> Key {
        Key {
            tag: tag_of(hash),
            path: (hash >> TAG_BITS) as u32 & ((1 << TREE_BITS) - 1),
        }
    }
}

/// The child a key follows when leaving a sub-bucket at `depth` (depth 1 is
/// the overflow sub-bucket of a primary bucket).
#[inline]
fn side(path: u32, depth: u32) -> usize {
    if depth <= TREE_BITS {
        ((path >> (depth - 1)) & 1) as usize
    } else {
        0
    }
}

/// An entry that found no free pool node (the segment's pool is at its
/// limit). Only a pathological concentration of keys gets here; it keeps the
/// index correct instead of failing the insert, at the price of a linear scan.
#[derive(Clone, Copy, Debug)]
struct Spilled {
    bucket: u32,
    tag: u16,
    loc: Loc,
}

/// A pointer to a child pointer: where a node hangs.
#[derive(Clone, Copy, Debug)]
enum Link {
    /// The overflow pointer of primary bucket `off`.
    Main(usize),
    /// Child `side` of pool node `node` (index + 1).
    Node(u16, usize),
}

/// Where an exact entry was found.
enum Pos {
    Main(usize),
    Node {
        node: u16,
        slot: usize,
        parent: Link,
    },
    Spill(usize),
}

pub(super) struct Segment {
    /// Primary buckets; empty until the segment is first written (the target
    /// table of a resize is allocated lazily) and again after it is migrated.
    buckets: Box<[Bucket]>,
    /// Sub-buckets; `pool[i]` is addressed as `i + 1`.
    pool: Vec<Bucket>,
    /// Head of the free-node list (index + 1, 0 = empty), linked through meta.
    free: u16,
    /// Pool nodes in use.
    used: u32,
    /// Primary buckets that have a sub-bucket (the growth signal).
    overflowing: u32,
    spill: Vec<Spilled>,
}

#[inline]
fn scan(b: &Bucket, tag: u16, is_match: &mut impl FnMut(Loc) -> bool) -> Option<Loc> {
    let mut m = b.tag_mask(tag);
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        let loc = b.loc(i);
        if is_match(loc) {
            return Some(loc);
        }
    }
    None
}

impl Segment {
    pub(super) fn unallocated() -> Segment {
        Segment {
            buckets: Box::new([]),
            pool: Vec::new(),
            free: 0,
            used: 0,
            overflowing: 0,
            spill: Vec::new(),
        }
    }

    pub(super) fn new(buckets: usize) -> Segment {
        Segment {
            buckets: vec![Bucket::EMPTY; buckets].into_boxed_slice(),
            ..Segment::unallocated()
        }
    }

    pub(super) fn is_allocated(&self) -> bool {
        !self.buckets.is_empty()
    }

    #[cfg(any(test, feature = "testing"))]
    pub(super) fn bucket_len(&self) -> usize {
        self.buckets.len()
    }

    /// Heap bytes held by this segment.
    pub(super) fn bytes(&self) -> usize {
        (self.buckets.len() + self.pool.capacity()) * std::mem::size_of::<Bucket>()
            + self.spill.capacity() * std::mem::size_of::<Spilled>()
    }

    /// Pool nodes in use.
    pub(super) fn nodes(&self) -> usize {
        self.used as usize
    }

    /// Primary buckets with at least one sub-bucket.
    pub(super) fn overflowing(&self) -> usize {
        self.overflowing as usize
    }

    fn link(&self, link: Link) -> u16 {
        match link {
            Link::Main(off) => self.buckets[off].half(OVERFLOW),
            Link::Node(n, s) => self.pool[n as usize - 1].half(s),
        }
    }

    fn set_link(&mut self, link: Link, v: u16) {
        match link {
            Link::Main(off) => {
                let main = &mut self.buckets[off];
                self.overflowing =
                    self.overflowing + (v != 0) as u32 - (main.half(OVERFLOW) != 0) as u32;
                main.set_half(OVERFLOW, v);
            }
            Link::Node(n, s) => self.pool[n as usize - 1].set_half(s, v),
        }
    }

    fn alloc(&mut self, limit: usize) -> Option<u16> {
        let n = if self.free != 0 {
            let n = self.free;
            let node = &mut self.pool[n as usize - 1];
            self.free = node.half(0);
            *node = Bucket::EMPTY;
            n
        } else {
            let len = self.pool.len();
            if len >= limit.min(MAX_POOL) {
                return None;
            }
            if len == self.pool.capacity() {
                // Grow by 1/16 rather than doubling: the pool's slack is index
                // memory too, and a realloc of a few KB is cheap next to that.
                let room = limit.min(MAX_POOL) - len;
                self.pool.reserve_exact((len / 16).max(4).min(room));
            }
            self.pool.push(Bucket::EMPTY);
            self.pool.len() as u16
        };
        self.used += 1;
        Some(n)
    }

    fn release(&mut self, n: u16) {
        self.used -= 1;
        if n as usize == self.pool.len() {
            self.pool.pop();
            // Give memory back once the pool has shrunk well below its capacity
            // (hysteresis, so churn at one size does not realloc every time).
            let (len, cap) = (self.pool.len(), self.pool.capacity());
            if cap > 16 && len < cap / 2 {
                self.pool.shrink_to(len + len / 16 + 4);
            }
        } else {
            let node = &mut self.pool[n as usize - 1];
            *node = Bucket::EMPTY;
            node.set_half(0, self.free);
            self.free = n;
        }
    }

    /// Where the primary buckets' pointer is, to prefetch.
    #[inline]
    pub(super) fn bucket_ref(&self) -> *const u8 {
        std::ptr::from_ref(&self.buckets).cast()
    }

    /// The primary bucket `off`, if allocated (for prefetching).
    #[inline]
    pub(super) fn bucket(&self, off: usize) -> Option<&Bucket> {
        self.buckets.get(off)
    }

    /// Offer every entry of bucket `off` whose tag matches to `is_match`.
    #[inline]
    pub(super) fn find(
        &self,
        off: usize,
        key: Key,
        is_match: &mut impl FnMut(Loc) -> bool,
    ) -> Option<Loc> {
        // An unallocated segment (lazily built resize target) has no entries.
        let main = self.buckets.get(off)?;
        if let Some(loc) = scan(main, key.tag, is_match) {
            return Some(loc);
        }
        if main.half(FILTER) & filter_bit(key.tag) == 0 {
            return None;
        }
        let mut cur = main.half(OVERFLOW);
        let mut depth = 1;
        while cur != 0 {
            let node = &self.pool[cur as usize - 1];
            if let Some(loc) = scan(node, key.tag, is_match) {
                return Some(loc);
            }
            cur = node.half(side(key.path, depth));
            depth += 1;
        }
        self.spill
            .iter()
            .filter(|s| s.bucket as usize == off && s.tag == key.tag)
            .map(|s| s.loc)
            .find(|&loc| is_match(loc))
    }

    /// Add an entry to bucket `off` (allocating the segment if needed is the
    /// caller's job): first free slot on the key's path, else a new leaf.
    pub(super) fn insert(&mut self, off: usize, key: Key, loc: Loc, pool_limit: usize) {
        let main = &mut self.buckets[off];
        if let Some(i) = main.first_free() {
            main.set(i, key.tag, loc);
            return;
        }
        main.set_half(FILTER, main.half(FILTER) | filter_bit(key.tag));
        let mut parent = Link::Main(off);
        let mut cur = main.half(OVERFLOW);
        let mut depth = 1;
        while cur != 0 {
            let node = &mut self.pool[cur as usize - 1];
            if let Some(i) = node.first_free() {
                node.set(i, key.tag, loc);
                return;
            }
            let s = side(key.path, depth);
            parent = Link::Node(cur, s);
            cur = node.half(s);
            depth += 1;
        }
        match self.alloc(pool_limit) {
            Some(n) => {
                self.pool[n as usize - 1].set(0, key.tag, loc);
                self.set_link(parent, n);
            }
            None => self.spill.push(Spilled {
                bucket: off as u32,
                tag: key.tag,
                loc,
            }),
        }
    }

    fn locate(&self, off: usize, key: Key, loc: Loc) -> Option<Pos> {
        let main = self.buckets.get(off)?;
        if let Some(i) = main.find_exact(key.tag, loc) {
            return Some(Pos::Main(i));
        }
        if main.half(FILTER) & filter_bit(key.tag) == 0 {
            return None;
        }
        let mut parent = Link::Main(off);
        let mut cur = main.half(OVERFLOW);
        let mut depth = 1;
        while cur != 0 {
            let node = &self.pool[cur as usize - 1];
            if let Some(slot) = node.find_exact(key.tag, loc) {
                return Some(Pos::Node {
                    node: cur,
                    slot,
                    parent,
                });
            }
            let s = side(key.path, depth);
            parent = Link::Node(cur, s);
            cur = node.half(s);
            depth += 1;
        }
        self.spill
            .iter()
            .position(|s| s.bucket as usize == off && s.tag == key.tag && s.loc == loc)
            .map(Pos::Spill)
    }

    /// Point the entry (key, old) of bucket `off` at `new`.
    pub(super) fn relocate(&mut self, off: usize, key: Key, old: Loc, new: Loc) -> bool {
        match self.locate(off, key, old) {
            None => false,
            Some(Pos::Main(i)) => {
                self.buckets[off].set_loc(i, new);
                true
            }
            Some(Pos::Node { node, slot, .. }) => {
                self.pool[node as usize - 1].set_loc(slot, new);
                true
            }
            Some(Pos::Spill(i)) => {
                self.spill[i].loc = new;
                true
            }
        }
    }

    /// Remove the entry (key, loc) of bucket `off`.
    pub(super) fn remove(&mut self, off: usize, key: Key, loc: Loc) -> bool {
        match self.locate(off, key, loc) {
            None => return false,
            Some(Pos::Main(i)) => {
                if self.buckets[off].half(OVERFLOW) == 0 {
                    self.buckets[off].clear(i);
                    return true;
                }
                let (tag, moved) = self.take_from_leaf(Link::Main(off));
                self.buckets[off].set(i, tag, moved);
            }
            Some(Pos::Node { node, slot, parent }) => {
                let b = &self.pool[node as usize - 1];
                let child = if b.half(1) != 0 {
                    Some(Link::Node(node, 1))
                } else if b.half(0) != 0 {
                    Some(Link::Node(node, 0))
                } else {
                    None
                };
                match child {
                    // An inner node must stay full: refill the hole from a leaf
                    // below it (any leaf: all of them lie on paths through it).
                    Some(link) => {
                        let (tag, moved) = self.take_from_leaf(link);
                        self.pool[node as usize - 1].set(slot, tag, moved);
                    }
                    None => {
                        let b = &mut self.pool[node as usize - 1];
                        b.clear(slot);
                        if b.is_empty() {
                            self.release(node);
                            self.set_link(parent, 0);
                        }
                    }
                }
            }
            Some(Pos::Spill(i)) => {
                self.spill.swap_remove(i);
                return true;
            }
        }
        self.refilter(off);
        true
    }

    /// Take one entry out of a leaf of the subtree hanging at `link` (which
    /// must be non-empty), freeing the leaf if that empties it.
    fn take_from_leaf(&mut self, mut link: Link) -> (u16, Loc) {
        let mut cur = self.link(link);
        debug_assert!(cur != 0);
        loop {
            let b = &self.pool[cur as usize - 1];
            let s = if b.half(1) != 0 {
                1
            } else if b.half(0) != 0 {
                0
            } else {
                break;
            };
            link = Link::Node(cur, s);
            cur = b.half(s);
        }
        let leaf = &mut self.pool[cur as usize - 1];
        let m = leaf.occupied_mask();
        debug_assert!(m != 0, "leaves are never empty");
        let j = 31 - m.leading_zeros() as usize;
        let entry = (leaf.tag(j), leaf.loc(j));
        leaf.clear(j);
        if leaf.is_empty() {
            self.release(cur);
            self.set_link(link, 0);
        }
        entry
    }

    /// Recompute the overflow filter of bucket `off` after an entry left its
    /// subtree. Skipped (the old filter is a superset, so still correct) when
    /// the subtree is large or the segment has spilled entries.
    fn refilter(&mut self, off: usize) {
        if !self.spill.is_empty() {
            return;
        }
        let mut bits = 0u16;
        let mut stack = [0u16; REFILTER_BUDGET];
        let mut top = 0;
        let root = self.buckets[off].half(OVERFLOW);
        if root != 0 {
            stack[0] = root;
            top = 1;
        }
        let mut visited = 0;
        while top > 0 {
            top -= 1;
            let node = &self.pool[stack[top] as usize - 1];
            visited += 1;
            let mut m = node.occupied_mask();
            while m != 0 {
                let i = m.trailing_zeros() as usize;
                m &= m - 1;
                bits |= filter_bit(node.tag(i));
            }
            for s in 0..2 {
                let c = node.half(s);
                if c != 0 {
                    if visited + top >= REFILTER_BUDGET {
                        return;
                    }
                    stack[top] = c;
                    top += 1;
                }
            }
        }
        self.buckets[off].set_half(FILTER, bits);
    }

    /// Every entry of bucket `off`: its slots, its sub-buckets' and its
    /// spilled ones (a range walk, `Index::for_range`).
    pub(super) fn for_each(&self, off: usize, f: &mut impl FnMut(Loc)) {
        let Some(main) = self.buckets.get(off) else {
            return;
        };
        main.locs().for_each(&mut *f);
        let mut stack = Vec::new();
        if main.half(OVERFLOW) != 0 {
            stack.push(main.half(OVERFLOW));
        }
        while let Some(n) = stack.pop() {
            let node = &self.pool[n as usize - 1];
            node.locs().for_each(&mut *f);
            stack.extend((0..2).map(|s| node.half(s)).filter(|&c| c != 0));
        }
        for s in self.spill.iter().filter(|s| s.bucket as usize == off) {
            f(s.loc);
        }
    }

    /// Move every entry of bucket `off` into `out` as (tag, loc), freeing its
    /// sub-buckets (used by the incremental resize).
    pub(super) fn drain(&mut self, off: usize, out: &mut Vec<(u16, Loc)>) {
        let Some(main) = self.buckets.get_mut(off) else {
            return;
        };
        main.drain_into(out);
        let root = main.half(OVERFLOW);
        main.set_half(OVERFLOW, 0);
        main.set_half(FILTER, 0);
        self.overflowing -= (root != 0) as u32;
        let mut stack = Vec::new();
        if root != 0 {
            stack.push(root);
        }
        while let Some(n) = stack.pop() {
            let node = &mut self.pool[n as usize - 1];
            node.drain_into(out);
            stack.extend((0..2).map(|s| node.half(s)).filter(|&c| c != 0));
            self.release(n);
        }
        if !self.spill.is_empty() {
            self.spill.retain(|s| {
                let keep = s.bucket as usize != off;
                if !keep {
                    out.push((s.tag, s.loc));
                }
                keep
            });
        }
    }
}

/// One entry as `validate` saw it.
#[cfg(any(test, feature = "testing"))]
pub(super) struct Seen {
    pub bucket: usize,
    pub tag: u16,
    pub loc: Loc,
    /// Children taken from depth 1 down to the node holding the entry, or
    /// `None` for an entry in the primary bucket or the spill list.
    pub sides: Option<Vec<usize>>,
}

impl Segment {
    /// Index lines a `find` for `key` reads before accepting `target` (all of
    /// them on a miss): the cost model behind the figures in the module doc.
    pub(super) fn probe_lines(&self, off: usize, key: Key, target: Option<Loc>) -> usize {
        let Some(main) = self.buckets.get(off) else {
            return 0;
        };
        let hit = |b: &Bucket| {
            let mut m = b.tag_mask(key.tag);
            let mut found = false;
            while m != 0 {
                found |= Some(b.loc(m.trailing_zeros() as usize)) == target;
                m &= m - 1;
            }
            found
        };
        if hit(main) || main.half(FILTER) & filter_bit(key.tag) == 0 {
            return 1;
        }
        let (mut lines, mut cur, mut depth) = (1, main.half(OVERFLOW), 1);
        while cur != 0 {
            let node = &self.pool[cur as usize - 1];
            lines += 1;
            if hit(node) {
                break;
            }
            cur = node.half(side(key.path, depth));
            depth += 1;
        }
        lines
    }
}

#[cfg(any(test, feature = "testing"))]
impl Segment {
    /// Check the segment's own invariants and list its entries.
    pub(super) fn validate(&self, out: &mut Vec<Seen>) -> Result<(), String> {
        let mut reached = vec![false; self.pool.len()];
        for (off, main) in self.buckets.iter().enumerate() {
            let mut m = main.occupied_mask();
            while m != 0 {
                let i = m.trailing_zeros() as usize;
                m &= m - 1;
                out.push(Seen {
                    bucket: off,
                    tag: main.tag(i),
                    loc: main.loc(i),
                    sides: None,
                });
            }
            let root = main.half(OVERFLOW);
            if root != 0 && !main.is_full() {
                return Err(format!("bucket {off} has sub-buckets but is not full"));
            }
            let mut stack = Vec::new();
            if root != 0 {
                stack.push((root, Vec::new()));
            }
            while let Some((n, sides)) = stack.pop() {
                let idx = n as usize - 1;
                if idx >= self.pool.len() || reached[idx] {
                    return Err(format!("pool node {n} out of range or shared"));
                }
                reached[idx] = true;
                let node = &self.pool[idx];
                if node.is_empty() {
                    return Err(format!("bucket {off}: empty sub-bucket {n}"));
                }
                let has_child = node.half(0) != 0 || node.half(1) != 0;
                if has_child && !node.is_full() {
                    return Err(format!("bucket {off}: inner sub-bucket {n} not full"));
                }
                if sides.len() as u32 >= TREE_BITS && node.half(1) != 0 {
                    return Err(format!("bucket {off}: branch below the last tree bit"));
                }
                let mut m = node.occupied_mask();
                while m != 0 {
                    let i = m.trailing_zeros() as usize;
                    m &= m - 1;
                    let tag = node.tag(i);
                    if main.half(FILTER) & filter_bit(tag) == 0 {
                        return Err(format!("bucket {off}: filter misses tag {tag:#x}"));
                    }
                    out.push(Seen {
                        bucket: off,
                        tag,
                        loc: node.loc(i),
                        sides: Some(sides.clone()),
                    });
                }
                for s in 0..2 {
                    let c = node.half(s);
                    if c != 0 {
                        let mut more = sides.clone();
                        more.push(s);
                        stack.push((c, more));
                    }
                }
            }
        }
        for s in &self.spill {
            if s.bucket as usize >= self.buckets.len() {
                return Err(format!(
                    "spilled entry for bucket {} out of range",
                    s.bucket
                ));
            }
            if self.buckets[s.bucket as usize].half(FILTER) & filter_bit(s.tag) == 0 {
                return Err(format!("filter misses spilled tag {:#x}", s.tag));
            }
            out.push(Seen {
                bucket: s.bucket as usize,
                tag: s.tag,
                loc: s.loc,
                sides: None,
            });
        }
        let overflowing = self
            .buckets
            .iter()
            .filter(|b| b.half(OVERFLOW) != 0)
            .count();
        if overflowing != self.overflowing as usize {
            return Err(format!(
                "{} overflowing buckets counted, {overflowing} seen",
                self.overflowing
            ));
        }
        let in_use = reached.iter().filter(|&&r| r).count();
        if in_use != self.used as usize {
            return Err(format!("used {} but {} nodes reachable", self.used, in_use));
        }
        let mut free = self.free;
        let mut free_count = 0;
        while free != 0 {
            let idx = free as usize - 1;
            if idx >= self.pool.len() || reached[idx] {
                return Err(format!("free node {free} out of range, in use, or looped"));
            }
            reached[idx] = true;
            free_count += 1;
            if !self.pool[idx].is_empty() {
                return Err(format!("free node {free} holds entries"));
            }
            free = self.pool[idx].half(0);
        }
        if in_use + free_count != self.pool.len() {
            return Err(format!(
                "pool of {} nodes: {in_use} used + {free_count} free",
                self.pool.len()
            ));
        }
        if self.pool.len() > MAX_POOL {
            return Err("pool larger than 16-bit indices allow".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::bucket::SLOTS;
    use super::*;

    /// A hash for `bucket`-independent tests: tag `tag`, tree path `path`.
    fn key(tag: u16, path: u32) -> Key {
        Key::of(((path as u64) << TAG_BITS) | tag as u64)
    }

    fn check(seg: &Segment) -> Vec<Seen> {
        let mut seen = Vec::new();
        seg.validate(&mut seen).unwrap();
        seen
    }

    #[test]
    fn overflow_goes_to_one_sub_bucket_then_branches() {
        let mut seg = Segment::new(4);
        // 10 fill the primary bucket, 10 more the single overflow sub-bucket
        // whatever their path bits, then the tree branches on path bit 0.
        for i in 0..20u64 {
            seg.insert(1, key(5, i as u32), i, MAX_POOL);
        }
        assert_eq!(seg.nodes(), 1);
        seg.insert(1, key(5, 0b10), 100, MAX_POOL);
        seg.insert(1, key(5, 0b11), 101, MAX_POOL);
        assert_eq!(seg.nodes(), 3);
        let seen = check(&seg);
        let sides = |loc| seen.iter().find(|s| s.loc == loc).unwrap().sides.clone();
        assert_eq!(sides(100), Some(vec![0]));
        assert_eq!(sides(101), Some(vec![1]));
        // Lookups follow the path: a key with path bit 0 = 1 sees loc 101 but
        // not 100, which sits in the other branch.
        let mut offered = Vec::new();
        seg.find(1, key(5, 0b11), &mut |l| {
            offered.push(l);
            false
        });
        assert!(offered.contains(&101) && !offered.contains(&100));
        assert_eq!(offered.len(), 21);
    }

    #[test]
    fn filter_skips_sub_bucket_on_miss_and_is_recomputed() {
        let mut seg = Segment::new(1);
        for i in 0..SLOTS as u64 {
            seg.insert(0, key(16, 0), i, MAX_POOL);
        }
        seg.insert(0, key(3, 0), 50, MAX_POOL); // filter bit 3
        assert_eq!(seg.buckets[0].half(FILTER), 1 << 3);
        // Tag 4 is not below: the walk stops at the primary bucket.
        let mut calls = 0;
        assert_eq!(
            seg.find(0, key(4, 0), &mut |_| {
                calls += 1;
                true
            }),
            None
        );
        assert_eq!(calls, 0);
        // Removing a primary entry pulls 50 up; the subtree is gone, so is the filter.
        assert!(seg.remove(0, key(16, 0), 3));
        assert_eq!(seg.nodes(), 0);
        assert_eq!(seg.buckets[0].half(FILTER), 0);
        assert_eq!(seg.find(0, key(3, 0), &mut |l| l == 50), Some(50));
        check(&seg);
    }

    #[test]
    fn removal_from_inner_node_refills_from_leaf() {
        let mut seg = Segment::new(1);
        for i in 0..40u64 {
            seg.insert(0, key(9, (i % 4) as u32), i, MAX_POOL);
        }
        let before = seg.nodes();
        assert!(before >= 3);
        // Entries 10..20 live in the overflow sub-bucket (an inner node now).
        for i in 10..20u64 {
            assert!(seg.remove(0, key(9, (i % 4) as u32), i));
            check(&seg);
        }
        assert!(seg.nodes() < before);
        for i in (0..10).chain(20..40u64) {
            let k = key(9, (i % 4) as u32);
            assert_eq!(seg.find(0, k, &mut |l| l == i), Some(i), "lost {i}");
        }
        assert!(!seg.remove(0, key(9, 0), 10));
    }

    #[test]
    fn spill_when_pool_limit_reached() {
        let mut seg = Segment::new(1);
        for i in 0..35u64 {
            seg.insert(0, key(1 + (i % 7) as u16, i as u32), i, 2);
        }
        assert_eq!(seg.nodes(), 2);
        // 20..35 alternate path bit 0: the 8 even ones fill the one child the
        // limit allows, the 7 odd ones spill.
        assert_eq!(seg.spill.len(), 7);
        check(&seg);
        for i in 0..35u64 {
            let k = key(1 + (i % 7) as u16, i as u32);
            assert_eq!(seg.find(0, k, &mut |l| l == i), Some(i));
        }
        assert!(seg.relocate(0, key(1 + (34 % 7), 34), 34, 1000));
        assert_eq!(
            seg.find(0, key(1 + (34 % 7), 34), &mut |l| l == 1000),
            Some(1000)
        );
        let mut out = Vec::new();
        seg.drain(0, &mut out);
        out.sort_by_key(|e| e.1);
        assert_eq!(out.len(), 35);
        assert_eq!(out.last().unwrap().1, 1000);
        assert_eq!(seg.nodes(), 0);
        check(&seg);
    }

    #[test]
    fn pool_reuses_and_returns_nodes() {
        let mut seg = Segment::new(8);
        for b in 0..8 {
            for i in 0..15u64 {
                seg.insert(b, key(2, 0), (b as u64) << 8 | i, MAX_POOL);
            }
        }
        assert_eq!(seg.nodes(), 8);
        let grown = seg.bytes();
        for b in 0..8 {
            for i in 0..15u64 {
                assert!(seg.remove(b, key(2, 0), (b as u64) << 8 | i));
            }
            check(&seg);
        }
        assert_eq!(seg.nodes(), 0);
        assert!(seg.bytes() <= grown);
        assert_eq!(seg.pool.len() as u32, seg.free_len());
    }

    impl Segment {
        fn free_len(&self) -> u32 {
            let (mut n, mut f) = (0, self.free);
            while f != 0 {
                n += 1;
                f = self.pool[f as usize - 1].half(0);
            }
            n
        }
    }
}

//! A warm restart's items put back into the zone in bulk (`crate::warm`,
//! issue 34), not demoted one by one.
//!
//! Demoted one at a time, in any order, each item costs its block a
//! rewrite (decode, merge, compress) and the blocks split as they fill:
//! a million items took seconds, and the N-zone they passed through ran
//! over `-m` and lost whole pages of them. Saved in key-hash order, the
//! items arrive leaf by leaf: [`Zone::refill`] gathers the items of the
//! leaf that holds the next hash, splits that (empty) leaf in the trie as
//! soon as they outgrow a block, and writes each leaf once its last item
//! is known (the next hash is past it), compressed with the zone's own
//! flush job (`super::flush`), so every block is built once, as full as a
//! block may be. Items that do not fit that order (out of order, a hash
//! seen twice, over half a block: those are stored apart) are staged as
//! demotions are, and packed by [`Zone::refill_done`].
//!
//! Nothing else may change the zone between the calls (a warm restart
//! runs before the server listens); if the trie did change, what was
//! gathered is staged as demotions are, so the zone stays right.

use super::desc::Entry;
use super::flush::Job;
use super::log;
use super::trie::{range_end, Node, MAX_DEPTH};
use super::zone::Zone;
use crate::hash::hash;
use crate::item;

/// The leaf being gathered (see the module's doc).
#[derive(Default)]
pub struct Refill {
    /// The leaf and its block's id (meaningful while `entries` is not
    /// empty).
    node: Option<(Node, u32)>,
    work: Vec<u8>,
    entries: Vec<Entry>,
    /// The last hash taken in order.
    last: Option<u64>,
    /// Items handed to the zone (in blocks or staged).
    taken: u64,
}

impl Refill {
    /// Items handed to the zone so far.
    pub fn taken(&self) -> u64 {
        self.taken
    }
}

impl Zone {
    /// Whether the zone would store an item of `len` bytes: in a block,
    /// or apart (as [`Zone::admits`] says, without counting anything).
    pub fn takes(&self, len: usize) -> bool {
        len <= self.raw_capacity() / 2 || len <= self.apart_limit()
    }

    /// Bytes the zone may still write without sweeping, whatever it has
    /// gathered: its live bytes under [`super::config::FILL`] of its
    /// pages, with the writer's reserve to spare, and the room at its
    /// head. False when another page is needed for `len` more bytes of
    /// items (a gathered leaf, at most a block's capacity, compresses to
    /// no more than it decodes to).
    pub fn refill_wants_page(&self, len: usize) -> bool {
        let page = self.log.page_size();
        // (A record takes at most a share of a page.)
        let len = len.min(page / super::config::RECORD_SHARE);
        let need = log::round(self.raw_capacity() + len);
        let reserve = log::round(super::config::ROOM_BLOCKS * self.cfg.block_bytes);
        let allowed = (super::config::FILL * (self.log.pages() * page) as f64) as usize;
        self.log.pages() == 0
            || self.log.live_bytes() + need + reserve > allowed
            || self.log.head_room() < need.min(page)
    }

    /// Offer a warm restart's item as a training sample (before any is
    /// put back): false once the samples are enough to train on.
    pub fn refill_sample(&mut self, image: &[u8]) -> bool {
        if self.samples_full() || !self.sampling() {
            return false;
        }
        if image.len() <= self.raw_capacity() / 2
            && self.sample_bytes + image.len() <= self.cfg.sample_bytes
        {
            self.samples.push(image.to_vec());
            self.sample_bytes += image.len();
        }
        !self.samples_full()
    }

    /// Put back `image` (a whole item, as the N-zone holds it), the next
    /// of a warm restart's items in key-hash order. False if the zone does
    /// not take it (too large for it: [`Zone::takes`]), for the caller to
    /// store elsewhere.
    pub fn refill(&mut self, r: &mut Refill, image: &[u8], now: u32) -> bool {
        if !item::is_whole(image) || !self.takes(image.len()) {
            return false;
        }
        let h = hash(item::key(image));
        r.taken += 1;
        if !self.gathered_still_leaf(r) {
            self.stage_gathered(r, now);
        }
        let in_order = r.last.is_none_or(|l| h > l);
        if !in_order || image.len() > self.raw_capacity() / 2 {
            // Stored apart, or out of the order leaves are built in: as a
            // demotion (what is gathered first, so that its leaf is not
            // rewritten under it).
            self.write_gathered(r, now);
            if !in_order {
                // A copy put back before (the same key, or hash) is
                // replaced, as a demotion replaces what the N-zone
                // overwrote.
                self.remove(h, false);
            }
            self.push(h, image, now);
            r.last = r.last.max(Some(h));
            return true;
        }
        r.last = Some(h);
        if let Some((node, _)) = r.node.filter(|_| !r.entries.is_empty()) {
            if h > range_end(node) {
                // Every item of the gathered leaf is in.
                self.write_gathered(r, now);
            }
        }
        if r.entries.is_empty() {
            r.node = Some(self.trie.leaf_of(h));
            r.work.clear();
        }
        let capacity = self.raw_capacity();
        let len = image.len();
        while let Some((node, id)) = r.node {
            let bytes: usize = r.entries.iter().map(|e| e.len as usize).sum();
            if crate::block::encoded_len(r.entries.len() + 1, bytes + len) <= capacity {
                break;
            }
            if node.depth >= MAX_DEPTH || self.descs[id as usize].count > 0 {
                // A leaf that holds a block already (a stub packed
                // meanwhile), or the deepest: the job merges and splits.
                self.write_gathered(r, now);
                r.node = Some(self.trie.leaf_of(h));
                break;
            }
            // Too many for one block: split the (empty) leaf; the items of
            // its left half are all in if `h` is in the right one.
            let right = self.new_desc();
            if !self.trie.split(node, id, right) {
                self.free_descs.push(right);
                break;
            }
            self.stats.splits += 1;
            let (l, rn) = node.children();
            if h <= range_end(l) {
                r.node = Some((l, id));
                continue;
            }
            let mid = r.entries.partition_point(|e| e.h <= range_end(l));
            let rest: Vec<Entry> = r.entries.drain(mid..).collect();
            let left = std::mem::take(&mut r.entries);
            if !left.is_empty() {
                self.write_leaf(l, id, r.work.clone(), left, now);
            }
            // The right half's items keep their places in `work`.
            r.entries = rest;
            r.node = Some((rn, right));
        }
        r.entries.push(Entry {
            h,
            at: r.work.len() as u32,
            len: len as u32,
        });
        r.work.extend_from_slice(image);
        true
    }

    /// The warm restart's items are all in: the last leaf is written, and
    /// what was staged packed.
    pub fn refill_done(&mut self, r: &mut Refill, now: u32) {
        if !self.gathered_still_leaf(r) {
            self.stage_gathered(r, now);
        }
        self.write_gathered(r, now);
        self.flush_some(now, usize::MAX);
    }

    /// Whether the gathered items' leaf is still the leaf (empty, as it
    /// was) that holds them.
    fn gathered_still_leaf(&self, r: &Refill) -> bool {
        let (Some((node, id)), Some(first), Some(last)) =
            (r.node, r.entries.first(), r.entries.last())
        else {
            return true;
        };
        self.trie.leaf_of(first.h) == (node, id) && self.trie.leaf_of(last.h) == (node, id)
    }

    /// Stage the gathered items as demotions (the trie changed under
    /// them).
    fn stage_gathered(&mut self, r: &mut Refill, now: u32) {
        let entries = std::mem::take(&mut r.entries);
        for e in &entries {
            let image = super::desc::entry(&r.work, *e).to_vec();
            self.push(e.h, &image, now);
        }
        r.work.clear();
    }

    /// Write the gathered items as their leaf's block.
    fn write_gathered(&mut self, r: &mut Refill, now: u32) {
        let entries = std::mem::take(&mut r.entries);
        let Some((node, id)) = r.node else {
            return;
        };
        if !entries.is_empty() {
            let work = std::mem::take(&mut r.work);
            self.write_leaf(node, id, work, entries, now);
        }
        r.work.clear();
    }

    /// Write `entries` (images in `work`, in hash order, all in leaf
    /// `node`) into it with a flush job, merged with the block it holds if
    /// any (a stub packed meanwhile); the job splits it if they need to.
    fn write_leaf(&mut self, node: Node, id: u32, work: Vec<u8>, entries: Vec<Entry>, now: u32) {
        let n = entries.len() as u64;
        let mut job = self.job_for(node, id, None, now);
        job.work = work;
        job.entries = entries;
        job.run(&mut self.coder, &mut self.raw);
        // Counted in before the job is swapped in, which takes out those
        // it drops (expired) or finds no room for.
        self.stats.items += n;
        let ok = self.finish_flush(Job::Block(Box::new(job)));
        debug_assert!(ok, "nothing can change a job under one lock hold");
        if !ok {
            self.stats.items -= n;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::super::zone::tests::{image, key, zone};
    use super::*;
    use crate::codec::Codec;

    /// Put `items` back as the engine does (`Engine::refill_zone`): a page
    /// granted whenever the zone wants one, up to `most`; the zone
    /// validates every `check` items and at the end.
    fn refill_all(z: &mut Zone, items: &[Vec<u8>], most: usize, check: usize) -> Vec<bool> {
        let mut r = Refill::default();
        let mut taken = Vec::new();
        for (i, im) in items.iter().enumerate() {
            if z.refill_wants_page(im.len()) && z.pages() < most {
                let pages = z.pages();
                z.set_target_pages(pages + 1);
                z.grant_page();
            }
            taken.push(z.refill(&mut r, im, 10));
            if check > 0 && i % check == 0 {
                z.validate();
            }
        }
        z.refill_done(&mut r, 10);
        z.validate();
        assert_eq!(r.taken(), taken.iter().filter(|&&t| t).count() as u64);
        taken
    }

    fn by_hash(mut items: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        items.sort_by_key(|im| hash(item::key(im)));
        items
    }

    /// Items in key-hash order, with room for them: every one comes back
    /// byte for byte, nothing is evicted or swept, each block is written
    /// once (no rewrites, no stage), and the zone keeps under its fill
    /// limit (its writer would sweep else).
    #[test]
    fn in_hash_order_each_block_is_built_once() {
        for codec in [Codec::Lz4, Codec::Zstd] {
            let mut z = zone(codec);
            let items = by_hash(
                (0..6_000u16)
                    .map(|k| image(k, 40 + (k as usize * 7) % 160, (k % 3) as u8, 0, 1))
                    .collect(),
            );
            let taken = refill_all(&mut z, &items, usize::MAX, 997);
            assert!(taken.iter().all(|&t| t));
            let s = z.stats();
            assert_eq!(s.items, items.len() as u64, "{s:?}");
            assert_eq!(
                (s.evictions, s.sweeps, s.demotions, s.staged, s.refused),
                (0, 0, 0, 0, 0),
                "{s:?}"
            );
            let written: u64 = s.written.iter().map(|w| w.0).sum();
            let full = z
                .trie
                .leaves_in_order()
                .iter()
                .filter(|&&(_, id)| z.descs[id as usize].count > 0)
                .count() as u64;
            assert_eq!(written, full, "each block written once: {s:?}");
            assert!(z.log.live_bytes() as f64 <= 0.95 * (z.pages() * z.log.page_size()) as f64);
            for im in &items {
                let k = item::key(im);
                assert!(z.get(hash(k), k, 10, 0, false).is_some());
                assert_eq!(z.found(), &im[..]);
            }
        }
    }

    #[derive(Clone, Debug)]
    struct Put {
        k: u16,
        len: usize,
        fill: u8,
        ttl: u32,
        /// Moved this far down the order (0: in order).
        late: usize,
    }

    fn put() -> impl Strategy<Value = Put> {
        (
            any::<u16>(),
            prop_oneof![12 => 0..600usize, 1 => 600..60_000usize],
            0..5u8,
            prop_oneof![4 => Just(0u32), 1 => 1..20u32],
            prop_oneof![12 => Just(0usize), 1 => 1..50usize],
        )
            .prop_map(|(k, len, fill, ttl, late)| Put {
                k,
                len,
                fill,
                ttl,
                late,
            })
    }

    /// Any items, mostly in hash order but some late (out of order), some
    /// stored apart, some with a TTL, into a zone of at most `most` pages:
    /// the zone validates throughout, and every item it says it holds
    /// reads back byte for byte (the last one put back under its key);
    /// one it lost is counted (evicted, expired or refused).
    fn run(codec: Codec, puts: &[Put], most: usize) {
        let mut z = zone(codec);
        let mut items: Vec<(u16, Vec<u8>)> = puts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let exp = if p.ttl == 0 { 0 } else { 10 + p.ttl };
                (p.k, image(p.k, p.len, p.fill, exp, i as u64 + 1))
            })
            .collect();
        items.sort_by_key(|(_, im)| hash(item::key(im)));
        for (i, p) in puts.iter().enumerate() {
            if p.late > 0 && i < items.len() {
                let x = items.remove(i);
                items.insert((i + p.late).min(items.len()), x);
            }
        }
        let images: Vec<Vec<u8>> = items.iter().map(|(_, im)| im.clone()).collect();
        let taken = refill_all(&mut z, &images, most, 7);
        let mut last: HashMap<u16, Vec<u8>> = HashMap::new();
        for ((k, im), t) in items.iter().zip(&taken) {
            if *t {
                last.insert(*k, im.clone());
            } else {
                assert!(!z.takes(im.len()));
            }
        }
        let s = z.stats();
        let lost = s.evictions + s.refused + s.expired;
        let mut missing = 0;
        for (k, im) in &last {
            match z.get(hash(&key(*k)), &key(*k), 10, 0, false) {
                Some(_) => assert_eq!(z.found(), &im[..], "key {k}"),
                None => missing += 1,
            }
        }
        assert!(missing <= lost, "{missing} missing, {s:?}");
        assert!(z.pages() <= most.max(1), "{} pages", z.pages());
        if most == usize::MAX {
            // With room, only records that do not compress below their
            // share of a page are let go (as at any demotion).
            assert_eq!((s.evictions, s.sweeps), (s.refused, 0), "{s:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn refills_agree_with_a_map(
            puts in proptest::collection::vec(put(), 1..400),
            zstd in any::<bool>(),
            most in prop_oneof![Just(usize::MAX), 1..8usize],
        ) {
            run(if zstd { Codec::Zstd } else { Codec::Lz4 }, &puts, most);
        }
    }
}

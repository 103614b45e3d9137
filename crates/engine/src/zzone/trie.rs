//! The Z-zone's hashed binary trie (zExpander §3.1, Figures 3 and 4).
//!
//! Blocks are the leaves of a binary trie over key hashes: a leaf labelled
//! with a prefix of `d` bits holds the items whose hash starts with it, and
//! when its block overflows it splits on the next bit into two leaves. The
//! hash keeps the tree balanced, so leaves sit within a few levels of each
//! other.
//!
//! To reach a leaf without chasing pointers from the root, the trie is kept
//! as a complete binary tree in heap order (node `2^d - 1 + prefix`),
//! internal and missing ("ghost") nodes holding a null pointer. A lookup
//! starts at the deepest level, at the node the hash's first bits name, and
//! walks up to the first non-null pointer: its leaf. The pointer array is
//! cut into segments of [`SEGMENT`] four-byte pointers, and a segment with
//! no leaf is not allocated (Figure 4a).
//!
//! A leaf is named by a `u32` id the zone gives it (its block descriptor).

/// Pointers per segment (zExpander: 128).
pub const SEGMENT: usize = 128;

/// The deepest level the trie grows to: beyond it a full leaf makes room
/// by replacement instead of splitting, which bounds the first-level
/// array (2^(MAX_DEPTH + 1) / 128 entries) whatever the keys.
pub const MAX_DEPTH: u32 = 30;

/// A leaf: its level (prefix length) and prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Node {
    pub depth: u32,
    pub prefix: u64,
}

impl Node {
    pub const ROOT: Node = Node {
        depth: 0,
        prefix: 0,
    };

    /// The node at `depth` on the path of hash `h`.
    #[inline]
    pub fn of(h: u64, depth: u32) -> Node {
        Node {
            depth,
            prefix: if depth == 0 { 0 } else { h >> (64 - depth) },
        }
    }

    #[inline]
    fn heap_index(self) -> usize {
        ((1usize << self.depth) - 1) + self.prefix as usize
    }

    #[inline]
    pub fn parent(self) -> Node {
        Node {
            depth: self.depth - 1,
            prefix: self.prefix >> 1,
        }
    }

    pub fn children(self) -> (Node, Node) {
        let c = |b| Node {
            depth: self.depth + 1,
            prefix: self.prefix << 1 | b,
        };
        (c(0), c(1))
    }
}

struct Segment {
    /// Leaf id + 1 per node; 0 for internal and ghost nodes.
    ptr: [u32; SEGMENT],
    /// Non-null pointers here (the segment goes when it reaches 0).
    used: u32,
}

/// The trie of leaf ids.
pub struct Trie {
    first: Vec<Option<Box<Segment>>>,
    /// The deepest level that has a leaf.
    depth: u32,
    leaves: usize,
    /// Segments allocated (their memory counts in `-m`, checked on every
    /// store, so it is kept rather than counted).
    segments: usize,
}

impl Trie {
    /// A trie of one leaf, the root, with id `root`.
    pub fn new(root: u32) -> Trie {
        let mut t = Trie {
            first: Vec::new(),
            depth: 0,
            leaves: 0,
            segments: 0,
        };
        t.put(Node::ROOT, Some(root));
        t
    }

    pub fn leaves(&self) -> usize {
        self.leaves
    }

    pub fn depth(&self) -> u32 {
        self.depth
    }

    fn get(&self, n: Node) -> Option<u32> {
        let i = n.heap_index();
        let seg = self.first.get(i / SEGMENT)?.as_ref()?;
        seg.ptr[i % SEGMENT].checked_sub(1)
    }

    fn put(&mut self, n: Node, id: Option<u32>) {
        let i = n.heap_index();
        let (s, o) = (i / SEGMENT, i % SEGMENT);
        if s >= self.first.len() {
            if id.is_none() {
                return;
            }
            self.first.resize_with(s + 1, || None);
        }
        let slot = &mut self.first[s];
        let seg = match slot {
            Some(seg) => seg,
            None if id.is_none() => return,
            None => {
                self.segments += 1;
                slot.insert(Box::new(Segment {
                    ptr: [0; SEGMENT],
                    used: 0,
                }))
            }
        };
        let was = seg.ptr[o] != 0;
        seg.ptr[o] = id.map_or(0, |v| {
            assert!(v < u32::MAX, "leaf id {v} too large");
            v + 1
        });
        match (was, id.is_some()) {
            (false, true) => {
                seg.used += 1;
                self.leaves += 1;
            }
            (true, false) => {
                seg.used -= 1;
                self.leaves -= 1;
                if seg.used == 0 {
                    *slot = None;
                    self.segments -= 1;
                }
            }
            _ => {}
        }
    }

    /// The leaf holding hash `h`, and its id: from the deepest level up to
    /// the first non-null pointer (usually within a level or two).
    pub fn leaf_of(&self, h: u64) -> (Node, u32) {
        let mut n = Node::of(h, self.depth);
        loop {
            if let Some(id) = self.get(n) {
                return (n, id);
            }
            // The root is always covered: the leaves partition the space.
            n = n.parent();
        }
    }

    /// Give leaf `n` a new id (its block was rewritten elsewhere).
    pub fn set(&mut self, n: Node, id: u32) {
        debug_assert!(self.get(n).is_some(), "{n:?} is a leaf");
        self.put(n, Some(id));
    }

    /// Split leaf `n` into its two children, with ids `left` (next bit 0)
    /// and `right`. False, and nothing changed, at [`MAX_DEPTH`].
    pub fn split(&mut self, n: Node, left: u32, right: u32) -> bool {
        debug_assert!(self.get(n).is_some(), "{n:?} is a leaf");
        if n.depth >= MAX_DEPTH {
            return false;
        }
        let (l, r) = n.children();
        self.put(n, None);
        self.put(l, Some(left));
        self.put(r, Some(right));
        self.depth = self.depth.max(n.depth + 1);
        true
    }

    /// The other child of `n`'s parent, if it is a leaf: its node and id.
    pub fn sibling_leaf(&self, n: Node) -> Option<(Node, u32)> {
        if n.depth == 0 {
            return None;
        }
        let s = Node {
            depth: n.depth,
            prefix: n.prefix ^ 1,
        };
        self.get(s).map(|id| (s, id))
    }

    /// Join leaf `n` and its sibling leaf into their parent, with id `id`
    /// (the reverse of [`Trie::split`]).
    pub fn merge(&mut self, n: Node, id: u32) {
        debug_assert!(self.get(n).is_some() && self.sibling_leaf(n).is_some());
        let (l, r) = n.parent().children();
        self.put(l, None);
        self.put(r, None);
        self.put(n.parent(), Some(id));
    }

    /// Bytes of the pointer arrays (counted in the zone's metadata).
    pub fn memory_bytes(&self) -> usize {
        self.first.capacity() * std::mem::size_of::<Option<Box<Segment>>>()
            + self.segments * std::mem::size_of::<Segment>()
    }

    /// Every leaf, in prefix order.
    pub fn leaves_in_order(&self) -> Vec<(Node, u32)> {
        let mut out = Vec::with_capacity(self.leaves);
        self.collect(Node::ROOT, &mut out);
        out
    }

    fn collect(&self, n: Node, out: &mut Vec<(Node, u32)>) {
        if let Some(id) = self.get(n) {
            out.push((n, id));
        } else if n.depth < self.depth {
            let (l, r) = n.children();
            self.collect(l, out);
            self.collect(r, out);
        }
    }

    /// The invariants: the leaves partition the hash space (the walk from
    /// the root meets no hole, and finds every non-null pointer, so none
    /// hides below a leaf), the counts agree with the pointers, and no
    /// segment is allocated empty.
    #[cfg(any(test, feature = "testing"))]
    pub fn validate(&self) {
        fn cover(t: &Trie, n: Node, found: &mut usize) {
            match t.get(n) {
                Some(_) => *found += 1,
                None => {
                    assert!(n.depth < t.depth, "hole at {n:?}");
                    let (l, r) = n.children();
                    cover(t, l, found);
                    cover(t, r, found);
                }
            }
        }
        let mut found = 0;
        cover(self, Node::ROOT, &mut found);
        assert_eq!(found, self.leaves, "leaf count");
        let mut used = 0;
        for seg in self.first.iter().flatten() {
            let n = seg.ptr.iter().filter(|&&p| p != 0).count() as u32;
            assert_eq!(n, seg.used, "segment count");
            assert!(n > 0, "empty segment allocated");
            used += n as usize;
        }
        assert_eq!(used, self.leaves);
        assert_eq!(
            self.first.iter().flatten().count(),
            self.segments,
            "segment count"
        );
    }
}

/// The last hash of leaf `n`'s range.
#[inline]
pub fn range_end(n: Node) -> u64 {
    if n.depth == 0 {
        u64::MAX
    } else {
        (n.prefix << (64 - n.depth)) | (u64::MAX >> n.depth)
    }
}

#[inline]
pub fn range_start(n: Node) -> u64 {
    if n.depth == 0 {
        0
    } else {
        n.prefix << (64 - n.depth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// The model: leaves by node; the leaf of a hash is the one whose
    /// prefix it starts with.
    fn model_leaf(m: &BTreeMap<Node, u32>, h: u64) -> (Node, u32) {
        let hits: Vec<_> = m
            .iter()
            .filter(|(n, _)| Node::of(h, n.depth) == **n)
            .collect();
        assert_eq!(hits.len(), 1, "the model's leaves partition the space");
        (*hits[0].0, *hits[0].1)
    }

    proptest! {
        #[test]
        fn the_trie_finds_the_leaf_a_model_does(
            ops in proptest::collection::vec((any::<u64>(), 0..3u8), 1..200),
            probes in proptest::collection::vec(any::<u64>(), 1..50),
        ) {
            let mut t = Trie::new(0);
            let mut m = BTreeMap::from([(Node::ROOT, 0u32)]);
            let mut next = 1u32;
            for (h, op) in ops {
                let (n, id) = t.leaf_of(h);
                prop_assert_eq!((n, id), model_leaf(&m, h));
                match op {
                    0 => {
                        if t.split(n, next, next + 1) {
                            m.remove(&n);
                            let (l, r) = n.children();
                            m.insert(l, next);
                            m.insert(r, next + 1);
                            next += 2;
                        }
                    }
                    1 => {
                        t.set(n, next);
                        m.insert(n, next);
                        next += 1;
                    }
                    _ => {
                        // Join the leaf with its sibling, if that is a leaf.
                        let sib = t.sibling_leaf(n);
                        let model_sib = (n.depth > 0)
                            .then_some(Node { depth: n.depth, prefix: n.prefix ^ 1 })
                            .and_then(|s| m.get(&s).map(|&id| (s, id)));
                        prop_assert_eq!(sib, model_sib);
                        if let Some((s, _)) = sib {
                            t.merge(n, next);
                            m.remove(&n);
                            m.remove(&s);
                            m.insert(n.parent(), next);
                            next += 1;
                        }
                    }
                }
            }
            t.validate();
            for h in probes {
                prop_assert_eq!(t.leaf_of(h), model_leaf(&m, h));
            }
            // In prefix order: each leaf's range starts where the last ended.
            let leaves = t.leaves_in_order();
            let start = |n: &Node| if n.depth == 0 { 0 } else { n.prefix << (64 - n.depth) };
            prop_assert!(leaves.windows(2).all(|w| start(&w[0].0) < start(&w[1].0)));
            let mut sorted = leaves;
            sorted.sort();
            prop_assert_eq!(sorted, m.iter().map(|(n, id)| (*n, *id)).collect::<Vec<_>>());
        }
    }

    #[test]
    fn hashed_keys_keep_the_trie_shallow_and_small() {
        // Split the leaf of each key's hash whenever it holds 20: as the
        // zone does with ~20 items per 2 KB block.
        let mut t = Trie::new(0);
        let mut keys: Vec<Vec<u64>> = vec![Vec::new()];
        let mut x = 1u64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let h = crate::hash::hash(&x.to_le_bytes());
            let (n, id) = t.leaf_of(h);
            keys[id as usize].push(h);
            if keys[id as usize].len() > 20 {
                let (l, r) = (keys.len() as u32, keys.len() as u32 + 1);
                assert!(t.split(n, l, r));
                keys.push(Vec::new());
                keys.push(Vec::new());
                // Its keys go to the children.
                for k in std::mem::take(&mut keys[id as usize]) {
                    let (_, c) = t.leaf_of(k);
                    keys[c as usize].push(k);
                }
            }
        }
        t.validate();
        let blocks = t.leaves();
        // Over 10 000 blocks, within a few levels of log2.
        assert!(blocks > 10_000, "{blocks}");
        assert!(t.depth() <= blocks.ilog2() + 5, "depth {}", t.depth());
        // Pointer arrays: a few bytes per block (zExpander: 4-byte pointers).
        assert!(t.memory_bytes() < blocks * 16, "{} bytes", t.memory_bytes());
    }
}

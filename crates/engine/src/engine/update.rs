//! Changing items that are there: `delete`, `touch`, incr/decr
//! (memcached's `do_add_delta`) and the meta commands' flag changes.

use super::Engine;
use crate::api::{exptime_of, Arith, ArithOutcome, DeleteOutcome, ItemId, ItemRef, Lookup};
use crate::clock::Expiry;
use crate::hash::hash;
use crate::{chain, item};

impl Engine {
    pub fn delete(&mut self, key: &[u8], cas: u64) -> DeleteOutcome {
        let h = hash(key);
        let Some(loc) = self.find_live(key, h) else {
            if let Some(f) = &self.flash {
                // A copy on flash is deleted as if it had been evicted
                // (docs/protocol.md, "The flash tier").
                f.forget(h);
            }
            let outcome = self.delete_in_zone(key, h, cas);
            self.enforce_budget(None);
            return outcome;
        };
        if cas != 0 && item::Header::read(self.slabs.chunk(loc)).cas != cas {
            return DeleteOutcome::Exists;
        }
        let class = self.slabs.class_of(loc);
        self.slabs.classes[class].stats.delete_hits += 1;
        self.remove(loc);
        DeleteOutcome::Deleted
    }

    /// Change an item's expiry (touch/gat); returns the item if it exists.
    pub fn touch(&mut self, key: &[u8], expiry: Expiry) -> Option<ItemRef<'_>> {
        let h = hash(key);
        let loc = self.find_to_change(key, h)?;
        item::set_exptime(self.slabs.chunk_mut(loc), exptime_of(expiry));
        self.access(loc, Lookup::GET);
        let class = self.slabs.class_of(loc);
        self.slabs.classes[class].stats.touch_hits += 1;
        Some(self.view(loc))
    }

    pub fn arith(&mut self, key: &[u8], req: &Arith) -> ArithOutcome {
        let h = hash(key);
        let Some(loc) = self.find_to_change(key, h) else {
            let Some((initial, expiry)) = req.autovivify else {
                return ArithOutcome::NotFound;
            };
            let digits = initial.to_string();
            let cas = self.next_cas();
            return match self.write_new(
                h,
                key,
                &[digits.as_bytes()],
                0,
                exptime_of(expiry),
                cas,
                item::quantize_cost(1),
                item::LIVE,
                None,
            ) {
                Ok(_) => match self.find(key, h) {
                    Some(loc) => ArithOutcome::Value {
                        value: initial,
                        id: ItemId(loc),
                    },
                    None => ArithOutcome::NoMemory,
                },
                Err(_) => ArithOutcome::NoMemory,
            };
        };
        if chain::is_head(self.slabs.chunk(loc)) {
            // Far longer than any number.
            return ArithOutcome::NonNumeric;
        }
        let p = item::parts(self.slabs.chunk(loc));
        // Like a chained one, an empty value is refused before the CAS is
        // compared (memcached's `do_add_delta`).
        if p.value.is_empty() {
            return ArithOutcome::NonNumeric;
        }
        if req.cas != 0 && p.header.cas != req.cas {
            return ArithOutcome::Exists;
        }
        let Some(current) = parse_decimal(p.value) else {
            return ArithOutcome::NonNumeric;
        };
        let value = if req.incr {
            current.wrapping_add(req.delta)
        } else {
            current.saturating_sub(req.delta)
        };
        let text = value.to_string();
        let digits = text.as_bytes();
        let (flags, old_len, cost) = (p.flags, p.value.len(), p.header.cost);
        let exptime = match req.new_expiry {
            Some(e) => exptime_of(e),
            None => p.header.exptime,
        };
        let class = self.slabs.class_of(loc);
        let s = &mut self.slabs.classes[class].stats;
        if req.incr {
            s.incr_hits += 1;
        } else {
            s.decr_hits += 1;
        }
        let cas = self.next_cas();
        if digits.len() <= old_len {
            // Fits: rewrite in place, padding with spaces like memcached
            // (`do_add_delta`), so a shrinking counter never reallocates.
            let chunk = self.slabs.chunk_mut(loc);
            let start = item::value_start(chunk);
            let field = &mut chunk[start..start + old_len];
            field[..digits.len()].copy_from_slice(digits);
            field[digits.len()..].fill(b' ');
            item::set_cas(chunk, cas);
            item::set_exptime(chunk, exptime);
            self.access(
                loc,
                Lookup {
                    bump: true,
                    fetch: false,
                },
            );
            return ArithOutcome::Value {
                value,
                id: ItemId(loc),
            };
        }
        // A longer result is a new item, not yet fetched (memcached: `h0`).
        match self.write_new(
            h,
            key,
            &[digits],
            flags,
            exptime,
            cas,
            cost,
            item::LIVE,
            Some(loc),
        ) {
            Ok(_) => match self.find(key, h) {
                Some(l) => ArithOutcome::Value {
                    value,
                    id: ItemId(l),
                },
                None => ArithOutcome::NoMemory,
            },
            Err(_) => ArithOutcome::NoMemory,
        }
    }

    pub(super) fn live_id(&mut self, id: ItemId) -> Option<u64> {
        if !self.slabs.is_live(id.0) {
            return None;
        }
        self.hold_item(id.0);
        Some(id.0)
    }

    pub(super) fn update_bits(&mut self, id: ItemId, f: impl FnOnce(u8) -> u8) {
        if let Some(loc) = self.live_id(id) {
            let chunk = self.slabs.chunk_mut(loc);
            let b = item::bits(chunk);
            item::set_bits(chunk, f(b));
        }
    }

    /// Meta helpers: change bits on a live item.
    pub fn set_expiry(&mut self, id: ItemId, expiry: Expiry) {
        if let Some(loc) = self.live_id(id) {
            item::set_exptime(self.slabs.chunk_mut(loc), exptime_of(expiry));
        }
    }

    pub fn set_stale(&mut self, id: ItemId, stale: bool) {
        self.update_bits(id, |b| {
            if stale {
                b | item::STALE
            } else {
                b & !item::STALE
            }
        });
    }

    pub fn set_win_sent(&mut self, id: ItemId, sent: bool) {
        self.update_bits(id, |b| if sent { b | item::WIN } else { b & !item::WIN });
    }

    /// Meta `md I`: mark stale, give a new CAS (`new_cas`, the client's
    /// `E`, or the next counter value), optionally a new expiry.
    pub fn invalidate(&mut self, id: ItemId, expiry: Option<Expiry>, new_cas: Option<u64>) {
        if self.live_id(id).is_none() {
            return;
        }
        let cas = match new_cas {
            Some(c) => c & item::CAS_MASK,
            None => self.next_cas(),
        };
        let chunk = self.slabs.chunk_mut(id.0);
        item::set_cas(chunk, cas);
        let b = item::bits(chunk);
        item::set_bits(chunk, (b | item::STALE) & !item::WIN);
        if let Some(e) = expiry {
            item::set_exptime(chunk, exptime_of(e));
        }
    }
}

/// memcached's incr/decr read the value with `safe_strtoull` on the item's
/// data, which C sees up to its first NUL and followed by `\r\n`: leading
/// white space, a sign, any number of leading zeros, and anything after a
/// white-space byte are fine (`" 5"`, `"007"`, `"12 ab"`, a padded result).
fn parse_decimal(v: &[u8]) -> Option<u64> {
    cachalot_protocol::text::strtoull(cachalot_protocol::text::until_nul(v))
}

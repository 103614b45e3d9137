//! The engine's part of meta commands that change an item in several steps
//! (look, then store, mark or re-expire it), each step after the first
//! depending on what the one before found. Each [`Cache`] method takes the
//! engine lock once for all its steps, so no other request sees the item
//! half changed; what the protocol writes about the item is written by the
//! caller's closure, under the same lock (as `Cache::get` hands an item).

use crate::api::{Arith, ArithOutcome, ItemId, ItemRef, Lookup, Store, StoreMode, StoreOutcome};
use crate::cache::Cache;
use crate::clock::Expiry;
use crate::engine::Engine;

/// What to change in an item after its closure has seen it
/// ([`Cache::peek_edit`], [`Cache::arith_edit`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Edit {
    /// A new expiry.
    pub expiry: Option<Expiry>,
    /// Mark the recache token as sent (meta `W` given).
    pub win_sent: bool,
    /// Then access it as a GET does (meta's deferred bump).
    pub bump: bool,
}

/// An `md` ([`Cache::meta_delete`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct MetaDelete {
    /// `C`: delete only if the item's CAS is this.
    pub cas: Option<u64>,
    /// `x`: keep the item with an empty value (client flags `flags`, expiry
    /// `expiry` or none, CAS `new_cas` or the old item's).
    pub blank: bool,
    pub flags: u32,
    /// `T`.
    pub expiry: Option<Expiry>,
    /// `E`.
    pub new_cas: Option<u64>,
    /// `I`: keep the item, stale, with a new CAS, instead of deleting it.
    pub invalidate: bool,
}

/// What an `md` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaDeleted {
    NotFound,
    /// The CAS did not match.
    Exists,
    /// `x` could not store its empty item.
    NoMemory,
    /// `I`: marked stale.
    Invalidated,
    /// Deleted (or blanked): the slab class id and value length of the
    /// item left, as the deletion watchers describe it.
    Deleted {
        class: u32,
        len: usize,
    },
}

/// Replace the item of `key` by one with `value` (a plain set), with CAS
/// `cas` (even 0: memcached links these items with `E`'s CAS as given).
/// Returns the new item.
fn restore(
    eng: &mut Engine,
    key: &[u8],
    value: &[u8],
    flags: u32,
    exp: Expiry,
    cost: u32,
    cas: u64,
) -> Option<ItemId> {
    let req = Store {
        flags,
        expiry: exp,
        cost: Some(cost),
        new_cas: Some(cas),
        ..Store::set(key, value)
    };
    match eng.store(&req) {
        StoreOutcome::Stored { .. } => eng.lookup(key, Lookup::PEEK).map(|it| it.id),
        _ => None,
    }
}

fn apply(eng: &mut Engine, key: &[u8], id: ItemId, edit: Edit) {
    if let Some(e) = edit.expiry {
        eng.set_expiry(id, e);
    }
    if edit.win_sent {
        eng.set_win_sent(id, true);
    }
    if edit.bump {
        eng.lookup(key, Lookup::GET);
    }
}

impl Cache {
    /// An `mg` that changes its item: look at it without touching it
    /// (`Lookup::PEEK`); on a miss, with `vivify`, link an empty item
    /// (flags 0, no expiry, CAS `new_cas` if given). `f` sees the item and
    /// whether it was created here, and says what to change in it. None on
    /// a miss.
    pub fn peek_edit<R>(
        &self,
        key: &[u8],
        vivify: bool,
        new_cas: Option<u64>,
        f: impl FnOnce(&ItemRef<'_>, bool) -> (R, Edit),
    ) -> Option<R> {
        let mut eng = self.lock();
        let mut created = false;
        let mut found = eng.lookup(key, Lookup::PEEK).map(|it| it.id);
        if found.is_none() && vivify {
            let req = Store {
                new_cas,
                mode: StoreMode::Add,
                ..Store::set(key, b"")
            };
            found = match eng.store(&req) {
                StoreOutcome::Stored { .. } => eng.lookup(key, Lookup::PEEK).map(|it| it.id),
                _ => None,
            };
            created = found.is_some();
        }
        let id = found?;
        let (r, edit) = f(&eng.item(id), created);
        apply(&mut eng, key, id, edit);
        Some(r)
    }

    /// An `ms` with a CAS (memcached's `cas`): `C0` compares with 0 (the
    /// engine reads 0 as "no compare"), and in invalidation mode (`I`) a
    /// CAS older than the item's stores anyway, keeping the old item's TTL
    /// (`req.expiry` is set to it) and win token, as memcached does: the
    /// new TTL never applies, even one that has already passed.
    pub fn store_meta_cas(&self, req: &mut Store<'_>) -> StoreOutcome {
        let mut eng = self.lock();
        let stale_of = if req.invalidate {
            eng.lookup(req.key, Lookup::PEEK)
                .filter(|it| req.cas < it.cas)
                .map(|it| (it.expiry, it.win_sent))
        } else {
            None
        };
        if let Some((old_exp, _)) = stale_of {
            req.expiry = old_exp;
        }
        let outcome = if req.cas == 0 {
            match eng.lookup(req.key, Lookup::PEEK).map(|it| it.cas) {
                None => StoreOutcome::NotFound,
                Some(0) => eng.store(req),
                Some(_) => StoreOutcome::Exists,
            }
        } else {
            eng.store(req)
        };
        if let (StoreOutcome::Stored { .. }, Some((_, true))) = (outcome, stale_of) {
            if let Some(id) = eng.lookup(req.key, Lookup::PEEK).map(|it| it.id) {
                eng.set_win_sent(id, true);
            }
        }
        outcome
    }

    /// An `ms` in append or prepend mode: with `vivify` (the TTL `N`
    /// gives), a miss stores the data as a new item (protocol.txt 1.6.45,
    /// ms: "N(token): if in append mode, autovivify on miss with supplied
    /// TTL"), whatever the CAS, with the request's client flags (memcached's
    /// APPENDVIV). Returns the outcome and, when stored, the length of the
    /// value now stored.
    pub fn append_vivify(
        &self,
        req: &Store<'_>,
        vivify: Option<Expiry>,
    ) -> (StoreOutcome, Option<usize>) {
        let mut eng = self.lock();
        let mut outcome = eng.store(req);
        if let (Some(exp), StoreOutcome::NotStored | StoreOutcome::NotFound) = (vivify, outcome) {
            let viv = Store {
                mode: StoreMode::Add,
                cas: 0,
                expiry: exp,
                ..*req
            };
            outcome = eng.store(&viv);
        }
        let joined = match outcome {
            StoreOutcome::Stored { .. } => {
                eng.lookup(req.key, Lookup::PEEK).map(|it| it.value.len())
            }
            _ => None,
        };
        (outcome, joined)
    }

    /// An `md` ([`MetaDelete`]).
    pub fn meta_delete(&self, key: &[u8], md: &MetaDelete) -> MetaDeleted {
        let mut eng = self.lock();
        let found = eng
            .lookup(key, Lookup::PEEK)
            .map(|it| (it.id, it.cas, it.value.len(), it.flags, it.cost));
        let Some((mut id, item_cas, len, flags, cost)) = found else {
            return MetaDeleted::NotFound;
        };
        if md.cas.is_some_and(|c| c != item_cas) {
            return MetaDeleted::Exists;
        }
        if md.blank {
            // protocol.txt 1.6.45, md: "x: removes the item value, but
            // leaves the item" by "replacing it with an empty value item
            // atomically". As memcached's process_mdelete_cmd builds it.
            let exp = md.expiry.unwrap_or(Expiry::Never);
            let cas = md.new_cas.unwrap_or(item_cas);
            match restore(&mut eng, key, b"", md.flags, exp, cost, cas) {
                Some(new_id) => id = new_id,
                None => return MetaDeleted::NoMemory,
            }
        }
        if md.invalidate {
            // Keep the item, mark it stale with a new CAS (`E`'s, or the
            // next one) so the next reader wins the right to recache it.
            eng.invalidate(id, md.expiry, md.new_cas);
            return MetaDeleted::Invalidated;
        }
        if !md.blank {
            eng.delete(key, 0);
        }
        // memcached logs the item it leaves: `x`'s empty one.
        let (len, flags) = match md.blank {
            true => (0, md.flags),
            false => (len, flags),
        };
        MetaDeleted::Deleted {
            class: eng.class_id(key.len(), len, flags),
            len,
        }
    }

    /// An `ma`: [`Engine::arith`] with `req`; whether the item existed is
    /// looked up first when `req` vivifies. On success, with `new_cas` (the
    /// extension `E`) the result is stored again with that CAS; then `f`
    /// sees the new value, its item and whether it was created, and says
    /// what to change in it. The failure and whether the item existed
    /// otherwise.
    pub fn arith_edit<R>(
        &self,
        key: &[u8],
        req: &Arith,
        new_cas: Option<u64>,
        f: impl FnOnce(u64, &ItemRef<'_>, bool) -> (R, Edit),
    ) -> Result<R, (ArithOutcome, bool)> {
        let mut eng = self.lock();
        // Only a vivifying request needs to know whether the item was there.
        let existed = req.autovivify.is_none() || eng.lookup(key, Lookup::PEEK).is_some();
        let (value, mut id) = match eng.arith(key, req) {
            ArithOutcome::Value { value, id } => (value, id),
            other => return Err((other, existed)),
        };
        if let Some(c) = new_cas {
            let digits = value.to_string();
            let it = eng.item(id);
            let (flags, exp, cost) = (it.flags, it.expiry, it.cost);
            if let Some(new_id) = restore(&mut eng, key, digits.as_bytes(), flags, exp, cost, c) {
                id = new_id;
            }
        }
        let (r, edit) = f(value, &eng.item(id), !existed);
        apply(&mut eng, key, id, edit);
        Ok(r)
    }
}

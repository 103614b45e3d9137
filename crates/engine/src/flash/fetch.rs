//! Parking a request on a flash read (issue 12: "a GET served from flash
//! parks its connection and completes when the read does").
//!
//! A worker runs a connection's requests inside [`scope`], with the
//! connection's [`Fetches`]. A GET that misses memory and finds its key
//! possibly on flash does not read there: it records a [`Want`] and
//! answers as a miss, and the handler, seeing [`parked`], takes the request
//! back (it has written nothing for it) and stops. The worker hands the
//! wants to its reader threads, keeps serving its other connections, and
//! when the reads complete puts the images in the connection's
//! [`Fetches::done`] and runs the request again: this time the lookup
//! finds the image there. Outside a scope (the lab's simulator, tests) the
//! lookup reads flash itself.

use std::cell::RefCell;

use super::index::Loc;

/// A flash read a request waits for.
#[derive(Debug, Clone)]
pub struct Want {
    pub h: u64,
    pub key: Box<[u8]>,
    pub locs: Vec<Loc>,
}

/// What a worker's own read of a [`Want`] needs next
/// (`Cache::flash_advance`).
#[derive(Debug)]
pub enum FlashStep {
    /// Finished: the item's image, or None if flash does not have it.
    Done(Option<Box<[u8]>>),
    /// This device read first.
    Io(super::DeviceRead),
}

/// A completed read: the key, and its image if flash had it.
pub type Fetched = (Box<[u8]>, Option<Box<[u8]>>);

/// A connection's completed and wanted reads.
#[derive(Debug, Default)]
pub struct Fetches {
    pub done: Vec<Fetched>,
    pub wanted: Vec<Want>,
}

impl Fetches {
    /// The request they were for is answered.
    pub fn clear(&mut self) {
        self.done.clear();
        self.wanted.clear();
    }
}

thread_local! {
    static SCOPE: RefCell<Option<Fetches>> = const { RefCell::new(None) };
}

/// Run `f` (a connection's requests) with `fetches` as this thread's.
pub fn scope<R>(fetches: &mut Fetches, f: impl FnOnce() -> R) -> R {
    let prev = SCOPE.replace(Some(std::mem::take(fetches)));
    let r = f();
    *fetches = SCOPE.replace(prev).unwrap_or_default();
    r
}

/// What a lookup that missed memory does about flash.
pub(crate) enum InScope {
    /// No scope: read flash now.
    Read,
    /// The read completed: its image, or None (not on flash after all).
    Done(Option<Box<[u8]>>),
    /// Recorded as wanted: answer as a miss, the request is parked.
    Parked,
}

/// Called by the lookup with the key and the places flash may have it.
pub(crate) fn on_flash(h: u64, key: &[u8], locs: &[Loc]) -> InScope {
    SCOPE.with_borrow_mut(|s| {
        let Some(s) = s else {
            return InScope::Read;
        };
        if let Some(i) = s.done.iter().position(|(k, _)| &k[..] == key) {
            return InScope::Done(s.done.swap_remove(i).1);
        }
        if !s.wanted.iter().any(|w| &w.key[..] == key) {
            s.wanted.push(Want {
                h,
                key: key.into(),
                locs: locs.to_vec(),
            });
        }
        InScope::Parked
    })
}

/// Whether a lookup in this scope parked its request (the handler must
/// take the request back and stop).
pub fn parked() -> bool {
    SCOPE.with_borrow(|s| s.as_ref().is_some_and(|s| !s.wanted.is_empty()))
}

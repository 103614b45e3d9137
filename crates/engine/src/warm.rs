//! Warm restart (memcached's `-e FILE`): at a clean shutdown the items in
//! memory are written to a file, and the next start with the same `-e`
//! loads them back before it listens, with their keys, values, flags, CAS
//! values, TTLs (as absolute times, so the time spent down counts), costs
//! and stale marks.
//!
//! memcached 1.6 maps its item memory onto the file and re-links it at
//! start, which ties the file to the same `-m` and layout, and is turned off
//! with extstore. A stream of items ties it to nothing: `-m`, `-I`, the slab
//! classes and the eviction policy may all change between the two runs, and
//! the flash tier restarts beside it from its own snapshot (items in memory
//! shadow older copies on flash, as they do while running).
//!
//! Items are written coldest first, in passes over bands of last-access age,
//! so that a smaller cache at load keeps the hottest ones and eviction order
//! resumes roughly where it was; reading headers once per band costs less
//! than sorting every item in memory at shutdown. Items are batched into
//! blocks with a CRC-32 each: a damaged block and everything after it is not
//! loaded (a miss, never wrong bytes). The file is written beside its final
//! name and renamed, and removed once loaded: a crash after that start must
//! not bring back items that were deleted or changed meanwhile.
//!
//! Items in the Z-zone are not written (they come back as misses).

use std::fs::File;
use std::io::{self, BufReader, BufWriter, ErrorKind, Read, Write};
use std::path::Path;

use crate::clock::Expiry;
use crate::durable;
use crate::engine::{ItemRef, Lookup, Store, StoreMode, StoreOutcome};
use crate::Cache;

const MAGIC: &[u8; 16] = b"cachalot-warm\0v1";
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

/// What a save or a load did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WarmStats {
    /// Items written, or stored at load.
    pub items: u64,
    /// Key and value bytes of those items.
    pub bytes: u64,
    /// At load: items whose TTL ran out while the server was down, or that
    /// the cache would not take (too large for the new `-I`, no memory).
    pub skipped: u64,
    /// At load: the file was damaged; what came before the damage was loaded.
    pub damaged: bool,
}

/// Write every item in memory to `path` (`durable::replace`).
pub fn save(cache: &Cache, path: &Path) -> io::Result<WarmStats> {
    durable::replace(path, |file| {
        let mut out = BufWriter::new(file);
        let stats = write_items(cache, &mut out)?;
        out.flush()?;
        Ok(stats)
    })
}

fn write_items(cache: &Cache, out: &mut impl Write) -> io::Result<WarmStats> {
    out.write_all(MAGIC)?;
    let clock = cache.clock();
    let (unix_now, now) = (clock.unix_now(), clock.now());
    let mut stats = WarmStats::default();
    let mut block = Vec::with_capacity(BLOCK + 4096);
    let mut max_age = u32::MAX;
    for min_age in AGE_BANDS {
        let mut page = Some(0);
        while let Some(from) = page {
            page = cache.lock().export_page(from, min_age, max_age, |item| {
                // Absolute expiry: the time spent down counts against the TTL.
                let exp_unix = match item.expiry {
                    Expiry::Never => 0,
                    Expiry::Expired => return,
                    Expiry::At(t) => unix_now + i64::from(t.saturating_sub(now)),
                };
                encode(item, exp_unix, &mut block);
                stats.items += 1;
                stats.bytes += (item.key.len() + item.value.len()) as u64;
            });
            if block.len() >= BLOCK {
                write_block(out, &block)?;
                block.clear();
            }
        }
        max_age = min_age;
    }
    if !block.is_empty() {
        write_block(out, &block)?;
    }
    out.write_all(&END.to_le_bytes())?;
    out.write_all(&stats.items.to_le_bytes())?;
    Ok(stats)
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

/// Load the items `save` wrote, then remove the file. A missing file is no
/// items (a first start); a file that is not ours is an error, and stays.
pub fn load(cache: &Cache, path: &Path) -> io::Result<WarmStats> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(WarmStats::default()),
        Err(e) => return Err(e),
    };
    let size = file.metadata()?.len();
    let mut input = BufReader::with_capacity(BLOCK, file);
    let mut magic = [0u8; 16];
    input.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(io::Error::new(
            ErrorKind::InvalidData,
            "not a cachalot warm restart file",
        ));
    }
    // One thread: stores from several contend for the engine's page
    // allocation and were slower (measured: 4.9 s against 4.4 s for 4 M).
    let mut stats = WarmStats::default();
    let mut payload = Vec::new();
    let mut max_cas = 0;
    loop {
        match read_block(&mut input, size, &mut payload) {
            Ok(true) => {}
            Ok(false) => break,
            Err(_) => {
                stats.damaged = true;
                break;
            }
        }
        if decode_block(cache, &payload, &mut stats, &mut max_cas).is_none() {
            stats.damaged = true;
            break;
        }
    }
    cache.lock().raise_cas(max_cas);
    std::fs::remove_file(path)?;
    Ok(stats)
}

/// The next block's payload into `buf`; false at the end marker.
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
    let clock = cache.clock();
    while !rest.is_empty() {
        let head = rest.get(..RECORD_HEAD)?;
        let key_len = head[0] as usize;
        let u32_at =
            |at: usize| u32::from_le_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&head[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let flags = u32_at(1);
        let exp_unix = u64_at(5) as i64;
        let cas = u64_at(13);
        let cost = u32_at(21);
        let bits = head[25];
        let value_len = u32_at(26) as usize;
        let body = rest.get(RECORD_HEAD..RECORD_HEAD + key_len + value_len)?;
        rest = &rest[RECORD_HEAD + key_len + value_len..];
        let (key, value) = body.split_at(key_len);
        let expiry = match exp_unix {
            0 => Expiry::Never,
            t => match clock.expiry(t) {
                Expiry::Expired => {
                    stats.skipped += 1;
                    continue;
                }
                e => e,
            },
        };
        let req = Store {
            key,
            value,
            flags,
            expiry,
            mode: StoreMode::Set,
            cas: 0,
            new_cas: (cas != 0).then_some(cas),
            // `ItemRef::cost` reads 1 for an item stored without one.
            cost: (cost != 1).then_some(cost),
            invalidate: false,
        };
        match cache.store(&req) {
            StoreOutcome::Stored { .. } => {
                stats.items += 1;
                stats.bytes += body.len() as u64;
                *max_cas = (*max_cas).max(cas);
                if bits & STALE != 0 {
                    let mut engine = cache.lock();
                    if let Some(id) = engine.lookup(key, Lookup::PEEK).map(|it| it.id) {
                        engine.set_stale(id, true);
                    }
                }
            }
            _ => stats.skipped += 1,
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Clock, Config};
    use std::path::PathBuf;
    use std::sync::Arc;

    fn cache() -> Cache {
        let config = Config {
            memory_limit: 32 << 20,
            ..Config::default()
        };
        Cache::new(config, Arc::new(Clock::new())).expect("cache")
    }

    fn temp(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("cachalot-warm-{}-{tag}", std::process::id()))
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

    #[test]
    fn items_come_back_with_their_fields_and_the_file_goes() {
        let a = cache();
        let mut keys = Vec::new();
        for i in 0..5000u32 {
            let key = format!("key-{i}").into_bytes();
            // Values from a few bytes to chained ones (over 16 KB... 64 KB).
            let len = if i % 500 == 0 {
                60_000
            } else {
                (i % 300) as usize
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
        {
            let mut e = a.lock();
            let id = e
                .lookup(b"key-42", Lookup::PEEK)
                .map(|it| it.id)
                .expect("key-42");
            e.set_stale(id, true);
        }
        let path = temp("roundtrip");
        let saved = save(&a, &path).expect("save");
        assert_eq!(saved.items, 5000);
        let b = cache();
        let loaded = load(&b, &path).expect("load");
        assert_eq!(
            (loaded.items, loaded.skipped, loaded.damaged),
            (5000, 0, false)
        );
        assert!(!path.exists(), "the file must not outlive its load");
        let (before, after) = (snapshot(&a, &keys), snapshot(&b, &keys));
        for (k, (x, y)) in keys.iter().zip(before.iter().zip(&after)) {
            let (x, y) = (x.as_ref().expect("saved"), y.as_ref().expect("loaded"));
            assert_eq!(x.0, y.0, "{}", String::from_utf8_lossy(k));
            // The two clocks may have started either side of a second.
            assert!((x.1 - y.1).abs() <= 1, "ttl {} vs {}", x.1, y.1);
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
    fn expired_meanwhile_and_damaged_blocks_are_misses() {
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
        b.clock().advance(std::time::Duration::from_secs(10));
        let mut bytes = std::fs::read(&path).expect("read");
        let loaded = load(&b, &path).expect("load");
        assert_eq!((loaded.items, loaded.skipped), (1900, 100));

        // A flipped byte in the second block: the first loads, no more.
        let second = 16 + 8 + u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
        assert!(second + 100 < bytes.len(), "the test wants two blocks");
        bytes[second + 50] ^= 0x40;
        std::fs::write(&path, &bytes).expect("write");
        let c = cache();
        let loaded = load(&c, &path).expect("load");
        assert!(
            loaded.damaged && loaded.items > 0 && loaded.items < 2000,
            "{loaded:?}"
        );
        // Whatever was loaded is exactly what was saved.
        for i in 0..2000u32 {
            let key = format!("k{i}");
            c.get(key.as_bytes(), Lookup::PEEK, |it| {
                if let Some(it) = it {
                    assert_eq!(it.value, value.as_slice());
                }
            });
        }
        // Not a warm restart file at all: an error, and the file stays.
        std::fs::write(&path, b"hello").expect("write");
        assert!(load(&cache(), &path).is_err());
        assert!(path.exists());
        let _ = std::fs::remove_file(&path);
    }
}

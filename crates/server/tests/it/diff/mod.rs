//! The differential tester's parts: `gen` makes seeded command sequences,
//! `exec` runs them on memcached and cachalot and compares the replies,
//! `timed` holds the few sequences that need the clock; here: starting the
//! two servers and shrinking a failing sequence to its shortest form.

pub mod exec;
pub mod gen;
pub mod timed;

use std::sync::atomic::{AtomicU64, Ordering};

use crate::common::{self, Memcached};
use exec::Difference;
use gen::{Seq, Step};

/// Flags both servers get: memory enough that no sequence ever evicts
/// (eviction differs by design), `-I 2m` so values over a page are chained
/// (`gen::ITEM_MAX`).
pub const SERVER_FLAGS: &[&str] = &["-m", "1024", "-t", "2", "-I", "2m"];

/// What cachalot gets besides [`SERVER_FLAGS`] in the Z-zone pair: after
/// every command each item of the N-zone is demoted to the Z-zone and
/// packed into a block (a test knob), so every command reads the item from
/// a block, through promotion or a zone read. The blocks are stored
/// uncompressed (`zzone_codec=none`, the form zstd's entropy test also
/// picks): the sequences' few small items make blocks that zstd cannot
/// shrink, and a zone whose blocks do not compress gives its pages up and
/// evicts, by design (`zzone::config::PROBE_EVERY`), which memcached
/// would not.
pub const ZONE_FLAGS: &[&str] = &["-o", "zzone=1,zzone_codec=none,zzone_demote_all=1"];

/// memcached and cachalot with the same flags.
pub struct Pair {
    pub memcached: Memcached,
    pub cachalot: common::Server,
}

impl Pair {
    /// A pair whose cachalot also has [`ZONE_FLAGS`] if `zone`.
    pub fn start_for(zone: bool) -> Pair {
        let mut flags = SERVER_FLAGS.to_vec();
        if zone {
            flags.extend_from_slice(ZONE_FLAGS);
        }
        Pair {
            memcached: Memcached::start(SERVER_FLAGS),
            cachalot: common::Server::start(&flags),
        }
    }

    /// Run `steps` of `seq` under a key prefix no earlier run used, so
    /// every run starts from keys neither server has seen.
    pub fn run(&self, seq: &Seq, steps: &[Step]) -> Option<Difference> {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let prefix = format!("{:08x}:", RUNS.fetch_add(1, Ordering::Relaxed));
        debug_assert_eq!(prefix.len(), gen::PREFIX_LEN);
        exec::run(
            self.memcached.addr(),
            self.cachalot.addr(),
            seq,
            steps,
            prefix.as_bytes(),
        )
    }
}

/// The shortest sub-sequence of `seq` that still shows a difference:
/// Zeller's delta debugging (ddmin) over its steps, then single steps
/// removed until none can go. Each candidate runs on fresh keys.
pub fn shrink(pair: &Pair, seq: &Seq) -> Vec<Step> {
    let fails = |steps: &[Step]| pair.run(seq, steps).is_some();
    let mut cur: Vec<Step> = seq.steps.clone();
    let mut n = 2;
    while cur.len() >= 2 {
        let chunk = cur.len().div_ceil(n);
        let complements = (0..n).map(|i| {
            let (lo, hi) = ((i * chunk).min(cur.len()), ((i + 1) * chunk).min(cur.len()));
            cur[..lo]
                .iter()
                .chain(&cur[hi..])
                .cloned()
                .collect::<Vec<Step>>()
        });
        match complements
            .filter(|c| c.len() < cur.len())
            .find(|c| fails(c))
        {
            Some(smaller) => {
                cur = smaller;
                n = (n - 1).max(2);
            }
            None if n >= cur.len() => break,
            None => n = (2 * n).min(cur.len()),
        }
    }
    // 1-minimal: no single step can go.
    let mut i = 0;
    while i < cur.len() && cur.len() > 1 {
        let mut without = cur.clone();
        without.remove(i);
        if fails(&without) {
            cur = without;
        } else {
            i += 1;
        }
    }
    cur
}

/// The failure report: seed, the shortest sequence, both servers' replies.
pub fn report(pair: &Pair, seq: &Seq, diff: &Difference) -> String {
    let short = shrink(pair, seq);
    let again = pair.run(seq, &short);
    let rerun = match seq.zone {
        true => "DIFF_ZONE_SEED={} DIFF_ZONE_SEQUENCES=1, test random_sequences_through_the_zone",
        false => "DIFF_SEED={} DIFF_SEQUENCES=1",
    }
    .replace("{}", &seq.seed.to_string());
    let mut s = format!(
        "memcached and cachalot{} differ: seed {} ({:?}, {} steps; rerun with {rerun})\n\
         first difference at steps {}..{} of the original sequence\n\
         shortest sequence that reproduces it ({} steps; `|` starts a pipeline; keys prefixed PPPPPPPP:;\n\
         replies after each pipeline, CAS uniques numbered #n in order of appearance):\n",
        if seq.zone { " (Z-zone pair)" } else { "" },
        seq.seed,
        seq.family,
        seq.steps.len(),
        diff.first_step,
        diff.first_step + diff.steps,
        short.len()
    );
    let d = again.as_ref().unwrap_or(diff);
    let mut batch = 0;
    for (i, st) in short.iter().enumerate() {
        s.push_str(&exec::describe(st, b"PPPPPPPP:"));
        s.push('\n');
        let last_of_batch =
            !matches!(short.get(i + 1), Some(n) if !n.new_batch && !n.cmd.needs_fresh_batch());
        if last_of_batch && again.is_some() {
            match d.earlier.get(batch) {
                Some(r) => s.push_str(&format!("      both:      {}\n", exec::show(r, 300))),
                None if batch == d.earlier.len() => s.push_str(&format!(
                    "      memcached: {}\n      cachalot:  {}\n",
                    exec::show(&d.memcached, 600),
                    exec::show(&d.cachalot, 600)
                )),
                None => {}
            }
            batch += 1;
        }
    }
    if again.is_none() {
        // Not reproducible alone: show the original run.
        s.push_str("the shortened sequence did not fail again (flaky?); the original sequence:\n");
        for st in &seq.steps {
            s.push_str(&exec::describe(st, b"PPPPPPPP:"));
            s.push('\n');
        }
        s.push_str(&format!(
            "replies to the batch at step {}:\n  memcached: {}\n  cachalot:  {}\n",
            d.first_step,
            exec::show(&d.memcached, 2000),
            exec::show(&d.cachalot, 2000)
        ));
    }
    // Eviction differs by design: if either server evicted (or moved a
    // page, which may evict), say so.
    for (name, addr) in [
        ("memcached", pair.memcached.addr()),
        ("cachalot", pair.cachalot.addr()),
    ] {
        s.push_str(&format!("{name} stats: {}\n", memory_stats(addr)));
    }
    if seq.zone {
        // What the Z-zone let go of, and why.
        s.push_str(&format!(
            "cachalot stats zzone: {}\n",
            zone_stats(pair.cachalot.addr())
        ));
    }
    s
}

/// `stats zzone`, without the per-codec figures.
fn zone_stats(addr: std::net::SocketAddr) -> String {
    use std::io::Write;
    let Ok(mut c) = std::net::TcpStream::connect(addr) else {
        return "unreachable".into();
    };
    if c.write_all(b"stats zzone\r\n").is_err() {
        return "unreachable".into();
    }
    let reply = common::read_until(&mut c, b"END\r\n");
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|l| l.strip_prefix("STAT zzone_"))
        .filter(|l| !l.starts_with("raw_") && !l.starts_with("lz4_"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a server holds and what it let go of (items, bytes, evictions,
/// reclaims, page moves and what they evicted or, in memcached, deleted
/// for being busy, the memory limit).
pub fn memory_stats(addr: std::net::SocketAddr) -> String {
    use std::io::Write;
    let Ok(mut c) = std::net::TcpStream::connect(addr) else {
        return "unreachable".into();
    };
    if c.write_all(b"stats\r\n").is_err() {
        return "unreachable".into();
    }
    let reply = common::read_until(&mut c, b"END\r\n");
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter(|l| {
            [
                "curr_items ",
                "bytes ",
                "evictions ",
                "reclaimed ",
                "expired_unfetched ",
                "slabs_moved ",
                "slab_reassign_evictions_nomem ",
                "slab_reassign_busy_deletes ",
                "limit_maxbytes ",
            ]
            .iter()
            .any(|k| l.starts_with(k))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a cachalot's Z-zone did (`stats zzone`; all 0 without one).
#[derive(Clone, Copy, Debug, Default)]
pub struct ZoneFigures {
    pub demotions: u64,
    pub flushed: u64,
    pub hits: u64,
    pub promotions: u64,
    /// Items stored apart from their blocks (values over half a block).
    pub large_written: u64,
}

impl ZoneFigures {
    pub fn add(self, o: ZoneFigures) -> ZoneFigures {
        ZoneFigures {
            demotions: self.demotions + o.demotions,
            flushed: self.flushed + o.flushed,
            hits: self.hits + o.hits,
            promotions: self.promotions + o.promotions,
            large_written: self.large_written + o.large_written,
        }
    }
}

pub fn zone_figures(addr: std::net::SocketAddr) -> ZoneFigures {
    use std::io::Write;
    let mut z = ZoneFigures::default();
    let Ok(mut c) = std::net::TcpStream::connect(addr) else {
        return z;
    };
    if c.write_all(b"stats zzone\r\n").is_err() {
        return z;
    }
    let reply = common::read_until(&mut c, b"END\r\n");
    for line in String::from_utf8_lossy(&reply).lines() {
        let mut t = line.split(' ').skip(1);
        let (Some(name), Some(n)) = (t.next(), t.next().and_then(|n| n.parse().ok())) else {
            continue;
        };
        match name {
            "zzone_demotions" => z.demotions = n,
            "zzone_flushed" => z.flushed = n,
            "zzone_hits" => z.hits = n,
            "zzone_promotions" => z.promotions = n,
            "zzone_large_written" => z.large_written = n,
            _ => {}
        }
    }
    z
}

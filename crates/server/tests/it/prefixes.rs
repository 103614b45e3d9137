//! `stats prefixes` (issue 36, criterion 2): per-prefix items and bytes in
//! each tier add up to the engine's own totals, and requests are counted
//! by prefix across protocols.

use crate::common;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use common::Server;

fn stats(server: &Server, group: &str) -> BTreeMap<String, String> {
    let reply = server.ask(
        format!("stats {group}\r\n")
            .replace("stats \r", "stats\r")
            .as_bytes(),
        b"END\r\n",
    );
    String::from_utf8(reply)
        .expect("text")
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("STAT ")?.splitn(2, ' ');
            Some((w.next()?.to_string(), w.next()?.to_string()))
        })
        .collect()
}

fn num(m: &BTreeMap<String, String>, k: &str) -> u64 {
    m.get(k)
        .unwrap_or_else(|| panic!("no {k}: {m:?}"))
        .parse()
        .expect(k)
}

/// 24 MB of compressible values under four prefixes (and keys with none)
/// in an 8 MB cache: the N-zone holds some, the Z-zone the rest. The
/// walk's sums per tier are the engine's `bytes` and `zzone_bytes_in`.
#[test]
fn prefix_bytes_add_up_to_the_engines_totals() {
    let port = common::free_port();
    let listen = format!("metrics_listen=127.0.0.1:{port}");
    let server = Server::start(&["-m", "8", "-D", ":", "-o", &listen]);
    let mut c = server.connect();
    let mut batch = Vec::new();
    for i in 0..24_000u32 {
        let key = match i % 5 {
            4 => format!("plain{i}"),
            p => format!("p{p}:{i}"),
        };
        let value = format!(
            "{{\"id\":{i},\"name\":\"user {}\",\"bio\":\"{}\"}}",
            i % 97,
            "lorem ipsum dolor sit amet ".repeat(35)
        );
        batch.extend_from_slice(format!("set {key} 0 0 {} noreply\r\n", value.len()).as_bytes());
        batch.extend_from_slice(value.as_bytes());
        batch.extend_from_slice(b"\r\n");
        if batch.len() > 256 << 10 {
            c.write_all(&batch).expect("send");
            batch.clear();
        }
    }
    batch.extend_from_slice(b"get p1:1 p1:2 p2:3 nosuch:1\r\nmn\r\n");
    c.write_all(&batch).expect("send");
    common::read_until(&mut c, b"MN\r\n");

    // A walk that began after the writes. The maintainer may go on moving
    // items from the N-zone to the Z-zone meanwhile (a walk takes a few of
    // its turns), which moves bytes between the tiers but not their total.
    let deadline = Instant::now() + Duration::from_secs(30);
    let written = Instant::now();
    let (p, s, z) = loop {
        let p = stats(&server, "prefixes");
        let s = stats(&server, "");
        let z = stats(&server, "zzone");
        let age = p
            .get("prefixes_walk_age_ms")
            .map_or(-1, |v| v.parse::<i64>().unwrap());
        let took = p
            .get("prefixes_walk_ms")
            .map_or(0, |v| v.parse::<u128>().unwrap());
        if age >= 0 && age as u128 + took < written.elapsed().as_millis() {
            break (p, s, z);
        }
        assert!(Instant::now() < deadline, "no walk after the writes: {p:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let sum = |field: &str| -> u64 {
        p.iter()
            .filter(|(k, _)| k.ends_with(&format!(":{field}")))
            .map(|(_, v)| v.parse::<u64>().unwrap())
            .sum()
    };
    let (memory, zone) = (num(&s, "bytes"), num(&z, "zzone_bytes_in"));
    assert!(zone > 1 << 20, "the zone holds items: {z:?}");
    let listed = sum("bytes_memory") + sum("bytes_zzone");
    let total = memory + zone;
    assert!(
        listed.abs_diff(total) * 100 <= total,
        "{listed} bytes listed, the engine counts {memory} + {zone}"
    );
    assert_eq!(sum("items"), num(&s, "curr_items"));
    assert_eq!(sum("bytes_flash"), 0);
    // Four prefixes and the keys without one.
    for name in ["p0", "p1", "p2", "p3", "(none)"] {
        assert!(
            num(&p, &format!("prefix:{name}:items")) > 0,
            "{name}: {p:?}"
        );
    }
    // Requests by prefix: the SETs, and the GETs' hits and misses.
    assert_eq!(num(&p, "prefix:p0:sets"), 4800);
    assert_eq!(num(&p, "prefix:p1:gets"), 2);
    assert_eq!(num(&p, "prefix:p1:hits") + num(&p, "prefix:p1:misses"), 2);
    assert_eq!(num(&p, "prefix:nosuch:misses"), 1);

    // The same figures in /metrics, for the 20 largest prefixes.
    let mut h = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics");
    h.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").expect("send");
    let mut body = String::new();
    std::io::Read::read_to_string(&mut h, &mut body).expect("read");
    for want in [
        "cachalot_prefix_items{prefix=\"p0\"} ",
        "cachalot_prefix_bytes{prefix=\"(none)\",tier=\"zzone\"} ",
        "cachalot_prefix_requests_total{prefix=\"p0\",result=\"set\"} 4800",
        "cachalot_prefix_requests_total{prefix=\"nosuch\",result=\"miss\"} 1",
    ] {
        assert!(body.contains(want), "{want} missing:\n{body}");
    }
}

#[test]
fn prefixes_off_says_how_to_turn_them_on() {
    let server = Server::start(&[]);
    let reply = server.ask(b"stats prefixes\r\n", b"\r\n");
    assert_eq!(
        reply,
        b"CLIENT_ERROR prefix stats are off (-D <delimiter>, or stats detail on)\r\n"
    );
}

/// A `set ... noreply` of `key` with 1,000 printable bytes that do not
/// compress, appended to `batch`.
fn push_random_set(batch: &mut Vec<u8>, key: &str, rng: &mut fastrand::Rng) {
    batch.extend_from_slice(format!("set {key} 0 0 1000 noreply\r\n").as_bytes());
    batch.extend((0..1000).map(|_| rng.u8(b'!'..b'{')));
    batch.extend_from_slice(b"\r\n");
}

/// Evictions by prefix: incompressible values under two prefixes, three
/// to one, four times the memory, with the Z-zone on (items evicted from
/// it) and off (from the N-zone). The prefixes' evictions and those no
/// prefix was told of add up to the evictions stats; they split about as
/// the writes did, and few are not told (only Z-zone blocks dropped with
/// their older items compressed, here where nothing compresses).
#[test]
fn evictions_are_counted_by_prefix() {
    for (zone, most_untold) in [("zzone=1", 0.10), ("zzone=0", 0.0)] {
        let server = Server::start(&["-m", "8", "-D", ":", "-o", zone]);
        let mut c = server.connect();
        let mut batch = Vec::new();
        let mut rng = fastrand::Rng::with_seed(1);
        for i in 0..32_000u32 {
            let key = match i % 4 {
                3 => format!("small:{i}"),
                _ => format!("big:{i}"),
            };
            push_random_set(&mut batch, &key, &mut rng);
            if batch.len() > 256 << 10 {
                c.write_all(&batch).expect("send");
                batch.clear();
            }
        }
        batch.extend_from_slice(b"mn\r\n");
        c.write_all(&batch).expect("send");
        common::read_until(&mut c, b"MN\r\n");
        let deadline = Instant::now() + Duration::from_secs(30);
        // Items a page move lost count too (memcached's
        // slab_reassign_evictions_nomem).
        let evicted = |s: &BTreeMap<String, String>| {
            num(s, "evictions") + num(s, "slab_reassign_evictions_nomem")
        };
        // The Z-zone's writer evicts as it packs its stage: the figures
        // are read once the stage is empty, between two equal counts.
        let staged = || match zone {
            "zzone=1" => num(&stats(&server, "zzone"), "zzone_staged"),
            _ => 0,
        };
        let (p, total) = loop {
            let a = evicted(&stats(&server, ""));
            let p = stats(&server, "prefixes");
            let b = evicted(&stats(&server, ""));
            if a == b && staged() == 0 {
                break (p, b);
            }
            assert!(Instant::now() < deadline, "{zone}: evictions never settle");
            std::thread::sleep(Duration::from_millis(20));
        };
        let (big, small, untold) = (
            num(&p, "prefix:big:evictions"),
            num(&p, "prefix:small:evictions"),
            num(&p, "prefixes_evictions_unattributed"),
        );
        assert!(total > 16_000, "{zone}: {total} evictions");
        assert_eq!(big + small + untold, total, "{zone}: {p:?}");
        assert!(
            untold as f64 <= most_untold * total as f64,
            "{zone}: {untold} of {total} evictions told to no prefix"
        );
        let share = big as f64 / (big + small) as f64;
        assert!((0.65..0.85).contains(&share), "{zone}: big's share {share}");
    }
}

/// Flash too (criterion 2 across every tier): 16,000 items of one image
/// length under two prefixes in an 8 MB cache with a flash tier. The walk reads the flash items back; its sums are the items
/// the engine counts, and its bytes those items' images (the image length
/// from the engine's own `bytes` over the items memory holds).
#[test]
fn prefix_bytes_add_up_on_flash() {
    let path = common::temp_path("prefix-flash");
    let p = path.to_str().expect("utf-8 path").to_string();
    let server = Server::start(&[
        "-m",
        "8",
        "--flash-path",
        &p,
        "--flash-size",
        "64",
        "-D",
        ":",
    ]);
    let mut c = server.connect();
    let mut rng = fastrand::Rng::with_seed(2);
    let n = 16_000u32;
    for chunk in 0..n / 1000 {
        let mut batch = Vec::new();
        for i in chunk * 1000..(chunk + 1) * 1000 {
            // Keys of one length, so every image is as long.
            let key = match i % 4 {
                3 => format!("sml:{i:07}"),
                _ => format!("big:{i:07}"),
            };
            push_random_set(&mut batch, &key, &mut rng);
        }
        batch.extend_from_slice(b"mn\r\n");
        c.write_all(&batch).expect("send");
        common::read_until(&mut c, b"MN\r\n");
        // Let the flash writer catch up: items that find its stage full
        // are evicted (on a busy machine, many still are).
        let deadline = Instant::now() + Duration::from_secs(60);
        while num(&stats(&server, "flash"), "flash_staged") > 0 {
            assert!(Instant::now() < deadline, "the flash stage never empties");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let written = Instant::now();
    let deadline = written + Duration::from_secs(120);
    let p = loop {
        let p = stats(&server, "prefixes");
        let age = p["prefixes_walk_age_ms"].parse::<i64>().expect("age");
        let took = p["prefixes_walk_ms"].parse::<u128>().expect("took");
        if age >= 0 && age as u128 + took < written.elapsed().as_millis() {
            break p;
        }
        assert!(Instant::now() < deadline, "no walk after the writes: {p:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let (s, f) = (stats(&server, ""), stats(&server, "flash"));
    let _ = std::fs::remove_file(&path);
    let on_flash = num(&f, "flash_items");
    let in_memory = num(&s, "curr_items") - on_flash;
    assert!(on_flash > 1000 && in_memory > 1000, "{s:?} {f:?}");
    let image = num(&s, "bytes") / in_memory;
    let sum = |field: &str| -> u64 {
        p.iter()
            .filter(|(k, _)| k.ends_with(&format!(":{field}")))
            .map(|(_, v)| v.parse::<u64>().expect("number"))
            .sum()
    };
    assert_eq!(sum("items"), num(&s, "curr_items"));
    let (flash, memory) = (sum("bytes_flash"), sum("bytes_memory") + sum("bytes_zzone"));
    let want = on_flash * image;
    assert!(
        flash.abs_diff(want) * 100 <= want,
        "{flash} bytes listed on flash, {on_flash} items of {image} bytes there"
    );
    assert!(
        memory.abs_diff(num(&s, "bytes")) * 100 <= num(&s, "bytes"),
        "{memory} bytes listed in memory: {s:?}"
    );
    let big = num(&p, "prefix:big:bytes_flash") + num(&p, "prefix:big:bytes_memory");
    let share = big as f64 / (flash + memory) as f64;
    assert!((0.72..0.78).contains(&share), "big's share {share}");
}

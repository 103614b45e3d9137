//! Warm restart (`-e FILE`, issue 13): a filled server stopped cleanly and
//! started again with the same `-e` finds its items, with their CAS values,
//! flags, TTLs and costs, side by side with memcached 1.6.18 doing the same
//! (`-e` and SIGUSR1, its graceful restart). Also: the flash tier restarts
//! with it, and a crash after a warm start does not bring back old items.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{temp_path, Memcached, Server};

const ITEMS: usize = 40_000;

/// Item number -> (value, CAS, flags, TTL, cost) as `mg` reports them.
type Items = HashMap<usize, (Vec<u8>, u64, u32, i64, Option<u32>)>;

/// (value, flags, ttl, cost) of item `i` as the fill stores it.
fn item(i: usize) -> (Vec<u8>, u32, u32, Option<u32>) {
    let len = 10 + (i * 37) % 390;
    let value = (0..len).map(|j| b'a' + ((i + j) % 26) as u8).collect();
    let ttl = if i.is_multiple_of(3) {
        0
    } else {
        3600 + i as u32
    };
    let cost = i.is_multiple_of(5).then_some(100 + i as u32);
    (value, i as u32, ttl, cost)
}

fn key(i: usize) -> String {
    format!("warm:{i}")
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    s
}

/// Store items `0..n` with `set ... [cost=N] noreply` (the cost only for
/// cachalot: memcached refuses a second optional token), waiting for a
/// `version` to come back after every 2000 and at the end; with a flash
/// tier, also for its writer to have nothing staged (items that find its
/// stage full are evicted, not written).
fn fill(addr: SocketAddr, n: usize, costs: bool, flash: bool) {
    let mut s = connect(addr);
    let mut batch = Vec::new();
    for i in 0..n {
        let (value, flags, ttl, cost) = item(i);
        let cost = match cost {
            Some(c) if costs => format!(" cost={c}"),
            _ => String::new(),
        };
        let line = format!(
            "set {} {flags} {ttl} {}{cost} noreply\r\n",
            key(i),
            value.len()
        );
        batch.extend_from_slice(line.as_bytes());
        batch.extend_from_slice(&value);
        batch.extend_from_slice(b"\r\n");
        if (i + 1).is_multiple_of(2000) || i == n - 1 {
            batch.extend_from_slice(b"version\r\n");
            s.write_all(&batch).expect("send");
            batch.clear();
            let got = common::read_until(&mut s, b"\r\n");
            assert!(
                got.starts_with(b"VERSION "),
                "{}",
                String::from_utf8_lossy(&got)
            );
            if flash {
                settle(&mut s);
            }
        }
    }
}

/// Wait until the flash tier's writer has nothing staged.
fn settle(s: &mut TcpStream) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        s.write_all(b"stats flash\r\n").expect("send");
        let reply = String::from_utf8_lossy(&common::read_until(s, b"END\r\n")).into_owned();
        let staged: u64 = reply
            .lines()
            .find_map(|l| l.strip_prefix("STAT flash_staged "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no flash_staged in {reply}"));
        if staged == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{staged} items still staged");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What `mg <key> v c f t [w]` says of each item: (value, cas, flags, ttl,
/// cost); missing keys are absent. `w` (the cost) is cachalot's alone.
fn read_all(addr: SocketAddr, n: usize, costs: bool) -> Items {
    let flags = if costs { "v c f t w" } else { "v c f t" };
    let s = connect(addr);
    let mut reader = BufReader::new(s.try_clone().expect("clone"));
    let mut writer = s;
    let mut out = HashMap::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(2000) {
        let mut req = String::new();
        for &i in chunk {
            req.push_str(&format!("mg {} {flags}\r\n", key(i)));
        }
        writer.write_all(req.as_bytes()).expect("send");
        for &i in chunk {
            let mut line = String::new();
            reader.read_line(&mut line).expect("reply line");
            let line = line.trim_end();
            if line == "EN" {
                continue;
            }
            let mut words = line.split(' ');
            assert_eq!(words.next(), Some("VA"), "{line}");
            let len: usize = words.next().and_then(|w| w.parse().ok()).expect("length");
            let (mut cas, mut flags, mut ttl, mut cost) = (0, 0, 0, None);
            for w in words {
                let (flag, v) = w.split_at(1);
                match flag {
                    "c" => cas = v.parse().expect("cas"),
                    "f" => flags = v.parse().expect("flags"),
                    "t" => ttl = v.parse().expect("ttl"),
                    "w" => cost = Some(v.parse().expect("cost")),
                    _ => {}
                }
            }
            let mut value = vec![0; len + 2];
            reader.read_exact(&mut value).expect("value");
            value.truncate(len);
            out.insert(i, (value, cas, flags, ttl, cost));
        }
    }
    out
}

/// Check what came back against what was there before the restart:
/// at least 99% of the items, each with the same value, CAS, flags and
/// cost, and its TTL less the time spent down. Returns how many came back.
fn compare(who: &str, before: &Items, after: &Items, down_secs: i64) -> usize {
    let kept = before.keys().filter(|i| after.contains_key(i)).count();
    assert!(
        kept * 100 >= before.len() * 99,
        "{who}: {kept} of {} items came back",
        before.len()
    );
    for (i, a) in after {
        let b = before
            .get(i)
            .unwrap_or_else(|| panic!("{who}: {} came from nowhere", key(*i)));
        assert_eq!((&a.0, a.1, a.2), (&b.0, b.1, b.2), "{who}: {}", key(*i));
        assert_eq!(a.4, b.4, "{who}: cost of {}", key(*i));
        if b.3 == -1 {
            assert_eq!(a.3, -1, "{who}: {} got a TTL", key(*i));
        } else {
            let spent = b.3 - a.3;
            assert!(
                (0..=down_secs + 3).contains(&spent),
                "{who}: {} TTL {} -> {} ({down_secs} s down)",
                key(*i),
                b.3,
                a.3
            );
        }
    }
    kept
}

/// Fill, stop with `signal`, start again and compare: (items before,
/// items after, items that were on flash before, or in the Z-zone when it
/// stopped with `-o zzone=1`).
fn cachalot_restart(file: &Path, extra: &[&str], signal: &str) -> (usize, usize, u64) {
    cachalot_restart_n(file, extra, signal, ITEMS)
}

/// [`cachalot_restart`] with `n` items.
fn cachalot_restart_n(file: &Path, extra: &[&str], signal: &str, n: usize) -> (usize, usize, u64) {
    let file = file.to_string_lossy().into_owned();
    let mut args = vec!["-m", "64", "-e", &file];
    args.extend_from_slice(extra);
    let mut first = Server::start(&args);
    // (Without a flash tier, `stats flash` is an unknown group: ERROR.)
    let flash = extra.contains(&"--flash-path");
    fill(first.addr(), n, true, flash);
    // The time down counts from the first read: an item's TTL may be read
    // that early, and is read back after the restart.
    let started = std::time::Instant::now();
    let before = read_all(first.addr(), n, true);
    let zone = extra.iter().any(|a| a.contains("zzone=1"));
    let flash_items = match (flash, zone) {
        (true, _) => first.stat("flash", "flash_items"),
        (false, true) => first.stat("zzone", "zzone_items"),
        (false, false) => 0,
    };
    first.signal(signal);
    assert!(
        first
            .wait_exit(Duration::from_secs(60))
            .is_some_and(|s| s.success()),
        "cachalot did not stop cleanly on SIG{signal}: {}",
        first.stderr()
    );
    assert!(Path::new(&file).exists(), "nothing saved to {file}");
    let second = Server::start(&args);
    let after = read_all(second.addr(), n, true);
    let down = started.elapsed().as_secs() as i64;
    let kept = compare("cachalot", &before, &after, down);
    // Loaded once: the file is gone, and new CAS values are above the old.
    assert!(!Path::new(&file).exists(), "{file} outlived its load");
    let mut s = connect(second.addr());
    s.write_all(b"ms warm:new 1 c\r\nx\r\n").expect("send");
    let reply = String::from_utf8_lossy(&common::read_until(&mut s, b"\r\n")).into_owned();
    let cas: u64 = reply
        .trim_end()
        .strip_prefix("HD c")
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{reply:?}"));
    let max = before.values().map(|v| v.1).max().unwrap_or(0);
    assert!(cas > max, "new CAS {cas} not above the restored {max}");
    (before.len(), kept, flash_items)
}

#[test]
fn a_restart_keeps_the_items_as_memcached_does() {
    let file = temp_path("warm");
    let (had, kept, _) = cachalot_restart(&file, &[], "USR1");
    assert_eq!(had, ITEMS, "the fill fits: every item was there before");
    assert_eq!(kept, ITEMS);

    // memcached 1.6.18, the same fill and its graceful restart.
    let mc_file = temp_path("memcached-warm");
    let mc_path = mc_file.to_string_lossy().into_owned();
    let flags = ["-m", "64", "-e", mc_path.as_str()];
    let mut first = Memcached::start(&flags);
    fill(first.addr(), ITEMS, false, false);
    let started = std::time::Instant::now();
    let before = read_all(first.addr(), ITEMS, false);
    assert!(first.stop_with("USR1", Duration::from_secs(60)).is_some());
    // memcached needs its clock to move on before it restores.
    std::thread::sleep(Duration::from_millis(1500));
    let second = Memcached::start(&flags);
    let after = read_all(second.addr(), ITEMS, false);
    let down = started.elapsed().as_secs() as i64;
    assert_eq!(compare("memcached", &before, &after, down), ITEMS);
    drop(second);
    let _ = std::fs::remove_file(&mc_file);
    let _ = std::fs::remove_file(format!("{mc_path}.meta"));
}

#[test]
fn the_z_zone_s_items_come_back_too() {
    // Compressible values, a Z-zone that takes all it may (90% of -m) and
    // few slab classes (-f 2: each class keeps a 1 MB page): most items
    // are in the Z-zone when the server stops.
    let file = temp_path("warm-zzone");
    let extra = ["-m", "16", "-f", "2", "-o", "zzone=1,zzone_target=0"];
    let n = 120_000;
    let started = Instant::now();
    let (had, kept, in_zone) = cachalot_restart_n(&file, &extra, "TERM", n);
    eprintln!(
        "zzone warm restart: {kept} of {had} items back, {in_zone} of them in the zone; \
         fill, stop, start and reads {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(had, n, "the fill fits: every item was there before");
    assert!(
        in_zone as usize * 2 >= had,
        "only {in_zone} of {had} in the zone"
    );
}

#[test]
fn sigterm_saves_too_and_the_flash_tier_restarts_with_memory() {
    // 16 MB of memory and a flash tier: a good part of the items is on
    // flash when the server stops; both parts must come back.
    let file = temp_path("warm-flash");
    let flash = temp_path("warm-flash-tier");
    let flash_arg = flash.to_string_lossy().into_owned();
    let extra = ["--flash-path", &flash_arg, "--flash-size", "64", "-m", "16"];
    let (had, kept, on_flash) = cachalot_restart(&file, &extra, "TERM");
    assert_eq!(had, ITEMS, "every item was there before the restart");
    assert!(on_flash >= 5000, "only {on_flash} items on flash");
    assert!(kept * 100 >= had * 99, "{kept} of {had}");
    for suffix in ["", ".dict", ".index"] {
        let _ = std::fs::remove_file(format!("{flash_arg}{suffix}"));
    }
}

#[test]
fn a_crash_after_a_warm_start_does_not_bring_back_old_items() {
    let file = temp_path("warm-crash");
    let path = file.to_string_lossy().into_owned();
    let mut first = Server::start(&["-e", &path]);
    first.ask(b"set k 0 0 3\r\nold\r\n", b"\r\n");
    first.signal("TERM");
    assert!(first.wait_exit(Duration::from_secs(30)).is_some());
    let mut second = Server::start(&["-e", &path]);
    assert_eq!(
        second.ask(b"get k\r\n", b"END\r\n"),
        b"VALUE k 0 3\r\nold\r\nEND\r\n"
    );
    assert_eq!(
        second.ask(b"set k 0 0 3\r\nnew\r\n", b"\r\n"),
        b"STORED\r\n"
    );
    second.signal("KILL");
    assert!(second.wait_exit(Duration::from_secs(30)).is_some());
    let third = Server::start(&["-e", &path]);
    assert_eq!(
        third.ask(b"get k\r\n", b"END\r\n"),
        b"END\r\n",
        "the old value came back"
    );
    // A file that is not a warm restart file stops start-up.
    drop(third);
    std::fs::write(&file, b"something else").expect("write");
    let err = Server::try_start(&["-e", &path])
        .err()
        .expect("started on a foreign file");
    assert!(err.contains("warm restart: cannot load"), "{err}");
    let _ = std::fs::remove_file(&file);
}

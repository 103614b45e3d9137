//! memcached's `ext_item_age` (issue 32): with `ext_item_age=2` and
//! `ext_item_size=512`, items larger than 512 bytes go to flash once idle
//! for more than 2 seconds, whether or not memory is short; memory then
//! holds no values of their classes, and the `extstore_*` stats report
//! them. Checked side by side with memcached 1.6.18: both within
//! `ext_item_age` + 2 s of the last store, small items left in memory,
//! values read back byte for byte.

use crate::common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{temp_path, Memcached, Server};

const BIG: usize = 2000;
const BIG_LEN: usize = 2000;
const SMALL: usize = 100;

struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    fn new(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Conn {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).expect("reply line");
        l.trim_end().to_string()
    }

    fn set(&mut self, key: &str, value: &[u8]) {
        let mut req = format!("set {key} 0 0 {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        self.w.write_all(&req).unwrap();
        assert_eq!(self.line(), "STORED", "set {key}");
    }

    fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        self.w
            .write_all(format!("get {key}\r\n").as_bytes())
            .unwrap();
        let head = self.line();
        if head == "END" {
            return None;
        }
        let len: usize = head.rsplit(' ').next().unwrap().parse().unwrap();
        let mut v = vec![0u8; len + 2];
        self.r.read_exact(&mut v).unwrap();
        v.truncate(len);
        assert_eq!(self.line(), "END");
        Some(v)
    }

    /// `stats <group>` as name -> value.
    fn stats(&mut self, group: &str) -> HashMap<String, String> {
        let cmd = if group.is_empty() {
            "stats\r\n".to_string()
        } else {
            format!("stats {group}\r\n")
        };
        self.w.write_all(cmd.as_bytes()).unwrap();
        let mut out = HashMap::new();
        loop {
            let l = self.line();
            if l == "END" {
                return out;
            }
            let mut it = l.splitn(3, ' ');
            if let (Some("STAT"), Some(k), Some(v)) = (it.next(), it.next(), it.next()) {
                out.insert(k.to_string(), v.to_string());
            }
        }
    }

    fn num(&mut self, name: &str) -> u64 {
        self.stats("")
            .get(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// Chunks in use in the classes whose chunks hold more than 1,000
    /// bytes (the big values' classes).
    fn big_chunks_used(&mut self) -> u64 {
        let st = self.stats("slabs");
        let mut size: HashMap<&str, u64> = HashMap::new();
        let mut used: HashMap<&str, u64> = HashMap::new();
        for (k, v) in &st {
            if let Some((class, field)) = k.split_once(':') {
                let v = v.parse().unwrap_or(0);
                match field {
                    "chunk_size" => size.insert(class, v),
                    "used_chunks" => used.insert(class, v),
                    _ => None,
                };
            }
        }
        used.iter()
            .filter(|(c, _)| size.get(*c).is_some_and(|&s| s > 1000))
            .map(|(_, &u)| u)
            .sum()
    }
}

fn big_value(i: usize) -> Vec<u8> {
    format!("{i:05}").repeat(BIG_LEN / 5).into_bytes()
}

/// Fill, then wait for the big items to be on flash; returns how long
/// after the last store they all were.
fn run(addr: SocketAddr, name: &str) -> Duration {
    let mut c = Conn::new(addr);
    for i in 0..BIG {
        c.set(&format!("big:{i}"), &big_value(i));
    }
    for i in 0..SMALL {
        c.set(&format!("small:{i}"), &[b'y'; 100]);
    }
    let stored = Instant::now();
    loop {
        let on_flash = c.num("extstore_objects_written");
        if on_flash >= BIG as u64 && c.big_chunks_used() == 0 {
            break;
        }
        assert!(
            stored.elapsed() < Duration::from_secs(20),
            "{name}: {on_flash} of {BIG} items written to flash, {} big chunks in use",
            c.big_chunks_used()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = stored.elapsed();
    // Only the big ones: the small ones are below ext_item_size.
    assert_eq!(c.num("extstore_objects_written"), BIG as u64, "{name}");
    assert!(c.num("extstore_objects_used") >= BIG as u64, "{name}");
    for i in (0..BIG).step_by(97) {
        assert_eq!(
            c.get(&format!("big:{i}")),
            Some(big_value(i)),
            "{name}: big:{i}"
        );
    }
    for i in 0..SMALL {
        assert_eq!(c.get(&format!("small:{i}")), Some(vec![b'y'; 100]));
    }
    assert!(c.num("get_extstore") > 0, "{name}: reads served from flash");
    took
}

#[test]
fn items_older_than_ext_item_age_go_to_flash_as_in_memcached() {
    let flags = |file: &std::path::Path| {
        vec![
            "-m".to_string(),
            "64".to_string(),
            "-o".to_string(),
            // memcached's extstore needs several of its 64 MB pages.
            format!(
                "ext_path={}:512m,ext_item_age=2,ext_item_size=512",
                file.display()
            ),
        ]
    };
    let (mf, cf) = (temp_path("mc-ext"), temp_path("ext"));
    let mflags = flags(&mf);
    let m = Memcached::start(&mflags.iter().map(String::as_str).collect::<Vec<_>>());
    let memcached = run(m.addr(), "memcached");
    drop(m);
    let cflags = flags(&cf);
    let c = Server::start(&cflags.iter().map(String::as_str).collect::<Vec<_>>());
    let cachalot = run(c.addr(), "cachalot");
    drop(c);
    for f in [&mf, &cf] {
        let _ = std::fs::remove_file(f);
        for suffix in [".index", ".journal", ".dict"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", f.display()));
        }
    }
    eprintln!("on flash after the last store: memcached {memcached:?}, cachalot {cachalot:?}");
    assert!(
        cachalot <= Duration::from_secs(4),
        "cachalot took {cachalot:?} (ext_item_age 2 s + 2 s); memcached {memcached:?}"
    );
}

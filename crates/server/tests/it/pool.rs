//! Three cachalot nodes behind twemproxy (Debian's `nutcracker`, ketama
//! consistent hashing, auto-ejection; issue 13): a node is killed and
//! traffic goes on, the keys of the other nodes stay where they were, the
//! dead node's keys are written to the others; the node comes back and
//! takes its share of new keys again.

use crate::common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, read_until, read_until_whole, temp_path, Server};

const KEYS: usize = 300;
/// nutcracker's `server_retry_timeout`: how long an ejected node stays out.
const RETRY_MS: u64 = 1000;

struct Proxy {
    child: Child,
    addr: SocketAddr,
    conf: PathBuf,
}

impl Proxy {
    fn start(nodes: &[u16]) -> Proxy {
        let port = free_port();
        let conf = temp_path("nutcracker.yml");
        let servers: String = nodes
            .iter()
            .enumerate()
            .map(|(i, p)| format!("   - 127.0.0.1:{p}:1 node{i}\n"))
            .collect();
        std::fs::write(
            &conf,
            format!(
                "pool:\n  listen: 127.0.0.1:{port}\n  hash: md5\n  distribution: ketama\n  \
                 timeout: 500\n  auto_eject_hosts: true\n  server_retry_timeout: {RETRY_MS}\n  \
                 server_failure_limit: 1\n  servers:\n{servers}"
            ),
        )
        .expect("write the proxy's configuration");
        let bin = ["/usr/sbin/nutcracker", "/usr/bin/nutcracker"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("nutcracker (Debian package, scripts/install-deps.sh installs it)");
        let child = Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .args(["-s", &free_port().to_string(), "-a", "127.0.0.1", "-v", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nutcracker");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "nutcracker did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Proxy { child, addr, conf }
    }

    /// One request on a fresh connection (the proxy may close a client's
    /// connection when a node fails), until `done` says the reply is whole
    /// or the connection closes.
    fn ask(&self, request: &[u8], done: impl Fn(&[u8]) -> bool) -> String {
        let mut s = TcpStream::connect(self.addr).expect("connect to the proxy");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(request).expect("send through the proxy");
        String::from_utf8_lossy(&read_until_whole(&mut s, done)).into_owned()
    }

    fn set(&self, key: &str, value: &str) -> String {
        let req = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
        self.ask(req.as_bytes(), |r| r.ends_with(b"\r\n"))
    }

    /// A hit's `VALUE ... END`, a miss's `END`, or the proxy's one-line
    /// `SERVER_ERROR` (after which it may keep the connection open, so
    /// waiting for an `END` would wait for the read timeout).
    fn get(&self, key: &str) -> String {
        self.ask(format!("get {key}\r\n").as_bytes(), |r| {
            r.ends_with(b"\r\n") && (!r.starts_with(b"VALUE") || r.ends_with(b"END\r\n"))
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.conf);
    }
}

fn key(i: usize) -> String {
    format!("pool:key:{i}")
}

/// Which node holds `key`, asked of the nodes themselves (`None` if no
/// live node does).
fn holder(nodes: &[Option<Server>], key: &str) -> Option<usize> {
    let found: Vec<usize> = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| n.as_ref().map(|n| (i, n)))
        .filter(|(_, n)| {
            let mut s = n.connect();
            s.write_all(format!("get {key}\r\n").as_bytes())
                .expect("ask a node");
            read_until(&mut s, b"END\r\n").starts_with(b"VALUE")
        })
        .map(|(i, _)| i)
        .collect();
    assert!(found.len() <= 1, "{key} is on nodes {found:?}");
    found.first().copied()
}

fn start_node(port: u16) -> Server {
    Server::start(&["-p", &port.to_string(), "-m", "16", "-t", "1"])
}

#[test]
fn a_node_dies_its_keys_move_and_it_rejoins() {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut nodes: Vec<Option<Server>> = ports.iter().map(|&p| Some(start_node(p))).collect();
    let proxy = Proxy::start(&ports);

    for i in 0..KEYS {
        assert_eq!(proxy.set(&key(i), &format!("v{i}")), "STORED\r\n");
    }
    let before: Vec<usize> = (0..KEYS)
        .map(|i| holder(&nodes, &key(i)).expect("every key is on a node"))
        .collect();
    for n in 0..3 {
        let share = before.iter().filter(|&&h| h == n).count();
        assert!(
            share > KEYS / 10,
            "ketama gave node {n} {share} of {KEYS} keys"
        );
    }

    // Node 1 dies. The proxy ejects it after its first failure; until then
    // a request for one of its keys may fail (SERVER_ERROR), never hang.
    let dead = 1;
    nodes[dead] = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut misses = 0;
    for i in (0..KEYS).filter(|&i| before[i] == dead) {
        let r = proxy.get(&key(i));
        assert!(
            r == "END\r\n" || r.starts_with("SERVER_ERROR"),
            "a dead node's key: {r:?}"
        );
        misses += 1;
        assert!(Instant::now() < deadline);
    }
    assert!(misses > 0);
    // The other nodes' keys are where they were, with their values.
    for i in (0..KEYS).filter(|&i| before[i] != dead) {
        assert_eq!(
            proxy.get(&key(i)),
            format!(
                "VALUE {} 0 {}\r\nv{i}\r\nEND\r\n",
                key(i),
                format!("v{i}").len()
            ),
            "a live node's key moved or was lost"
        );
        assert_eq!(holder(&nodes, &key(i)), Some(before[i]));
    }
    // The dead node's keys, written again, go to the live nodes.
    // On a slow machine the checks above outlast the proxy's retry timeout,
    // so it may try the dead node once more (SERVER_ERROR) and eject it
    // again: the same set then goes to a live node.
    for i in (0..KEYS).filter(|&i| before[i] == dead) {
        let mut r = proxy.set(&key(i), "again");
        if r.starts_with("SERVER_ERROR") {
            r = proxy.set(&key(i), "again");
        }
        assert_eq!(r, "STORED\r\n");
        let h = holder(&nodes, &key(i));
        assert!(h.is_some() && h != Some(dead), "{} went to {h:?}", key(i));
    }

    // The node comes back (empty) on its port; once the retry timeout has
    // passed, the proxy sends it its share of new keys again.
    nodes[dead] = Some(start_node(ports[dead]));
    std::thread::sleep(Duration::from_millis(RETRY_MS + 500));
    let deadline = Instant::now() + Duration::from_secs(15);
    let rejoined = loop {
        let fresh: Vec<String> = (0..60)
            .map(|j| format!("pool:new:{j}:{}", rand_tag()))
            .collect();
        for k in &fresh {
            let r = proxy.set(k, "n");
            assert!(r == "STORED\r\n" || r.starts_with("SERVER_ERROR"), "{r:?}");
        }
        let on_dead = fresh
            .iter()
            .filter(|k| holder(&nodes, k) == Some(dead))
            .count();
        if on_dead > 0 {
            break on_dead;
        }
        assert!(
            Instant::now() < deadline,
            "node {dead} never rejoined the pool"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        rejoined > 5,
        "only {rejoined} of 60 new keys on the rejoined node"
    );
    // And the keys of the nodes that stayed are still served.
    let kept = key(before.iter().position(|&h| h != dead).unwrap_or(0));
    let r = proxy.get(&kept);
    assert!(r.starts_with("VALUE"), "{r:?}");
}

/// A tag that differs between rounds of the rejoin loop.
fn rand_tag() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

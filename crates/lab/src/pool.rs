//! A pool of nodes behind twemproxy (Debian's `nutcracker`), for `compare
//! --pool N`: N nodes of one kind, and the proxy hashing keys over them with
//! ketama, as docs/deploy.md configures it (md5: nutcracker 0.5.0's
//! `fnv1a_64` with ketama sends every key to one node).

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::servers::{LocalServer, ServerConfig};

/// Counters that add up over the nodes (the pool's `stats`).
const SUMMED: &[&str] = &[
    "curr_items",
    "total_items",
    "evictions",
    "bytes",
    "limit_maxbytes",
    "get_hits",
    "get_misses",
    "cmd_get",
    "cmd_set",
];

/// The nodes and the proxy in front of them; all stopped on drop.
pub struct Pool {
    pub nodes: Vec<LocalServer>,
    proxy: Child,
    addr: SocketAddr,
    conf: PathBuf,
}

impl Pool {
    /// Start `n` nodes from `cfg` and nutcracker in front of them.
    pub fn start(cfg: &ServerConfig, n: usize) -> anyhow::Result<Pool> {
        let nodes = (0..n)
            .map(|_| LocalServer::start(cfg))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let port = free_port()?;
        let conf = std::env::temp_dir().join(format!(
            "cachalot-lab-nutcracker-{}-{port}.yml",
            std::process::id()
        ));
        let servers: String = nodes
            .iter()
            .enumerate()
            .map(|(i, s)| format!("   - {}:1 node{i}\n", s.addr()))
            .collect();
        std::fs::write(
            &conf,
            format!(
                "pool:\n  listen: 127.0.0.1:{port}\n  hash: md5\n  distribution: ketama\n  \
                 timeout: 2000\n  auto_eject_hosts: false\n  servers:\n{servers}"
            ),
        )
        .with_context(|| format!("writing {}", conf.display()))?;
        let bin = ["/usr/sbin/nutcracker", "/usr/bin/nutcracker"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .context("nutcracker not found (Debian: apt-get install nutcracker)")?;
        let proxy = Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .args([
                "-s",
                &free_port()?.to_string(),
                "-a",
                "127.0.0.1",
                "-v",
                "0",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting nutcracker")?;
        let mut pool = Pool {
            nodes,
            proxy,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            conf,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(pool.addr).is_err() {
            if let Ok(Some(status)) = pool.proxy.try_wait() {
                bail!("nutcracker exited with {status}");
            }
            if Instant::now() > deadline {
                bail!("nutcracker did not listen on {}", pool.addr);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(pool)
    }

    /// Where clients connect: the proxy.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The nodes' command lines, then the proxy's configuration.
    pub fn command_line(&self) -> Vec<String> {
        let mut line: Vec<String> = self
            .nodes
            .first()
            .map(|n| n.command_line())
            .unwrap_or_default();
        line.push(format!(
            "(x{} behind nutcracker, ketama md5)",
            self.nodes.len()
        ));
        line
    }

    /// The pool's `stats`: the counters in [`SUMMED`] added over the nodes,
    /// the rest as the first node has them.
    pub fn stats(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let mut total: BTreeMap<String, String> = BTreeMap::new();
        for node in &self.nodes {
            for (k, v) in node.stats()? {
                let summed = SUMMED.contains(&k.as_str());
                match total.get_mut(&k) {
                    Some(t) if summed => {
                        let sum = t.parse::<u64>().unwrap_or(0) + v.parse::<u64>().unwrap_or(0);
                        *t = sum.to_string();
                    }
                    Some(_) => {}
                    None => {
                        total.insert(k, v);
                    }
                }
            }
        }
        Ok(total)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let _ = self.proxy.kill();
        let _ = self.proxy.wait();
        let _ = std::fs::remove_file(&self.conf);
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

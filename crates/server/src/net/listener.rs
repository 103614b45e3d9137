//! Listening sockets: `-l` / `-p` TCP interfaces and the `-s` unix socket.
//!
//! Follows memcached 1.6's `server_sockets` / `server_socket_unix`: `-l` is a
//! comma-separated list whose entries are `host`, `host:port`, `[ipv6]:port`
//! or a bare IPv6 address (more than one colon); every address a name resolves
//! to is bound; `-p 0` turns TCP off; `-s` replaces TCP entirely. Sockets get
//! SO_REUSEADDR (restart without waiting for TIME_WAIT), IPV6_V6ONLY,
//! TCP_NODELAY and SO_KEEPALIVE, and the `-b` backlog.

use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use socket2::{Domain, SockAddr, Socket, Type};

use crate::settings::Settings;

/// One bound, non-blocking listening socket.
pub enum Listener {
    Tcp {
        sock: mio::net::TcpListener,
        addr: SocketAddr,
        /// memcached's name for it ("tcp:127.0.0.1:11211").
        name: String,
        /// Connections start TLS (`-Z`, unless listed as `notls:`).
        tls: bool,
    },
    Unix {
        sock: mio::net::UnixListener,
        path: PathBuf,
        name: String,
    },
}

impl Listener {
    pub fn name(&self) -> &str {
        match self {
            Listener::Tcp { name, .. } | Listener::Unix { name, .. } => name,
        }
    }
}

/// memcached's `conn_to_str` for an internet address.
pub fn tcp_name(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("tcp:{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("tcp6:[{}]:{}", a.ip(), a.port()),
    }
}

/// Split one `-l` entry into host and port (memcached's rules).
pub fn split_host_port(entry: &str, default_port: u16) -> Result<(String, u16), String> {
    // With -Z, "notls:" marks a listener without TLS (see `bind_all`).
    let entry = entry.strip_prefix("notls:").unwrap_or(entry);
    let bad = || format!("ERROR: Invalid listen address {entry}.");
    if let Some(rest) = entry.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse::<u16>().map_err(|_| bad())?,
            None if after.is_empty() => default_port,
            None => return Err(bad()),
        };
        return Ok((host.to_string(), port));
    }
    match entry.matches(':').count() {
        0 => Ok((entry.to_string(), default_port)),
        1 => {
            let (host, port) = entry.split_once(':').ok_or_else(bad)?;
            Ok((host.to_string(), port.parse::<u16>().map_err(|_| bad())?))
        }
        // A bare IPv6 address.
        _ => Ok((entry.to_string(), default_port)),
    }
}

/// A startup failure: memcached's message and exit code.
#[derive(Debug)]
pub struct BindError {
    pub message: String,
    pub code: i32,
}

fn bind_error(message: String) -> BindError {
    BindError {
        message,
        code: super::exit::EX_OSERR,
    }
}

/// Bind everything the settings ask for.
pub fn bind_all(settings: &Settings) -> Result<Vec<Listener>, BindError> {
    let mut out = Vec::new();
    if let Some(path) = &settings.unix_socket {
        out.push(bind_unix(path, settings.unix_mask, settings.backlog)?);
        return Ok(out);
    }
    if settings.port == 0 && !settings.port_ephemeral {
        return Ok(out);
    }
    for entry in &settings.listen {
        let (host, port) = split_host_port(entry, settings.port).map_err(|m| BindError {
            message: m,
            code: super::exit::EX_USAGE,
        })?;
        let addrs: Vec<SocketAddr> = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| {
                bind_error(format!(
                    "getaddrinfo(): {e}\nfailed to listen on one of interface(s) {entry}"
                ))
            })?
            .collect();
        if addrs.is_empty() {
            return Err(bind_error(format!(
                "failed to listen on one of interface(s) {entry}: no address"
            )));
        }
        for addr in addrs {
            if out
                .iter()
                .any(|l| matches!(l, Listener::Tcp { addr: a, .. } if *a == addr))
            {
                continue;
            }
            let sock = bind_tcp(addr, settings.backlog).map_err(|e| {
                bind_error(format!(
                    "failed to listen on one of interface(s) {entry}: {e}"
                ))
            })?;
            let addr = sock.local_addr().unwrap_or(addr);
            out.push(Listener::Tcp {
                sock,
                addr,
                name: tcp_name(&addr),
                tls: settings.tls.enabled && !entry.starts_with("notls:"),
            });
        }
    }
    Ok(out)
}

fn bind_tcp(addr: SocketAddr, backlog: i32) -> std::io::Result<mio::net::TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    // Accepted sockets inherit these on Linux: small replies go out at once,
    // and dead peers are eventually noticed.
    sock.set_nodelay(true)?;
    sock.set_keepalive(true)?;
    sock.bind(&addr.into())?;
    sock.listen(backlog)?;
    sock.set_nonblocking(true)?;
    Ok(mio::net::TcpListener::from_std(sock.into()))
}

fn bind_unix(path: &Path, mask: u32, backlog: i32) -> Result<Listener, BindError> {
    let fail = |e: std::io::Error| {
        bind_error(format!(
            "failed to listen on UNIX socket: {}: {e}",
            path.display()
        ))
    };
    // A socket file left by a previous run would make bind fail; anything
    // else at that path is not ours to delete (memcached does the same).
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if meta.file_type().is_socket() {
            let _ = std::fs::remove_file(path);
        }
    }
    let sock = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(fail)?;
    let addr = SockAddr::unix(path).map_err(fail)?;
    sock.bind(&addr).map_err(fail)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mask & 0o777)).map_err(fail)?;
    sock.listen(backlog).map_err(fail)?;
    sock.set_nonblocking(true).map_err(fail)?;
    let std_listener: std::os::unix::net::UnixListener = sock.into();
    Ok(Listener::Unix {
        sock: mio::net::UnixListener::from_std(std_listener),
        path: path.to_path_buf(),
        name: format!("unix:{}", path.display()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms() {
        assert_eq!(
            split_host_port("127.0.0.1", 11211).unwrap(),
            ("127.0.0.1".into(), 11211)
        );
        assert_eq!(
            split_host_port("127.0.0.1:2000", 11211).unwrap(),
            ("127.0.0.1".into(), 2000)
        );
        assert_eq!(
            split_host_port("[::1]:2000", 11211).unwrap(),
            ("::1".into(), 2000)
        );
        assert_eq!(split_host_port("[::1]", 7).unwrap(), ("::1".into(), 7));
        assert_eq!(split_host_port("::1", 7).unwrap(), ("::1".into(), 7));
        assert_eq!(
            split_host_port("notls:localhost:9", 7).unwrap(),
            ("localhost".into(), 9)
        );
        assert!(split_host_port("127.0.0.1:http", 7).is_err());
        assert!(split_host_port("[::1", 7).is_err());
    }

    #[test]
    fn binds_ephemeral_tcp_and_names_it() {
        let settings = Settings {
            port: 1, // replaced below by an explicit :0 entry
            listen: vec!["127.0.0.1:0".into()],
            ..Settings::default()
        };
        let ls = bind_all(&settings).unwrap();
        assert_eq!(ls.len(), 1);
        let Listener::Tcp { addr, name, .. } = &ls[0] else {
            panic!("expected tcp")
        };
        assert_ne!(addr.port(), 0);
        assert_eq!(name, &format!("tcp:127.0.0.1:{}", addr.port()));
    }

    #[test]
    fn ephemeral_port_binds_something() {
        let settings = Settings {
            port: 0,
            port_ephemeral: true,
            ..Settings::default()
        };
        let ls = bind_all(&settings).unwrap();
        assert_eq!(ls.len(), 1);
        assert!(matches!(&ls[0], Listener::Tcp { addr, .. } if addr.port() != 0));
    }

    #[test]
    fn port_zero_means_no_tcp() {
        let settings = Settings {
            port: 0,
            ..Settings::default()
        };
        assert!(bind_all(&settings).unwrap().is_empty());
    }

    #[test]
    fn unix_socket_gets_mask_and_replaces_stale_socket() {
        let dir = std::env::temp_dir().join(format!("cachalot-l-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let settings = Settings {
            unix_socket: Some(path.clone()),
            unix_mask: 0o755,
            ..Settings::default()
        };
        let first = bind_all(&settings).unwrap();
        drop(first); // leaves the socket file behind, like a crashed server
        let second = bind_all(&settings).unwrap();
        assert_eq!(second[0].name(), format!("unix:{}", path.display()));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        drop(second);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

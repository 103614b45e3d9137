//! TLS on the TCP listeners: memcached's `-Z` and `-o ssl_*` options, served
//! by rustls (ring as the crypto provider: it builds quickly and needs no
//! cmake).
//!
//! A TLS connection is a [`TlsStream`]: the worker's event loop sees the same
//! non-blocking `Read`/`Write` it sees for plain TCP, and rustls does the
//! handshake inside `read`. Two things differ from a plain socket, and the
//! connection (`net::conn`) asks for both: a short read no longer means the
//! socket is drained (rustls may hold decrypted bytes while the kernel queue
//! is empty, or the reverse), and encrypted output can wait inside rustls
//! after the plaintext was taken (`wants_write`). rustls' send buffer is
//! capped at `ssl_wbuf_size`, so a slow reader costs no more with TLS than
//! without it.
//!
//! Deviations from memcached 1.6 (OpenSSL), each in docs/protocol.md:
//! TLS 1.2 and 1.3 only, rustls' cipher suites (`ssl_ciphers` is reported,
//! not applied), no kernel TLS, and `ssl_verify_mode` 1-3 need `ssl_ca_cert`.

use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::crypto::ring::default_provider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{RootCertStore, ServerConfig, ServerConnection};

/// Sessions kept for resumption with `ssl_session_cache` (about 1 KB each).
const SESSION_CACHE: usize = 1024;

/// The `-Z` and `-o ssl_*` settings, as memcached names and reports them.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// `-Z`: TLS on every TCP listener not marked `notls:`.
    pub enabled: bool,
    /// `ssl_chain_cert`: the server's certificate chain (PEM).
    pub chain_cert: Option<PathBuf>,
    /// `ssl_key`: its private key, when not in the chain file.
    pub key: Option<PathBuf>,
    /// `ssl_keyformat`: OpenSSL's file types, 1 = PEM, 2 = DER (ASN.1).
    pub keyformat: u8,
    /// `ssl_verify_mode`: 0 none, 1 request, 2 require, 3 once.
    pub verify_mode: u8,
    /// `ssl_ca_cert`: the CAs client certificates must chain to (PEM).
    pub ca_cert: Option<PathBuf>,
    /// `ssl_ciphers` (reported only).
    pub ciphers: Option<String>,
    /// `ssl_wbuf_size`, in bytes: encrypted output buffered per connection.
    pub wbuf_size: usize,
    /// `ssl_session_cache`: keep sessions for resumption.
    pub session_cache: bool,
    /// `ssl_kernel_tls` (reported only: not supported).
    pub kernel_tls: bool,
    /// `ssl_min_version`: 0 TLS 1.0 .. 3 TLS 1.3 (below 2 means 1.2 here).
    pub min_version: u8,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            enabled: false,
            chain_cert: None,
            key: None,
            keyformat: 1,
            verify_mode: 0,
            ca_cert: None,
            ciphers: None,
            wbuf_size: 16 * 1024,
            session_cache: false,
            kernel_tls: false,
            min_version: 2,
        }
    }
}

impl TlsSettings {
    /// `ssl_min_version` as `stats settings` prints it.
    pub fn min_version_name(&self) -> &'static str {
        match self.min_version {
            0 => "tlsv1.0",
            1 => "tlsv1.1",
            2 => "tlsv1.2",
            _ => "tlsv1.3",
        }
    }
}

/// The server's TLS state: the configuration new connections use (swapped
/// by `refresh_certs`) and the counters `stats` reports.
pub struct Tls {
    settings: TlsSettings,
    config: RwLock<Arc<ServerConfig>>,
    /// Clock time of the last certificate load.
    loaded_at: AtomicU32,
    pub handshake_errors: AtomicU64,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Load the certificates and build the configuration; the message is
    /// memcached's start-up error.
    pub fn new(settings: &TlsSettings, now: u32) -> Result<Tls, String> {
        let config = build_config(settings)?;
        Ok(Tls {
            settings: settings.clone(),
            config: RwLock::new(config),
            loaded_at: AtomicU32::new(now),
            handshake_errors: AtomicU64::new(0),
        })
    }

    /// `refresh_certs`: load the files again; connections already open keep
    /// the old certificates, new ones get the new.
    pub fn refresh(&self, now: u32) -> Result<(), String> {
        let config = build_config(&self.settings)?;
        *self.config.write() = config;
        self.loaded_at.store(now, Ordering::Relaxed);
        Ok(())
    }

    /// Seconds since the certificates were last loaded.
    pub fn since_refresh(&self, now: u32) -> u32 {
        now.saturating_sub(self.loaded_at.load(Ordering::Relaxed))
    }

    /// Start the server side of a TLS connection on an accepted socket.
    pub fn accept(self: &Arc<Self>, sock: mio::net::TcpStream) -> io::Result<TlsStream> {
        let config = self.config.read().clone();
        let mut conn = ServerConnection::new(config).map_err(io::Error::other)?;
        conn.set_buffer_limit(Some(self.settings.wbuf_size.max(4096)));
        Ok(TlsStream {
            sock,
            conn,
            tls: self.clone(),
        })
    }
}

fn build_config(s: &TlsSettings) -> Result<Arc<ServerConfig>, String> {
    let chain_path = s.chain_cert.as_ref().ok_or_else(|| {
        "Error loading the certificate chain: (null) : no ssl_chain_cert given".to_string()
    })?;
    let chain_err = |e: &dyn fmt::Display| {
        format!(
            "Error loading the certificate chain: {} : {e}",
            chain_path.display()
        )
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(chain_path)
        .map_err(|e| chain_err(&e))?
        .collect::<Result<_, _>>()
        .map_err(|e| chain_err(&e))?;
    if chain.is_empty() {
        return Err(chain_err(&"no certificate found"));
    }
    // memcached takes the key from the chain file when ssl_key is not set.
    let key_path = s.key.as_ref().unwrap_or(chain_path);
    let key_err =
        |e: &dyn fmt::Display| format!("Error loading the key: {} : {e}", key_path.display());
    let key: PrivateKeyDer<'static> = match s.keyformat {
        1 => PrivateKeyDer::from_pem_file(key_path).map_err(|e| key_err(&e))?,
        2 => {
            let der = std::fs::read(key_path).map_err(|e| key_err(&e))?;
            PrivateKeyDer::try_from(der).map_err(|e| key_err(&e))?
        }
        _ => return Err(key_err(&"ssl_keyformat must be 1 (PEM) or 2 (DER)")),
    };
    let provider = Arc::new(default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = if s.min_version >= 3 {
        &[&rustls::version::TLS13]
    } else {
        rustls::DEFAULT_VERSIONS
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| format!("Error setting the TLS versions: {e}"))?;
    let builder = if s.verify_mode == 0 {
        builder.with_no_client_auth()
    } else {
        let ca_path = s.ca_cert.as_ref().ok_or_else(|| {
            "Error: ssl_verify_mode needs -o ssl_ca_cert, the CAs that sign client certificates"
                .to_string()
        })?;
        let ca_err = |e: &dyn fmt::Display| {
            format!(
                "Error loading the CA certificate: {} : {e}",
                ca_path.display()
            )
        };
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(ca_path).map_err(|e| ca_err(&e))? {
            roots
                .add(cert.map_err(|e| ca_err(&e))?)
                .map_err(|e| ca_err(&e))?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        // 1 (request): a certificate is checked if the client sends one;
        // 2 and 3 (require, once: there is no renegotiation) need one.
        let verifier = match s.verify_mode {
            1 => verifier.allow_unauthenticated(),
            _ => verifier,
        };
        builder.with_client_cert_verifier(verifier.build().map_err(|e| ca_err(&e))?)
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| key_err(&e))?;
    config.session_storage = if s.session_cache {
        ServerSessionMemoryCache::new(SESSION_CACHE)
    } else {
        Arc::new(NoServerSessionStorage {})
    };
    Ok(Arc::new(config))
}

/// A server-side TLS connection over a non-blocking TCP socket.
pub struct TlsStream {
    sock: mio::net::TcpStream,
    conn: ServerConnection,
    tls: Arc<Tls>,
}

impl TlsStream {
    pub fn socket(&self) -> &mio::net::TcpStream {
        &self.sock
    }

    pub fn socket_mut(&mut self) -> &mut mio::net::TcpStream {
        &mut self.sock
    }

    /// Encrypted bytes wait for the socket.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Send what rustls has ready until the socket would block.
    fn write_tls(&mut self) -> io::Result<()> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.sock) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl Read for TlsStream {
    /// Decrypted bytes, reading the socket only when rustls has none:
    /// `WouldBlock` therefore means both are empty, as edge-triggered
    /// polling needs. `Ok(0)` is the end: close_notify or the socket's EOF.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                // Plaintext, the peer's close_notify, or its EOF without one.
                other => return other,
            }
            match self.conn.read_tls(&mut self.sock) {
                Ok(0) => return Ok(0),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            if let Err(e) = self.conn.process_new_packets() {
                if self.conn.is_handshaking() {
                    self.tls.handshake_errors.fetch_add(1, Ordering::Relaxed);
                }
                // The alert rustls queued for the peer, best effort.
                let _ = self.write_tls();
                return Err(io::Error::new(ErrorKind::InvalidData, e));
            }
            // Handshake messages (or a key update) to answer with.
            self.write_tls()?;
        }
    }
}

impl Write for TlsStream {
    /// Plaintext goes into rustls up to `ssl_wbuf_size` of pending output;
    /// `WouldBlock` when it is full, like a socket whose buffer is.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_tls()?;
        let n = self.conn.writer().write(buf)?;
        self.write_tls()?;
        if n == 0 && !buf.is_empty() {
            return Err(ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.write_tls()
    }
}

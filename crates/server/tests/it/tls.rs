//! TLS (`-Z`, `-o ssl_*`) with real clients (issue 13): Python's ssl module
//! under pymemcache verifies the server's certificate (tests/tls_client.py),
//! and every check also runs against memcached 1.6.18 started with the same
//! flags and certificates, which is the oracle.
//!
//! Certificates come from the `openssl` command (scripts/install-deps.sh):
//! a CA, a server certificate for 127.0.0.1 it signs, a client certificate it
//! signs, and a second, untrusted CA with a client certificate of its own.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{free_port, python, temp_path, Memcached, Server};

/// `openssl req` arguments for a new P-256 key without a passphrase.
const NEW_KEY: &[&str] = &[
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn new() -> Certs {
        let dir = temp_path("tls");
        std::fs::create_dir_all(&dir).expect("cert dir");
        let certs = Certs { dir };
        certs.ca("ca");
        certs.ca("rogue-ca");
        certs.leaf("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost");
        certs.leaf("client", "ca", "extendedKeyUsage=clientAuth");
        certs.leaf("rogue", "rogue-ca", "extendedKeyUsage=clientAuth");
        certs
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_string_lossy().into_owned()
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("run openssl (scripts/install-deps.sh installs it)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn ca(&self, name: &str) {
        let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
        let subj = format!("/CN=cachalot test {name}");
        self.openssl(
            &[
                &["req", "-x509"],
                NEW_KEY,
                &["-keyout", &key, "-out", &pem, "-days", "2", "-subj", &subj],
            ]
            .concat(),
        );
    }

    fn leaf(&self, name: &str, ca: &str, ext: &str) {
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        let ext_file = format!("{name}.ext");
        std::fs::write(self.dir.join(&ext_file), format!("{ext}\n")).expect("ext file");
        let subj = format!("/CN={name}");
        self.openssl(
            &[
                &["req"],
                NEW_KEY,
                &["-keyout", &key, "-out", &csr, "-subj", &subj],
            ]
            .concat(),
        );
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &ext_file,
        ]);
    }

    /// `-o` value for a TLS server with this key pair.
    fn server_opts(&self, extra: &str) -> String {
        let mut o = format!(
            "ssl_chain_cert={},ssl_key={}",
            self.path("server.pem"),
            self.path("server.key")
        );
        if !extra.is_empty() {
            o.push(',');
            o.push_str(extra);
        }
        o
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Run tests/tls_client.py; its stdout.
fn client(action: &str, addr: SocketAddr, ca: &str, cert: Option<(&str, &str)>) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tls_client.py");
    let mut cmd = Command::new(python());
    cmd.arg(script)
        .args([action, "127.0.0.1", &addr.port().to_string(), ca]);
    if let Some((c, k)) = cert {
        cmd.args([c, k]);
    }
    let out = cmd
        .output()
        .expect("run python (scripts/install-deps.sh makes .venv)");
    assert!(
        out.status.success(),
        "tls_client.py {action}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a client that does not speak TLS gets: the reply bytes before the
/// server closed (none expected).
fn plain_client(addr: SocketAddr) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(b"version\r\n").expect("send");
    let mut got = Vec::new();
    // EOF or a reset both end it; a timeout would mean the server waits.
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the server neither answered nor closed: {e}"),
        }
    }
    got
}

/// A plain request on a `notls:` listener.
fn ask_plain(port: u16, request: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect notls");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(request.as_bytes()).expect("send");
    let end: &[u8] = if request.starts_with("stats") {
        b"END\r\n"
    } else {
        b"\r\n"
    };
    String::from_utf8_lossy(&common::read_until(&mut s, end)).into_owned()
}

fn stat(stats: &str, name: &str) -> String {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no {name} in\n{stats}"))
        .to_string()
}

#[test]
fn a_verifying_client_gets_memcacheds_answers_over_tls() {
    let certs = Certs::new();
    let opts = certs.server_opts("");
    let ours = Server::start(&["-Z", "-o", &opts]);
    let theirs = Memcached::start(&["-Z", "-o", &opts]);
    let ca = certs.path("ca.pem");
    let got = client("roundtrip", ours.addr(), &ca, None);
    let want = client("roundtrip", theirs.addr(), &ca, None);
    assert_eq!(got, want, "cachalot and memcached differ over TLS");
    for line in [
        "set True",
        "get b'hello'",
        "get-big True",
        "get-many 100 True",
    ] {
        assert!(got.lines().any(|l| l == line), "{line:?} missing in\n{got}");
    }
    // Beyond what memcached 1.6.18 survives (docs/protocol.md): requests
    // TLS decrypted in one go are all served without waiting for the socket.
    let got = client("pipeline", ours.addr(), &ca, None);
    assert_eq!(got, "set-many []\nget-many 3000 True\n");
}

#[test]
fn clients_that_cannot_verify_or_do_not_speak_tls_are_refused() {
    let certs = Certs::new();
    let opts = certs.server_opts("");
    let admin = free_port();
    let listen = format!("127.0.0.1,notls:127.0.0.1:{admin}");
    let ours = Server::start(&["-Z", "-o", &opts, "-l", &listen]);
    let theirs = Memcached::start(&["-Z", "-o", &opts]);
    for addr in [ours.addr(), theirs.addr()] {
        // The client does not trust the server's CA: it hangs up.
        let wrong_ca = certs.path("rogue-ca.pem");
        assert_eq!(
            client("probe", addr, &wrong_ca, None).trim(),
            "REFUSED verify"
        );
        // No TLS: no answer (at most a TLS alert), the connection is closed.
        let got = plain_client(addr);
        assert!(got.is_empty() || got[0] == 21, "a plain client got {got:?}");
        // The server still serves those who do it right.
        assert_eq!(
            client("probe", addr, &certs.path("ca.pem"), None).trim(),
            "OK"
        );
    }
    // The plain client broke a handshake; the notls listener serves plain text.
    let stats = ask_plain(admin, "stats\r\n");
    assert!(
        stat(&stats, "ssl_handshake_errors")
            .parse::<u64>()
            .unwrap_or(0)
            >= 1
    );
    assert_eq!(
        ask_plain(admin, "version\r\n").split(' ').next(),
        Some("VERSION")
    );
    let settings = ask_plain(admin, "stats settings\r\n");
    assert_eq!(stat(&settings, "ssl_enabled"), "yes");
    assert_eq!(stat(&settings, "ssl_chain_cert"), certs.path("server.pem"));
    assert_eq!(stat(&settings, "ssl_min_version"), "tlsv1.2");
}

#[test]
fn verify_mode_2_wants_a_client_certificate_from_the_ca() {
    let certs = Certs::new();
    let opts = certs.server_opts(&format!(
        "ssl_verify_mode=2,ssl_ca_cert={}",
        certs.path("ca.pem")
    ));
    let ours = Server::start(&["-Z", "-o", &opts]);
    let theirs = Memcached::start(&["-Z", "-o", &opts]);
    let ca = certs.path("ca.pem");
    let (client_pem, client_key) = (certs.path("client.pem"), certs.path("client.key"));
    let (rogue_pem, rogue_key) = (certs.path("rogue.pem"), certs.path("rogue.key"));
    for (who, addr) in [("cachalot", ours.addr()), ("memcached", theirs.addr())] {
        let none = client("probe", addr, &ca, None);
        assert!(none.starts_with("REFUSED"), "{who}, no certificate: {none}");
        let rogue = client("probe", addr, &ca, Some((&rogue_pem, &rogue_key)));
        assert!(
            rogue.starts_with("REFUSED"),
            "{who}, untrusted certificate: {rogue}"
        );
        let good = client("probe", addr, &ca, Some((&client_pem, &client_key)));
        assert_eq!(good.trim(), "OK", "{who}, trusted certificate");
    }
}

#[test]
fn refresh_certs_loads_new_files_and_keeps_the_old_on_failure() {
    let certs = Certs::new();
    let chain = certs.dir.join("live.pem");
    std::fs::copy(certs.dir.join("server.pem"), &chain).expect("copy chain");
    let opts = format!(
        "ssl_chain_cert={},ssl_key={}",
        chain.display(),
        certs.path("server.key")
    );
    let admin = free_port();
    let listen = format!("127.0.0.1,notls:127.0.0.1:{admin}");
    let ours = Server::start(&["-Z", "-o", &opts, "-l", &listen]);
    assert_eq!(ask_plain(admin, "refresh_certs\r\n"), "OK\r\n");
    std::fs::write(&chain, "not a certificate\n").expect("break the chain");
    let failed = ask_plain(admin, "refresh_certs\r\n");
    let prefix = format!(
        "Error loading the certificate chain: {} : ",
        chain.display()
    );
    assert!(failed.starts_with(&prefix), "{failed:?}");
    // New connections still get the certificates loaded before.
    let ca = certs.path("ca.pem");
    assert_eq!(client("probe", ours.addr(), &ca, None).trim(), "OK");

    // Without -Z, as memcached says it.
    let plain = Server::start(&[]);
    let theirs = Memcached::start(&[]);
    let want = "Error TLS not enabled\r\n";
    assert_eq!(plain.ask(b"refresh_certs\r\n", b"\r\n"), want.as_bytes());
    let mut s = TcpStream::connect(theirs.addr()).expect("connect memcached");
    s.write_all(b"refresh_certs\r\n").expect("send");
    assert_eq!(common::read_until(&mut s, b"\r\n"), want.as_bytes());
}

#[test]
fn a_missing_certificate_stops_start_up_as_in_memcached() {
    let missing = temp_path("no-such-cert.pem");
    let opts = format!("ssl_chain_cert={}", missing.display());
    let err = match Server::try_start(&["-Z", "-o", &opts]) {
        Ok(_) => panic!("started without its certificate"),
        Err(e) => e,
    };
    assert!(
        err.contains(&format!(
            "Error loading the certificate chain: {}",
            missing.display()
        )),
        "{err}"
    );
    assert!(err.contains("exit status: 64"), "{err}");
}

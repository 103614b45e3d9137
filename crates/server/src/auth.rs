//! ASCII authentication, memcached's `-Y authfile` (issue 13).
//!
//! The file holds `user:password` lines. A connection is refused every
//! command (`CLIENT_ERROR unauthenticated`) until it sends a `set` whose
//! data is `<user> <password>`; memcached 1.6.18 is the oracle for every
//! reply, and `crates/server/tests/it/auth.rs` runs the same script against
//! both servers:
//!
//! - any line but a `set` with a numeric size: `CLIENT_ERROR
//!   unauthenticated` (`quit` and meta commands included; the connection
//!   stays open);
//! - a data block not ended by `\r\n`: `CLIENT_ERROR bad command line
//!   termination`;
//! - a block of fewer than two space-separated words: `CLIENT_ERROR bad
//!   authentication token format` (words after the second are ignored);
//! - a wrong pair: `CLIENT_ERROR authentication failure`; a right one:
//!   `STORED` (with `noreply` too), and the connection is then served as
//!   any other;
//! - a block that would not fit memcached's 16 KB read buffer closes the
//!   connection.
//!
//! The binary protocol is refused with `-Y` (memcached's rule), so every
//! connection speaks text.

use std::path::Path;

use cachalot_protocol::text;

/// Largest `set` data block (plus its `\r\n`) an unauthenticated
/// connection may send: memcached's read buffer; a larger one closes it.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The users of an auth file.
#[derive(Debug)]
pub struct AuthFile {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The reply to a wrong user or password (memcached counts it in
/// `auth_errors`, and it and `STORED` in `auth_cmds`).
pub const FAILURE: &str = "CLIENT_ERROR authentication failure";

/// What a request line does on a connection not yet authenticated.
pub enum Gate {
    /// Reply this line and consume the request line only.
    Refuse(&'static str),
    /// A `set` whose block (`size` bytes plus `\r\n`) follows the line.
    Token(usize),
    /// Close the connection.
    Close,
}

impl AuthFile {
    /// Read `path`, with memcached's messages for what it refuses.
    pub fn load(path: &Path) -> Result<AuthFile, String> {
        let bytes = std::fs::read(path).map_err(|e| {
            let why = e.kind().to_string();
            let why = match e.raw_os_error() {
                Some(code) => std::io::Error::from_raw_os_error(code)
                    .to_string()
                    .split(" (os error")
                    .next()
                    .unwrap_or(&why)
                    .to_string(),
                None => why,
            };
            format!(
                "Could not open authfile [{}] for reading, error {why}: {why}",
                path.display()
            )
        })?;
        AuthFile::parse(&bytes).ok_or_else(|| {
            format!(
                "Authfile [{}] has a malformed entry. Should be 'user:password'",
                path.display()
            )
        })
    }

    /// `user:password` lines (the password is everything after the first
    /// colon). As memcached 1.6.18: an empty line or a line with a `\r` is
    /// malformed; the last line needs no newline.
    pub fn parse(bytes: &[u8]) -> Option<AuthFile> {
        let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let mut entries = Vec::new();
        if body.is_empty() {
            return Some(AuthFile { entries });
        }
        for line in body.split(|&b| b == b'\n') {
            if line.contains(&b'\r') {
                return None;
            }
            let colon = line.iter().position(|&b| b == b':')?;
            entries.push((line[..colon].to_vec(), line[colon + 1..].to_vec()));
        }
        Some(AuthFile { entries })
    }

    /// Whether `user` and `pass` name an entry. Every entry is compared
    /// whole, so the time taken does not say how much of a guess was right.
    pub fn check(&self, user: &[u8], pass: &[u8]) -> bool {
        self.entries.iter().fold(false, |found, (u, p)| {
            found | (same(u, user) & same(p, pass))
        })
    }
}

/// Equal, in a time that depends on the lengths only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// What an unauthenticated connection's request line asks for.
pub fn gate(line: &[u8]) -> Gate {
    let w: Vec<&[u8]> = text::words(line).take(5).collect();
    let size = match w.as_slice() {
        [b"set", _, _, _, size] => text::strtoul32(size),
        _ => None,
    };
    match size {
        None => Gate::Refuse("CLIENT_ERROR unauthenticated"),
        Some(n) if n as usize + 2 > MAX_TOKEN_BYTES => Gate::Close,
        Some(n) => Gate::Token(n as usize),
    }
}

/// The reply to a whole token block (`block`: its `size` bytes and the two
/// after them), and whether it authenticated the connection.
pub fn answer(auth: &AuthFile, block: &[u8]) -> (&'static str, bool) {
    let Some(data) = block.strip_suffix(b"\r\n") else {
        return ("CLIENT_ERROR bad command line termination", false);
    };
    let mut w = text::words(text::until_nul(data));
    match (w.next(), w.next()) {
        (Some(user), Some(pass)) if auth.check(user, pass) => ("STORED", true),
        (Some(_), Some(_)) => (FAILURE, false),
        _ => ("CLIENT_ERROR bad authentication token format", false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> AuthFile {
        AuthFile::parse(b"alice:secret\nbob:a:b\n:anon\nnopass:\n").expect("parses")
    }

    #[test]
    fn the_file_is_read_as_memcached_reads_it() {
        let f = file();
        assert!(f.check(b"alice", b"secret"));
        assert!(
            f.check(b"bob", b"a:b"),
            "the password runs past a second colon"
        );
        assert!(f.check(b"", b"anon") && f.check(b"nopass", b""));
        assert!(!f.check(b"alice", b"secre") && !f.check(b"alice", b"secret2"));
        assert!(!f.check(b"Alice", b"secret"));
        assert!(AuthFile::parse(b"a:b").is_some(), "no final newline");
        assert!(AuthFile::parse(b"").is_some_and(|f| !f.check(b"", b"")));
        for bad in [&b"a:b\n\n"[..], b"nocolon\n", b"a:b\r\n", b"\na:b\n"] {
            assert!(AuthFile::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn lines_and_tokens_get_memcached_replies() {
        let f = file();
        assert!(matches!(gate(b"set x 0 0 12"), Gate::Token(12)));
        assert!(matches!(gate(b"set  x 0 0 12 noreply"), Gate::Token(12)));
        for refused in [
            &b"get foo"[..],
            b"quit",
            b"add x 0 0 12",
            b"set x 0 0",
            b"set x 0 0 -1",
            b"set x 0 0 1a",
            b"mg foo v",
            b"",
        ] {
            assert!(
                matches!(gate(refused), Gate::Refuse("CLIENT_ERROR unauthenticated")),
                "{refused:?}"
            );
        }
        assert!(matches!(gate(b"set x 0 0 16383"), Gate::Close));
        assert!(matches!(gate(b"set x 0 0 16382"), Gate::Token(16382)));
        assert_eq!(answer(&f, b"alice secret\r\n"), ("STORED", true));
        assert_eq!(answer(&f, b"alice  secret xx\r\n"), ("STORED", true));
        assert_eq!(
            answer(&f, b"alice secret\n\n").0,
            "CLIENT_ERROR bad command line termination"
        );
        assert_eq!(
            answer(&f, b"alice:secret\r\n").0,
            "CLIENT_ERROR bad authentication token format"
        );
        assert_eq!(
            answer(&f, b"\0lice secret\r\n").0,
            "CLIENT_ERROR bad authentication token format"
        );
        assert_eq!(
            answer(&f, b"alice secre\0\r\n"),
            ("CLIENT_ERROR authentication failure", false)
        );
        assert_eq!(
            answer(&f, b"alice wrong\r\n"),
            ("CLIENT_ERROR authentication failure", false)
        );
    }
}

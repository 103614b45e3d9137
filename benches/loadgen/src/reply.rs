//! Incremental parsing of the memcached text-protocol replies the benchmarks
//! expect (doc/protocol.txt, "Retrieval command" and "Storage commands").
//!
//! Replies arrive in arbitrary TCP fragments, so every function here looks at
//! the bytes received so far and says either "not complete yet" (`None`) or
//! how many bytes one whole reply unit takes. Nothing here trusts the server:
//! a malformed reply is reported, never a panic, since a server under test
//! may well be buggy.

/// One unit of a reply stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Unit<'a> {
    /// `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n`
    Value { key: &'a [u8], data: &'a [u8] },
    /// `END\r\n`, the end of a retrieval reply.
    End,
    /// `STORED\r\n`
    Stored,
    /// `VERSION <x>\r\n`
    Version,
    /// Any other complete line (errors such as `SERVER_ERROR ...`,
    /// `NOT_STORED`), without its `\r\n`.
    Other(&'a [u8]),
}

/// Where the first line in `buf` ends: the index just past its `\n`.
fn line_end(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n').map(|p| p + 1)
}

fn trim_crlf(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn parse_usize(s: &[u8]) -> Option<usize> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    let mut n: usize = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(usize::from(c - b'0'))?;
    }
    Some(n)
}

/// Parses the next unit from `buf`. `Ok(None)`: need more bytes.
/// `Err`: the bytes cannot be a memcached reply (e.g. a VALUE line without a
/// length, or data not followed by `\r\n`).
pub fn next_unit(buf: &[u8]) -> Result<Option<(Unit<'_>, usize)>, String> {
    let Some(end) = line_end(buf) else {
        return Ok(None);
    };
    let line = trim_crlf(&buf[..end]);
    if let Some(rest) = line.strip_prefix(b"VALUE ") {
        let mut fields = rest.split(|&b| b == b' ');
        let key = fields.next().unwrap_or_default();
        let _flags = fields.next();
        let len = fields
            .next()
            .and_then(parse_usize)
            .ok_or_else(|| format!("bad VALUE line: {:?}", String::from_utf8_lossy(line)))?;
        let total = end
            .checked_add(len)
            .and_then(|n| n.checked_add(2))
            .ok_or("VALUE length overflows")?;
        if buf.len() < total {
            return Ok(None);
        }
        if &buf[end + len..total] != b"\r\n" {
            return Err(format!(
                "data block of {:?} not followed by \\r\\n",
                String::from_utf8_lossy(key)
            ));
        }
        return Ok(Some((
            Unit::Value {
                key,
                data: &buf[end..end + len],
            },
            total,
        )));
    }
    let unit = match line {
        b"END" => Unit::End,
        b"STORED" => Unit::Stored,
        l if l.starts_with(b"VERSION ") => Unit::Version,
        l => Unit::Other(l),
    };
    Ok(Some((unit, end)))
}

/// The reply to a single-key `get`: a hit (with its data length), a miss, or
/// an error line. Returns the bytes consumed when the whole reply is there.
#[derive(Debug, PartialEq, Eq)]
pub enum GetReply {
    Hit,
    Miss,
    Error,
}

pub fn next_get_reply(buf: &[u8]) -> Result<Option<(GetReply, usize)>, String> {
    match next_unit(buf)? {
        None => Ok(None),
        Some((Unit::End, n)) => Ok(Some((GetReply::Miss, n))),
        Some((Unit::Value { .. }, n)) => match next_unit(&buf[n..])? {
            None => Ok(None),
            Some((Unit::End, m)) => Ok(Some((GetReply::Hit, n + m))),
            Some((other, _)) => Err(format!("expected END after one VALUE, got {other:?}")),
        },
        Some((_, n)) => Ok(Some((GetReply::Error, n))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_unit_needs_all_its_bytes() {
        let full = b"VALUE key:1 0 5\r\nhello\r\nEND\r\n";
        for cut in 0..24 {
            assert_eq!(next_unit(&full[..cut]).unwrap(), None, "cut at {cut}");
        }
        let (u, n) = next_unit(full).unwrap().unwrap();
        assert_eq!(
            u,
            Unit::Value {
                key: b"key:1",
                data: b"hello"
            }
        );
        assert_eq!(n, 24);
        assert_eq!(next_unit(&full[n..]).unwrap(), Some((Unit::End, 5)));
    }

    #[test]
    fn data_may_contain_crlf() {
        let full = b"VALUE k 0 4 99\r\n\r\n\r\n\r\nEND\r\n";
        let (u, n) = next_unit(full).unwrap().unwrap();
        assert_eq!(
            u,
            Unit::Value {
                key: b"k",
                data: b"\r\n\r\n"
            }
        );
        assert_eq!(&full[n..], b"END\r\n");
    }

    #[test]
    fn other_lines() {
        assert_eq!(next_unit(b"STORED\r\nxx").unwrap(), Some((Unit::Stored, 8)));
        assert_eq!(
            next_unit(b"VERSION 1.6.18\r\n").unwrap(),
            Some((Unit::Version, 16))
        );
        assert_eq!(
            next_unit(b"SERVER_ERROR out of memory\r\n").unwrap(),
            Some((Unit::Other(b"SERVER_ERROR out of memory"), 28))
        );
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        assert!(next_unit(b"VALUE k 0\r\n").is_err());
        assert!(next_unit(b"VALUE k 0 x\r\n").is_err());
        assert!(next_unit(b"VALUE k 0 2\r\nabXY").is_err());
        assert!(next_unit(b"VALUE k 0 99999999999999999999999\r\n").is_err());
    }

    #[test]
    fn get_replies() {
        assert_eq!(
            next_get_reply(b"END\r\n").unwrap(),
            Some((GetReply::Miss, 5))
        );
        assert_eq!(
            next_get_reply(b"VALUE a 0 1\r\nx\r\nEND\r\nEND\r\n").unwrap(),
            Some((GetReply::Hit, 21))
        );
        assert_eq!(next_get_reply(b"VALUE a 0 1\r\nx\r\nEN").unwrap(), None);
        assert_eq!(
            next_get_reply(b"SERVER_ERROR busy\r\n").unwrap(),
            Some((GetReply::Error, 19))
        );
        assert!(next_get_reply(b"VALUE a 0 1\r\nx\r\nSTORED\r\n").is_err());
    }
}

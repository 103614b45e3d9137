//! A small script format for meta-protocol conversations, so one table of
//! request/reply pairs (`tests/meta_cases.txt`) can be replayed against the
//! spawned `cachalot` binary, against a real memcached (the cross-check that
//! keeps the table honest) and in process against the handler (unit tests in
//! `src/meta.rs`, no sockets).
//!
//! Format, one directive per line (`#` lines and blank lines are ignored):
//!
//! ```text
//! ## case name [ext]     a new case; [ext] = cachalot extension, not sent to memcached
//! ## case name [1.6.45]  memcached 1.6.45 semantics that 1.6.18 lacks, written
//!                        from 1.6.45's protocol.txt (the case cites the line);
//!                        like [ext], not sent to memcached 1.6.18
//! > request bytes        sent as one write
//! < expected reply       the lines after a `>` are concatenated and must be
//!                        exactly what arrives in answer to it (none = nothing)
//! ~ seconds              wait that long (sleep on a socket, clock advance in
//!                        process): for last-access times and TTLs
//! ```
//!
//! Escapes: `\r \n \t \0 \\ \{ \xNN`. `{repeat:c:N}` stands for N copies of
//! the byte c. In requests `{name}` inserts a captured number. In replies `{N}` is any
//! decimal number (optionally negative), `{N:name}` captures it, `{=name}` must
//! equal a capture, `{~X}` is a number within 2 of X (TTLs tick during the
//! test) and `{age:X}` is within 1 of X (a time difference after X seconds of
//! `~` waits: a clock tick may fall inside the commands' own time, and
//! memcached may apply an LRU bump a moment late). Every case starts with `flush_all` on a fresh connection and ends
//! with `mn`, whose `MN` proves nothing unexpected was sent in between.

use std::collections::HashMap;

/// Part of a request template.
#[derive(Clone, Debug)]
enum Req {
    Lit(Vec<u8>),
    Var(String),
    Repeat(u8, usize),
}

/// Part of an expected reply.
#[derive(Clone, Debug)]
enum Pat {
    Lit(Vec<u8>),
    Num {
        capture: Option<String>,
        equal: Option<String>,
        /// Accepted range.
        near: Option<(i64, i64)>,
    },
}

#[derive(Clone, Debug)]
pub struct Step {
    /// Seconds to wait instead of sending (a `~` line).
    wait: Option<u64>,
    send: Vec<Req>,
    expect: Vec<Pat>,
    /// The script line of the request, for messages.
    line: usize,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub name: String,
    /// Uses a cachalot extension or a memcached 1.6.45 behaviour: not
    /// replayed against memcached 1.6.18.
    pub ext: bool,
    steps: Vec<Step>,
}

/// Parse a script. Panics on a malformed script (a bug in the test data).
pub fn parse(script: &str) -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    for (i, raw) in script.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() || (raw.starts_with('#') && !raw.starts_with("##")) {
            continue;
        }
        if let Some(title) = raw.strip_prefix("## ") {
            let ext = title.contains("[ext]") || title.contains("[1.6.45]");
            let name = title
                .replace("[ext]", "")
                .replace("[1.6.45]", "")
                .trim()
                .to_string();
            cases.push(Case {
                name,
                ext,
                steps: Vec::new(),
            });
            continue;
        }
        let case = cases
            .last_mut()
            .unwrap_or_else(|| panic!("line {line}: directive before the first case"));
        if let Some(secs) = raw.strip_prefix("~ ") {
            case.steps.push(Step {
                wait: Some(
                    secs.trim()
                        .parse()
                        .unwrap_or_else(|_| panic!("line {line}: bad wait {secs:?}")),
                ),
                send: Vec::new(),
                expect: Vec::new(),
                line,
            });
        } else if let Some(body) = raw.strip_prefix("> ") {
            case.steps.push(Step {
                wait: None,
                send: parse_request(body, line),
                expect: Vec::new(),
                line,
            });
        } else if let Some(body) = raw.strip_prefix("< ") {
            let step = case
                .steps
                .last_mut()
                .unwrap_or_else(|| panic!("line {line}: reply before any request"));
            step.expect.extend(parse_reply(body, line));
        } else {
            panic!("line {line}: cannot parse {raw:?}");
        }
    }
    cases
}

/// Unescape `\r \n \t \0 \\ \{ \xNN`; `{...}` groups are returned separately.
fn split(body: &str, line: usize) -> Vec<Result<Vec<u8>, String>> {
    let b = body.as_bytes();
    let mut parts = Vec::new();
    let mut lit = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                let c = *b
                    .get(i + 1)
                    .unwrap_or_else(|| panic!("line {line}: trailing backslash"));
                i += 2;
                match c {
                    b'r' => lit.push(b'\r'),
                    b'n' => lit.push(b'\n'),
                    b't' => lit.push(b'\t'),
                    b'0' => lit.push(0),
                    b'\\' | b'{' => lit.push(c),
                    b'x' => {
                        let hex = body
                            .get(i..i + 2)
                            .unwrap_or_else(|| panic!("line {line}: short \\x"));
                        lit.push(
                            u8::from_str_radix(hex, 16)
                                .unwrap_or_else(|_| panic!("line {line}: bad \\x{hex}")),
                        );
                        i += 2;
                    }
                    _ => panic!("line {line}: unknown escape \\{}", c as char),
                }
            }
            b'{' => {
                let end = body[i..]
                    .find('}')
                    .unwrap_or_else(|| panic!("line {line}: unclosed {{"));
                if !lit.is_empty() {
                    parts.push(Ok(std::mem::take(&mut lit)));
                }
                parts.push(Err(body[i + 1..i + end].to_string()));
                i += end + 1;
            }
            c => {
                lit.push(c);
                i += 1;
            }
        }
    }
    if !lit.is_empty() {
        parts.push(Ok(lit));
    }
    parts
}

fn parse_request(body: &str, line: usize) -> Vec<Req> {
    split(body, line)
        .into_iter()
        .map(|p| match p {
            Ok(l) => Req::Lit(l),
            Err(g) => match g.strip_prefix("repeat:") {
                Some(spec) => {
                    let (c, n) = spec
                        .split_once(':')
                        .unwrap_or_else(|| panic!("line {line}: repeat:c:N"));
                    let n = n
                        .parse()
                        .unwrap_or_else(|_| panic!("line {line}: repeat count"));
                    Req::Repeat(c.as_bytes()[0], n)
                }
                None => Req::Var(g),
            },
        })
        .collect()
}

fn parse_reply(body: &str, line: usize) -> Vec<Pat> {
    split(body, line)
        .into_iter()
        .map(|p| match p {
            Ok(l) => Pat::Lit(l),
            Err(g) if g.starts_with("repeat:") => {
                match parse_request(&format!("{{{g}}}"), line).pop() {
                    Some(Req::Repeat(c, n)) => Pat::Lit(vec![c; n]),
                    _ => panic!("line {line}: bad {{{g}}}"),
                }
            }
            Err(g) => {
                let mut num = Pat::Num {
                    capture: None,
                    equal: None,
                    near: None,
                };
                if let Pat::Num {
                    capture,
                    equal,
                    near,
                } = &mut num
                {
                    if let Some(name) = g.strip_prefix("N:") {
                        *capture = Some(name.to_string());
                    } else if let Some(name) = g.strip_prefix('=') {
                        *equal = Some(name.to_string());
                    } else if let Some(x) = g.strip_prefix('~') {
                        let x: i64 = x
                            .parse()
                            .unwrap_or_else(|_| panic!("line {line}: bad {{~{x}}}"));
                        *near = Some((x - 2, x + 2));
                    } else if let Some(x) = g.strip_prefix("age:") {
                        let x: i64 = x
                            .parse()
                            .unwrap_or_else(|_| panic!("line {line}: bad {{age:{x}}}"));
                        *near = Some((x - 1, x + 1));
                    } else if g != "N" {
                        panic!("line {line}: unknown pattern {{{g}}}");
                    }
                }
                num
            }
        })
        .collect()
}

enum Match {
    Full(Vec<(String, String)>),
    Partial,
    Mismatch,
}

/// Does `got` match `pats` completely, so far, or not at all?
fn matches(pats: &[Pat], got: &[u8], caps: &HashMap<String, String>) -> Match {
    let mut new_caps = Vec::new();
    let mut off = 0;
    for p in pats {
        let rest = &got[off..];
        match p {
            Pat::Lit(l) => {
                let n = l.len().min(rest.len());
                if rest[..n] != l[..n] {
                    return Match::Mismatch;
                }
                if rest.len() < l.len() {
                    return Match::Partial;
                }
                off += l.len();
            }
            Pat::Num {
                capture,
                equal,
                near,
            } => {
                let sign = usize::from(rest.first() == Some(&b'-'));
                let digits = rest[sign..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                if sign + digits == rest.len() {
                    // The number may go on in the next read.
                    return Match::Partial;
                }
                if digits == 0 {
                    return Match::Mismatch;
                }
                let text = String::from_utf8_lossy(&rest[..sign + digits]).into_owned();
                if let Some(name) = equal {
                    if caps.get(name) != Some(&text) {
                        return Match::Mismatch;
                    }
                }
                if let Some((lo, hi)) = near {
                    match text.parse::<i64>() {
                        Ok(v) if (*lo..=*hi).contains(&v) => {}
                        _ => return Match::Mismatch,
                    }
                }
                if let Some(name) = capture {
                    new_caps.push((name.clone(), text));
                }
                off += sign + digits;
            }
        }
    }
    if off == got.len() {
        Match::Full(new_caps)
    } else {
        Match::Mismatch
    }
}

/// A connection to the server under test.
pub trait Conn {
    fn send(&mut self, bytes: &[u8]);
    /// More reply bytes: what arrived since the last call, or None when
    /// nothing more is coming (timeout, or nothing pending in process).
    fn recv(&mut self) -> Option<Vec<u8>>;
    /// Let `secs` seconds pass on the server's clock.
    fn wait(&mut self, secs: u64);
}

fn render(bytes: &[u8]) -> String {
    let s: String = bytes.escape_ascii().to_string();
    if s.len() > 300 {
        format!("{}...({} bytes)", &s[..300], bytes.len())
    } else {
        s
    }
}

fn expect(
    conn: &mut dyn Conn,
    pats: &[Pat],
    caps: &mut HashMap<String, String>,
    what: &str,
) -> Result<(), String> {
    let mut got = Vec::new();
    loop {
        match matches(pats, &got, caps) {
            Match::Full(new) => {
                caps.extend(new);
                return Ok(());
            }
            Match::Mismatch => return Err(format!("{what}: unexpected reply {}", render(&got))),
            Match::Partial => match conn.recv() {
                Some(more) => got.extend(more),
                None => return Err(format!("{what}: incomplete reply {}", render(&got))),
            },
        }
    }
}

/// Replay one case on a fresh connection.
pub fn run(case: &Case, conn: &mut dyn Conn) -> Result<(), String> {
    let mut caps = HashMap::new();
    conn.send(b"flush_all\r\n");
    expect(
        conn,
        &[Pat::Lit(b"OK\r\n".to_vec())],
        &mut caps,
        "flush_all",
    )?;
    for step in &case.steps {
        if let Some(secs) = step.wait {
            conn.wait(secs);
            continue;
        }
        let mut bytes = Vec::new();
        for part in &step.send {
            match part {
                Req::Lit(l) => bytes.extend_from_slice(l),
                Req::Repeat(c, n) => bytes.extend(std::iter::repeat_n(*c, *n)),
                Req::Var(name) => bytes.extend_from_slice(
                    caps.get(name)
                        .ok_or_else(|| format!("line {}: no capture {name}", step.line))?
                        .as_bytes(),
                ),
            }
        }
        conn.send(&bytes);
        if !step.expect.is_empty() {
            let what = format!("line {} ({})", step.line, render(&bytes));
            expect(conn, &step.expect, &mut caps, &what)?;
        }
    }
    conn.send(b"mn\r\n");
    expect(
        conn,
        &[Pat::Lit(b"MN\r\n".to_vec())],
        &mut caps,
        "closing mn (stray or missing bytes before it)",
    )
}

/// Replay every case (skipping extensions unless `with_ext`), each on a new
/// connection from `connect`; returns the failures.
pub fn run_all<'a>(
    cases: &[Case],
    with_ext: bool,
    connect: &mut dyn FnMut() -> Box<dyn Conn + 'a>,
) -> Vec<String> {
    let mut failures = Vec::new();
    for case in cases.iter().filter(|c| with_ext || !c.ext) {
        let mut conn = connect();
        if let Err(e) = run(case, conn.as_mut()) {
            failures.push(format!("case {:?}: {e}", case.name));
        }
    }
    failures
}

/// The shared case table.
pub const CASES: &str = include_str!("../../meta_cases.txt");

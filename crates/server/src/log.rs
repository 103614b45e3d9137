//! What the server says on stderr at memcached's `-v` levels (`-v` errors
//! and warnings, `-vv` connections, `-vvv` more), in one of two forms
//! (`-o log_format=`):
//!
//! - `text` (the default): memcached's own lines, so scripts that read a
//!   memcached's stderr keep working (`<12 new auto-negotiating client
//!   connection`);
//! - `logfmt`: one `key=value` line per event for log pipelines (Loki,
//!   Vector, journald's structured fields...): `ts` (Unix seconds with
//!   microseconds, as `watch` prints them), `level`, `event`, the event's
//!   own fields, and `msg`, the memcached line.
//!
//! The level filter stays at each call site (`if verbose > 1`), as in
//! memcached; this module only shapes the line.

use std::fmt::{Display, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

/// `-o log_format=`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Text,
    Logfmt,
}

impl Format {
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "text" => Some(Format::Text),
            "logfmt" => Some(Format::Logfmt),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Text => "text",
            Format::Logfmt => "logfmt",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }
}

/// `at` as Unix seconds with microseconds (`1795757723.068633`), the
/// `ts=` of log and `watch` lines.
pub fn unix_ts(at: SystemTime) -> String {
    let t = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:06}", t.as_secs(), t.subsec_micros())
}

/// Write one event to stderr: `msg` as it is (text), or with `event` and
/// `fields` as a logfmt line.
pub fn emit(
    format: Format,
    level: Level,
    event: &str,
    msg: impl Display,
    fields: &[(&str, &dyn Display)],
) {
    match format {
        Format::Text => eprintln!("{msg}"),
        Format::Logfmt => eprintln!("{}", logfmt(SystemTime::now(), level, event, &msg, fields)),
    }
}

fn logfmt(
    at: SystemTime,
    level: Level,
    event: &str,
    msg: &dyn Display,
    fields: &[(&str, &dyn Display)],
) -> String {
    let mut line = format!("ts={} level={} event={event}", unix_ts(at), level.name());
    for (k, v) in fields.iter().chain([&("msg", msg)]) {
        let _ = write!(line, " {k}=");
        push_value(&mut line, &v.to_string());
    }
    line
}

/// A logfmt value: bare when it can be, else quoted with `"` and `\`
/// escaped and control characters written as `\n`, `\t` or `\u{..}`.
fn push_value(out: &mut String, v: &str) {
    let bare = !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '=' && c != '\\');
    if bare {
        out.push_str(v);
        return;
    }
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn logfmt_lines_quote_what_needs_it() {
        let at = UNIX_EPOCH + Duration::from_micros(1_795_757_723_068_633);
        let peer = "tcp:127.0.0.1:5000";
        let line = logfmt(
            at,
            Level::Info,
            "conn_open",
            &"<12 new auto-negotiating client connection",
            &[("fd", &12), ("peer", &peer), ("note", &"a \"b\"\n=c")],
        );
        assert_eq!(
            line,
            "ts=1795757723.068633 level=info event=conn_open fd=12 \
             peer=tcp:127.0.0.1:5000 note=\"a \\\"b\\\"\\n=c\" \
             msg=\"<12 new auto-negotiating client connection\""
        );
        let empty = logfmt(at, Level::Warn, "x", &"", &[]);
        assert!(empty.ends_with(" level=warn event=x msg=\"\""), "{empty}");
        assert_eq!(Format::parse("logfmt"), Some(Format::Logfmt));
        assert_eq!(Format::parse("json"), None);
    }
}

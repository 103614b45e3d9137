//! memcached's `getopt_long` table and GNU getopt's way of reading argv
//! with it, below both the command line (`cli`) and the config file
//! (`cli::conf`, which asks the table which options take a value).

use crate::net::exit::EXIT_FAILURE;

/// A command-line error: the message for stderr and the exit code.
#[derive(Debug, PartialEq, Eq)]
pub struct CliError {
    pub message: String,
    pub code: i32,
}

impl CliError {
    pub(super) fn new(code: i32, message: impl Into<String>) -> CliError {
        CliError {
            message: message.into(),
            code,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Arg {
    None,
    Required,
    Optional,
}

/// memcached 1.6's `getopt_long` table: (short letter, long name, argument).
pub(super) const OPTIONS: &[(char, &str, Arg)] = &[
    ('a', "unix-mask", Arg::Required),
    ('A', "enable-shutdown", Arg::None),
    ('Z', "enable-ssl", Arg::None),
    ('p', "port", Arg::Required),
    ('s', "unix-socket", Arg::Required),
    ('U', "udp-port", Arg::Required),
    ('m', "memory-limit", Arg::Required),
    ('M', "disable-evictions", Arg::None),
    ('c', "conn-limit", Arg::Required),
    ('k', "lock-memory", Arg::None),
    ('h', "help", Arg::None),
    ('i', "license", Arg::None),
    ('V', "version", Arg::None),
    ('r', "enable-coredumps", Arg::None),
    ('v', "verbose", Arg::Optional),
    ('d', "daemon", Arg::None),
    ('l', "listen", Arg::Required),
    ('u', "user", Arg::Required),
    ('P', "pidfile", Arg::Required),
    ('f', "slab-growth-factor", Arg::Required),
    ('n', "slab-min-size", Arg::Required),
    ('t', "threads", Arg::Required),
    ('L', "enable-largepages", Arg::None),
    ('D', "", Arg::Required),
    ('R', "max-reqs-per-event", Arg::Required),
    ('C', "disable-cas", Arg::None),
    ('b', "listen-backlog", Arg::Required),
    ('B', "protocol", Arg::Required),
    ('I', "max-item-size", Arg::Required),
    ('S', "enable-sasl", Arg::None),
    ('F', "disable-flush-all", Arg::None),
    ('X', "disable-dumping", Arg::None),
    ('W', "disable-watch", Arg::None),
    ('Y', "auth-file", Arg::Required),
    ('e', "memory-file", Arg::Required),
    ('o', "extended", Arg::Required),
    ('N', "napi-ids", Arg::Required),
    // cachalot's own, long names only (letters no one can type as flags).
    (FLASH_PATH, "flash-path", Arg::Required),
    (FLASH_SIZE, "flash-size", Arg::Required),
];

pub(super) const FLASH_PATH: char = '\u{1}';
pub(super) const FLASH_SIZE: char = '\u{2}';

/// getopt's complaint plus memcached's own second line, exit 1.
pub(super) fn getopt_error(first: String) -> CliError {
    CliError::new(
        EXIT_FAILURE,
        format!("{first}\nIllegal argument \"?\"\nTry 'cachalot -h' for the list of options."),
    )
}

/// Options in command-line order (an error ends the list where getopt would
/// have reported it, so `-h` before a bad flag still prints help), and the
/// non-option words.
pub(super) type Tokens = (Vec<Result<(char, Option<String>), CliError>>, Vec<String>);

/// Split argv into (option letter, value) pairs the way GNU getopt_long does.
pub(super) fn tokenize(args: &[String]) -> Tokens {
    let mut out = Vec::new();
    let mut extra = Vec::new();
    if let Err(e) = tokenize_into(args, &mut out, &mut extra) {
        out.push(Err(e));
    }
    (out, extra)
}

fn tokenize_into(
    args: &[String],
    out: &mut Vec<Result<(char, Option<String>), CliError>>,
    extra: &mut Vec<String>,
) -> Result<(), CliError> {
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            extra.extend(args[i..].iter().cloned());
            break;
        }
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let exact = OPTIONS.iter().find(|o| !o.1.is_empty() && o.1 == name);
            let opt = match exact {
                Some(o) => *o,
                None => {
                    let matches: Vec<_> = OPTIONS
                        .iter()
                        .filter(|o| !o.1.is_empty() && o.1.starts_with(name))
                        .collect();
                    match matches.as_slice() {
                        [one] => **one,
                        [] => {
                            return Err(getopt_error(format!(
                                "cachalot: unrecognized option '--{name}'"
                            )))
                        }
                        many => {
                            let names: Vec<String> =
                                many.iter().map(|o| format!("'--{}'", o.1)).collect();
                            return Err(getopt_error(format!(
                                "cachalot: option '--{name}' is ambiguous; possibilities: {}",
                                names.join(" ")
                            )));
                        }
                    }
                }
            };
            let value = match (opt.2, inline) {
                (Arg::None, Some(_)) => {
                    return Err(getopt_error(format!(
                        "cachalot: option '--{}' doesn't allow an argument",
                        opt.1
                    )))
                }
                (Arg::None, None) => None,
                (Arg::Optional, v) => v,
                (Arg::Required, Some(v)) => Some(v),
                (Arg::Required, None) => match args.get(i) {
                    Some(v) => {
                        i += 1;
                        Some(v.clone())
                    }
                    None => {
                        return Err(getopt_error(format!(
                            "cachalot: option '--{}' requires an argument",
                            opt.1
                        )))
                    }
                },
            };
            out.push(Ok((opt.0, value)));
            continue;
        }
        let Some(shorts) = arg.strip_prefix('-').filter(|s| !s.is_empty()) else {
            // A non-option word: GNU getopt moves it to the end; memcached ignores it.
            extra.push(arg.clone());
            continue;
        };
        for (pos, c) in shorts.char_indices() {
            let Some(opt) = OPTIONS.iter().find(|o| o.0 == c) else {
                return Err(getopt_error(format!("cachalot: invalid option -- '{c}'")));
            };
            match opt.2 {
                Arg::None | Arg::Optional => out.push(Ok((c, None))),
                Arg::Required => {
                    let rest = &shorts[pos + c.len_utf8()..];
                    let value = if !rest.is_empty() {
                        rest.to_string()
                    } else if let Some(v) = args.get(i) {
                        i += 1;
                        v.clone()
                    } else {
                        return Err(getopt_error(format!(
                            "cachalot: option requires an argument -- '{c}'"
                        )));
                    };
                    out.push(Ok((c, Some(value))));
                    break;
                }
            }
        }
    }
    Ok(())
}

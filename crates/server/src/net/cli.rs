//! memcached 1.6's command line, so start-up scripts keep working unchanged.
//!
//! The flags, long names and error messages follow memcached 1.6.18's `main()`
//! (its `getopt_long` table and `-o` sub-options), checked against the real
//! binary: combined short flags (`-vv`, `-vp11211`), attached or separate
//! values (`-p11211`, `-p 11211`), `--long=value` / `--long value`, unambiguous
//! long-name prefixes, and options after non-option words (GNU permutation).
//! Where memcached silently turns garbage into 0 (`atoi`), cachalot reports a
//! clear error instead: a typo should not start a server on the wrong port.

use std::path::PathBuf;

use crate::settings::{ProtocolChoice, Settings};
use cachalot_engine::codec::Codec;

use self::getopt::{getopt_error, tokenize, CliError, FLASH_PATH, FLASH_SIZE};
use super::exit::{EXIT_FAILURE, EX_USAGE};

mod conf;
pub mod getopt;

/// What the command line asks for.
#[derive(Debug)]
pub enum Action {
    Run(Box<Settings>),
    Help,
    Version,
    License,
}

/// The result of parsing: what to do plus warnings to print on stderr.
#[derive(Debug)]
pub struct Parsed {
    pub action: Action,
    pub warnings: Vec<String>,
}

/// A whole decimal number (no sign, no garbage).
fn number<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// memcached 1.6.18's `-I`: `atoi` of the text without a trailing k or m
/// (either case), times 1024 or 1024^2 in 32-bit `int` arithmetic. There is
/// no `g`: `-I 1g` reads 1 (and fails as too small), like `-I 1x`.
fn item_size_arg(v: &str) -> i32 {
    let (digits, mult) = match v.as_bytes().last() {
        Some(b'k' | b'K') => (&v[..v.len() - 1], 1 << 10),
        Some(b'm' | b'M') => (&v[..v.len() - 1], 1 << 20),
        _ => (v, 1),
    };
    atoi(digits).wrapping_mul(mult)
}

/// glibc's `atoi`: `(int) strtol(s, NULL, 10)`: leading white space, a sign,
/// as many digits as follow (saturating at the `long` range), truncated to 32
/// bits; 0 when there are no digits.
fn atoi(s: &str) -> i32 {
    let b = s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, digits) = match b.as_bytes().first() {
        Some(b'-') => (true, &b[1..]),
        Some(b'+') => (false, &b[1..]),
        _ => (false, b),
    };
    let mut n: i64 = 0;
    for d in digits.bytes().take_while(u8::is_ascii_digit) {
        let d = i64::from(d - b'0');
        n = n
            .checked_mul(10)
            .and_then(|n| {
                if negative {
                    n.checked_sub(d)
                } else {
                    n.checked_add(d)
                }
            })
            .unwrap_or(if negative { i64::MIN } else { i64::MAX });
    }
    n as i32
}

/// memcached's checks of `-I` against `-m` and `slab_chunk_max`, in its order
/// and words; the size in bytes when they pass.
fn check_item_size(size: i32, e: &cachalot_engine::Config) -> Result<usize, CliError> {
    let usage = |m: String| Err(CliError::new(EX_USAGE, m));
    if size < 1024 {
        return usage("Item max size cannot be less than 1024 bytes.".into());
    }
    let size = size as usize;
    if size > e.memory_limit / 2 {
        return usage("Cannot set item size limit higher than 1/2 of memory max.".into());
    }
    if size > 1 << 30 {
        return usage("Cannot set item size limit higher than a gigabyte.".into());
    }
    let chunk = e.slab_chunk_max;
    if chunk > size {
        return usage(format!(
            "slab_chunk_max (bytes: {chunk}) cannot be larger than -I (item_size_max {size})"
        ));
    }
    if !size.is_multiple_of(chunk) {
        return usage(format!(
            "-I (item_size_max: {size}) must be evenly divisible by slab_chunk_max (bytes: {chunk})"
        ));
    }
    let page = cachalot_engine::DEFAULT_PAGE_SIZE;
    if !page.is_multiple_of(chunk) {
        return usage(format!(
            "slab_chunk_max (bytes: {chunk}) must divide evenly into {page} (slab_page_size)"
        ));
    }
    Ok(size)
}

/// A size with an optional k/m/g suffix (binary units), in bytes; `unit` is
/// the multiplier of a bare number.
fn size_with_suffix(s: &str, unit: u64) -> Option<u64> {
    let (digits, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        b't' | b'T' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, unit),
    };
    number::<u64>(digits)?.checked_mul(mult)
}

fn positive_float(s: &str) -> Option<f64> {
    s.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// A flash tier's size: a bare number is megabytes, as `-m`; k/m/g/t
/// suffixes; at least one slab (1 MB).
fn flash_size(v: &str) -> Option<u64> {
    size_with_suffix(v, 1 << 20).filter(|&b| b >= 1 << 20)
}

/// The flash tier's settings, created on first use (`--flash-*`, `ext_*`).
fn flash_config(s: &mut Settings) -> &mut cachalot_engine::flash::FlashConfig {
    s.engine
        .flash
        .get_or_insert_with(|| cachalot_engine::flash::FlashConfig::new(PathBuf::new(), 0))
}

/// `-o net_io`'s value (and `CACHALOT_NET_IO`'s): whether the workers
/// use io_uring.
fn net_uring(value: Option<&str>) -> Option<bool> {
    match value {
        Some("uring") => Some(true),
        Some("epoll") => Some(false),
        _ => None,
    }
}

/// Parse memcached's arguments (without the program name).
pub fn parse(args: &[String]) -> Result<Parsed, CliError> {
    let args = conf::expand(args)?;
    let (opts, extra) = tokenize(&args);
    let mut s = Settings::default();
    // The default of `-o net_io`, from the environment: how the test suite
    // runs every server it starts on the epoll fallback too. As strict as
    // the option: a misspelt value must not quietly mean the default.
    if let Some(v) = std::env::var_os("CACHALOT_NET_IO") {
        s.net_uring = net_uring(v.to_str())
            .ok_or_else(|| CliError::new(EXIT_FAILURE, "CACHALOT_NET_IO must be uring or epoll"))?;
    }
    let mut warnings = Vec::new();
    let mut listen_given = false;
    let mut item_size = 1i32 << 20;
    let mut given = Given::default();
    let mut auth_file = None;

    for opt in opts {
        let (c, value) = opt?;
        let v = value.unwrap_or_default();
        match c {
            'h' => {
                return Ok(Parsed {
                    action: Action::Help,
                    warnings,
                })
            }
            'V' => {
                return Ok(Parsed {
                    action: Action::Version,
                    warnings,
                })
            }
            'i' => {
                return Ok(Parsed {
                    action: Action::License,
                    warnings,
                })
            }
            'A' => s.shutdown_enabled = true,
            'a' => {
                s.unix_mask = u32::from_str_radix(&v, 8)
                    .ok()
                    .filter(|m| *m <= 0o777)
                    .ok_or_else(|| {
                        CliError::new(EX_USAGE, format!("ERROR: Invalid unix socket mask {v}."))
                    })?
            }
            'p' if v == "-1" => {
                // memcached: any free port, reported via MEMCACHED_PORT_FILENAME.
                s.port = 0;
                s.port_ephemeral = true;
            }
            'p' => {
                s.port = number::<u16>(&v).ok_or_else(|| {
                    CliError::new(EX_USAGE, format!("ERROR: Invalid port number {v}."))
                })?;
                s.port_ephemeral = false;
            }
            's' => s.unix_socket = Some(PathBuf::from(v)),
            'U' => {
                s.udp_port = number::<u16>(&v).ok_or_else(|| {
                    CliError::new(EX_USAGE, format!("ERROR: Invalid UDP port number {v}."))
                })?
            }
            'm' => {
                // memcached 1.6.18 reads a bare number of megabytes; k/m/g
                // suffixes are accepted as a convenience.
                let bytes = size_with_suffix(&v, 1 << 20)
                    .and_then(|b| usize::try_from(b).ok())
                    .ok_or_else(|| {
                        CliError::new(EX_USAGE, format!("ERROR: Invalid memory limit {v}."))
                    })?;
                s.engine.memory_limit = bytes;
            }
            'M' => s.engine.evict = false,
            'c' => {
                s.max_conns = number::<usize>(&v).filter(|n| *n > 0).ok_or_else(|| {
                    CliError::new(EXIT_FAILURE, "Maximum connections must be greater than 0")
                })?
            }
            'k' => s.lock_memory = true,
            'r' => s.enable_coredumps = true,
            'v' => s.verbose = s.verbose.saturating_add(1),
            'd' => s.daemonize = true,
            'l' => {
                // Repeated -l accumulate (memcached joins them with commas);
                // the first one replaces the default.
                if !listen_given {
                    s.listen.clear();
                    listen_given = true;
                }
                for part in v.split(',').filter(|p| !p.is_empty()) {
                    if !s.listen.iter().any(|l| l == part) {
                        s.listen.push(part.to_string());
                    }
                }
            }
            'u' => s.user = Some(v),
            'P' => s.pid_file = Some(PathBuf::from(v)),
            'f' => {
                s.engine.growth_factor = positive_float(&v)
                    .filter(|f| *f > 1.0)
                    .ok_or_else(|| CliError::new(EXIT_FAILURE, "Factor must be greater than 1"))?
            }
            'n' => {
                s.engine.chunk_min_data =
                    number::<usize>(&v).filter(|n| *n > 0).ok_or_else(|| {
                        CliError::new(EXIT_FAILURE, "Chunk size must be greater than 0")
                    })?
            }
            't' => {
                s.threads = number::<usize>(&v).filter(|n| *n > 0).ok_or_else(|| {
                    CliError::new(EXIT_FAILURE, "Number of threads must be greater than 0")
                })?;
                if s.threads > 64 {
                    warnings.push(
                        "WARNING: Setting a high number of worker threads is not recommended.\n \
                         Set this value to the number of cores in your machine or less."
                            .to_string(),
                    );
                }
            }
            'L' => s.engine.prealloc = true,
            'D' => {
                let Some(ch) = v.chars().next() else {
                    return Err(CliError::new(EXIT_FAILURE, "No delimiter specified"));
                };
                s.prefix_delimiter = ch;
                s.detail_enabled = true;
            }
            'R' => {
                s.reqs_per_event = number::<usize>(&v).filter(|n| *n > 0).ok_or_else(|| {
                    CliError::new(
                        EXIT_FAILURE,
                        "Number of requests per event must be greater than 0",
                    )
                })?
            }
            'C' => s.engine.cas_enabled = false,
            'b' => {
                s.backlog = number::<i32>(&v).filter(|n| *n > 0).ok_or_else(|| {
                    CliError::new(EX_USAGE, format!("ERROR: Invalid listen backlog {v}."))
                })?
            }
            'B' => {
                s.protocol = match v.as_str() {
                    "auto" => ProtocolChoice::Auto,
                    "binary" => ProtocolChoice::Binary,
                    "ascii" => ProtocolChoice::Ascii,
                    _ => {
                        return Err(CliError::new(
                            EX_USAGE,
                            format!(
                                "Invalid value for binding protocol: {v}\n \
                                 -- should be one of auto, binary, or ascii"
                            ),
                        ))
                    }
                }
            }
            // Checked after all flags, as memcached does.
            'I' => item_size = item_size_arg(&v),
            'S' => {
                return Err(CliError::new(
                    EX_USAGE,
                    "This server is not built with SASL support.",
                ))
            }
            'Z' => s.tls.enabled = true,
            'Y' => auth_file = Some(std::path::PathBuf::from(&v)),
            'e' => s.memory_file = Some(PathBuf::from(&v)),
            'F' => s.flush_enabled = false,
            'X' => s.dump_enabled = false,
            'W' => s.watch_enabled = false,
            'N' => {
                number::<u32>(&v).ok_or_else(|| {
                    CliError::new(EX_USAGE, format!("ERROR: Invalid napi ids value {v}."))
                })?;
                warnings.push("WARNING: -N (napi ids) is not supported; ignored.".to_string());
            }
            'o' => extended(&v, &mut s, &mut warnings, &mut given)?,
            FLASH_PATH => flash_config(&mut s).path = PathBuf::from(v),
            FLASH_SIZE => {
                flash_config(&mut s).size = flash_size(&v).ok_or_else(|| {
                    CliError::new(EX_USAGE, format!("ERROR: Invalid flash size {v}."))
                })?;
            }
            _ => return Err(getopt_error(format!("cachalot: invalid option -- '{c}'"))),
        }
    }

    for word in extra {
        warnings.push(format!("WARNING: ignoring extra argument '{word}'"));
    }
    if s.udp_port != 0 {
        warnings.push(format!(
            "WARNING: UDP is not supported; -U {} ignored (UDP stays off).",
            s.udp_port
        ));
        s.udp_port = 0;
    }
    s.engine.item_size_max = check_item_size(item_size, &s.engine)?;
    if let Some(path) = auth_file {
        // memcached's order: the protocol conflict, then the file.
        match s.protocol {
            ProtocolChoice::Binary => {
                return Err(CliError::new(
                    EX_USAGE,
                    "ERROR: You cannot allow the BINARY protocol while using ascii authentication tokens.",
                ))
            }
            _ => s.protocol = ProtocolChoice::Ascii,
        }
        let auth =
            crate::auth::AuthFile::load(&path).map_err(|m| CliError::new(EXIT_FAILURE, m))?;
        s.auth = Some(std::sync::Arc::new(auth));
    }
    if let Some(f) = &s.engine.flash {
        if f.path.as_os_str().is_empty() || f.size == 0 {
            return Err(CliError::new(
                EX_USAGE,
                "The flash tier needs both --flash-path and --flash-size (or -o ext_path=FILE:SIZE).",
            ));
        }
    }
    // A test knob that would silently test nothing.
    if s.zzone_demote_all && !s.engine.zzone {
        return Err(CliError::new(EX_USAGE, "zzone_demote_all needs zzone=1"));
    }
    // `slab_automove=0` pauses whichever rebalancing rule runs (as `slabs
    // automove 0` does at run time), unless `rebalance=` names one: an
    // explicit rule wins over memcached's flag, in either order.
    if given.rebalance
        && s.engine.rebalance != cachalot_engine::RebalancePolicy::Off
        && s.engine.slab_automove == 0
    {
        s.engine.slab_automove = 1;
    }
    // The Z-zone is on by default, but not in front of a flash tier
    // unless asked for: there, what the zone has no room for is evicted
    // rather than written to flash (7-10% fewer hits on
    // `tests/it/flash.rs`'s reads), and a clean stop does not keep it yet.
    if s.engine.flash.is_some() && !given.zzone {
        s.engine.zzone = false;
    }
    // The observers are on by default where they take at most 1% of -m
    // (1.5% for the curve, whose bound is an upper one; at -m 1 they would
    // take a third of it); asked for, always.
    let one_percent = s.engine.memory_limit / 100;
    if !given.hotkeys && s.threads * crate::hotkeys::SKETCH_BYTES > one_percent {
        s.hotkeys = false;
    }
    let curve = crate::mrc::Curve::memory_bytes(s.engine.memory_limit, s.detail_enabled);
    if !given.mrc && curve * 2 > 3 * one_percent {
        s.mrc = false;
    }
    s.trace = trace_config(&given)?;
    // A request line may carry a key plus meta flags; values are bounded by -I.
    s.max_line = s.max_line.max(2048);
    Ok(Parsed {
        action: Action::Run(Box::new(s)),
        warnings,
    })
}

/// One numeric sub-option value, with memcached's "missing" message.
fn sub_number<T: std::str::FromStr>(name: &str, value: Option<&str>) -> Result<T, CliError> {
    let v = value.ok_or_else(|| {
        CliError::new(EXIT_FAILURE, format!("Missing numeric argument for {name}"))
    })?;
    number::<T>(v)
        .ok_or_else(|| CliError::new(EXIT_FAILURE, format!("Invalid numeric argument for {name}")))
}

/// An `ssl_*` value (memcached: "Missing <name> argument").
fn ssl_arg<'v>(name: &str, value: Option<&'v str>) -> Result<&'v str, CliError> {
    value.ok_or_else(|| CliError::new(EXIT_FAILURE, format!("Missing {name} argument")))
}

/// A numeric `ssl_*` value, parsed as memcached's `safe_strtol`.
fn ssl_number(name: &str, value: Option<&str>) -> Result<i64, CliError> {
    number::<i64>(ssl_arg(name, value)?)
        .ok_or_else(|| CliError::new(EXIT_FAILURE, format!("could not parse argument to {name}")))
}

/// `ssl_verify_mode` and `ssl_min_version`: 0 to 3.
fn ssl_choice(name: &str, value: Option<&str>) -> Result<u8, CliError> {
    match ssl_number(name, value)? {
        m @ 0..=3 => Ok(m as u8),
        _ => Err(CliError::new(
            EXIT_FAILURE,
            format!("Invalid {name}. Use help to see valid options."),
        )),
    }
}

/// A `-o` switch: `name`, `name=1` or `name=on`; `name=0` or `name=off`.
fn sub_switch(name: &str, value: Option<&str>) -> Result<bool, CliError> {
    match value {
        None | Some("1") | Some("on") => Ok(true),
        Some("0") | Some("off") => Ok(false),
        Some(_) => Err(CliError::new(
            EXIT_FAILURE,
            format!("{name} must be 0 or 1"),
        )),
    }
}

fn sub_float(name: &str, value: Option<&str>) -> Result<f64, CliError> {
    let v = value.ok_or_else(|| {
        CliError::new(EXIT_FAILURE, format!("Missing numeric argument for {name}"))
    })?;
    positive_float(v)
        .filter(|f| *f >= 0.0)
        .ok_or_else(|| CliError::new(EXIT_FAILURE, format!("Invalid numeric argument for {name}")))
}

/// Options whose defaults depend on others, and whether they were given.
#[derive(Default)]
struct Given {
    rebalance: bool,
    zzone: bool,
    hotkeys: bool,
    mrc: bool,
    /// `trace_file` and the `trace_*` options, in any order.
    trace_file: Option<PathBuf>,
    trace_sample: Option<f64>,
    trace_max: Option<u64>,
    trace_format: Option<crate::capture::Format>,
    trace_keys: Option<crate::capture::Keys>,
}

/// The trace capture `trace_*` asked for (issue 36): none without
/// `trace_file`, and an error for a `trace_*` option without it.
fn trace_config(given: &Given) -> Result<Option<crate::capture::TraceConfig>, CliError> {
    use crate::capture::{Format, Keys, TraceConfig};
    let Some(path) = &given.trace_file else {
        let orphan = [
            (given.trace_sample.is_some(), "trace_sample"),
            (given.trace_max.is_some(), "trace_max"),
            (given.trace_format.is_some(), "trace_format"),
            (given.trace_keys.is_some(), "trace_keys"),
        ];
        return match orphan.iter().find(|(given, _)| *given) {
            Some((_, name)) => Err(CliError::new(
                EXIT_FAILURE,
                format!("{name} needs trace_file"),
            )),
            None => Ok(None),
        };
    };
    let mut t = TraceConfig::new(path.clone());
    t.sample = given.trace_sample.unwrap_or(t.sample);
    t.max_bytes = given.trace_max.unwrap_or(t.max_bytes);
    t.format = given.trace_format.unwrap_or(t.format);
    t.keys = given.trace_keys.unwrap_or(t.keys);
    if t.keys == Keys::Plain && t.format != Format::Csv {
        return Err(CliError::new(
            EXIT_FAILURE,
            "trace_keys=plain needs trace_format=csv (oracleGeneral ids are numbers)",
        ));
    }
    Ok(Some(t))
}

/// `-o key[=value],key...`: memcached's extended options.
fn extended(
    list: &str,
    s: &mut Settings,
    warnings: &mut Vec<String>,
    given: &mut Given,
) -> Result<(), CliError> {
    for item in list.split(',').filter(|i| !i.is_empty()) {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (item, None),
        };
        match key {
            "maxconns_fast" => s.maxconns_fast = true,
            "no_maxconns_fast" => s.maxconns_fast = false,
            "hashpower" => {
                let hp: u32 = sub_number("hashpower", value)?;
                if hp < 12 {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        format!("Initial hashtable multiplier of {hp} is too low"),
                    ));
                }
                if hp > 32 {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        format!(
                            "Initial hashtable multiplier of {hp} is too high\n\
                             Choose a value based on \"STAT hash_power_level\" from a running instance"
                        ),
                    ));
                }
                s.hashpower_init = hp as u8;
            }
            "tail_repair_time" => {
                let t: u64 = value.and_then(number).unwrap_or(0);
                if value.is_none() {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        "Missing numeric argument for tail_repair_time",
                    ));
                }
                if t < 10 {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        "Cannot set tail_repair_time to less than 10 seconds",
                    ));
                }
                s.tail_repair_time = t;
            }
            "hash_algorithm" => match value {
                Some(a @ ("jenkins" | "murmur3" | "xxh3")) => s.hash_algorithm = a.to_string(),
                None => {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        "Missing hash_algorithm argument",
                    ))
                }
                Some(_) => {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        "Unknown hash_algorithm option (jenkins, murmur3, xxh3)",
                    ))
                }
            },
            "lru_crawler" => s.lru_crawler = true,
            "no_lru_crawler" => s.lru_crawler = false,
            "lru_crawler_sleep" => {
                let us: u64 = sub_number("lru_crawler_sleep", value)?;
                if us > 1_000_000 {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        "LRU crawler sleep must be between 0 and 1 second",
                    ));
                }
                s.lru_crawler_sleep = us;
            }
            "lru_crawler_tocrawl" => {
                s.lru_crawler_tocrawl = sub_number::<u32>("lru_crawler_tocrawl", value)? as u64
            }
            "lru_maintainer" => s.lru_maintainer = true,
            "no_lru_maintainer" => s.lru_maintainer = false,
            "hot_lru_pct" | "warm_lru_pct" => {
                let pct: u32 = sub_number(key, value)?;
                if !(1..80).contains(&pct) {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        format!("{key} must be > 1 and < 80"),
                    ));
                }
                if key == "hot_lru_pct" {
                    s.hot_lru_pct = pct;
                } else {
                    s.warm_lru_pct = pct;
                }
            }
            "hot_max_factor" => s.hot_max_factor = sub_float(key, value)?,
            "warm_max_factor" => s.warm_max_factor = sub_float(key, value)?,
            "temporary_ttl" => s.temporary_ttl = sub_number(key, value)?,
            "idle_timeout" => s.idle_timeout = sub_number(key, value)?,
            "hotkeys" => {
                s.hotkeys = sub_switch(key, value)?;
                given.hotkeys = true;
            }
            "mrc" => {
                s.mrc = sub_switch(key, value)?;
                given.mrc = true;
            }
            // Issue 36: trace capture (`capture`); put together once all
            // options are read (`trace_config`).
            "trace_file" => {
                given.trace_file =
                    Some(PathBuf::from(value.filter(|v| !v.is_empty()).ok_or_else(
                        || CliError::new(EXIT_FAILURE, "Missing trace_file argument"),
                    )?))
            }
            "trace_sample" => {
                let r = value
                    .and_then(positive_float)
                    .filter(|r| *r > 0.0 && *r <= 1.0)
                    .ok_or_else(|| {
                        CliError::new(
                            EXIT_FAILURE,
                            "trace_sample must be a number above 0 and at most 1",
                        )
                    })?;
                given.trace_sample = Some(r);
            }
            "trace_max" => {
                let v = value.unwrap_or("");
                let n = size_with_suffix(v, 1)
                    .filter(|&n| n >= crate::capture::ORACLE_RECORD as u64)
                    .ok_or_else(|| {
                        CliError::new(
                            EXIT_FAILURE,
                            format!(
                                "Invalid trace_max: {v} (bytes, k/m/g/t suffixes, at least 24)"
                            ),
                        )
                    })?;
                given.trace_max = Some(n);
            }
            "trace_format" => {
                given.trace_format = Some(match value {
                    Some("oracle") | Some("oracleGeneral") => crate::capture::Format::Oracle,
                    Some("csv") => crate::capture::Format::Csv,
                    _ => {
                        return Err(CliError::new(
                            EXIT_FAILURE,
                            "trace_format must be oracle or csv",
                        ))
                    }
                })
            }
            "trace_keys" => {
                given.trace_keys = Some(match value {
                    Some("hashed") => crate::capture::Keys::Hashed,
                    Some("plain") => crate::capture::Keys::Plain,
                    _ => {
                        return Err(CliError::new(
                            EXIT_FAILURE,
                            "trace_keys must be hashed or plain",
                        ))
                    }
                })
            }
            "metrics_listen" => {
                s.metrics_listen = Some(
                    value
                        .filter(|v| !v.is_empty())
                        .map(str::to_string)
                        .ok_or_else(|| {
                            CliError::new(EXIT_FAILURE, "metrics_listen needs HOST:PORT")
                        })?,
                )
            }
            "watcher_logbuf_size" => {
                s.watcher_logbuf_size = sub_number::<usize>(key, value)?.saturating_mul(1024)
            }
            "worker_logbuf_size" => {
                s.worker_logbuf_size = sub_number::<usize>(key, value)?.saturating_mul(1024)
            }
            "read_buf_mem_limit" => {
                s.read_buf_mem_limit = sub_number::<usize>(key, value)?.saturating_mul(1 << 20)
            }
            "slab_reassign" => s.engine.slab_reassign = true,
            "no_slab_reassign" => s.engine.slab_reassign = false,
            "slab_automove" => {
                let mode: i64 = match value {
                    None => 1,
                    Some(v) => v.parse().map_err(|_| {
                        CliError::new(EXIT_FAILURE, "slab_automove must be between 0 and 2")
                    })?,
                };
                if !(0..=2).contains(&mode) {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        "slab_automove must be between 0 and 2",
                    ));
                }
                s.engine.slab_automove = mode as u8;
            }
            "no_slab_automove" => s.engine.slab_automove = 0,
            // Issue 4: eviction by recomputation cost (GD-Wheel) and costs
            // learned from miss-to-set gaps; errors worded like memcached's
            // for hash_algorithm and slab_automove.
            "eviction" => match value {
                None => return Err(CliError::new(EXIT_FAILURE, "Missing eviction argument")),
                Some(v) => {
                    s.engine.eviction = v.parse().map_err(|_| {
                        CliError::new(
                            EXIT_FAILURE,
                            "Unknown eviction option (lru, gdwheel, gdwheel-lazy, sieve)",
                        )
                    })?
                }
            },
            "learn_costs" => s.engine.learn_costs = sub_switch(key, value)?,
            "no_learn_costs" => s.engine.learn_costs = false,
            // Issue 10: item pages on transparent huge pages (Cavast 6.1).
            "hugepages" => s.engine.hugepages = sub_switch(key, value)?,
            "no_hugepages" => s.engine.hugepages = false,
            // Issue 10: index stripes (the GET path's reader locks).
            "lock_stripes" => {
                let n: usize = sub_number(key, value)?;
                if n == 0 || n > 4096 {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        "lock_stripes must be between 1 and 4096",
                    ));
                }
                s.engine.lock_stripes = n.next_power_of_two();
            }
            // Issue 10: SETs that overwrite their item in place (stripe only).
            "in_place_sets" => s.engine.in_place_sets = sub_switch(key, value)?,
            "no_in_place_sets" => s.engine.in_place_sets = false,
            "lockfree_inserts" => s.engine.lockfree_inserts = sub_switch(key, value)?,
            // Cavast's hot/cold re-partitioning within pages.
            "repartition" => s.engine.repartition = sub_switch(key, value)?,
            // Issue 11: zExpander's compressed Z-zone.
            "zzone" => {
                s.engine.zzone = sub_switch(key, value)?;
                given.zzone = true;
            }
            "zzone_block" => {
                let n: u32 = sub_number(key, value)?;
                if !(256..=65536).contains(&n) {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        "zzone_block must be between 256 and 65536",
                    ));
                }
                s.engine.zzone_block = n as usize;
            }
            "zzone_deltas" => {
                let n: u32 = sub_number(key, value)?;
                if n > 15 {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        "zzone_deltas must be at most 15",
                    ));
                }
                s.engine.zzone_deltas = n as u8;
            }
            "zzone_codec" => {
                s.engine.zzone_codec = match value {
                    Some("lz4") => Codec::Lz4,
                    Some("zstd") => Codec::Zstd,
                    Some("none") => Codec::Raw,
                    _ => {
                        return Err(CliError::new(
                            EXIT_FAILURE,
                            "zzone_codec must be lz4, zstd or none",
                        ))
                    }
                }
            }
            // A test knob (issue 34): not for production.
            "zzone_demote_all" => s.zzone_demote_all = sub_switch(key, value)?,
            "zzone_target" => {
                let n: u32 = sub_number(key, value)?;
                if n > 100 {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        "zzone_target must be between 0 and 100",
                    ));
                }
                s.engine.zzone_target = n as u8;
            }
            // Issue 4: how pages move between slab classes (docs/cost.md,
            // "Rebalancing"); `memcached` is slab_automove's rule.
            "rebalance" => match value {
                None => return Err(CliError::new(EXIT_FAILURE, "Missing rebalance argument")),
                Some(v) => {
                    s.engine.rebalance = v.parse().map_err(|_| {
                        CliError::new(
                            EXIT_FAILURE,
                            "Unknown rebalance option (off, memcached, sas, cost-per-byte, mrc)",
                        )
                    })?;
                    given.rebalance = true;
                }
            },
            "sas_rule" => match value {
                None => return Err(CliError::new(EXIT_FAILURE, "Missing sas_rule argument")),
                Some(v) => {
                    s.engine.rebalance_tuning.sas_rule = v.parse().map_err(|_| {
                        CliError::new(EXIT_FAILURE, "Unknown sas_rule option (marginal, paper)")
                    })?
                }
            },
            "sas_misses" => {
                let m: u64 = sub_number(key, value)?;
                if m == 0 {
                    return Err(CliError::new(EXIT_FAILURE, "sas_misses must be at least 1"));
                }
                s.engine.rebalance_tuning.sas_misses = m;
            }
            "slab_automove_ratio" => s.slab_automove_ratio = sub_float(key, value)?,
            "slab_automove_window" => s.slab_automove_window = sub_number(key, value)?,
            "slab_automove_freeratio" => {
                sub_float(key, value)?;
            }
            // Bytes, as `safe_strtol` reads them (memcached 1.6.18 goes on
            // after these messages and crashes; a chunk limit of 0 or less
            // is refused here).
            "slab_chunk_max" => {
                let v = value.ok_or_else(|| {
                    CliError::new(EXIT_FAILURE, "Missing slab_chunk_max argument")
                })?;
                let n = cachalot_protocol::text::strtol32(v.as_bytes())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        CliError::new(EXIT_FAILURE, "could not parse argument to slab_chunk_max")
                    })?;
                s.engine.slab_chunk_max = n as usize;
            }
            "track_sizes" => s.track_sizes = true,
            "no_hashexpand" => s.hash_expand = false,
            "modern" => s.modern = true,
            "no_modern" => s.modern = false,
            // Accepted and without effect here, as in memcached 1.6.
            "no_inline_ascii_resp"
            | "inline_ascii_resp"
            | "no_chunked_items"
            | "drop_privileges"
            | "no_drop_privileges" => {}
            "sock_cookie_id" => {
                sub_number::<u32>(key, value)?;
            }
            "resp_obj_mem_limit" => warnings.push(
                "DEPRECATED: resp_obj_mem_limit no longer used. See read_buf_mem_limit,\n\
                 now in megabytes. Value is ignored."
                    .to_string(),
            ),
            // Issue 12: the flash tier, under extstore's names too.
            "ext_path" => {
                let v = value.unwrap_or("");
                let (path, size) = v.rsplit_once(':').ok_or_else(|| {
                    CliError::new(
                        EXIT_FAILURE,
                        "ext_path must be FILE:SIZE (e.g. /data/ext:64g)",
                    )
                })?;
                let size = flash_size(size).ok_or_else(|| {
                    CliError::new(EXIT_FAILURE, format!("Invalid ext_path size: {size}"))
                })?;
                flash_config(s).path = PathBuf::from(path);
                flash_config(s).size = size;
            }
            "ext_item_size" => flash_config(s).item_min = sub_number::<usize>(key, value)?,
            "flash_write_rate" => {
                let v = value.unwrap_or("");
                let bad = || CliError::new(EXIT_FAILURE, format!("Invalid flash_write_rate: {v}"));
                // Bytes a second (k/m/g suffixes), or drive writes per day.
                match v.strip_suffix("dwpd") {
                    Some(d) => {
                        flash_config(s).write_dwpd =
                            positive_float(d).filter(|d| *d > 0.0).ok_or_else(bad)?
                    }
                    None => flash_config(s).write_rate = size_with_suffix(v, 1).ok_or_else(bad)?,
                }
            }
            "flash_miss_cost" => flash_config(s).miss_cost_us = sub_number::<u64>(key, value)?,
            "flash_hot" => {
                let n = sub_number::<u8>(key, value)?;
                if n > 50 {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        "flash_hot must be between 0 and 50",
                    ));
                }
                flash_config(s).hot_percent = n;
            }
            "flash_io" => {
                s.flash_uring = match value {
                    Some("uring") => true,
                    Some("threads") => false,
                    _ => {
                        return Err(CliError::new(
                            EXIT_FAILURE,
                            "flash_io must be uring or threads",
                        ))
                    }
                }
            }
            "net_io" => {
                s.net_uring = net_uring(value)
                    .ok_or_else(|| CliError::new(EXIT_FAILURE, "net_io must be uring or epoll"))?;
            }
            "flash_codec" => {
                flash_config(s).codec = match value {
                    Some("zstd") => Codec::Zstd,
                    Some("lz4") => Codec::Lz4,
                    Some("none") => Codec::Raw,
                    _ => {
                        return Err(CliError::new(
                            EXIT_FAILURE,
                            "flash_codec must be lz4, zstd or none",
                        ))
                    }
                }
            }
            "flash_zstd_level" => {
                let n = sub_number::<i32>(key, value)?;
                if !(1..=19).contains(&n) {
                    return Err(CliError::new(
                        EXIT_FAILURE,
                        "flash_zstd_level must be between 1 and 19",
                    ));
                }
                flash_config(s).zstd_level = n;
            }
            // extstore's tuning of its own design (page sizes, compaction
            // thresholds, recache rates, its write buffers and threads):
            // accepted, so start-up scripts keep working; the tier's own
            // mechanisms replace them (docs/protocol.md, "The flash tier").
            "ext_threads" => {
                s.flash_readers = sub_number::<usize>(key, value)?.clamp(1, 64);
            }
            "ext_item_age" => flash_config(s).item_age = Some(sub_number::<u32>(key, value)?),
            "ext_recache_rate" => {
                flash_config(s).recache_rate = sub_number::<u64>(key, value)?.max(1)
            }
            // The stage is the tier's write buffer; it must hold an N-zone
            // page emptied at once (1 MB), and counts in `-m`.
            "ext_wbuf_size" => {
                flash_config(s).stage_bytes = (sub_number::<usize>(key, value)?.clamp(2, 64)) << 20
            }
            "ext_io_depth" | "ext_page_size" | "ext_low_ttl" | "ext_compact_under"
            | "ext_drop_under" | "ext_max_frag" | "ext_max_sleep" | "ext_drop_unread"
            | "no_ext_drop_unread" => {}
            k if k.starts_with("ext_") => {
                return Err(CliError::new(
                    EXIT_FAILURE,
                    format!("Illegal suboption \"{item}\""),
                ))
            }
            // TLS (`tls`), with memcached's parsing and messages.
            "ssl_chain_cert" => s.tls.chain_cert = Some(ssl_arg(key, value)?.into()),
            "ssl_key" => s.tls.key = Some(ssl_arg(key, value)?.into()),
            "ssl_ca_cert" => s.tls.ca_cert = Some(ssl_arg(key, value)?.into()),
            "ssl_ciphers" => s.tls.ciphers = Some(ssl_arg(key, value)?.to_string()),
            "ssl_keyformat" => {
                s.tls.keyformat = ssl_number(key, value)?.try_into().map_err(|_| {
                    CliError::new(EXIT_FAILURE, "ssl_keyformat must be 1 (PEM) or 2 (DER)")
                })?
            }
            "ssl_verify_mode" => s.tls.verify_mode = ssl_choice(key, value)?,
            "ssl_min_version" => {
                s.tls.min_version = ssl_choice(key, value)?;
                if s.tls.min_version < 2 {
                    warnings.push(
                        "WARNING: TLS 1.0 and 1.1 are not offered; ssl_min_version means TLS 1.2"
                            .to_string(),
                    );
                }
            }
            "ssl_wbuf_size" => {
                let kb = u32::try_from(ssl_number(key, value)?).map_err(|_| {
                    CliError::new(EXIT_FAILURE, "could not parse argument to ssl_wbuf_size")
                })?;
                s.tls.wbuf_size = kb as usize * 1024;
            }
            "log_format" => {
                s.log_format = value.and_then(crate::log::Format::parse).ok_or_else(|| {
                    CliError::new(EXIT_FAILURE, "log_format must be text or logfmt")
                })?
            }
            "ssl_session_cache" => s.tls.session_cache = true,
            "ssl_kernel_tls" => {
                warnings
                    .push("WARNING: kernel TLS is not supported; ignoring ssl_kernel_tls".into());
                s.tls.kernel_tls = true;
            }
            _ => {
                return Err(CliError::new(
                    EXIT_FAILURE,
                    format!("Illegal suboption \"{item}\""),
                ))
            }
        }
    }
    Ok(())
}

/// `-h`: memcached's usage text, limited to what cachalot does.
pub fn usage() -> String {
    format!(
        "cachalot {version} (memcached {compat} compatible)
-p, --port=<num>          TCP port to listen on (default: 11211, 0 = off,
                          -1 = any free port, written to $MEMCACHED_PORT_FILENAME)
-U, --udp-port=<num>      UDP port (only 0, off, is supported)
-s, --unix-socket=<file>  UNIX socket to listen on (disables network support)
-a, --unix-mask=<mask>    access mask for UNIX socket, in octal (default: 700)
-A, --enable-shutdown     enable ascii \"shutdown\" command
-l, --listen=<addr>       interface to listen on (default: 127.0.0.1);
                          comma-separated, each may be <ip>:<port> or [<ipv6>]:<port>
-d, --daemon              run as a daemon
-r, --enable-coredumps    maximize core file limit
-u, --user=<user>         assume identity of <username> (only when run as root)
-m, --memory-limit=<num>  item memory in megabytes (default: 64; k/m/g suffixes accepted)
-M, --disable-evictions   return error on memory exhausted instead of evicting
-c, --conn-limit=<num>    max simultaneous connections (default: 1024)
-k, --lock-memory         lock down all paged memory
-v, --verbose             verbose (print errors/warnings while in event loop)
-vv                       very verbose (also print client connections)
-vvv                      extremely verbose
-h, --help                print this help and exit
    --config-file=<file>  read options from <file>, one per line as typed here
                          (-m 64, # comments); options after it win
-i, --license             print the license and exit
-V, --version             print version and exit
-P, --pidfile=<file>      save PID in <file> (removed at exit)
-f, --slab-growth-factor=<num> chunk size growth factor (default: 1.25)
-n, --slab-min-size=<bytes> min space used for key+value+flags (default: 16)
-L, --enable-largepages   preallocate all item memory at start
-D <char>                 delimiter between key prefixes and IDs (per-prefix stats)
-t, --threads=<num>       number of worker threads (default: number of cores)
-R, --max-reqs-per-event  maximum number of requests per event, limits the
                          requests processed per connection to prevent
                          starvation (default: 20)
-C, --disable-cas         disable use of CAS
-b, --listen-backlog=<num> set the backlog queue limit (default: 1024)
-B, --protocol=<name>     protocol - one of ascii, binary, or auto (default: auto-negotiate)
-I, --max-item-size=<num> adjusts max item size
                          (default: 1m, min: 1k, max: 16m)
-F, --disable-flush-all   disable flush_all command
-X, --disable-dumping     disable stats cachedump and lru_crawler metadump
-W, --disable-watch       disable watch commands (live logging)
-Y, --auth-file=<file>    enable ASCII protocol authentication. format:
                          user:pass\nuser2:pass2\n
-e, --memory-file=<file>  save the items in memory to <file> at a clean
                          shutdown (SIGTERM, SIGINT, SIGUSR1, shutdown) and
                          load them back at the next start (warm restart)
-Z, --enable-ssl          enable TLS/SSL on the TCP listeners; 'notls' prefix
                          disables it for one (-l notls:<ip>:<port>)
    --flash-path=<file>   keep items that leave memory in a flash tier in this
                          file (compressed, indexed in a few bytes of memory
                          each; -o ext_path=FILE:SIZE is the same)
    --flash-size=<num>    size of the flash tier (megabytes, or k/m/g/t)
-o, --extended            comma separated list of extended options
                          most options have a 'no_' prefix to disable
   - maxconns_fast:       immediately close new connections after limit (default: enabled)
   - hashpower:           initial hash table size hint (log2 of buckets)
   - idle_timeout:        timeout for idle connections in seconds (default: 0, no timeout)
   - slab_reassign:       allow memory pages to move between slab classes (default: enabled)
   - slab_automove:       0 = off, 1 = rebalance pages in the background (default), 2 = aggressive
   - eviction:            lru (default), gdwheel: evict by recomputation cost
                          (GreedyDual with cost wheels; costs from meta w / cost=),
                          gdwheel-lazy: the same, hits applied when the item
                          reaches the front (a hit writes no shared state),
                          or sieve: SIEVE (NSDI'24), a FIFO whose hand passes over
                          items read since it last came by and evicts the others
   - learn_costs:         0 (default) or 1: learn a key's cost from the time between
                          a GET miss and the SET that follows it
   - hugepages:           1 (default) or 0: item memory on transparent huge pages
                          (madvise; ignored where the kernel has none)
   - lock_stripes:        index stripes, each with its own reader-writer lock
                          (a power of two up to 4096; default 16)
   - in_place_sets:       0 or 1 (default): a SET whose item stays in its slab
                          class overwrites the old one in place, holding only
                          its key's stripe (CLOCK eviction without learn_costs)
   - lockfree_inserts:    0 or 1 (default): a SET of a new key writes its item in
                          a chunk reserved for its thread, holding only its key's
                          stripe (as in_place_sets, and not with rebalance=sas)
   - repartition:         0 (default) or 1: the maintainer sorts each page's
                          items into 16 columns by last access, hottest first,
                          reclaiming expired ones on the way (Cavast; CLOCK
                          eviction only)
   - zzone:               1 (default, but 0 with a flash tier) or 0: items the
                          slab engine evicts go to a compressed Z-zone in the
                          same memory, where GETs that miss find them
                          (zExpander)
   - zzone_block:         bytes a Z-zone block holds compressed before it
                          splits (default 4096)
   - zzone_deltas:        flushes a Z-zone block takes as deltas (its new
                          items compressed on their own) before one
                          rewrites it whole (default 4, and 15 while
                          the stage waits more than half full; 0: every
                          flush rewrites)
   - zzone_codec:         zstd (default), lz4 or none
   - zzone_target:        percent of the expensive operations the adaptive
                          split keeps in the uncompressed zone (default 90;
                          0: the Z-zone takes all it can)
   - zzone_demote_all:    TEST KNOB, 0 (default) or 1 (with zzone=1): after
                          every command, every item of the slab engine is
                          demoted to the Z-zone (the differential tester's;
                          slow, not for production)
   - ext_path:            FILE:SIZE, the flash tier (as --flash-path/--flash-size)
   - ext_item_size:       smallest item written to flash (default 0: all)
   - ext_item_age:        seconds idle after which an item goes to flash
                          ahead of eviction (default: unlimited, only on
                          eviction)
   - ext_recache_rate:    flash hits per item brought back to memory at most
                          (default 8)
   - ext_wbuf_size:       MB of the tier's write stage, 2 to 64, counted in -m
                          (default: -m / 32 within those)
   - flash_write_rate:    bytes per second the flash writer may write (k/m/g
                          suffixes), or drive writes per day (e.g. 3dwpd);
                          default 0: no limit; items that arrive faster are
                          not admitted
   - flash_hot:           percent of the flash slabs for re-read items, kept
                          uncompressed, at start (SlimCache's hot area;
                          default 5); the cost model moves it from there
   - flash_miss_cost:     microseconds a miss costs the client, for items
                          that carry no cost (default 1000)
   - metrics_listen:      HOST:PORT of an HTTP listener for Prometheus
                          (GET /metrics); default: none
   - hotkeys:             1 or 0: each worker counts requests per key for
                          `stats hotkeys [N]` and `watch hotkeys` (about
                          27 KB a worker, counted in -m; on by default where
                          that is at most 1% of -m)
   - mrc:                 1 or 0: keep a sampled miss-ratio curve for `stats
                          mrc` (the miss ratio at 1/4, 1/2, 2 and 4 times -m;
                          counted in -m, on by default where that is at most
                          1.5% of it: from -m 7, -m 14 with -D)
   - trace_file:          record a trace of the requests to this file
                          (default: none); oracleGeneral (libCacheSim's
                          binary records), or the lab's CSV if it ends in .csv
   - trace_sample:        the share of keys traced, 0 < R <= 1 (default 1),
                          chosen by key hash: every request of a traced key
                          is recorded, so the trace replays at R x the memory
   - trace_max:           bytes at which the capture stops (k/m/g/t
                          suffixes; default 1g)
   - trace_format:        oracle or csv (default: by trace_file's name)
   - trace_keys:          hashed (default: 64-bit ids) or plain (the keys,
                          csv only)
   - log_format:          text (default: memcached's -v lines) or logfmt (one
                          key=value line per event: ts, level, event, fields, msg)
   - ssl_chain_cert:      certificate chain file in PEM format
   - ssl_key:             private key, if not part of the ssl_chain_cert
   - ssl_keyformat:       private key format, 1 (PEM, default) or 2 (DER)
   - ssl_verify_mode:     peer certificate verification mode, default is 0(None).
                          valid values are 0(None), 1(Request), 2(Require)
                          or 3(Once); 1-3 need ssl_ca_cert
   - ssl_ca_cert:         PEM format file of acceptable client CA's
   - ssl_wbuf_size:       size in kilobytes of per-connection TLS output buffer
                          (default: 16)
   - ssl_session_cache:   enable server-side session cache, to support session
                          resumption
   - ssl_min_version:     minimum protocol version to accept (default: tlsv1.2)
                          valid values are 0-2 (tlsv1.2) or 3 (tlsv1.3)
   - ssl_ciphers, ssl_kernel_tls: accepted and reported; rustls' own cipher
                          suites are used, and there is no kernel TLS
   - flash_codec:         zstd (default), lz4 or none
   - flash_zstd_level:    zstd's level for flash containers (default 3;
                          higher packs more items for more writer CPU)
   - flash_io:            how parked GETs read flash: uring (default: each
                          worker's own io_uring, where the kernel allows it)
                          or threads (ext_threads reader threads)
   - net_io:              how workers read plain TCP connections: uring
                          (default: each worker's own io_uring, where the
                          kernel allows it) or epoll; $CACHALOT_NET_IO sets
                          the default
   - rebalance:           how pages move between slab classes: off, memcached
                          (slab_automove's rule), sas (towards capacity misses),
                          cost-per-byte or mrc (default: towards the optimum of
                          sampled miss-ratio curves); slab_automove=0 pauses it
                          unless given
   - sas_rule, sas_misses: SAS's choice of classes (marginal, the default, or
                          paper: Algorithm 3 as written) and how many capacity
                          misses between two page moves (default 2000)
   - tail_repair_time, hash_algorithm, lru_crawler, lru_maintainer, hot_lru_pct,
     warm_lru_pct, hot_max_factor, warm_max_factor, temporary_ttl, slab_chunk_max,
     slab_automove_ratio, slab_automove_window, track_sizes, no_hashexpand, modern,
     watcher_logbuf_size, worker_logbuf_size, read_buf_mem_limit:
                          accepted as in memcached 1.6 (reported by \"stats settings\")
",
        version = env!("CARGO_PKG_VERSION"),
        compat = COMPAT_VERSION,
    )
}

/// The memcached release whose behaviour cachalot reproduces.
pub const COMPAT_VERSION: &str = "1.6.18";

/// `-V`.
pub fn version() -> String {
    format!("cachalot {}", env!("CARGO_PKG_VERSION"))
}

/// `-i`.
pub fn license() -> String {
    format!(
        "cachalot {}\n\nLicensed under the BSD 3-Clause License. cachalot reimplements the \
         memcached protocol and command line;\nmemcached is Copyright (c) 2003, Danga Interactive, \
         Inc. and distributed under the BSD license.",
        env!("CARGO_PKG_VERSION")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<(Settings, Vec<String>), CliError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let parsed = parse(&args)?;
        match parsed.action {
            Action::Run(s) => Ok((*s, parsed.warnings)),
            other => panic!("expected Run, got {other:?}"),
        }
    }

    fn err(args: &[&str]) -> CliError {
        match run(args) {
            Err(e) => e,
            Ok(_) => panic!("{args:?} should fail"),
        }
    }

    #[test]
    fn ephemeral_port() {
        let (s, _) = run(&["-p", "-1"]).unwrap();
        assert!(s.port_ephemeral);
        let (s, _) = run(&["-p", "-1", "-p", "5"]).unwrap();
        assert!(!s.port_ephemeral);
        assert_eq!(s.port, 5);
        assert_eq!(err(&["-p", "-2"]).code, EX_USAGE);
    }

    #[test]
    fn defaults() {
        let (s, w) = run(&[]).unwrap();
        assert_eq!(s.port, 11211);
        assert_eq!(s.listen, vec!["127.0.0.1"]);
        assert_eq!(s.max_conns, 1024);
        assert_eq!(s.engine.memory_limit, 64 << 20);
        assert!(w.is_empty());
    }

    #[test]
    fn short_flag_forms() {
        let (s, _) = run(&["-p11212", "-vv", "-c", "10", "-vt", "3", "-m64"]).unwrap();
        assert_eq!(s.port, 11212);
        assert_eq!(s.verbose, 3);
        assert_eq!(s.max_conns, 10);
        assert_eq!(s.threads, 3);
        assert_eq!(s.engine.memory_limit, 64 << 20);
    }

    #[test]
    fn long_flag_forms() {
        let (s, _) = run(&[
            "--port=1234",
            "--memory-limit",
            "128",
            "--threads=2",
            "--conn-limit=5",
            "--verbose",
            "--enable-shutdown",
            "--disable-cas",
            "--protocol=ascii",
            "--max-item-size=2m",
            "--memory-l=256", // unambiguous prefix
        ])
        .unwrap();
        assert_eq!(s.port, 1234);
        assert_eq!(s.engine.memory_limit, 256 << 20);
        assert_eq!(s.threads, 2);
        assert_eq!(s.max_conns, 5);
        assert_eq!(s.verbose, 1);
        assert!(s.shutdown_enabled);
        assert!(!s.engine.cas_enabled);
        assert_eq!(s.protocol, ProtocolChoice::Ascii);
        assert_eq!(s.engine.item_size_max, 2 << 20);
    }

    /// Exit status and message of memcached 1.6.18 for each `-I` (with the
    /// default `-m 64` unless given), read off /usr/bin/memcached.
    #[test]
    fn item_size_limits_follow_memcached() {
        let too_small = "Item max size cannot be less than 1024 bytes.";
        let half = "Cannot set item size limit higher than 1/2 of memory max.";
        let giga = "Cannot set item size limit higher than a gigabyte.";
        let ok = |args: &[&str], size: usize, chunk: usize| {
            let (s, _) = run(args).unwrap_or_else(|e| panic!("{args:?}: {}", e.message));
            assert_eq!(
                (s.engine.item_size_max, s.engine.slab_chunk_max),
                (size, chunk),
                "{args:?}"
            );
        };
        ok(&[], 1 << 20, 512 << 10);
        ok(&["-I", "512k"], 512 << 10, 512 << 10);
        ok(&["-I", "1536k"], 1536 << 10, 512 << 10);
        ok(&["-I", "2m"], 2 << 20, 512 << 10);
        ok(&["-I", "1.5m"], 1 << 20, 512 << 10);
        ok(&["-I", "+1M"], 1 << 20, 512 << 10);
        ok(&["-I", "32m", "-m", "64"], 32 << 20, 512 << 10);
        ok(&["-I", "1024m", "-m", "2048"], 1 << 30, 512 << 10);
        ok(&["-I", "1k", "-o", "slab_chunk_max=1024"], 1024, 1024);
        ok(&["-I", "100k", "-o", "slab_chunk_max=16"], 100 << 10, 16);
        ok(&["-o", "slab_chunk_max=16384"], 1 << 20, 16384);
        let fails: &[(&[&str], String)] = &[
            (&["-I", "512"], too_small.into()),
            (&["-I", "1g"], too_small.into()),
            (&["-I", "2g"], too_small.into()),
            (&["-I", "1x"], too_small.into()),
            (&["-I", "0x100000"], too_small.into()),
            (&["-I", "-1"], too_small.into()),
            (&["-I", "99999999999k"], too_small.into()),
            (&["-I", "2048m", "-m", "8192"], too_small.into()),
            (&["-I", "512", "-m", "1"], too_small.into()),
            (&["-I", "33m"], half.into()),
            (&["-I", "64m", "-m", "64"], half.into()),
            (&["-I", "99999999999"], half.into()),
            (&["-I", "1m", "-m", "1"], half.into()),
            (&["-I", "1025m", "-m", "4096"], giga.into()),
            (&["-I", "2097151k", "-m", "8192"], giga.into()),
            (
                &["-I", "1k"],
                "slab_chunk_max (bytes: 524288) cannot be larger than -I (item_size_max 1024)"
                    .into(),
            ),
            (
                &["-I", "1kk"],
                "slab_chunk_max (bytes: 524288) cannot be larger than -I (item_size_max 1024)"
                    .into(),
            ),
            (
                &["-I", "600k"],
                "-I (item_size_max: 614400) must be evenly divisible by slab_chunk_max (bytes: 524288)"
                    .into(),
            ),
            (
                &["-o", "slab_chunk_max=1000"],
                "-I (item_size_max: 1048576) must be evenly divisible by slab_chunk_max (bytes: 1000)"
                    .into(),
            ),
            (
                &["-I", "2m", "-o", "slab_chunk_max=2097152"],
                "slab_chunk_max (bytes: 2097152) must divide evenly into 1048576 (slab_page_size)"
                    .into(),
            ),
        ];
        for (args, message) in fails {
            let e = err(args);
            assert_eq!((e.code, &e.message), (EX_USAGE, message), "{args:?}");
        }
    }

    #[test]
    fn memory_suffixes() {
        assert_eq!(run(&["-m", "1g"]).unwrap().0.engine.memory_limit, 1 << 30);
        assert_eq!(
            run(&["-m", "512m"]).unwrap().0.engine.memory_limit,
            512 << 20
        );
        assert_eq!(err(&["-m", "lots"]).code, EX_USAGE);
    }

    #[test]
    fn listen_lists_accumulate() {
        let (s, _) = run(&["-l", "127.0.0.1,127.0.0.2:11300", "-l", "[::1]:11400"]).unwrap();
        assert_eq!(
            s.listen,
            vec!["127.0.0.1", "127.0.0.2:11300", "[::1]:11400"]
        );
    }

    #[test]
    fn memcached_error_messages() {
        let e = err(&["-Q"]);
        assert_eq!(e.code, 1);
        assert!(e
            .message
            .starts_with("cachalot: invalid option -- 'Q'\nIllegal argument"));
        let e = err(&["-p"]);
        assert!(e
            .message
            .starts_with("cachalot: option requires an argument -- 'p'"));
        assert_eq!(err(&["--nope"]).code, 1);
        assert_eq!(
            err(&["-p", "99999"]).message,
            "ERROR: Invalid port number 99999."
        );
        assert_eq!(err(&["-p", "99999"]).code, EX_USAGE);
        assert_eq!(
            err(&["-c", "0"]).message,
            "Maximum connections must be greater than 0"
        );
        assert_eq!(
            err(&["-t", "abc"]).message,
            "Number of threads must be greater than 0"
        );
        assert_eq!(err(&["-f", "1.0"]).message, "Factor must be greater than 1");
        assert_eq!(
            err(&["-n", "0"]).message,
            "Chunk size must be greater than 0"
        );
        assert_eq!(
            err(&["-R", "0"]).message,
            "Number of requests per event must be greater than 0"
        );
        let e = err(&["-B", "foo"]);
        assert_eq!(
            e.message,
            "Invalid value for binding protocol: foo\n -- should be one of auto, binary, or ascii"
        );
        assert_eq!(e.code, EX_USAGE);
        assert_eq!(
            err(&["-I", "500"]).message,
            "Item max size cannot be less than 1024 bytes."
        );
        assert_eq!(
            err(&["-I", "40m"]).message,
            "Cannot set item size limit higher than 1/2 of memory max."
        );
        assert_eq!(
            err(&["-o", "slab_chunk_max"]).message,
            "Missing slab_chunk_max argument"
        );
        assert_eq!(
            err(&["-o", "slab_chunk_max=16k"]).message,
            "could not parse argument to slab_chunk_max"
        );
        assert_eq!(err(&["--help=x"]).code, 1);
    }

    #[test]
    fn rebalance_options_and_slab_automove() {
        use cachalot_engine::RebalancePolicy;
        let (s, _) = run(&[]).unwrap();
        assert_eq!(s.engine.rebalance, RebalancePolicy::default());
        assert_eq!(s.engine.slab_automove, 1);
        for (arg, want) in [
            ("rebalance=off", RebalancePolicy::Off),
            ("rebalance=memcached", RebalancePolicy::Memcached),
            ("rebalance=sas", RebalancePolicy::Sas),
            ("rebalance=mrc", RebalancePolicy::Mrc),
            ("rebalance=cost-per-byte", RebalancePolicy::CostPerByte),
        ] {
            let (s, w) = run(&["-o", arg]).unwrap();
            assert_eq!(s.engine.rebalance, want, "{arg}");
            assert!(w.is_empty());
        }
        // slab_automove=0 alone pauses the default rule...
        let (s, _) = run(&["-o", "slab_automove=0"]).unwrap();
        assert_eq!(s.engine.slab_automove, 0);
        assert_eq!(s.engine.rebalance, RebalancePolicy::default());
        // ...but an explicit rule wins, whatever the order.
        for args in [
            ["-o", "slab_automove=0,rebalance=sas"],
            ["-o", "rebalance=sas,slab_automove=0"],
        ] {
            let (s, _) = run(&args).unwrap();
            assert_eq!(s.engine.rebalance, RebalancePolicy::Sas);
            assert_eq!(s.engine.slab_automove, 1, "{args:?}");
        }
        let (s, _) = run(&["-o", "rebalance=sas", "-o", "slab_automove=2"]).unwrap();
        assert_eq!(s.engine.slab_automove, 2);
        let (s, _) = run(&["-o", "rebalance=off,slab_automove=0"]).unwrap();
        assert_eq!(s.engine.rebalance, RebalancePolicy::Off);
        assert_eq!(s.engine.slab_automove, 0);
        assert_eq!(
            err(&["-o", "rebalance=lru"]).message,
            "Unknown rebalance option (off, memcached, sas, cost-per-byte, mrc)"
        );
        assert_eq!(err(&["-o", "rebalance=lru"]).code, 1);
        assert_eq!(
            err(&["-o", "rebalance"]).message,
            "Missing rebalance argument"
        );
        let (s, _) = run(&["-o", "sas_rule=paper,sas_misses=500"]).unwrap();
        assert_eq!(
            s.engine.rebalance_tuning.sas_rule,
            cachalot_engine::rebalance::SasRule::Paper
        );
        assert_eq!(s.engine.rebalance_tuning.sas_misses, 500);
        assert_eq!(
            err(&["-o", "sas_rule=best"]).message,
            "Unknown sas_rule option (marginal, paper)"
        );
        assert_eq!(
            err(&["-o", "sas_misses=0"]).message,
            "sas_misses must be at least 1"
        );
        assert_eq!(
            err(&["-o", "sas_misses=x"]).message,
            "Invalid numeric argument for sas_misses"
        );
    }

    #[test]
    fn lock_stripes_option() {
        let (s, _) = run(&[]).unwrap();
        assert_eq!(s.engine.lock_stripes, 16);
        let (s, _) = run(&["-o", "lock_stripes=100"]).unwrap();
        assert_eq!(s.engine.lock_stripes, 128, "rounded up to a power of two");
        assert_eq!(
            err(&["-o", "lock_stripes=0"]).message,
            "lock_stripes must be between 1 and 4096"
        );
    }

    #[test]
    fn in_place_sets_option() {
        let (s, _) = run(&[]).unwrap();
        assert!(s.engine.in_place_sets && s.engine.lockfree_inserts);
        let (s, _) = run(&["-o", "lockfree_inserts=0"]).unwrap();
        assert!(!s.engine.lockfree_inserts);
        assert!(!s.engine.repartition);
        let (s, _) = run(&["-o", "repartition=1"]).unwrap();
        assert!(s.engine.repartition);
        // The Z-zone is on by default; `-o zzone=0` turns it off.
        assert!(s.engine.zzone);
        let (s, _) = run(&["-o", "zzone=0"]).unwrap();
        assert!(!s.engine.zzone);
        let (s, _) = run(&[
            "-o",
            "zzone=1,zzone_codec=lz4,zzone_block=4096,zzone_target=0,zzone_deltas=2",
        ])
        .unwrap();
        assert!(s.engine.zzone);
        assert_eq!(s.engine.zzone_codec, Codec::Lz4);
        assert_eq!(s.engine.zzone_block, 4096);
        assert_eq!(s.engine.zzone_deltas, 2);
        assert_eq!(s.engine.zzone_target, 0);
        let (s, _) = run(&["-o", "zzone=on,zzone=off"]).unwrap();
        assert!(!s.engine.zzone);
        // Not in front of a flash tier unless asked for, in either order.
        let (s, _) = run(&["-o", "ext_path=/tmp/x:1g"]).unwrap();
        assert!(!s.engine.zzone);
        let (s, _) = run(&["-o", "zzone=1", "-o", "ext_path=/tmp/x:1g"]).unwrap();
        assert!(s.engine.zzone);
        assert!(!s.zzone_demote_all);
        let (s, _) = run(&["-o", "zzone=1,zzone_demote_all=1"]).unwrap();
        assert!(s.zzone_demote_all && s.engine.zzone);
        assert!(run(&["-o", "zzone=0,zzone_demote_all=1"]).is_err());
        for bad in [
            "zzone_codec=gzip",
            "zzone_block=100",
            "zzone_target=101",
            "zzone_deltas=16",
        ] {
            assert!(run(&["-o", bad]).is_err(), "{bad}");
        }
        let (s, _) = run(&["-o", "in_place_sets=0"]).unwrap();
        assert!(!s.engine.in_place_sets);
        let (s, _) = run(&["-o", "in_place_sets=1", "-o", "no_in_place_sets"]).unwrap();
        assert!(!s.engine.in_place_sets);
        assert_eq!(
            err(&["-o", "in_place_sets=2"]).message,
            "in_place_sets must be 0 or 1"
        );
    }

    #[test]
    fn hugepages_option() {
        let (s, _) = run(&[]).unwrap();
        assert!(
            s.engine.hugepages,
            "on by default (docs/benchmarks-history.md)"
        );
        let (s, _) = run(&["-o", "hugepages=0"]).unwrap();
        assert!(!s.engine.hugepages);
        let (s, _) = run(&["-o", "no_hugepages,hugepages"]).unwrap();
        assert!(s.engine.hugepages);
        assert_eq!(
            err(&["-o", "hugepages=2"]).message,
            "hugepages must be 0 or 1"
        );
    }

    #[test]
    fn eviction_and_learned_cost_options() {
        use cachalot_engine::EvictionPolicy;
        let (s, _) = run(&[]).unwrap();
        assert_eq!(s.engine.eviction, EvictionPolicy::Lru);
        assert!(!s.engine.learn_costs);
        let (s, w) = run(&["-o", "eviction=gdwheel,learn_costs=1"]).unwrap();
        assert_eq!(s.engine.eviction, EvictionPolicy::GdWheel);
        assert!(s.engine.learn_costs);
        assert!(w.is_empty());
        let (s, _) = run(&["-o", "eviction=gdwheel,eviction=lru,learn_costs"]).unwrap();
        assert_eq!(s.engine.eviction, EvictionPolicy::Lru);
        assert!(s.engine.learn_costs);
        let (s, _) = run(&["-o", "eviction=sieve"]).unwrap();
        assert_eq!(s.engine.eviction, EvictionPolicy::Sieve);
        let (s, _) = run(&["-o", "learn_costs,no_learn_costs"]).unwrap();
        assert!(!s.engine.learn_costs);
        let (s, _) = run(&["-o", "learn_costs=0"]).unwrap();
        assert!(!s.engine.learn_costs);
        assert_eq!(
            err(&["-o", "eviction=lfu"]).message,
            "Unknown eviction option (lru, gdwheel, gdwheel-lazy, sieve)"
        );
        assert_eq!(err(&["-o", "eviction=lfu"]).code, 1);
        assert_eq!(
            err(&["-o", "eviction"]).message,
            "Missing eviction argument"
        );
        assert_eq!(
            err(&["-o", "learn_costs=2"]).message,
            "learn_costs must be 0 or 1"
        );
    }

    #[test]
    fn trace_capture_options() {
        use crate::capture::{Format, Keys, DEFAULT_MAX_BYTES};
        let (s, _) = run(&[]).unwrap();
        assert!(s.trace.is_none());
        let (s, _) = run(&["-o", "trace_file=/tmp/t.oracleGeneral"]).unwrap();
        let t = s.trace.expect("capture on");
        assert_eq!(
            (t.path.to_str(), t.sample, t.max_bytes, t.format, t.keys),
            (
                Some("/tmp/t.oracleGeneral"),
                1.0,
                DEFAULT_MAX_BYTES,
                Format::Oracle,
                Keys::Hashed
            )
        );
        // In any order; the format follows the name unless given.
        let (s, _) = run(&[
            "-o",
            "trace_sample=0.1,trace_max=64m,trace_keys=plain,trace_file=t.csv",
        ])
        .unwrap();
        let t = s.trace.expect("capture on");
        assert_eq!(
            (t.sample, t.max_bytes, t.format, t.keys),
            (0.1, 64 << 20, Format::Csv, Keys::Plain)
        );
        let (s, _) = run(&["-o", "trace_file=t.csv,trace_format=oracle"]).unwrap();
        assert_eq!(s.trace.expect("on").format, Format::Oracle);
        for (args, message) in [
            ("trace_file", "Missing trace_file argument"),
            ("trace_file=", "Missing trace_file argument"),
            ("trace_sample=0.5", "trace_sample needs trace_file"),
            (
                "trace_file=t,trace_sample=0",
                "trace_sample must be a number above 0 and at most 1",
            ),
            (
                "trace_file=t,trace_sample=1.5",
                "trace_sample must be a number above 0 and at most 1",
            ),
            (
                "trace_file=t,trace_sample=x",
                "trace_sample must be a number above 0 and at most 1",
            ),
            (
                "trace_file=t,trace_max=10",
                "Invalid trace_max: 10 (bytes, k/m/g/t suffixes, at least 24)",
            ),
            (
                "trace_file=t,trace_max=1x",
                "Invalid trace_max: 1x (bytes, k/m/g/t suffixes, at least 24)",
            ),
            (
                "trace_file=t,trace_format=json",
                "trace_format must be oracle or csv",
            ),
            (
                "trace_file=t,trace_keys=raw",
                "trace_keys must be hashed or plain",
            ),
            (
                "trace_file=t,trace_keys=plain",
                "trace_keys=plain needs trace_format=csv (oracleGeneral ids are numbers)",
            ),
        ] {
            let e = err(&["-o", args]);
            assert_eq!((e.message.as_str(), e.code), (message, 1), "{args}");
        }
    }

    /// The observers (hot keys, the live curve) are on by default where
    /// they take at most 1% of -m, and wherever they are asked for.
    #[test]
    fn observers_default_by_memory() {
        let (s, _) = run(&["-m", "64"]).unwrap();
        assert!(s.hotkeys && s.mrc);
        let (s, _) = run(&["-m", "2", "-I", "512k"]).unwrap();
        assert!(!s.hotkeys && !s.mrc);
        let (s, _) = run(&["-m", "2", "-I", "512k", "-o", "hotkeys=1,mrc=1"]).unwrap();
        assert!(s.hotkeys && s.mrc);
        // The curve is on from the smallest -m where it takes at most 1.5%
        // of it; the prefixes' curves take more (-D).
        for parts in [false, true] {
            let fits = |mb: usize| {
                crate::mrc::Curve::memory_bytes(mb << 20, parts) * 2 <= 3 * ((mb << 20) / 100)
            };
            let least = (1..64).find(|&mb| fits(mb)).expect("a size it fits");
            assert!(least > 2, "the curve fits in {least} MB");
            for (mb, on) in [(least - 1, false), (least, true)] {
                let m = mb.to_string();
                let mut args = vec!["-m", m.as_str()];
                if parts {
                    args.extend(["-D", ":"]);
                }
                let (s, _) = run(&args).unwrap();
                assert_eq!(s.mrc, on, "-m {mb}, prefixes {parts}");
            }
        }
        let (s, _) = run(&["-m", "64", "-o", "mrc=0"]).unwrap();
        assert!(s.hotkeys && !s.mrc);
    }

    #[test]
    fn extended_options() {
        let (s, w) = run(&[
            "-o",
            "slab_reassign,slab_automove=2,idle_timeout=5,hashpower=20",
        ])
        .unwrap();
        assert!(s.engine.slab_reassign);
        assert_eq!(s.engine.slab_automove, 2);
        assert_eq!(s.idle_timeout, 5);
        assert_eq!(s.hashpower_init, 20);
        assert!(w.is_empty());
        let (s, _) = run(&["-o", "no_lru_crawler,modern,no_slab_reassign,slab_automove"]).unwrap();
        assert!(!s.lru_crawler);
        assert!(!s.engine.slab_reassign);
        assert_eq!(s.engine.slab_automove, 1);
        assert_eq!(
            err(&["-o", "foo=bar"]).message,
            "Illegal suboption \"foo=bar\""
        );
        assert_eq!(err(&["-o", "foo=bar"]).code, 1);
        assert_eq!(
            err(&["-o", "slab_automove=5"]).message,
            "slab_automove must be between 0 and 2"
        );
        assert_eq!(
            err(&["-o", "hashpower=70"]).message,
            "Initial hashtable multiplier of 70 is too high\n\
             Choose a value based on \"STAT hash_power_level\" from a running instance"
        );
        assert_eq!(
            err(&["-o", "idle_timeout"]).message,
            "Missing numeric argument for idle_timeout"
        );
        assert_eq!(
            err(&["-o", "tail_repair_time=5"]).message,
            "Cannot set tail_repair_time to less than 10 seconds"
        );
        let (s, w) = run(&["-o", "ext_path=/tmp/x:1g,ext_item_size=64,ext_threads=4"]).unwrap();
        assert!(w.is_empty());
        let f = s.engine.flash.expect("flash on");
        assert_eq!(
            (f.path.to_str(), f.size, f.item_min),
            (Some("/tmp/x"), 1 << 30, 64)
        );
        let (s, _) = run(&["--flash-path", "/tmp/y", "--flash-size=64"]).unwrap();
        let f = s.engine.flash.expect("flash on");
        assert_eq!((f.path.to_str(), f.size), (Some("/tmp/y"), 64 << 20));
        let (s, _) = run(&[
            "--flash-path=/tmp/z",
            "--flash-size=1g",
            "-o",
            "flash_write_rate=2dwpd",
        ])
        .unwrap();
        let f = s.engine.flash.expect("flash on");
        assert_eq!(f.effective_write_rate(), (2u64 << 30) / 86_400);
        let (s, _) = run(&[
            "--flash-path=/tmp/z",
            "--flash-size=1g",
            "-o",
            "flash_write_rate=10m",
        ])
        .unwrap();
        assert_eq!(
            s.engine.flash.expect("flash on").effective_write_rate(),
            10 << 20
        );
        assert_eq!(err(&["-o", "flash_write_rate=xdwpd"]).code, EXIT_FAILURE);
        assert_eq!(err(&["--flash-path", "/tmp/y"]).code, EX_USAGE);
        assert_eq!(
            err(&["--flash-path", "/tmp/y", "--flash-size", "0"]).code,
            EX_USAGE
        );
        assert_eq!(err(&["-o", "ext_path=/tmp/x"]).code, EXIT_FAILURE);
        assert_eq!(err(&["-o", "ext_bogus=1"]).code, EXIT_FAILURE);
    }

    #[test]
    fn udp_and_extra_words_warn() {
        let (s, w) = run(&["-U", "11211", "stray"]).unwrap();
        assert_eq!(s.udp_port, 0);
        assert_eq!(w.len(), 2);
        assert!(w.iter().any(|m| m.contains("UDP is not supported")));
        let (_, w) = run(&["-U", "0"]).unwrap();
        assert!(w.is_empty());
    }

    #[test]
    fn help_and_version_stop_parsing() {
        let args: Vec<String> = ["-h", "-Q"].iter().map(|s| s.to_string()).collect();
        assert!(matches!(parse(&args).unwrap().action, Action::Help));
        let args: Vec<String> = ["-V"].iter().map(|s| s.to_string()).collect();
        assert!(matches!(parse(&args).unwrap().action, Action::Version));
        // An error before -h wins, as with getopt's sequential processing.
        let args: Vec<String> = ["-c", "0", "-h"].iter().map(|s| s.to_string()).collect();
        assert!(parse(&args).is_err());
    }

    #[test]
    fn unix_socket_and_mask() {
        let (s, _) = run(&["-s", "/tmp/c.sock", "-a", "755"]).unwrap();
        assert_eq!(s.unix_socket, Some(PathBuf::from("/tmp/c.sock")));
        assert_eq!(s.unix_mask, 0o755);
        assert_eq!(err(&["-a", "999"]).code, EX_USAGE);
    }
}

//! `--config-file=<file>`: command-line options read from a file, in the
//! format of Debian's /etc/memcached.conf.
//!
//! Each line holds one option exactly as it would be typed: `-m 64`,
//! `--memory-limit=64`, `-vv`, `-o ssl_chain_cert=/etc/ssl/a b.pem`. The
//! first word is the flag; the rest of the line, as written (no quoting, so
//! it may contain spaces), is its value. Blank lines are skipped and `#`
//! starts a comment at the beginning of a line or after white space.
//!
//! The file's options take the place of the `--config-file` word, so options
//! after it win, as in memcached ("last one wins"): `cachalot
//! --config-file=/etc/cachalot.conf -p 11311` runs on 11311 whatever the file
//! says. The option must be spelled in full: it is not in memcached's table,
//! so memcached's long-name prefixes (`--con` for `--conn-limit`) keep
//! their meaning.

use std::path::Path;

use super::getopt::{Arg, CliError, OPTIONS};
use crate::net::exit::EX_USAGE;

/// The long option that names a config file.
pub const OPTION: &str = "--config-file";

/// Files may name further files, up to this depth (a loop ends here).
const MAX_DEPTH: usize = 8;

/// `args` with each `--config-file=<file>` (or `--config-file <file>`)
/// replaced by the options in that file.
pub fn expand(args: &[String]) -> Result<Vec<String>, CliError> {
    expand_at(args, 0)
}

fn expand_at(args: &[String], depth: usize) -> Result<Vec<String>, CliError> {
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            // getopt's end of options: the rest are plain words.
            out.extend(args[i - 1..].iter().cloned());
            break;
        }
        let path = if arg == OPTION {
            let Some(path) = args.get(i) else {
                return Err(usage(format!(
                    "cachalot: option '{OPTION}' requires an argument"
                )));
            };
            i += 1;
            path.as_str()
        } else if let Some(path) = arg.strip_prefix(OPTION).and_then(|r| r.strip_prefix('=')) {
            path
        } else {
            out.push(arg.clone());
            if takes_next_word(arg) {
                // The next word is this option's value (`-P --config-file`
                // names a pid file), whatever it looks like.
                if let Some(value) = args.get(i) {
                    out.push(value.clone());
                    i += 1;
                }
            }
            continue;
        };
        if depth >= MAX_DEPTH {
            return Err(usage(format!(
                "cachalot: {path}: config files nested more than {MAX_DEPTH} deep (a loop?)"
            )));
        }
        let file_args = read(Path::new(path))?;
        out.extend(expand_at(&file_args, depth + 1)?);
    }
    Ok(out)
}

/// Whether `arg` is an option whose value is the following word, as getopt
/// reads it (`-p`, `-vp`, `--port`, `--po`; not `-p11211` or `--port=1`).
fn takes_next_word(arg: &str) -> bool {
    if let Some(long) = arg.strip_prefix("--") {
        if long.contains('=') || long.is_empty() {
            return false;
        }
        let exact = OPTIONS.iter().find(|o| !o.1.is_empty() && o.1 == long);
        let mut prefixed = OPTIONS
            .iter()
            .filter(|o| !o.1.is_empty() && o.1.starts_with(long));
        let opt = exact.or_else(|| match (prefixed.next(), prefixed.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        });
        return opt.is_some_and(|o| o.2 == Arg::Required);
    }
    let Some(shorts) = arg.strip_prefix('-') else {
        return false;
    };
    for (pos, c) in shorts.char_indices() {
        match OPTIONS.iter().find(|o| o.0 == c) {
            Some(o) if o.2 == Arg::Required => return pos + c.len_utf8() == shorts.len(),
            Some(_) => {}
            None => return false,
        }
    }
    false
}

/// The options in a config file, as command-line words.
pub fn read(path: &Path) -> Result<Vec<String>, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        usage(format!(
            "cachalot: cannot read config file {}: {e}",
            path.display()
        ))
    })?;
    parse(&text, path)
}

/// The options in a config file's text (`path` is for messages).
pub fn parse(text: &str, path: &Path) -> Result<Vec<String>, CliError> {
    let mut words = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = strip_comment(raw).trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("cachalot: {}:{}", path.display(), n + 1);
        if !line.starts_with('-') || line == "-" {
            let hint = if line.split_whitespace().next() == Some("logfile") {
                " (Debian's memcached wrapper reads logfile; cachalot logs to \
                 stderr, which systemd keeps in the journal: delete the line)"
            } else {
                ""
            };
            return Err(usage(format!(
                "{}: \"{line}\" is not an option: each line holds one flag, \
                 such as -m 64 or --memory-limit=64{hint}",
                at()
            )));
        }
        if line == "--" {
            return Err(usage(format!(
                "{}: \"--\" would end option parsing for the rest of the command line",
                at()
            )));
        }
        match line.split_once(char::is_whitespace) {
            Some((flag, value)) => {
                words.push(flag.to_string());
                words.push(value.trim_start().to_string());
            }
            None => words.push(line.to_string()),
        }
    }
    Ok(words)
}

/// The line without its comment: from a `#` that starts the line or follows
/// white space.
fn strip_comment(line: &str) -> &str {
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        if c == '#' && prev_space {
            return &line[..i];
        }
        prev_space = c.is_whitespace();
    }
    line
}

fn usage(message: String) -> CliError {
    CliError::new(EX_USAGE, message)
}

#[cfg(test)]
mod tests {
    use super::super::{parse as parse_cli, Action, Parsed, EXIT_FAILURE};
    use super::*;
    use std::path::PathBuf;

    /// A config file in the temp dir, removed on drop.
    struct TempConf(PathBuf);

    impl TempConf {
        fn new(text: &str) -> TempConf {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static N: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "cachalot-conf-test-{}-{}.conf",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::write(&path, text).unwrap();
            TempConf(path)
        }

        fn arg(&self) -> String {
            format!("{OPTION}={}", self.0.display())
        }
    }

    impl Drop for TempConf {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    /// The parsed settings as text (Settings is Debug, not PartialEq).
    fn settings(args: &[String]) -> String {
        match parse_cli(args) {
            Ok(Parsed {
                action: Action::Run(s),
                warnings,
            }) => format!("{s:#?}\n{warnings:?}"),
            Ok(other) => panic!("{args:?}: expected Run, got {other:?}"),
            Err(e) => panic!("{args:?}: {}", e.message),
        }
    }

    fn error(args: &[String]) -> CliError {
        match parse_cli(args) {
            Err(e) => e,
            Ok(p) => panic!("{args:?} should fail, got {p:?}"),
        }
    }

    /// The packaged /etc/cachalot.conf's settings, in both forms.
    #[test]
    fn file_and_command_line_give_the_same_settings() {
        let conf = TempConf::new(
            "# cachalot default config file\n\
             \n\
             -m 64\n\
             -p 11211\n\
             -u cachalot\n\
             -l 127.0.0.1\n\
             -c 1024\n\
             # -Z\n\
             # -o ssl_chain_cert=/etc/cachalot/cert.pem\n",
        );
        let cli = strings(&[
            "-m",
            "64",
            "-p",
            "11211",
            "-u",
            "cachalot",
            "-l",
            "127.0.0.1",
            "-c",
            "1024",
        ]);
        assert_eq!(settings(&[conf.arg()]), settings(&cli));
        // Not the defaults: the comparison sees what the file set.
        assert!(settings(&[conf.arg()]).contains("\"cachalot\""));
    }

    #[test]
    fn representative_flags_short_long_and_extended() {
        let conf = TempConf::new(
            "  -m 128   # megabytes\n\
             --port=11311\n\
             --conn-limit 2048\n\
             -t2\n\
             -vv\n\
             -l 127.0.0.1\n\
             -l [::1]:11312\n\
             --max-item-size=2m\n\
             -B ascii\n\
             -A\n\
             -C\n\
             \t\n\
             -P /tmp/cachalot test.pid\n\
             -o slab_reassign,slab_automove=2,idle_timeout=5,hashpower=20\n\
             -o ext_path=/var/lib/cachalot/flash:1g,ext_item_size=64\n\
             -o metrics_listen=127.0.0.1:9150\n\
             -Z\n\
             -o ssl_chain_cert=/etc/ssl/cachalot chain.pem,ssl_key=/etc/ssl/key.pem\n\
             ##\n",
        );
        let cli = strings(&[
            "-m",
            "128",
            "--port=11311",
            "--conn-limit",
            "2048",
            "-t2",
            "-vv",
            "-l",
            "127.0.0.1",
            "-l",
            "[::1]:11312",
            "--max-item-size=2m",
            "-B",
            "ascii",
            "-A",
            "-C",
            "-P",
            "/tmp/cachalot test.pid",
            "-o",
            "slab_reassign,slab_automove=2,idle_timeout=5,hashpower=20",
            "-o",
            "ext_path=/var/lib/cachalot/flash:1g,ext_item_size=64",
            "-o",
            "metrics_listen=127.0.0.1:9150",
            "-Z",
            "-o",
            "ssl_chain_cert=/etc/ssl/cachalot chain.pem,ssl_key=/etc/ssl/key.pem",
        ]);
        let from_file = settings(&[conf.arg()]);
        assert_eq!(from_file, settings(&cli));
        assert_ne!(from_file, settings(&[]));
        for expected in [
            "port: 11311",
            "max_conns: 2048",
            "verbose: 2",
            "/tmp/cachalot test.pid",
            "/var/lib/cachalot/flash",
            "/etc/ssl/cachalot chain.pem",
        ] {
            assert!(from_file.contains(expected), "{expected} in {from_file}");
        }
        // The separate-word form of the option, too.
        assert_eq!(
            settings(&strings(&[OPTION, conf.0.to_str().unwrap()])),
            from_file
        );
    }

    #[test]
    fn later_options_win_and_file_options_sit_where_the_option_is() {
        let conf = TempConf::new("-m 64\n-p 11211\n-l 127.0.0.1\n");
        let after = settings(&[
            conf.arg(),
            "-p".into(),
            "11400".into(),
            "-m".into(),
            "32".into(),
        ]);
        assert_eq!(
            after,
            settings(&strings(&["-l", "127.0.0.1", "-p", "11400", "-m", "32"]))
        );
        let before = settings(&["-p".into(), "11400".into(), conf.arg()]);
        assert_eq!(
            before,
            settings(&strings(&["-p", "11211", "-l", "127.0.0.1"]))
        );
        // -l accumulates, as on the command line.
        let both = settings(&[conf.arg(), "-l".into(), "::1".into()]);
        assert_eq!(
            both,
            settings(&strings(&["-p", "11211", "-l", "127.0.0.1", "-l", "::1"]))
        );
    }

    #[test]
    fn nested_files_and_loops() {
        let inner = TempConf::new("-m 99\n");
        let outer = TempConf::new(&format!("-p 11500\n{}\n", inner.arg()));
        assert_eq!(
            settings(&[outer.arg()]),
            settings(&strings(&["-p", "11500", "-m", "99"]))
        );
        let looping = TempConf::new("");
        std::fs::write(&looping.0, format!("-m 1\n{}\n", looping.arg())).unwrap();
        let e = error(&[looping.arg()]);
        assert_eq!(e.code, EX_USAGE);
        assert!(e.message.contains("nested"), "{}", e.message);
    }

    #[test]
    fn values_of_other_options_are_not_config_files() {
        let args = strings(&["-P", OPTION, "--pidfile", "--config-file=x", "--", OPTION]);
        assert_eq!(expand(&args).unwrap(), args);
        let args = strings(&["-vP", "--config-file=x", "--pid", "--config-file=y"]);
        assert_eq!(expand(&args).unwrap(), args);
        // memcached's long-name prefixes keep their meaning.
        assert!(settings(&strings(&["--con=5"])).contains("max_conns: 5"));
    }

    #[test]
    fn comments_blank_lines_and_values() {
        let words = parse(
            "# comment\n\n   \n-m 64 # trailing\n-o ssl_ciphers=A#B\n\
             -l   127.0.0.1 \r\n--disable-cas\n  #-p 1\n",
            Path::new("x.conf"),
        )
        .unwrap();
        assert_eq!(
            words,
            strings(&[
                "-m",
                "64",
                "-o",
                "ssl_ciphers=A#B",
                "-l",
                "127.0.0.1",
                "--disable-cas",
            ])
        );
    }

    /// Debian's /etc/memcached.conf (memcached 1.6.18, bookworm), less its
    /// `logfile` line: the rest means what memcached's wrapper passes.
    #[test]
    fn debian_memcached_conf_carries_over() {
        let debian = "# memcached default config file\n\
            # 2003 - Jay Bonci <jaybonci@debian.org>\n\
            \n\
            # Run memcached as a daemon. This command is implied, and is not needed for the\n\
            -d\n\
            \n\
            # Log memcached's output to /var/log/memcached\n\
            logfile /var/log/memcached.log\n\
            \n\
            # Be verbose\n\
            # -v\n\
            -m 64\n\
            \n\
            # Default connection port is 11211\n\
            -p 11211\n\
            -u memcache\n\
            -l 127.0.0.1\n\
            # -c 1024\n\
            # -k\n\
            -P /var/run/memcached/memcached.pid\n";
        let conf = TempConf::new(debian);
        let e = error(&[conf.arg()]);
        assert!(
            e.message.contains(":8:") && e.message.contains("logfile"),
            "{}",
            e.message
        );
        let without_logfile: String = debian
            .lines()
            .filter(|l| !l.starts_with("logfile"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(&conf.0, without_logfile).unwrap();
        let wrapper_args = strings(&[
            "-d",
            "-m",
            "64",
            "-p",
            "11211",
            "-u",
            "memcache",
            "-l",
            "127.0.0.1",
            "-P",
            "/var/run/memcached/memcached.pid",
        ]);
        assert_eq!(settings(&[conf.arg()]), settings(&wrapper_args));
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let missing = std::env::temp_dir().join("cachalot-no-such-dir/cachalot.conf");
        let e = error(&[format!("{OPTION}={}", missing.display())]);
        assert_eq!(e.code, EX_USAGE);
        assert!(
            e.message.contains("cannot read config file") && e.message.contains("cachalot.conf"),
            "{}",
            e.message
        );

        let conf = TempConf::new("-m 64\n\nport 11211\n");
        let e = error(&[conf.arg()]);
        assert_eq!(e.code, EX_USAGE);
        assert!(
            e.message.contains(&format!("{}:3:", conf.0.display()))
                && e.message.contains("\"port 11211\" is not an option"),
            "{}",
            e.message
        );

        // Debian's memcached.conf has a logfile line: say what to do.
        let conf = TempConf::new("-m 64\nlogfile /var/log/memcached.log\n");
        let e = error(&[conf.arg()]);
        assert_eq!(e.code, EX_USAGE);
        assert!(
            e.message.contains(":2:") && e.message.contains("journal"),
            "{}",
            e.message
        );

        let conf = TempConf::new("--\n-m 64\n");
        assert_eq!(error(&[conf.arg()]).code, EX_USAGE);

        let e = error(&strings(&[OPTION]));
        assert_eq!(e.code, EX_USAGE);
        assert!(e.message.contains("requires an argument"), "{}", e.message);

        // A bad value in the file fails as it would on the command line.
        let conf = TempConf::new("-c 0\n");
        let from_file = error(&[conf.arg()]);
        assert_eq!(from_file, error(&strings(&["-c", "0"])));
        assert_eq!(from_file.code, EXIT_FAILURE);
    }
}

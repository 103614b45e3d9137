//! The Debian package: `cargo deb --no-build` packs the already built
//! binary; the test reads the .deb's contents and control files, installs it
//! with `dpkg -i`, verifies the installed unit with `systemd-analyze verify`,
//! starts the server as systemd would (the unit's `ExecStart`, as its
//! `User=`, in its `StateDirectory=`) with flags appended: `-p <free port>`,
//! which wins over the conffile's `-p 11211`, and the conffile's flash tier
//! example. It talks to it, stops it with SIGTERM and purges the package,
//! leaving the machine as it was (a guard purges on failure too).
//!
//! Needs root, dpkg, systemd-analyze, setpriv and cargo-deb (all installed
//! by scripts/install-deps.sh on Debian): without them it fails, it does
//! not skip. It also fails if a cachalot package, user or /var/lib/cachalot
//! is already there, rather than touch them.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{cachalot_bin, free_port, read_until, temp_path};

const UNIT: &str = "/usr/lib/systemd/system/cachalot.service";
const CONF: &str = "/etc/cachalot.conf";
const BIN: &str = "/usr/bin/cachalot";
/// The unit's StateDirectory=, for the flash tier.
const STATE: &str = "/var/lib/cachalot";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(out.status.success(), "{cmd:?} failed: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn user_exists(name: &str) -> bool {
    run(Command::new("getent").args(["passwd", name]))
        .status
        .success()
}

fn package_installed() -> bool {
    let out = run(Command::new("dpkg-query").args(["-W", "-f=${Status}", "cachalot"]));
    out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("not-installed")
}

/// cargo-deb: on PATH, or where `cargo install` puts it.
fn cargo_deb() -> PathBuf {
    let home_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .map(|h| h.join("bin/cargo-deb"));
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("cargo-deb"))
            .find(|p| p.exists())
    });
    on_path
        .or(home_bin.filter(|p| p.exists()))
        .expect("cargo-deb not found: run scripts/install-deps.sh (cargo install cargo-deb)")
}

/// What the test installed: purged (and the server killed) when dropped,
/// so a failed assertion leaves the machine as it was.
struct Installed {
    server: Option<Child>,
    purged: bool,
}

impl Installed {
    fn purge(&mut self) -> Output {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.purged = true;
        run(Command::new("dpkg").args(["--purge", "cachalot"]))
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        if !self.purged {
            let out = self.purge();
            if !out.status.success() {
                eprintln!("dpkg --purge cachalot failed: {}", text(&out));
            }
        }
    }
}

/// One request on a fresh connection, read until `end`.
fn ask(port: u16, request: &[u8], end: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the packaged server");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(request).unwrap();
    String::from_utf8_lossy(&read_until(&mut s, end)).into_owned()
}

/// The value of a unit's `key=value` line (the last one wins, as in systemd;
/// the keys asked for are [Service]'s only).
fn unit_value(unit: &str, key: &str) -> Option<String> {
    unit.lines()
        .rev()
        .filter_map(|l| l.trim().split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().to_string())
}

#[test]
fn deb_installs_runs_as_its_service_and_purges() {
    let started = Instant::now();
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "the package test installs a .deb with dpkg: run the suite as root"
    );
    for tool in [
        "dpkg",
        "dpkg-deb",
        "dpkg-query",
        "systemd-analyze",
        "setpriv",
    ] {
        let found = run(Command::new("sh").args(["-c", &format!("command -v {tool}")]));
        assert!(
            found.status.success(),
            "{tool} not found: the package test needs a Debian machine with \
             dpkg, systemd and util-linux (scripts/install-deps.sh)"
        );
    }
    assert!(
        !package_installed()
            && !Path::new(BIN).exists()
            && !Path::new(STATE).exists()
            && !user_exists("cachalot"),
        "a cachalot package, {BIN}, {STATE} or user cachalot is already on this machine; \
         the package test installs and purges its own: remove them first \
         (dpkg --purge cachalot)"
    );

    // 1. Build the .deb from the binary the suite built (no cargo build).
    let bin = cachalot_bin();
    assert!(
        bin.exists(),
        "{} not found: build it first (cargo build --release)",
        bin.display()
    );
    let profile_dir = bin.parent().expect("binary in a profile directory");
    let target_dir = profile_dir
        .parent()
        .expect("profile directory in a target directory");
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev".to_string(),
        Some(other) => other.to_string(),
        None => "release".to_string(),
    };
    let out_dir = temp_path("deb");
    std::fs::create_dir_all(&out_dir).unwrap();
    let built = Instant::now();
    ok(Command::new(cargo_deb())
        .current_dir(repo())
        .env("CARGO_TARGET_DIR", target_dir)
        .args([
            "-p",
            "cachalot",
            "--no-build",
            "--fast",
            "--offline",
            "--profile",
        ])
        .arg(&profile)
        .arg("-o")
        .arg(&out_dir));
    let deb_time = built.elapsed();
    let deb = std::fs::read_dir(&out_dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .expect("cargo deb wrote a .deb");

    // 2. Its contents and control files.
    let listing = ok(Command::new("dpkg-deb").arg("-c").arg(&deb));
    for path in [
        "./usr/bin/cachalot",
        "./etc/cachalot.conf",
        "./usr/lib/systemd/system/cachalot.service",
        "./usr/share/doc/cachalot/README.md",
        "./usr/share/doc/cachalot/protocol.md",
    ] {
        assert!(
            listing.lines().any(|l| l.ends_with(path)),
            "{path} not in the package:\n{listing}"
        );
    }
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("-rwxr-xr-x") && l.ends_with("./usr/bin/cachalot")),
        "the binary is not executable:\n{listing}"
    );
    let field = |name: &str| {
        ok(Command::new("dpkg-deb").arg("-f").arg(&deb).arg(name))
            .trim()
            .to_string()
    };
    assert_eq!(field("Package"), "cachalot");
    assert_eq!(field("Section"), "net");
    assert_eq!(field("Priority"), "optional");
    let depends = field("Depends");
    assert!(
        depends.contains("adduser") && depends.contains("libc6"),
        "Depends: {depends}"
    );
    let control = temp_path("control");
    ok(Command::new("dpkg-deb").arg("-e").arg(&deb).arg(&control));
    let read = |name: &str| std::fs::read_to_string(control.join(name)).unwrap_or_default();
    assert_eq!(read("conffiles").trim(), CONF, "conffiles");
    assert!(read("postinst").contains("deb-systemd-helper enable cachalot.service"));
    assert!(read("postinst").contains("adduser"));
    assert!(read("postrm").contains("deb-systemd-helper purge cachalot.service"));
    let _ = std::fs::remove_dir_all(&control);

    // 3. Install it (from here on the guard purges on any failure).
    let mut installed = Installed {
        server: None,
        purged: false,
    };
    ok(Command::new("dpkg").arg("-i").arg(&deb));
    let _ = std::fs::remove_dir_all(&out_dir);
    assert!(package_installed(), "dpkg -i did not install cachalot");
    assert!(user_exists("cachalot"), "postinst made no cachalot user");
    assert_eq!(
        std::fs::read_to_string(CONF).unwrap(),
        std::fs::read_to_string(repo().join("packaging/debian/cachalot.conf")).unwrap()
    );
    assert!(
        Path::new("/etc/systemd/system/multi-user.target.wants/cachalot.service").exists(),
        "postinst did not enable the unit"
    );

    // 4. The installed unit passes systemd's checks (ExecStart exists now).
    let verify = run(Command::new("systemd-analyze").args(["verify", UNIT]));
    let complaints = String::from_utf8_lossy(&verify.stderr).into_owned()
        + &String::from_utf8_lossy(&verify.stdout);
    assert!(
        verify.status.success() && !complaints.contains("cachalot"),
        "systemd-analyze verify {UNIT}: {}",
        text(&verify)
    );

    // 5. Start it as systemd would: ExecStart as User=/Group=, in the
    //    StateDirectory= systemd makes for that user, with flags appended:
    //    a free port, and the conffile's flash example in that directory.
    let unit = std::fs::read_to_string(UNIT).unwrap();
    let exec = unit_value(&unit, "ExecStart").expect("ExecStart in the unit");
    assert!(
        !exec.contains(['"', '\'', '$', '%']),
        "ExecStart needs no quoting: {exec}"
    );
    let argv: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(argv[0], BIN);
    assert_eq!(unit_value(&unit, "Type").as_deref(), Some("simple"));
    let user = unit_value(&unit, "User").expect("User= in the unit");
    let group = unit_value(&unit, "Group").expect("Group= in the unit");
    assert_eq!(
        unit_value(&unit, "StateDirectory").map(|d| format!("/var/lib/{d}")),
        Some(STATE.to_string())
    );
    let mode = unit_value(&unit, "StateDirectoryMode").unwrap_or_else(|| "0755".into());
    ok(Command::new("install").args(["-d", "-o", &user, "-g", &group, "-m", &mode, STATE]));
    let flash_file = format!("{STATE}/flash");
    let flash_example = format!("-o ext_path={flash_file}:1g");
    assert!(
        std::fs::read_to_string(CONF)
            .unwrap()
            .contains(&format!("# {flash_example}")),
        "the conffile's flash example is not {flash_example:?}"
    );
    let port = free_port();
    let log = temp_path("service.log");
    let child = Command::new("setpriv")
        .args([
            &format!("--reuid={user}"),
            &format!("--regid={group}"),
            "--init-groups",
            "--",
        ])
        .args(&argv)
        .args(["-p", &port.to_string()])
        .args(["-o", &format!("ext_path={flash_file}:64m")])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn the unit's ExecStart");
    let pid = child.id();
    installed.server = Some(child);
    let stderr = || std::fs::read_to_string(&log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(15);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(Ok(Some(status))) = installed.server.as_mut().map(|c| c.try_wait()) {
            panic!("{exec} -p {port} exited with {status}:\n{}", stderr());
        }
        assert!(
            Instant::now() < deadline,
            "{exec} -p {port} did not accept within 15 s:\n{}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = ok(Command::new("id").args(["-u", &user]));
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some(uid.trim())),
        "the server does not run as {user}:\n{status}"
    );

    // 6. It answers, with the conffile's settings and the appended port.
    let version = ask(port, b"version\r\n", b"\r\n");
    assert!(version.starts_with("VERSION "), "{version:?}");
    assert_eq!(
        ask(port, b"set pkg 0 0 5\r\nhello\r\n", b"\r\n"),
        "STORED\r\n"
    );
    assert_eq!(
        ask(port, b"get pkg\r\n", b"END\r\n"),
        "VALUE pkg 0 5\r\nhello\r\nEND\r\n"
    );
    let settings = ask(port, b"stats settings\r\n", b"END\r\n");
    for line in [
        "STAT maxbytes 67108864\r\n".to_string(),
        "STAT maxconns 1024\r\n".to_string(),
        format!("STAT tcpport {port}\r\n"),
    ] {
        assert!(settings.contains(&line), "{line:?} not in:\n{settings}");
    }

    // The flash tier writes its file as the service's user.
    let owner = ok(Command::new("stat").args(["-c", "%U", &flash_file]));
    assert_eq!(owner.trim(), user, "owner of {flash_file}");
    let flash = ask(port, b"stats flash\r\n", b"END\r\n");
    assert!(flash.starts_with("STAT "), "stats flash: {flash:?}");

    // 7. Stop it as systemctl stop would (SIGTERM), then purge.
    let mut child = installed.server.take().expect("server running");
    ok(Command::new("kill").args(["-TERM", &pid.to_string()]));
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the server ignored SIGTERM for 10 s:\n{}", stderr());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "exit after SIGTERM: {exit}\n{}", stderr());
    let _ = std::fs::remove_file(&log);
    let purge = installed.purge();
    assert!(
        purge.status.success(),
        "dpkg --purge cachalot: {}",
        text(&purge)
    );
    assert!(!package_installed(), "cachalot still installed after purge");
    for gone in [
        BIN,
        CONF,
        UNIT,
        "/etc/systemd/system/multi-user.target.wants/cachalot.service",
        STATE,
    ] {
        assert!(!Path::new(gone).exists(), "{gone} left after purge");
    }
    assert!(!user_exists("cachalot"), "user cachalot left after purge");
    eprintln!(
        "package test: cargo deb {:.1} s, whole test {:.1} s",
        deb_time.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

//! The Debian package: `cargo deb --no-build` packs the already built
//! binary; the test reads the .deb's contents and control files, then
//! installs it with `dpkg -i` in a sandbox: a private mount namespace whose
//! root is a copy-on-write view of the machine's (an overlay over `/`, its
//! changes in a tmpfs), with a `policy-rc.d` that forbids starting
//! services. There it checks that the postinst made the `cachalot` user,
//! enabled the unit and started nothing, verifies the installed unit with
//! `systemd-analyze verify`, starts the server as systemd would (the unit's
//! `ExecStart`, as its `User=`, in its `StateDirectory=`) with flags
//! appended: `-p <free port>`, which wins over the conffile's `-p 11211`,
//! and the conffile's flash tier example. It talks to it, stops it with
//! SIGTERM and purges the package (user, state and conffile gone). The
//! sandbox then vanishes with everything written in it, and the test checks
//! that the host has no cachalot package, user, file or process, and that
//! 11211 is as free as it was: nothing of the test touches the host's
//! `/etc`, `/usr`, `/var` or dpkg database, even if it fails half-way.
//!
//! Needs root, dpkg, systemd-analyze, setpriv, unshare, nsenter, overlayfs
//! and cargo-deb (scripts/install-deps.sh installs what Debian lacks):
//! without them it fails, it does not skip. It also fails if a cachalot
//! package, user or /var/lib/cachalot is already on the host, rather than
//! run beside them.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
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

/// A command on the host, or in the sandbox.
fn cmd(sandbox: Option<&Sandbox>, program: &str) -> Command {
    match sandbox {
        Some(sb) => sb.command(program),
        None => Command::new(program),
    }
}

fn user_exists(sandbox: Option<&Sandbox>, name: &str) -> bool {
    run(cmd(sandbox, "getent").args(["passwd", name]))
        .status
        .success()
}

fn package_installed(sandbox: Option<&Sandbox>) -> bool {
    let out = run(cmd(sandbox, "dpkg-query").args(["-W", "-f=${Status}", "cachalot"]));
    out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("not-installed")
}

/// Whether something accepts on 127.0.0.1:11211 (the conffile's port).
fn port_11211_taken() -> bool {
    TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], 11211)),
        Duration::from_secs(1),
    )
    .is_ok()
}

/// The sandbox's shell: a tmpfs holds the overlay's upper layer, the
/// overlay over `/` becomes the root (with the machine's /proc, /dev and
/// /sys; its /run is the root file system's, without a running systemd's
/// sockets), a policy-rc.d forbids starting services, then it waits on
/// stdin: when the test closes it (or dies), the last process of the
/// namespace exits and the namespace, mounts and tmpfs go with it.
const SANDBOX_SH: &str = r#"set -e
d=$1
mount -t tmpfs -o mode=0755 cachalot-test "$d"
mkdir "$d/upper" "$d/work" "$d/root"
mount -t overlay overlay -o "lowerdir=/,upperdir=$d/upper,workdir=$d/work" "$d/root"
for m in proc dev sys; do mount --rbind "/$m" "$d/root/$m"; done
printf '#!/bin/sh
exit 101
' > "$d/root/usr/sbin/policy-rc.d"
chmod 755 "$d/root/usr/sbin/policy-rc.d"
exec chroot "$d/root" /bin/sh -c 'echo ready; exec cat >/dev/null'
"#;

/// A copy-on-write view of this machine in a mount namespace of its own
/// (see the module comment); commands run in it through nsenter, its files
/// are read and written through /proc/<pid>/root.
struct Sandbox {
    holder: Child,
    stdin: Option<ChildStdin>,
    mountpoint: PathBuf,
    /// The server started in it, killed when the sandbox goes.
    server: Option<Child>,
}

impl Sandbox {
    fn new() -> Sandbox {
        let mountpoint = temp_path("sandbox");
        std::fs::create_dir_all(&mountpoint).unwrap();
        let mut holder = Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                SANDBOX_SH,
                "sh",
            ])
            .arg(&mountpoint)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run unshare (util-linux)");
        let mut ready = String::new();
        let _ = BufReader::new(holder.stdout.take().expect("stdout")).read_line(&mut ready);
        if ready.trim() != "ready" {
            let _ = holder.kill();
            let out = holder.wait_with_output().expect("the sandbox's exit");
            panic!(
                "could not make the sandbox (unshare --mount, overlayfs over /, chroot): {}",
                text(&out)
            );
        }
        let stdin = holder.stdin.take();
        Sandbox {
            holder,
            stdin,
            mountpoint,
            server: None,
        }
    }

    fn pid(&self) -> u32 {
        self.holder.id()
    }

    /// `program` inside: the holder's mount namespace and root.
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("nsenter");
        c.args([
            "-t",
            &self.pid().to_string(),
            "-m",
            "-r",
            "-w",
            "--",
            program,
        ]);
        c
    }

    /// Where a path inside is, seen from the host.
    fn path(&self, inside: &str) -> PathBuf {
        Path::new(&format!("/proc/{}/root", self.pid())).join(inside.trim_start_matches('/'))
    }

    fn namespace(pid: u32) -> Option<PathBuf> {
        std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()
    }

    /// The processes in the sandbox's namespace, the holder aside.
    fn processes(&self) -> Vec<(u32, String)> {
        let Some(ns) = Sandbox::namespace(self.pid()) else {
            return Vec::new();
        };
        std::fs::read_dir("/proc")
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                    .filter(|&p| p != self.pid() && Sandbox::namespace(p).as_ref() == Some(&ns))
                    .map(|p| {
                        let comm =
                            std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                        (p, comm.trim().to_string())
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Anything else running there (a daemon a maintainer script
        // started) would keep the namespace alive: kill it.
        for (pid, _) in self.processes() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
        // EOF on the holder's stdin ends it, and with it the namespace.
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.holder.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = self.holder.kill();
                let _ = self.holder.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir(&self.mountpoint);
    }
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
        "unshare",
        "nsenter",
    ] {
        let found = run(Command::new("sh").args(["-c", &format!("command -v {tool}")]));
        assert!(
            found.status.success(),
            "{tool} not found: the package test needs a Debian machine with \
             dpkg, systemd and util-linux (scripts/install-deps.sh)"
        );
    }
    let on_host = || {
        package_installed(None)
            || Path::new(BIN).exists()
            || Path::new(STATE).exists()
            || user_exists(None, "cachalot")
    };
    assert!(
        !on_host(),
        "a cachalot package, {BIN}, {STATE} or user cachalot is already on this machine; \
         the package test installs and purges its own, in a sandbox: remove them first \
         (dpkg --purge cachalot)"
    );
    let port_was_taken = port_11211_taken();

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

    // 3. Install it in the sandbox (which, dropped, takes everything with
    //    it, on success or failure).
    let mut sb = Sandbox::new();
    std::fs::copy(&deb, sb.path("/cachalot-test.deb")).expect("copy the .deb into the sandbox");
    let _ = std::fs::remove_dir_all(&out_dir);
    ok(sb.command("dpkg").args(["-i", "/cachalot-test.deb"]));
    assert!(
        package_installed(Some(&sb)),
        "dpkg -i did not install cachalot"
    );
    assert!(
        user_exists(Some(&sb), "cachalot"),
        "postinst made no cachalot user"
    );
    assert!(
        !user_exists(None, "cachalot") && !package_installed(None) && !Path::new(BIN).exists(),
        "the sandbox's install reached the host"
    );
    assert_eq!(
        std::fs::read_to_string(sb.path(CONF)).unwrap(),
        std::fs::read_to_string(repo().join("packaging/debian/cachalot.conf")).unwrap()
    );
    assert!(
        sb.path("/etc/systemd/system/multi-user.target.wants/cachalot.service")
            .symlink_metadata()
            .is_ok(),
        "postinst did not enable the unit"
    );
    // The postinst started nothing (policy-rc.d refused, and no systemd
    // runs there): the namespace holds no process but its holder.
    let running = sb.processes();
    assert!(
        running.is_empty(),
        "processes left running by the install: {running:?}"
    );

    // 4. The installed unit passes systemd's checks (ExecStart exists now).
    let verify = run(sb.command("systemd-analyze").args(["verify", UNIT]));
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
    let unit = std::fs::read_to_string(sb.path(UNIT)).unwrap();
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
    ok(sb
        .command("install")
        .args(["-d", "-o", &user, "-g", &group, "-m", &mode, STATE]));
    let flash_file = format!("{STATE}/flash");
    let flash_example = format!("-o ext_path={flash_file}:1g");
    assert!(
        std::fs::read_to_string(sb.path(CONF))
            .unwrap()
            .contains(&format!("# {flash_example}")),
        "the conffile's flash example is not {flash_example:?}"
    );
    let port = free_port();
    let log = temp_path("service.log");
    let child = sb
        .command("setpriv")
        .args([
            &format!("--reuid={user}"),
            &format!("--regid={group}"),
            "--init-groups",
            "--",
        ])
        .args(&argv)
        .args(["-p", &port.to_string()])
        .args(["-o", &format!("ext_path={flash_file}:64m")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn the unit's ExecStart");
    let pid = child.id();
    sb.server = Some(child);
    let stderr = || std::fs::read_to_string(&log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(15);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(Ok(Some(status))) = sb.server.as_mut().map(|c| c.try_wait()) {
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
    let uid = ok(sb.command("id").args(["-u", &user]));
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
    let owner = ok(sb.command("stat").args(["-c", "%U", &flash_file]));
    assert_eq!(owner.trim(), user, "owner of {flash_file}");
    let flash = ask(port, b"stats flash\r\n", b"END\r\n");
    assert!(flash.starts_with("STAT "), "stats flash: {flash:?}");

    // 7. Stop it as systemctl stop would (SIGTERM), then purge.
    let mut child = sb.server.take().expect("server running");
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
    let purge = run(sb.command("dpkg").args(["--purge", "cachalot"]));
    assert!(
        purge.status.success(),
        "dpkg --purge cachalot: {}",
        text(&purge)
    );
    assert!(
        !package_installed(Some(&sb)),
        "cachalot still installed after purge"
    );
    for gone in [
        BIN,
        CONF,
        UNIT,
        "/etc/systemd/system/multi-user.target.wants/cachalot.service",
        STATE,
    ] {
        // (A link inside points at the host's path: look at the link.)
        assert!(
            sb.path(gone).symlink_metadata().is_err(),
            "{gone} left after purge"
        );
    }
    assert!(
        !user_exists(Some(&sb), "cachalot"),
        "user cachalot left after purge"
    );
    let running = sb.processes();
    assert!(
        running.is_empty(),
        "processes left in the sandbox: {running:?}"
    );

    // 8. The sandbox goes, and the host is as it was.
    let namespace = Sandbox::namespace(sb.pid()).expect("the sandbox's namespace");
    drop(sb);
    assert!(
        !on_host(),
        "a cachalot package, file or user is on the host"
    );
    assert!(
        port_was_taken || !port_11211_taken(),
        "127.0.0.1:11211 was free before the test and is taken after it"
    );
    let left: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| Sandbox::namespace(p).as_ref() == Some(&namespace))
        .collect();
    assert!(left.is_empty(), "processes still in the sandbox: {left:?}");
    eprintln!(
        "package test: cargo deb {:.1} s, whole test {:.1} s",
        deb_time.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

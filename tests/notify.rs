//! systemd's notify protocol through the binary: a datagram socket stands for systemd
//! (`NOTIFY_SOCKET`, `WATCHDOG_USEC`), and the daemon must say READY=1 only once it serves,
//! feed the watchdog, say RELOADING=1 then READY=1 around SIGHUP, and STOPPING=1 at SIGTERM,
//! after which the watchdog stops. And the shipped unit file passes systemd's own checks.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use daemon::{free_port, http, wait_until};

fn messages(sock: &UnixDatagram, until: Instant) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < until {
        match sock.recv(&mut buf) {
            Ok(n) => out.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(_) => continue,
        }
    }
    out
}

fn kill(pid: u32, signal: &str) {
    let ok = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {signal}");
}

#[test]
fn the_daemon_tells_systemd_when_it_serves_reloads_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let config = dir.path().join("shrike.toml");
    std::fs::write(&config, "[dns]\nenabled = false\n").unwrap();
    let port = free_port();
    // systemd names the process the watchdog is for: this shell's pid, which exec keeps.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("WATCHDOG_PID=$$ exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_shrike"))
        .arg("--config")
        .arg(&config)
        .args(["serve", "--milter", "off", "--http"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data")
        .arg(dir.path().join("data"))
        .env("NOTIFY_SOCKET", &path)
        .env("WATCHDOG_USEC", "200000")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();

    // READY=1 comes once, and only when the daemon answers.
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen.iter().any(|m: &String| m.contains("READY=1")) {
        assert!(Instant::now() < deadline, "no READY=1: {seen:?}");
        if let Ok(n) = sock.recv(&mut buf) {
            seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    let health = http(port, "GET", "/health", &[], b"").expect("serving once READY=1 is sent");
    assert_eq!(health.status, 200);
    let ready = seen.iter().find(|m| m.contains("READY=1")).unwrap();
    assert!(ready.contains("STATUS=serving rules generation"), "{ready}");

    // The watchdog is fed every half period (100 ms): several times a second.
    let fed = messages(&sock, Instant::now() + Duration::from_secs(1));
    let pings = fed.iter().filter(|m| m.contains("WATCHDOG=1")).count();
    assert!(pings >= 3, "{fed:?}");

    // SIGHUP: RELOADING=1, then READY=1 again.
    kill(pid, "-HUP");
    let mut around = Vec::new();
    wait_until("READY=1 after RELOADING=1", 30, || {
        around.extend(messages(&sock, Instant::now() + Duration::from_millis(100)));
        let r = around.iter().position(|m| m.contains("RELOADING=1"));
        r.is_some_and(|r| around[r..].iter().any(|m| m.contains("READY=1")))
    });

    // SIGTERM: STOPPING=1, and the watchdog falls silent once the process is gone.
    kill(pid, "-TERM");
    let mut stopping = Vec::new();
    wait_until("STOPPING=1", 30, || {
        stopping.extend(messages(&sock, Instant::now() + Duration::from_millis(100)));
        stopping.iter().any(|m| m.contains("STOPPING=1"))
    });
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let after = messages(&sock, Instant::now() + Duration::from_millis(500));
    assert!(after.is_empty(), "{after:?}");
}

#[test]
fn the_unit_file_passes_systemd_analyze() {
    let unit = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/shrike.service");
    let Ok(o) = Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(&unit)
        .output()
    else {
        panic!("systemd-analyze is missing (scripts/test.sh installs Debian's systemd)");
    };
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("{out}\n{}", String::from_utf8_lossy(&o.stderr)));
    let score: f64 = line
        .split("shrike.service:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    // systemd's scale: up to 2 is "OK"; the sandbox must not loosen past it unnoticed.
    assert!(score <= 2.0, "{line}");
    let text = std::fs::read_to_string(&unit).unwrap();
    for must in [
        "Type=notify",
        "WatchdogSec=",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(text.contains(must), "{must}");
    }
}

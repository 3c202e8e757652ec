//! Antivirus (`[antivirus]`, docs/antivirus.md) through real parts: Debian's `clamd`
//! (clamav-daemon) started here on a signature database this test writes (the EICAR test
//! file's MD5 in a `.hdb`, no download), on a unix socket and on TCP. EICAR in a MIME
//! attachment is rejected with its name through a real Postfix and over `/checkv2`; a clean
//! message passes; with clamd stopped every scan goes on within its budget with
//! `CLAM_VIRUS_FAIL` and `/health` says `"antivirus": "degraded"`.
//!
//! Needs the packages scripts/test.sh installs (clamav-daemon, postfix) and root for Postfix.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

#[allow(dead_code)]
#[path = "common/postfix.rs"]
mod postfix;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use daemon::{free_port, Daemon, Options};
use postfix::{eod, harness_dir, Postfix};

/// The EICAR test file (68 bytes), and its MD5: what a `.hdb` signature names.
const EICAR: &str = r"X5O!P%@AP[4\PZX54(P^)7CC)7}$EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*";
const EICAR_MD5: &str = "44d88612fea8a8f36de82e1278abb02f";

/// A clamd of our own; killed when dropped.
struct Clamd {
    child: Option<Child>,
    socket: PathBuf,
    port: u16,
}

impl Clamd {
    fn start(dir: &Path) -> Clamd {
        let dir = dir.join("clamd");
        let db = dir.join("db");
        std::fs::create_dir_all(&db).unwrap();
        std::fs::write(
            db.join("test.hdb"),
            format!("{EICAR_MD5}:{}:Eicar-Test-Signature\n", EICAR.len()),
        )
        .unwrap();
        let socket = dir.join("clamd.sock");
        let port = free_port();
        let conf = dir.join("clamd.conf");
        std::fs::write(
            &conf,
            format!(
                "Foreground yes\nDatabaseDirectory {}\nLocalSocket {}\nTCPSocket {port}\n\
                 TCPAddr 127.0.0.1\nLogFile {}\nPidFile {}\n",
                db.display(),
                socket.display(),
                dir.join("clamd.log").display(),
                dir.join("clamd.pid").display(),
            ),
        )
        .unwrap();
        let child = Command::new("clamd")
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("clamd is installed (scripts/test.sh installs clamav-daemon)");
        let c = Clamd {
            child: Some(child),
            socket,
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        while !c.pong() {
            assert!(
                Instant::now() < deadline,
                "clamd not up:\n{}",
                std::fs::read_to_string(dir.join("clamd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        c
    }

    fn pong(&self) -> bool {
        let Ok(mut s) = UnixStream::connect(&self.socket) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut reply = Vec::new();
        s.write_all(b"zPING\0").is_ok()
            && s.read_to_end(&mut reply).is_ok()
            && reply.starts_with(b"PONG")
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Clamd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A message with EICAR as a base64 attachment (no archive around it).
fn infected(id: &str) -> String {
    use base64_lines as b64;
    format!(
        "From: a@sender.example\r\nTo: bob@example.com\r\nSubject: invoice\r\nMessage-ID: <{id}>\r\n\
         MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"b1\"\r\n\r\n\
         --b1\r\nContent-Type: text/plain\r\n\r\nPlease see the attachment.\r\n\
         --b1\r\nContent-Type: application/octet-stream; name=\"invoice.com\"\r\n\
         Content-Disposition: attachment; filename=\"invoice.com\"\r\n\
         Content-Transfer-Encoding: base64\r\n\r\n{}\r\n--b1--\r\n",
        b64::encode(EICAR.as_bytes())
    )
}

fn clean(id: &str) -> String {
    format!(
        "From: a@sender.example\r\nTo: bob@example.com\r\nSubject: lunch\r\nMessage-ID: <{id}>\r\n\
         \r\nSee you at noon.\r\n"
    )
}

/// Base64 without a crate: the test's one attachment.
mod base64_lines {
    pub fn encode(data: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in data.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }
}

fn check(d: &Daemon, message: &str) -> serde_json::Value {
    let r = d.post("/checkv2", &[("IP", "192.0.2.1")], message.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

#[test]
fn clamd_rejects_eicar_and_a_stopped_clamd_fails_open() {
    let tmp = tempfile::tempdir().unwrap();
    let mut clamd = Clamd::start(tmp.path());
    let shrike = Daemon::start(
        tmp.path(),
        Options {
            config: Some(format!(
                "[antivirus]\nservers = [\"unix:{}\"]\ntimeout_ms = 1000\n",
                clamd.socket.display()
            )),
            ..Options::default()
        },
    );
    let health = |d: &Daemon| d.get("/health").json()["antivirus"].clone();
    assert_eq!(health(&shrike), "ok");

    // Over HTTP: rejected with the virus's name; a clean message passes untouched.
    let v = check(&shrike, &infected("v1@test"));
    assert_eq!(v["action"], "reject", "{v}");
    let name = v["symbols"]["CLAM_VIRUS"]["options"][0]
        .as_str()
        .unwrap_or_else(|| panic!("no CLAM_VIRUS in {v}"))
        .to_string();
    assert!(name.starts_with("Eicar-Test-Signature"), "{name}");
    assert_eq!(
        v["messages"]["smtp_message"],
        format!("Virus found: {name}"),
        "{v}"
    );
    let v = check(&shrike, &clean("c1@test"));
    assert!(v["symbols"].get("CLAM_VIRUS").is_none(), "{v}");
    assert!(v["symbols"].get("CLAM_VIRUS_FAIL").is_none(), "{v}");
    assert_eq!(v["action"], "no action", "{v}");

    // Through a real Postfix: 550 with the name at end of data; the clean one delivered.
    let harness = harness_dir(tmp.path());
    let postfix = Postfix::up(&harness, shrike.milter);
    let file = tmp.path().join("infected.eml");
    std::fs::write(&file, infected("v2@test")).unwrap();
    let line = postfix.send(&file);
    assert_eq!(eod(&line), "550", "{line}\n{}", postfix.maillog());
    assert!(line.contains("Virus found: Eicar-Test-Signature"), "{line}");
    let file = tmp.path().join("clean.eml");
    std::fs::write(&file, clean("c2@test")).unwrap();
    let line = postfix.send(&file);
    assert_eq!(eod(&line), "250", "{line}");
    assert!(postfix.delivered("c2@test").is_some());

    // clamd stopped: every scan goes on, well within its budget, with CLAM_VIRUS_FAIL.
    clamd.stop();
    for i in 0..3 {
        let t = Instant::now();
        let v = check(&shrike, &infected(&format!("v3-{i}@test")));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert!(v["symbols"].get("CLAM_VIRUS_FAIL").is_some(), "{v}");
        assert!(v["symbols"].get("CLAM_VIRUS").is_none(), "{v}");
        assert_eq!(v["symbols"]["CLAM_VIRUS_FAIL"]["score"], 0.0, "{v}");
    }
    assert_eq!(health(&shrike), "degraded");
    assert!(shrike.get("/health").json()["antivirus_error"].is_string());
    assert_eq!(shrike.metric("shrike_antivirus_viruses_total"), 2);
    assert_eq!(shrike.metric("shrike_antivirus_failures_total"), 3);
    assert_eq!(shrike.metric("shrike_antivirus_scans_total"), 7);
}

#[test]
fn clamd_over_tcp() {
    let tmp = tempfile::tempdir().unwrap();
    let clamd = Clamd::start(tmp.path());
    let shrike = Daemon::start(
        tmp.path(),
        Options {
            config: Some(format!(
                "[antivirus]\nservers = [\"127.0.0.1:{}\"]\naction = \"quarantine\"\n",
                clamd.port
            )),
            ..Options::default()
        },
    );
    let v = check(&shrike, &infected("t1@test"));
    assert_eq!(v["action"], "quarantine", "{v}");
    assert!(v["symbols"].get("CLAM_VIRUS").is_some(), "{v}");
}

//! `[log]` through the binary: JSON lines with the span fields a shipper indexes, the level from
//! the config unless `RUST_LOG` says otherwise, and the journal's form (no timestamp, a syslog
//! priority first) only when `JOURNAL_STREAM` names the daemon's actual stderr.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

use daemon::{free_port, http, wait_until};

/// Runs `shrike serve` with `config` and `env` until it answers, scans one message over HTTP,
/// stops it with SIGTERM and returns what it wrote to stderr. `journal` sets `JOURNAL_STREAM` to
/// the log file's own device and inode (as systemd does for the journal's stream) or to another
/// file's.
fn serve_log(dir: &Path, config: &str, env: &[(&str, &str)], journal: Option<bool>) -> String {
    let path = dir.join("shrike.toml");
    std::fs::write(&path, format!("[dns]\nenabled = false\n{config}")).unwrap();
    let log = dir.join("stderr.log");
    let file = std::fs::File::create(&log).unwrap();
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shrike"));
    cmd.arg("--config")
        .arg(&path)
        .args(["serve", "--milter", "off", "--http"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data")
        .arg(dir.join("data"))
        .env_remove("RUST_LOG")
        .env_remove("JOURNAL_STREAM")
        .envs(env.iter().copied())
        .stdout(Stdio::null());
    if let Some(same) = journal {
        let meta = if same {
            file.metadata().unwrap()
        } else {
            std::fs::metadata(&path).unwrap()
        };
        cmd.env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()));
    }
    let mut child = cmd.stderr(Stdio::from(file)).spawn().unwrap();
    wait_until("/health", 60, || {
        http(port, "GET", "/health", &[], b"").is_ok_and(|r| r.status == 200)
    });
    let r = http(
        port,
        "POST",
        "/checkv2",
        &[],
        b"From: a@example.com\r\nSubject: hello\r\n\r\nbody\r\n",
    )
    .unwrap();
    assert_eq!(r.status, 200);
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert!(child.wait().unwrap().success());
    std::fs::read_to_string(&log).unwrap()
}

#[test]
fn json_lines_carry_the_message_and_the_open_spans() {
    let dir = tempfile::tempdir().unwrap();
    let text = serve_log(
        dir.path(),
        "[log]\nformat = \"json\"\nlevel = \"info,shrike::server::pool=debug\"\n",
        &[],
        None,
    );
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let serving = lines
        .iter()
        .find(|v| v["fields"]["message"] == "shrike serving")
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(serving["level"], "INFO");
    assert!(serving["timestamp"].is_string(), "{serving}");
    // The scan's debug line inside the connection's and the scan's spans.
    let verdict = lines
        .iter()
        .find(|v| v["fields"]["message"] == "verdict")
        .unwrap_or_else(|| panic!("{text}"));
    let spans = verdict["spans"].as_array().unwrap();
    assert!(
        spans
            .iter()
            .any(|s| s["name"] == "conn" && s["listener"] == "HTTP"),
        "{verdict}"
    );
    assert!(
        spans
            .iter()
            .any(|s| s["name"] == "scan" && s["generation"] == 1),
        "{verdict}"
    );
    assert!(verdict["fields"]["score"].is_number(), "{verdict}");
}

#[test]
fn the_level_comes_from_the_config_unless_rust_log_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let quiet = serve_log(dir.path(), "[log]\nlevel = \"warn\"\n", &[], None);
    assert!(!quiet.contains("shrike serving"), "{quiet}");
    let dir = tempfile::tempdir().unwrap();
    let loud = serve_log(
        dir.path(),
        "[log]\nlevel = \"warn\"\n",
        &[("RUST_LOG", "info")],
        None,
    );
    assert!(loud.contains("shrike serving"), "{loud}");
    // No [log] level: the daemon's default is info.
    let dir = tempfile::tempdir().unwrap();
    let default = serve_log(dir.path(), "", &[], None);
    assert!(default.contains("INFO"), "{default}");
    assert!(default.contains("shrike serving"), "{default}");
}

#[test]
fn the_journal_gets_priorities_and_no_timestamps_of_ours() {
    let dir = tempfile::tempdir().unwrap();
    let journal = serve_log(dir.path(), "", &[], Some(true));
    let serving = journal
        .lines()
        .find(|l| l.contains("shrike serving"))
        .unwrap_or_else(|| panic!("{journal}"));
    assert!(serving.starts_with("<6> INFO "), "{serving}");
    for line in journal.lines().filter(|l| l.starts_with('<')) {
        assert!(!line.contains("2026-") && !line.contains("Z "), "{line}");
        assert!(!line.contains('\u{1b}'), "no colours: {line}");
    }

    // A JOURNAL_STREAM inherited by a process whose stderr is elsewhere changes nothing.
    let dir = tempfile::tempdir().unwrap();
    let file = serve_log(dir.path(), "", &[], Some(false));
    let serving = file
        .lines()
        .find(|l| l.contains("shrike serving"))
        .unwrap_or_else(|| panic!("{file}"));
    assert!(!serving.starts_with('<'), "{serving}");
    assert!(
        serving.as_bytes().first().is_some_and(u8::is_ascii_digit),
        "a timestamp first: {serving}"
    );
}

#[test]
fn a_bad_level_is_a_config_error_in_check_and_serve_alike() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shrike.toml");
    std::fs::write(&path, "[log]\nlevel = \"loud=[\"\n").unwrap();
    let (check, serve) = daemon::refused_by_check_and_serve(&path, &dir.path().join("data"));
    assert!(check.contains("[log] level \"loud=[\""), "{check}");
    assert_eq!(check, serve);
}

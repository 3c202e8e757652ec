// A real Postfix 3.7 in front of the daemon's milter (the harness in ../shared/tools/mta, or
// `$SHRIKE_MTA_TOOLS`), relaying what it accepts to a sink directory. Needs root (Postfix's
// master) and the packages scripts/test.sh installs. Users put `#[allow(dead_code)]` on the
// module.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::daemon::free_port;

pub fn tools() -> PathBuf {
    std::env::var_os("SHRIKE_MTA_TOOLS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/mta"),
        PathBuf::from,
    )
}

/// A Postfix instance of the harness; stopped (mta-down) when dropped.
pub struct Postfix {
    pub dir: PathBuf,
    pub smtp: u16,
}

impl Postfix {
    /// Starts Postfix under `dir` (made world-readable: Postfix's processes run as user
    /// postfix) with its milter on `milter_port`; `extra` are main.cf lines.
    pub fn up(dir: &Path, milter_port: u16) -> Postfix {
        Postfix::up_with(dir, milter_port, &[])
    }

    pub fn up_with(dir: &Path, milter_port: u16, extra: &[&str]) -> Postfix {
        let (smtp, sink) = (free_port(), free_port());
        let out = Command::new(tools().join("mta-up"))
            .arg("--force")
            .arg("--no-install")
            .arg("--dir")
            .arg(dir)
            .args(["--smtp-port", &smtp.to_string()])
            .args(["--sink-port", &sink.to_string()])
            .args(["--milter-port", &milter_port.to_string()])
            .args(["--default-action", "tempfail"])
            .env("POSTFIX_EXTRA", extra.join(";"))
            .output()
            .expect("run mta-up");
        assert!(
            out.status.success(),
            "mta-up failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Postfix {
            dir: dir.to_path_buf(),
            smtp,
        }
    }

    /// `mta-send` one file to bob@example.com; returns its result line.
    pub fn send(&self, file: &Path) -> String {
        self.send_to(file, &["bob@example.com"])
    }

    /// `mta-send` one file to `rcpts`; returns its result line.
    pub fn send_to(&self, file: &Path, rcpts: &[&str]) -> String {
        let mut cmd = Command::new(tools().join("mta-send"));
        cmd.args(["--server", &format!("127.0.0.1:{}", self.smtp)]);
        for r in rcpts {
            cmd.args(["-t", r]);
        }
        let out = cmd.arg(file).output().expect("run mta-send");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The sink file holding `marker`, waiting up to 15 s for delivery.
    pub fn delivered(&self, marker: &str) -> Option<String> {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(entries) = std::fs::read_dir(self.dir.join("sink")) {
                for e in entries.flatten() {
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    if text.contains(marker) && text.contains("\n\n") {
                        return Some(text);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// Whether a sink file holds `marker` now.
    pub fn sink_holds(&self, marker: &str) -> bool {
        std::fs::read_dir(self.dir.join("sink")).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(marker)))
        })
    }

    pub fn maillog(&self) -> String {
        std::fs::read_to_string(self.dir.join("postfix/log/maillog")).unwrap_or_default()
    }
}

impl Drop for Postfix {
    fn drop(&mut self) {
        let _ = Command::new(tools().join("mta-down"))
            .arg("--dir")
            .arg(&self.dir)
            .output();
    }
}

/// A directory under `tmp` Postfix's processes can reach (mode 0755 up to `tmp`).
pub fn harness_dir(tmp: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let harness = tmp.join("mta");
    std::fs::create_dir_all(&harness).unwrap();
    for p in [tmp, harness.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    harness
}

/// The EOD code of an `mta-send` result line.
pub fn eod(line: &str) -> &str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("EOD="))
        .unwrap_or("")
}

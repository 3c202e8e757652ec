// A small real tmpfs for tests of a full disk: mounted on a fresh directory, filled to the last
// byte by a filler file and emptied again, unmounted when dropped. Mounting needs root (or
// CAP_SYS_ADMIN): `Tmpfs::mount` says why it could not and the test returns, printing the reason.
// Users put `#[allow(dead_code)]` on the module.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Tmpfs {
    pub path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (mount's syntax: `3m`) on `path` (created). `Err` holds why
    /// it could not, for the skip message.
    pub fn mount(path: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(path)
            .output()
            .map_err(|e| format!("running mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs {
            path: path.to_path_buf(),
        })
    }

    /// Writes `filler` until the filesystem is full; returns the bytes it took.
    pub fn fill(&self, filler: &str) -> u64 {
        let path = self.path.join(filler);
        let mut f = std::fs::File::create(&path).expect("create the filler");
        let chunk = vec![0u8; 4096];
        let mut written = 0u64;
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
        written
    }

    /// Gives `bytes` of the filler's space back.
    pub fn give_back(&self, filler: &str, bytes: u64) {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(self.path.join(filler))
            .expect("open the filler");
        let len = f.metadata().expect("filler size").len();
        f.set_len(len.saturating_sub(bytes))
            .expect("shrink the filler");
    }

    /// Removes the filler: the space is free again.
    pub fn free(&self, filler: &str) {
        std::fs::remove_file(self.path.join(filler)).expect("remove the filler");
    }

    /// Remounts read-only (`ro: true`) or read-write. Linux refuses read-only while a file on
    /// it is open for writing, so this is for a filesystem no process is writing to.
    pub fn remount(&self, ro: bool) {
        let status = Command::new("mount")
            .args(["-o", if ro { "remount,ro" } else { "remount,rw" }])
            .arg(&self.path)
            .status()
            .expect("run mount");
        assert!(status.success(), "remount {}", self.path.display());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily, so a test that failed with a process still holding a file open unmounts too.
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Mounts a tmpfs, or prints why it cannot and gives `None` (the caller returns: the test is
/// skipped only where mounting is not permitted).
pub fn mount_or_skip(test: &str, path: &Path, size: &str) -> Option<Tmpfs> {
    match Tmpfs::mount(path, size) {
        Ok(t) => Some(t),
        Err(why) => {
            eprintln!("SKIPPED {test}: needs a tmpfs mount: {why}");
            None
        }
    }
}

//! What must not leak: the credentials inside URLs that logs and errors print, how a given
//! password or token is compared with the expected one, and the modes of the files and
//! directories that hold the daemon's state.
//!
//! Owns: `redact` and `Redacted` (every URL's password in a text replaced by `***`), `secret_eq`
//! (constant-time, an empty secret matches nothing), `private_dir` (0700) and
//! `write_private` / `tighten` (0600). Uses nothing of ours, so every module may use it. Never
//! touches: sockets, configuration.

use std::borrow::Cow;
use std::fmt;
use std::fs::Permissions;
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq as _;

/// What replaces a password.
pub const MASK: &str = "***";

/// `text` with the password of every URL in it replaced by `***`
/// (`redis://shrike:***@10.0.0.5:6379`); the scheme, user, host and port stay, as they are what
/// an operator needs to find the fault.
///
/// A URL's authority is taken to run to the next white space or quote, not to the next `/`: a
/// password with a raw `/` or `@` in it (not percent-encoded, so the URL does not parse) is
/// then masked whole too. What this can take for a password in other text is masked as well:
/// masking too much is harmless, too little is not.
pub fn redact(text: &str) -> Cow<'_, str> {
    let mut out = String::new();
    let mut copied = 0;
    let mut from = 0;
    while let Some(i) = text[from..].find("://") {
        let start = from + i + 3;
        let end = text[start..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>' | '\\'))
            .map_or(text.len(), |e| start + e);
        let token = &text[start..end];
        if let Some(at) = token.rfind('@') {
            if let Some(colon) = token[..at].find(':') {
                out.push_str(&text[copied..start + colon + 1]);
                out.push_str(MASK);
                copied = start + at;
            }
        }
        from = end;
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// Displays a text (a URL, an error message) with its URLs' passwords masked (`redact`).
#[derive(Clone, Copy)]
pub struct Redacted<'a>(pub &'a str);

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(self.0))
    }
}

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*redact(self.0), f)
    }
}

/// Every URL of a list (a cluster's seed nodes), its password masked.
pub fn redact_all(urls: &[String]) -> Vec<String> {
    urls.iter().map(|u| redact(u).into_owned()).collect()
}

/// Whether `given` is the secret `expected`, in a time that tells nothing of how much of it
/// matched, nor of its length (both are hashed first, and the digests compared in constant
/// time). An empty `expected` matches nothing: an unset secret must never let anyone in.
pub fn secret_eq(given: &[u8], expected: &[u8]) -> bool {
    if expected.is_empty() {
        return false;
    }
    let (a, b) = (Sha256::digest(given), Sha256::digest(expected));
    a.as_slice().ct_eq(b.as_slice()).into()
}

/// A directory `private_dir` was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirState {
    /// Made now, 0700.
    Created,
    /// It was there, and is left with its mode (the permission bits).
    Existing(u32),
}

impl DirState {
    /// The permission bits of an existing directory that let other users (not the owner, not
    /// its group) in, if any.
    pub fn open_to_others(self) -> Option<u32> {
        match self {
            DirState::Existing(mode) if mode & 0o007 != 0 => Some(mode),
            _ => None,
        }
    }
}

/// Creates `dir` (with its missing parents) for its owner alone, 0700, whatever the umask. A
/// directory that exists is not changed: its modes may be the operator's choice (a group that
/// reads the history with `shrike history`, a mount point); the caller warns if others can
/// enter it.
pub fn private_dir(dir: &Path) -> io::Result<DirState> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(DirState::Existing(m.permissions().mode() & 0o7777)),
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a directory", dir.display()),
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)?;
    }
    // Not recursive: a directory that appeared since the check above is told from ours.
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        // Another process made it meanwhile: theirs, left as it is.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let mode = std::fs::metadata(dir)?.permissions().mode() & 0o7777;
            return Ok(DirState::Existing(mode));
        }
        Err(e) => return Err(e),
    }
    // The mode given to mkdir passes through the umask, which may take the owner's bits too.
    std::fs::set_permissions(dir, Permissions::from_mode(0o700))?;
    Ok(DirState::Created)
}

/// Writes `bytes` to `path` readable and writable by its owner alone (0600, whatever the
/// umask), through a temporary file renamed over it: a reader never sees part of it.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.set_permissions(Permissions::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Makes an existing file of ours 0600 if its modes let anyone else read or write it; returns
/// the mode it had when it changed it.
pub fn tighten(path: &Path) -> io::Result<Option<u32>> {
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o7777;
    if mode & 0o077 == 0 {
        return Ok(None);
    }
    std::fs::set_permissions(path, Permissions::from_mode(0o600))?;
    Ok(Some(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_are_masked_and_the_rest_kept() {
        for (text, want) in [
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            (
                "redis://shrike:s3cret@10.0.0.5:6379/0",
                "redis://shrike:***@10.0.0.5:6379/0",
            ),
            ("rediss://:s3cret@h:6380", "rediss://:***@h:6380"),
            ("valkey://user@h:6379", "valkey://user@h:6379"),
            // A raw '@' or '/' in the password: still all of it.
            ("redis://u:p@ss/w@h:1", "redis://u:***@h:1"),
            (
                r#"["redis://a:one@h1:7000", "redis://b:two@h2:7001"]"#,
                r#"["redis://a:***@h1:7000", "redis://b:***@h2:7001"]"#,
            ),
            (
                "cannot reach redis://a:pw@h:1 (refused); retrying redis://a:pw@h:1",
                "cannot reach redis://a:***@h:1 (refused); retrying redis://a:***@h:1",
            ),
            (
                r#"store.redis.urls: "redis://u:pw@h:1" is not"#,
                r#"store.redis.urls: "redis://u:***@h:1" is not"#,
            ),
            ("no URL here: a@b:c", "no URL here: a@b:c"),
            ("://", "://"),
            ("x://:@", "x://:***@"),
        ] {
            assert_eq!(redact(text), want, "{text}");
            assert_eq!(Redacted(text).to_string(), want);
        }
        // Nothing to mask: no copy.
        assert!(matches!(redact("redis://h:1"), Cow::Borrowed(_)));
        assert_eq!(
            format!("{:?}", Redacted("redis://u:pw@h:1")),
            "\"redis://u:***@h:1\""
        );
        assert_eq!(
            redact_all(&["redis://u:pw@h:1".into(), "redis://h:2".into()]),
            ["redis://u:***@h:1", "redis://h:2"]
        );
    }

    #[test]
    fn secrets_compare_whole_and_an_empty_one_matches_nothing() {
        assert!(secret_eq(b"s3cret", b"s3cret"));
        assert!(!secret_eq(b"s3cre", b"s3cret"));
        assert!(!secret_eq(b"s3cret!", b"s3cret"));
        assert!(!secret_eq(b"S3cret", b"s3cret"));
        assert!(!secret_eq(b"", b""));
        assert!(!secret_eq(b"anything", b""));
    }

    /// The modes under any umask are tested through the binary (tests/secrets.rs), which can
    /// start it under `umask 000`.
    #[test]
    fn private_directories_and_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        assert_eq!(private_dir(&dir).unwrap(), DirState::Created);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&dir), 0o700);
        // An existing directory is left as it is, and said to be open when it is.
        std::fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
        let state = private_dir(&dir).unwrap();
        assert_eq!(state, DirState::Existing(0o755));
        assert_eq!(state.open_to_others(), Some(0o755));
        assert_eq!(mode(&dir), 0o755);
        std::fs::set_permissions(&dir, Permissions::from_mode(0o750)).unwrap();
        assert_eq!(private_dir(&dir).unwrap().open_to_others(), None);
        // A file where the directory should be.
        let file = tmp.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(private_dir(&file).is_err());

        let key = dir.join("key");
        write_private(&key, b"k1").unwrap();
        assert_eq!(mode(&key), 0o600);
        assert_eq!(std::fs::read(&key).unwrap(), b"k1");
        assert!(!key.with_extension("tmp").exists());
        assert_eq!(tighten(&key).unwrap(), None);
        std::fs::set_permissions(&key, Permissions::from_mode(0o644)).unwrap();
        assert_eq!(tighten(&key).unwrap(), Some(0o644));
        assert_eq!(mode(&key), 0o600);
        // A temporary file left by a kill is replaced, not refused.
        std::fs::write(key.with_extension("tmp"), b"half").unwrap();
        write_private(&key, b"k2").unwrap();
        assert_eq!(std::fs::read(&key).unwrap(), b"k2");
    }
}

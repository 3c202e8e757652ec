//! Encryption at rest of the kept bodies (`[quarantine] key_file`): XChaCha20-Poly1305 with a
//! random 24-byte nonce per entry, the entry's id as associated data (a body moved to another
//! entry's place does not open), and the kernel's randomness.

use std::path::Path;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

/// Bytes of the nonce stored before each sealed body.
const NONCE: usize = 24;

/// Fills `buf` from /dev/urandom. Without kernel randomness nothing secret can be made: the
/// caller's ids and nonces would repeat, so this is fatal.
pub fn random(buf: &mut [u8]) {
    use std::io::Read;
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(buf));
    if let Err(e) = read {
        panic!("no kernel randomness (/dev/urandom): {e}");
    }
}

/// The key of `key_file`.
#[derive(Clone)]
pub struct Key(XChaCha20Poly1305);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// Reads a key file: 32 raw bytes, or 64 hex digits (a trailing newline allowed).
    pub fn load(path: &Path) -> Result<Key, String> {
        let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
        let text = std::str::from_utf8(&bytes).map(str::trim).unwrap_or("");
        let key: Vec<u8> = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            (0..32)
                .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap_or(0))
                .collect()
        } else if bytes.len() == 32 {
            bytes
        } else {
            return Err("not a 32-byte key (32 raw bytes or 64 hex digits)".into());
        };
        XChaCha20Poly1305::new_from_slice(&key)
            .map(Key)
            .map_err(|e| e.to_string())
    }

    /// The nonce and the sealed `plain`, bound to `id`.
    pub fn seal(&self, id: &str, plain: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE];
        random(&mut nonce);
        let sealed = self
            .0
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plain,
                    aad: id.as_bytes(),
                },
            )
            .unwrap_or_default();
        let mut out = Vec::with_capacity(NONCE + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        out
    }

    /// The plain bytes of what [`Key::seal`] made for `id`; `None` when the key, the id or a
    /// byte differs.
    pub fn open(&self, id: &str, sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE {
            return None;
        }
        let (nonce, body) = sealed.split_at(NONCE);
        self.0
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: body,
                    aad: id.as_bytes(),
                },
            )
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_bodies_open_only_with_their_key_and_id() {
        let dir = tempfile::tempdir().unwrap();
        let raw = dir.path().join("raw");
        std::fs::write(&raw, [7u8; 32]).unwrap();
        let hex = dir.path().join("hex");
        std::fs::write(&hex, format!("{}\n", "07".repeat(32))).unwrap();
        let (a, b) = (Key::load(&raw).unwrap(), Key::load(&hex).unwrap());
        let sealed = a.seal("id1", b"secret body");
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_eq!(b.open("id1", &sealed).unwrap(), b"secret body");
        assert!(b.open("id2", &sealed).is_none());
        let mut bad = sealed.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(a.open("id1", &bad).is_none());
        let other = dir.path().join("other");
        std::fs::write(&other, [8u8; 32]).unwrap();
        assert!(Key::load(&other).unwrap().open("id1", &sealed).is_none());
        std::fs::write(&other, b"short").unwrap();
        assert!(Key::load(&other).is_err());
    }
}

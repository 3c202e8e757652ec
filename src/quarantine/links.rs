//! Per-recipient links: a token that names one recipient and an expiry, signed with
//! HMAC-SHA256 under a key in the quarantine directory (`link.key`, 0600, made at first use).
//! Whoever holds a recipient's link sees that recipient's kept mail and may release it to
//! that recipient; no account system. Changing any byte of the token, or waiting past its
//! expiry, makes it worthless.

use std::path::Path;

use base64ct::{Base64UrlUnpadded, Encoding};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::normal_address;

const KEY_FILE: &str = "link.key";

/// The key links are signed with.
#[derive(Clone)]
pub struct LinkKey([u8; 32]);

impl std::fmt::Debug for LinkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkKey(..)")
    }
}

/// Why a token does not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("not a quarantine link")]
    Malformed,
    #[error("the link's signature does not match")]
    BadSignature,
    #[error("the link has expired")]
    Expired,
}

impl LinkKey {
    /// The key of the quarantine directory `dir`, made (from /dev/urandom, 0600) when absent.
    pub fn open(dir: &Path) -> std::io::Result<LinkKey> {
        let path = dir.join(KEY_FILE);
        match std::fs::read(&path) {
            Ok(b) if b.len() == 32 => {
                let mut k = [0u8; 32];
                k.copy_from_slice(&b);
                return Ok(LinkKey(k));
            }
            Ok(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{} is not a 32-byte key", path.display()),
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        crate::secrets::private_dir(dir)?;
        let mut k = [0u8; 32];
        super::crypto::random(&mut k);
        crate::secrets::write_private(&path, &k)?;
        Ok(LinkKey(k))
    }

    fn mac(&self, rcpt: &str, expires: u64) -> Hmac<Sha256> {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("any key length");
        m.update(b"shrike quarantine link\0");
        m.update(rcpt.as_bytes());
        m.update(b"\0");
        m.update(expires.to_string().as_bytes());
        m
    }

    /// A token for `rcpt` valid until `expires` (Unix seconds).
    pub fn sign(&self, rcpt: &str, expires: u64) -> String {
        let rcpt = normal_address(rcpt);
        let sig = self.mac(&rcpt, expires).finalize().into_bytes();
        let hex: String = sig.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{}.{expires}.{hex}",
            Base64UrlUnpadded::encode_string(rcpt.as_bytes())
        )
    }

    /// The recipient a token names, when its signature matches and it has not expired at
    /// `now` (Unix seconds).
    pub fn verify(&self, token: &str, now: u64) -> Result<String, LinkError> {
        let mut parts = token.split('.');
        let (Some(r), Some(e), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(LinkError::Malformed);
        };
        let rcpt = Base64UrlUnpadded::decode_vec(r)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or(LinkError::Malformed)?;
        let expires: u64 = e.parse().map_err(|_| LinkError::Malformed)?;
        if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(LinkError::BadSignature);
        }
        let sig: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0))
            .collect();
        // Constant-time comparison (`verify_slice`).
        self.mac(&rcpt, expires)
            .verify_slice(&sig)
            .map_err(|_| LinkError::BadSignature)?;
        if now >= expires {
            return Err(LinkError::Expired);
        }
        Ok(rcpt)
    }
}

/// Unix seconds now.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_expire_and_refuse_changes() {
        let dir = tempfile::tempdir().unwrap();
        let k = LinkKey::open(dir.path()).unwrap();
        let t = k.sign("<Bob@Example.com>", 1000);
        assert_eq!(k.verify(&t, 999).unwrap(), "bob@example.com");
        assert_eq!(k.verify(&t, 1000), Err(LinkError::Expired));
        // Every character of the signature matters.
        let sig_at = t.rfind('.').unwrap() + 1;
        for i in sig_at..t.len() {
            let mut b = t.clone().into_bytes();
            b[i] = if b[i] == b'0' { b'1' } else { b'0' };
            let changed = String::from_utf8(b).unwrap();
            assert_eq!(k.verify(&changed, 1), Err(LinkError::BadSignature), "{i}");
        }
        // Another recipient or a later expiry with the same signature: refused.
        let other = t.replacen(
            t.split('.').next().unwrap(),
            &Base64UrlUnpadded::encode_string(b"eve@example.com"),
            1,
        );
        assert_eq!(k.verify(&other, 1), Err(LinkError::BadSignature));
        assert_eq!(
            k.verify(&t.replacen(".1000.", ".99999.", 1), 1),
            Err(LinkError::BadSignature)
        );
        assert_eq!(k.verify("garbage", 1), Err(LinkError::Malformed));
        let again = LinkKey::open(dir.path()).unwrap();
        assert!(again.verify(&t, 1).is_ok(), "the key is kept");
    }
}

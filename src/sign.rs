//! DKIM signing of mail our own users send (`[dkim_signing]`), by Stalwart's `mail-auth`.
//!
//! A message is signed only when its client authenticated (milter `{auth_authen}`, HTTP and
//! spamd `User`) and its From domain is the login's own domain (`alice@example.org` may send as
//! `example.org`): a signature vouches for the domain, so a login must never obtain one for a
//! domain it does not belong to. The key of a domain comes from a `[[dkim_signing.domain]]`
//! entry (read at start: a missing or unreadable key stops the start with the reason) or from
//! the `keys` path template (`$domain`, `$selector`), read when the domain first signs; a
//! domain whose key cannot be read then gets `DKIM_SIGN_FAIL` (score 0) with the reason, and the
//! message goes out unsigned and says so: never a crash, never an unsigned "success".
//!
//! Keys are PEM files: RSA in PKCS#1 (`BEGIN RSA PRIVATE KEY`) or PKCS#8 (`BEGIN PRIVATE KEY`),
//! Ed25519 in PKCS#8. Signatures use relaxed/relaxed canonicalization and RSA-SHA256 or
//! Ed25519-SHA256, by the key.
//!
//! ARC sealing (`[arc]`, [`Sealer`]): one RSA key read at start; the authentication task seals
//! each message with the results it found (`auth::verify`), and the scan keeps the set for
//! inbound mail it accepts unchanged.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mail_auth::common::crypto::{Ed25519Key, RsaKey, Sha256, SigningKey};
use mail_auth::dkim::{Canonicalization, DkimSigner, Done};
use parking_lot::Mutex;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::PrivateKeyDer;
use serde::{Deserialize, Serialize};

/// `[dkim_signing]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DkimSigningConfig {
    /// Sign authenticated senders' mail.
    pub enabled: bool,
    /// The selector of the domains the `keys` template serves.
    pub selector: String,
    /// Path of a domain's key, `$domain` and `$selector` replaced (empty: only the domains
    /// listed in `[[dkim_signing.domain]]` are signed).
    pub keys: String,
    /// Header fields signed (those present; `from` always).
    pub sign_headers: Vec<String>,
    /// Domains with their own selector and key file, read at start.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub domain: Vec<DomainKey>,
}

/// `[[dkim_signing.domain]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainKey {
    pub name: String,
    pub selector: String,
    pub key: PathBuf,
}

impl Default for DkimSigningConfig {
    fn default() -> Self {
        DkimSigningConfig {
            enabled: false,
            selector: "shrike".into(),
            keys: String::new(),
            sign_headers: [
                "from",
                "to",
                "cc",
                "subject",
                "date",
                "message-id",
                "in-reply-to",
                "references",
                "mime-version",
                "content-type",
                "content-transfer-encoding",
                "reply-to",
            ]
            .map(String::from)
            .to_vec(),
            domain: Vec::new(),
        }
    }
}

/// A `[dkim_signing]` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SignConfigError {
    #[error("dkim_signing: {0}")]
    Invalid(String),
    #[error("dkim_signing.domain {domain:?}: key {path}: {reason}")]
    Key {
        domain: String,
        path: PathBuf,
        reason: String,
    },
}

impl DkimSigningConfig {
    /// The checks that need no file (the keys are read by `Signer::new`).
    pub fn validate(&self) -> Result<(), SignConfigError> {
        if !self.enabled {
            return Ok(());
        }
        if self.keys.is_empty() && self.domain.is_empty() {
            return Err(SignConfigError::Invalid(
                "enabled without keys (a path template) or a [[dkim_signing.domain]]".into(),
            ));
        }
        if !self.keys.is_empty() && !self.keys.contains("$domain") {
            return Err(SignConfigError::Invalid(format!(
                "keys = {:?} must contain $domain (one key file per domain)",
                self.keys
            )));
        }
        for s in std::iter::once(&self.selector).chain(self.domain.iter().map(|d| &d.selector)) {
            if !valid_label_run(s) {
                return Err(SignConfigError::Invalid(format!(
                    "selector {s:?} is not a DNS name"
                )));
            }
        }
        for d in &self.domain {
            if !valid_label_run(&d.name) {
                return Err(SignConfigError::Invalid(format!(
                    "domain {:?} is not a DNS name",
                    d.name
                )));
            }
        }
        Ok(())
    }
}

/// Letters, digits, hyphens and dots, as selectors and domains are (no path separators: the
/// template puts them in a file name).
fn valid_label_run(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && !s.starts_with('.')
        && !s.contains("..")
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

/// A domain's ready signer.
enum Key {
    Rsa(DkimSigner<RsaKey<Sha256>, Done>),
    Ed25519(DkimSigner<Ed25519Key, Done>),
}

/// What signing did to a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not ours to sign: no login, a From domain that is not the login's, or no From.
    Skipped,
    /// The `DKIM-Signature` value (one line).
    Signed { domain: String, value: String },
    /// Should have been signed and could not be.
    Failed { domain: String, reason: String },
}

/// The signing keys of a daemon. Template keys are read once per domain and kept until the
/// signer is replaced (SIGHUP).
pub struct Signer {
    headers: Vec<String>,
    selector: String,
    template: String,
    fixed: HashMap<String, Arc<Key>>,
    loaded: Mutex<HashMap<String, Arc<Key>>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("domains", &self.fixed.keys().collect::<Vec<_>>())
            .field("template", &self.template)
            .finish()
    }
}

impl Signer {
    /// The signer of `config`, with every listed domain's key read (None: signing is off).
    pub fn new(config: &DkimSigningConfig) -> Result<Option<Signer>, SignConfigError> {
        if !config.enabled {
            return Ok(None);
        }
        config.validate()?;
        let mut headers: Vec<String> = config
            .sign_headers
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect();
        if !headers.iter().any(|h| h == "from") {
            headers.insert(0, "from".into());
        }
        let mut fixed = HashMap::new();
        for d in &config.domain {
            let name = d.name.to_ascii_lowercase();
            let key = load(&d.key, &name, &d.selector, &headers).map_err(|reason| {
                SignConfigError::Key {
                    domain: d.name.clone(),
                    path: d.key.clone(),
                    reason,
                }
            })?;
            fixed.insert(name, Arc::new(key));
        }
        Ok(Some(Signer {
            headers,
            selector: config.selector.clone(),
            template: config.keys.clone(),
            fixed,
            loaded: Mutex::new(HashMap::new()),
        }))
    }

    /// Drops the keys read through the template, so that each is read again at its next use.
    pub fn forget_loaded(&self) {
        self.loaded.lock().clear();
    }

    /// Signs `raw` when `user` may send as the domain of `from` (the first From address).
    pub fn sign(&self, raw: &[u8], user: Option<&str>, from: Option<&str>) -> Outcome {
        let (Some(user), Some(from)) = (user, from) else {
            return Outcome::Skipped;
        };
        let Some(domain) = domain_of(from) else {
            return Outcome::Skipped;
        };
        if domain_of(user).as_deref() != Some(domain.as_str()) {
            return Outcome::Skipped;
        }
        let key = match self.key(&domain) {
            Ok(Some(key)) => key,
            Ok(None) => return Outcome::Skipped,
            Err(reason) => return Outcome::Failed { domain, reason },
        };
        let signed = match &*key {
            Key::Rsa(s) => s.sign(raw),
            Key::Ed25519(s) => s.sign(raw),
        };
        match signed {
            Ok(sig) => Outcome::Signed {
                value: one_line(&sig.to_string()),
                domain,
            },
            Err(e) => Outcome::Failed {
                domain,
                reason: e.to_string(),
            },
        }
    }

    /// The domain's signer: listed, else read through the template (None: not a domain of
    /// ours, the template has no file for it).
    fn key(&self, domain: &str) -> Result<Option<Arc<Key>>, String> {
        if let Some(k) = self.fixed.get(domain) {
            return Ok(Some(k.clone()));
        }
        if self.template.is_empty() || !valid_label_run(domain) {
            return Ok(None);
        }
        if let Some(k) = self.loaded.lock().get(domain) {
            return Ok(Some(k.clone()));
        }
        let path = PathBuf::from(
            self.template
                .replace("$domain", domain)
                .replace("$selector", &self.selector),
        );
        let key = Arc::new(load(&path, domain, &self.selector, &self.headers)?);
        self.loaded.lock().insert(domain.to_string(), key.clone());
        Ok(Some(key))
    }
}

/// The lower-case domain after the last `@` of an address.
fn domain_of(address: &str) -> Option<String> {
    let address = address.trim().trim_start_matches('<').trim_end_matches('>');
    let (_, domain) = address.rsplit_once('@')?;
    let domain = domain.trim_end_matches('.').to_ascii_lowercase();
    (!domain.is_empty()).then_some(domain)
}

/// The field's value on one line: mail-auth writes the field name in front and folds the value
/// over lines; an MTA gets the value alone (relaxed canonicalization, and the whitespace left
/// in `h=`, `bh=` and `b=` is folding whitespace those tags allow).
fn one_line(field: &str) -> String {
    let value = match field.split_once(':') {
        Some((name, value)) if name.eq_ignore_ascii_case("dkim-signature") => value,
        _ => field,
    };
    value
        .replace("\r\n", "")
        .replace('\n', "")
        .trim()
        .to_string()
}

/// A key's signer: relaxed/relaxed over `headers`.
fn signer<T: SigningKey>(
    key: T,
    domain: &str,
    selector: &str,
    headers: &[String],
) -> DkimSigner<T, Done> {
    DkimSigner::from_key(key)
        .domain(domain)
        .selector(selector)
        .headers(headers.iter().cloned())
        .header_canonicalization(Canonicalization::Relaxed)
        .body_canonicalization(Canonicalization::Relaxed)
}

fn load(path: &Path, domain: &str, selector: &str, headers: &[String]) -> Result<Key, String> {
    let pem = std::fs::read(path).map_err(|e| format!("cannot read it: {e}"))?;
    let der = PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| format!("not a PEM private key ({e:?})"))?;
    let rsa = match &der {
        PrivateKeyDer::Pkcs1(_) => RsaKey::<Sha256>::from_key_der(der.clone_key()),
        PrivateKeyDer::Pkcs8(p) => match Ed25519Key::from_pkcs8_der(p.secret_pkcs8_der()) {
            Ok(ed) => return Ok(Key::Ed25519(signer(ed, domain, selector, headers))),
            Err(_) => RsaKey::<Sha256>::from_key_der(der.clone_key()),
        },
        _ => return Err("not an RSA or Ed25519 private key".into()),
    };
    rsa.map(|key| Key::Rsa(signer(key, domain, selector, headers)))
        .map_err(|e| format!("not an RSA or Ed25519 private key: {e}"))
}

/// The algorithm of a key `shrike dkim keygen` makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// RSA of this many bits (1024 to 4096: RFC 8301 asks verifiers to accept 1024 to 4096).
    Rsa(usize),
    Ed25519,
}

/// A new key: its PEM (PKCS#8) and the DNS record that publishes it.
#[derive(Debug)]
pub struct NewKey {
    pub pem: String,
    /// `SELECTOR._domainkey.DOMAIN`.
    pub name: String,
    /// The TXT record's text (`v=DKIM1; k=…; p=…`).
    pub record: String,
}

/// Makes a key for `domain` and `selector`.
pub fn keygen(kind: KeyKind, domain: &str, selector: &str) -> Result<NewKey, String> {
    use base64ct::{Base64, Encoding};
    use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
    for (what, name) in [("domain", domain), ("selector", selector)] {
        if !valid_label_run(name) {
            return Err(format!("{what} {name:?} is not a DNS name"));
        }
    }
    let (pem, k, public) = match kind {
        KeyKind::Rsa(bits) => {
            if !(1024..=4096).contains(&bits) {
                return Err(format!("RSA keys are 1024 to 4096 bits, not {bits}"));
            }
            let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, bits)
                .map_err(|e| format!("generating the RSA key: {e}"))?;
            let pem = key
                .to_pkcs8_pem(LineEnding::LF)
                .map_err(|e| format!("encoding the RSA key: {e}"))?;
            let public = key
                .to_public_key()
                .to_public_key_der()
                .map_err(|e| format!("encoding the RSA public key: {e}"))?;
            (pem.to_string(), "rsa", public.as_bytes().to_vec())
        }
        KeyKind::Ed25519 => {
            let der =
                Ed25519Key::generate_pkcs8().map_err(|e| format!("generating the key: {e}"))?;
            let key = Ed25519Key::from_pkcs8_der(&der).map_err(|e| e.to_string())?;
            let pem = rsa::pkcs8::der::pem::encode_string("PRIVATE KEY", LineEnding::LF, &der)
                .map_err(|e| format!("encoding the key: {e}"))?;
            (pem, "ed25519", key.public_key())
        }
    };
    Ok(NewKey {
        pem,
        name: format!("{selector}._domainkey.{domain}"),
        record: format!("v=DKIM1; k={k}; p={}", Base64::encode_string(&public)),
    })
}

impl NewKey {
    /// The record as a zone file line, its text split into strings of at most 255 bytes as
    /// TXT requires (a 2048-bit RSA key's is ~410).
    pub fn zone_line(&self) -> String {
        let chunks: Vec<String> = self
            .record
            .as_bytes()
            .chunks(250)
            .map(|c| format!("\"{}\"", String::from_utf8_lossy(c)))
            .collect();
        format!("{}. IN TXT ( {} )", self.name, chunks.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_logins_own_domain_is_signed() {
        assert_eq!(domain_of("Alice@Example.ORG"), Some("example.org".into()));
        assert_eq!(domain_of("<bob@example.org.>"), Some("example.org".into()));
        assert_eq!(domain_of("alice"), None);
        let signer = Signer {
            headers: vec!["from".into()],
            selector: "s".into(),
            template: String::new(),
            fixed: HashMap::new(),
            loaded: Mutex::new(HashMap::new()),
        };
        let raw = b"From: a@example.org\r\n\r\nhi\r\n";
        for (user, from) in [
            (None, Some("a@example.org")),
            (Some("a@example.org"), None),
            (Some("a@example.org"), Some("ceo@bank.example")),
            (Some("alice"), Some("a@example.org")),
            (Some("a@example.org"), Some("a@example.org")), // ours, but no key: not a domain of ours
        ] {
            assert_eq!(
                signer.sign(raw, user, from),
                Outcome::Skipped,
                "{user:?} {from:?}"
            );
        }
    }

    #[test]
    fn the_value_goes_out_on_one_line_without_its_name() {
        assert_eq!(
            one_line("dkim-signature:v=1; a=rsa-sha256;\r\n h=From:To; b=ab\r\n cd;"),
            "v=1; a=rsa-sha256; h=From:To; b=ab cd;"
        );
    }

    #[test]
    fn keygen_makes_keys_the_signer_reads() {
        let dir = tempfile::tempdir().unwrap();
        for kind in [KeyKind::Ed25519, KeyKind::Rsa(1024)] {
            let k = keygen(kind, "example.org", "s1").unwrap();
            assert_eq!(k.name, "s1._domainkey.example.org");
            assert!(k.record.starts_with("v=DKIM1; k="), "{}", k.record);
            let path = dir.path().join("k.pem");
            std::fs::write(&path, &k.pem).unwrap();
            let key = load(&path, "example.org", "s1", &["from".into()]).unwrap();
            assert_eq!(matches!(key, Key::Ed25519(_)), kind == KeyKind::Ed25519);
            assert!(k.zone_line().ends_with("\" )"), "{}", k.zone_line());
        }
        assert!(keygen(KeyKind::Rsa(512), "example.org", "s").is_err());
        assert!(keygen(KeyKind::Ed25519, "../etc", "s").is_err());
    }

    #[test]
    fn the_template_needs_the_domain_and_names_are_checked() {
        let mut c = DkimSigningConfig {
            enabled: true,
            keys: "/etc/shrike/dkim/key".into(),
            ..DkimSigningConfig::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("$domain"));
        c.keys = "/etc/shrike/dkim/$domain.$selector.key".into();
        assert!(c.validate().is_ok());
        c.selector = "../x".into();
        assert!(c.validate().is_err());
        assert!(!valid_label_run("a/b"));
        assert!(valid_label_run("s2026._x.example-1.org"));
    }
}

/// `[arc]`: ARC sealing (RFC 8617) of inbound mail we accept, so that a forward of it keeps
/// the authentication results we saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArcConfig {
    pub enabled: bool,
    /// The sealing domain (`d=`), whose `selector._domainkey` record holds the public key.
    pub domain: String,
    pub selector: String,
    /// PEM RSA key (PKCS#1 or PKCS#8): RFC 8617 allows only rsa-sha256.
    pub key: PathBuf,
    /// Header fields the ARC-Message-Signature covers (those present).
    pub sign_headers: Vec<String>,
}

impl Default for ArcConfig {
    fn default() -> Self {
        ArcConfig {
            enabled: false,
            domain: String::new(),
            selector: "arc".into(),
            key: PathBuf::new(),
            sign_headers: DkimSigningConfig::default().sign_headers,
        }
    }
}

/// Seals messages with a domain's ARC key (read at start: an unreadable key stops the start).
pub struct Sealer {
    sealer: mail_auth::arc::ArcSealer<RsaKey<Sha256>, Done>,
    domain: String,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer")
            .field("domain", &self.domain)
            .finish()
    }
}

/// Bytes of the message a seal covers at most: a message past this is not sealed (its
/// canonical form would be hashed whole, and the scan reads no more of it either).
pub const MAX_SEAL_BYTES: usize = 64 << 20;

impl Sealer {
    /// `None` when `[arc]` is off.
    pub fn new(config: &ArcConfig) -> Result<Option<Sealer>, SignConfigError> {
        if !config.enabled {
            return Ok(None);
        }
        let invalid = |m: String| SignConfigError::Invalid(format!("arc: {m}"));
        if !valid_label_run(&config.domain) {
            return Err(invalid(format!(
                "domain {:?} is not a DNS name",
                config.domain
            )));
        }
        if !valid_label_run(&config.selector) {
            return Err(invalid(format!(
                "selector {:?} is not a DNS name",
                config.selector
            )));
        }
        let key_error = |reason: String| SignConfigError::Key {
            domain: config.domain.clone(),
            path: config.key.clone(),
            reason,
        };
        let pem =
            std::fs::read(&config.key).map_err(|e| key_error(format!("cannot read it: {e}")))?;
        let der = PrivateKeyDer::from_pem_slice(&pem)
            .map_err(|e| key_error(format!("not a PEM private key ({e:?})")))?;
        let key = RsaKey::<Sha256>::from_key_der(der).map_err(|e| {
            key_error(format!(
                "not an RSA private key (ARC seals with rsa-sha256): {e}"
            ))
        })?;
        let sealer = mail_auth::arc::ArcSealer::from_key(key)
            .domain(config.domain.clone())
            .selector(config.selector.clone())
            .headers(config.sign_headers.iter().cloned())
            .header_canonicalization(Canonicalization::Relaxed)
            .body_canonicalization(Canonicalization::Relaxed);
        Ok(Some(Sealer {
            sealer,
            domain: config.domain.clone(),
        }))
    }

    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The ARC set (ARC-Seal, ARC-Message-Signature, ARC-Authentication-Results header lines,
    /// CRLF-terminated) for `message` with the chain as verified (`arc`) and our results.
    pub fn seal(
        &self,
        message: &mail_auth::AuthenticatedMessage<'_>,
        results: &mail_auth::AuthenticationResults<'_>,
        arc: &mail_auth::ArcOutput<'_>,
    ) -> Result<String, String> {
        use mail_auth::common::headers::HeaderWriter;
        if message.raw_message.len() > MAX_SEAL_BYTES {
            return Err("message too large to seal".into());
        }
        if !arc.can_be_sealed() {
            return Err("the chain it carries failed (cv=fail): not sealed again".into());
        }
        self.sealer
            .seal(message, results, arc)
            .map(|set| set.to_header())
            .map_err(|e| e.to_string())
    }
}

/// An ARC set's header lines as `(name, value)` fields, each value on one line, in order.
pub fn seal_fields(set: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in set.split("\r\n").filter(|l| !l.is_empty()) {
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = out.last_mut() {
                v.push_str(line);
            }
        } else if let Some((name, value)) = line.split_once(':') {
            out.push((name.trim().to_string(), value.trim_start().to_string()));
        }
    }
    out
}

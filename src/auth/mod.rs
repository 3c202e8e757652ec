//! Mail authentication: SPF (envelope sender and HELO), DKIM (every signature, RSA and
//! Ed25519), DMARC (alignment and the published policy) and ARC, verified by Stalwart's
//! `mail-auth` over the shared resolver (`verify.rs`), and their results as plain data
//! (`AuthResults`, what rules read as `msg:auth()`) and as an `Authentication-Results` header
//! (RFC 8601, `header.rs`).
//!
//! Owns: the result types, the mapping of mail-auth's outputs onto them, the header.
//! Never touches: the scan workers, rules, sockets other than the resolver's.

mod cache;
mod header;
mod memo;
mod verify;

pub use cache::AuthCaches;
pub use header::{authentication_results, claims_authserv_id};
pub use verify::{memoized, prefetch, verify, Piece, Smtp};

use serde::{Deserialize, Serialize};

/// `[auth]`: how results are written for the MTA.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// The authserv-id of our `Authentication-Results` header (RFC 8601 2.5); empty: this
    /// host's name. Incoming headers claiming it are removed.
    pub authserv_id: String,
    /// Whether the milter adds `Authentication-Results` (and removes forged ones).
    pub milter_header: bool,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            authserv_id: String::new(),
            milter_header: true,
        }
    }
}

/// Why `[auth]` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthConfigError {
    #[error("auth.authserv_id {0:?} is not a token (letters, digits, '.', '-', '_')")]
    AuthservId(String),
}

impl AuthConfig {
    pub fn validate(&self) -> Result<(), AuthConfigError> {
        let id = &self.authserv_id;
        if !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(AuthConfigError::AuthservId(id.clone()));
        }
        Ok(())
    }

    /// The authserv-id in use: configured, or this host's name, or `localhost`.
    pub fn authserv_id(&self) -> String {
        if !self.authserv_id.is_empty() {
            return self.authserv_id.to_ascii_lowercase();
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| {
                !h.is_empty()
                    && AuthConfig {
                        authserv_id: h.clone(),
                        milter_header: true,
                    }
                    .validate()
                    .is_ok()
            })
            .unwrap_or_else(|| "localhost".to_string())
    }
}

/// An RFC 8601 result value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pass,
    Fail,
    SoftFail,
    Neutral,
    /// A temporary failure: the resolver did not answer (in time).
    TempError,
    PermError,
    /// Nothing to check (no signature, no record).
    #[default]
    None,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::SoftFail => "softfail",
            Status::Neutral => "neutral",
            Status::TempError => "temperror",
            Status::PermError => "permerror",
            Status::None => "none",
        }
    }
}

/// One method's result (one DKIM signature's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct MethodResult {
    pub result: Status,
    /// SPF: the domain checked; DKIM: the signing domain (`d=`); DMARC: the From domain; ARC:
    /// the sealing domain of the last set.
    pub domain: Option<String>,
    /// DKIM and ARC: the selector (`s=`).
    pub selector: Option<String>,
    /// DMARC: the policy that applies to the From domain (`reject`, `quarantine`, `none`).
    pub policy: Option<String>,
    /// Why, when not a pass: mail-auth's error text, or "no answer within the budget".
    pub reason: Option<String>,
    /// DKIM: the signing domain is aligned with the From domain (relaxed: same organizational
    /// domain).
    pub aligned: bool,
}

impl MethodResult {
    pub fn of(result: Status) -> Self {
        MethodResult {
            result,
            ..Default::default()
        }
    }

    /// A temporary failure with its reason.
    pub fn temp(reason: &str) -> Self {
        MethodResult {
            result: Status::TempError,
            reason: Some(reason.to_string()),
            ..Default::default()
        }
    }
}

/// What authentication found of one message. `None` (or no DKIM entry): the method was not
/// run (checks off), which rules read as "not available", like `none`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct AuthResults {
    /// SPF of the envelope sender (MAIL FROM, or postmaster@HELO for a bounce).
    pub spf: Option<MethodResult>,
    /// SPF of the HELO name.
    pub helo: Option<MethodResult>,
    /// One entry per DKIM-Signature.
    pub dkim: Vec<MethodResult>,
    pub dmarc: Option<MethodResult>,
    pub arc: Option<MethodResult>,
    /// The RFC 5322 From domain authentication was judged for.
    pub from_domain: Option<String>,
}

impl AuthResults {
    /// The signing domain of a valid DKIM signature aligned with the From domain: a
    /// reputation key a forger cannot borrow (he cannot sign for it).
    pub fn aligned_dkim_domain(&self) -> Option<&str> {
        self.dkim
            .iter()
            .find(|d| d.result == Status::Pass && d.aligned)
            .and_then(|d| d.domain.as_deref())
    }
}

/// The registrable (organizational) domain of a host name, lower-cased.
pub(crate) fn organizational(domain: &str) -> String {
    let d = domain.trim_end_matches('.').to_ascii_lowercase();
    match psl::domain_str(&d) {
        Some(r) => r.to_string(),
        None => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_dkim_domain_needs_a_pass_and_alignment() {
        let mut a = AuthResults::default();
        assert_eq!(a.aligned_dkim_domain(), None);
        a.dkim.push(MethodResult {
            result: Status::Pass,
            domain: Some("other.example".into()),
            ..Default::default()
        });
        a.dkim.push(MethodResult {
            result: Status::Fail,
            domain: Some("bank.example".into()),
            aligned: true,
            ..Default::default()
        });
        assert_eq!(a.aligned_dkim_domain(), None);
        a.dkim.push(MethodResult {
            result: Status::Pass,
            domain: Some("mail.bank.example".into()),
            aligned: true,
            ..Default::default()
        });
        assert_eq!(a.aligned_dkim_domain(), Some("mail.bank.example"));
        assert_eq!(organizational("Mail.Bank.Example."), "bank.example");
    }
}

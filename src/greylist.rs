//! Greylisting (rspamd's `greylist`, Postgrey): the first delivery attempt of an unknown
//! (client network, envelope sender, recipient) triple is deferred; a retry after `delay_secs`
//! (real MTAs retry, most spamware does not) passes, and the triple then passes at once for
//! `pass_expire_secs`.
//!
//! Owns: `[greylist]` ([`GreylistConfig`], [`GreylistConfigError`]), the triple's keys and the
//! decision ([`Greylist::check`]). Never touches: the verdict (`scan` turns an outcome into an
//! action and a symbol), which messages are greylisted at all (`scan`: by score and action,
//! not for authenticated senders, not for settings that switch `GREYLIST` off), sockets.
//!
//! The state lives in the reputation store's rate counters, so several daemons on one Redis
//! share it: per triple, the attempts of the last `delay_secs` and of the last `expire_secs`
//! (two counters), and the passes of the last `pass_expire_secs`. An attempt older than the
//! delay but within the expiry (more attempts over the long window than over the short one)
//! lets the triple pass. A triple is hashed to one 64-bit key whatever the length of its
//! addresses, and a message looks up at most [`MAX_TRIPLES`] of them (its first recipients), so
//! a message costs a bounded number of store operations and keys.

use std::net::IpAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::message::Envelope;
use crate::store::{ReputationStore, StoreKey};

/// The symbols: a deferred message (`GREYLIST`) and one whose triples passed (`GREYLIST_PASS`),
/// both score 0.
pub const GREYLIST: &str = "GREYLIST";
pub const GREYLIST_PASS: &str = "GREYLIST_PASS";

/// Recipients of one message whose triples are checked (the first ones): a message to 1,000
/// recipients costs no more store operations than one to 8.
pub const MAX_TRIPLES: usize = 8;

/// Store kinds of the greylist's rate counters (beside the rules' `ratelimit`, 1000; outside
/// the shingle types' range).
const KIND_RECENT: u16 = 1_001;
const KIND_SEEN: u16 = 1_002;
const KIND_PASSED: u16 = 1_003;

/// Addresses are compared on at most this many bytes (RFC 5321's path limit).
const MAX_ADDRESS_BYTES: usize = 256;

/// `[greylist]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GreylistConfig {
    /// Off by default: the `greylist` action then defers every time, as before.
    pub enabled: bool,
    /// How long a new triple is deferred.
    pub delay_secs: u64,
    /// How long a deferred triple's first attempt counts: a retry later starts again.
    pub expire_secs: u64,
    /// How long a triple that passed keeps passing at once (renewed by each pass).
    pub pass_expire_secs: u64,
    /// Messages scoring below this are not greylisted (default: the `greylist` threshold of
    /// the settings that judged the message).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_score: Option<f64>,
}

impl Default for GreylistConfig {
    fn default() -> Self {
        GreylistConfig {
            enabled: false,
            delay_secs: 300,
            expire_secs: 86_400,
            pass_expire_secs: 30 * 86_400,
            min_score: None,
        }
    }
}

/// Why `[greylist]` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GreylistConfigError {
    #[error("greylist.delay_secs must be greater than 0")]
    ZeroDelay,
    #[error("greylist.expire_secs ({expire}) must be greater than greylist.delay_secs ({delay})")]
    ExpireTooShort { expire: u64, delay: u64 },
    #[error("greylist.pass_expire_secs must be greater than 0")]
    ZeroPassExpire,
    #[error("greylist.min_score must be a finite number")]
    MinScore,
}

impl GreylistConfig {
    pub fn validate(&self) -> Result<(), GreylistConfigError> {
        if self.delay_secs == 0 {
            return Err(GreylistConfigError::ZeroDelay);
        }
        if self.expire_secs <= self.delay_secs {
            return Err(GreylistConfigError::ExpireTooShort {
                expire: self.expire_secs,
                delay: self.delay_secs,
            });
        }
        if self.pass_expire_secs == 0 {
            return Err(GreylistConfigError::ZeroPassExpire);
        }
        if self.min_score.is_some_and(|s| !s.is_finite()) {
            return Err(GreylistConfigError::MinScore);
        }
        Ok(())
    }
}

/// What greylisting decided for a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Some triple is new or too young: defer. `triples` were looked at.
    Deferred { new: usize, waiting: usize },
    /// Every triple looked at has passed (now or before).
    Passed { triples: usize },
    /// Not greylisted: no client address, or the store cannot say (fail open).
    Skipped(&'static str),
}

/// Greylisting over a reputation store.
pub struct Greylist {
    config: GreylistConfig,
    store: Arc<dyn ReputationStore>,
    namespace: u8,
}

impl std::fmt::Debug for Greylist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Greylist")
            .field("config", &self.config)
            .finish()
    }
}

impl Greylist {
    /// `None` when `[greylist]` is off.
    pub fn new(
        config: &GreylistConfig,
        store: Arc<dyn ReputationStore>,
        namespace: u8,
    ) -> Option<Greylist> {
        config.enabled.then(|| Greylist {
            config: config.clone(),
            store,
            namespace,
        })
    }

    pub fn config(&self) -> &GreylistConfig {
        &self.config
    }

    /// Checks (and records) the message's triples: a new or young one defers the message; an
    /// old enough one passes and is remembered as passed.
    pub fn check(&self, envelope: &Envelope) -> Outcome {
        let Some(ip) = envelope.client_ip else {
            return Outcome::Skipped("no client address");
        };
        if self.store.status().is_some_and(|s| s.degraded) {
            return Outcome::Skipped("store unavailable");
        }
        let sender = envelope.mail_from.as_deref().unwrap_or("");
        let rcpts: Vec<&str> = if envelope.rcpt_to.is_empty() {
            vec![""]
        } else {
            envelope
                .rcpt_to
                .iter()
                .take(MAX_TRIPLES)
                .map(String::as_str)
                .collect()
        };
        let c = &self.config;
        let (mut new, mut waiting, mut passed) = (0, 0, 0);
        for rcpt in rcpts {
            let hash = triple_hash(ip, sender, rcpt);
            let key = |kind| StoreKey {
                namespace: self.namespace,
                kind,
                hash,
            };
            // `peek_rate` counts the hit it would make: the stored attempts are one fewer.
            let stored = |kind, window| {
                self.store
                    .peek_rate(key(kind), u64::MAX, window)
                    .count
                    .saturating_sub(1)
            };
            if stored(KIND_PASSED, c.pass_expire_secs) > 0 {
                self.store
                    .hit(key(KIND_PASSED), u64::MAX, c.pass_expire_secs);
                passed += 1;
                continue;
            }
            let seen = stored(KIND_SEEN, c.expire_secs);
            let recent = stored(KIND_RECENT, c.delay_secs);
            if seen > recent {
                // An attempt older than the delay, within the expiry: a real retry.
                self.store
                    .hit(key(KIND_PASSED), u64::MAX, c.pass_expire_secs);
                passed += 1;
                continue;
            }
            if seen == 0 {
                new += 1;
            } else {
                waiting += 1;
            }
            self.store.hit(key(KIND_SEEN), u64::MAX, c.expire_secs);
            self.store.hit(key(KIND_RECENT), u64::MAX, c.delay_secs);
        }
        if new + waiting > 0 {
            Outcome::Deferred { new, waiting }
        } else {
            Outcome::Passed { triples: passed }
        }
    }
}

/// The triple's key: the client's /24 (IPv4) or /64 (IPv6), and the sender and recipient
/// lower-cased (a long address is cut: it still names one triple).
fn triple_hash(ip: IpAddr, sender: &str, rcpt: &str) -> u64 {
    let mut bytes = Vec::with_capacity(24 + 2 * MAX_ADDRESS_BYTES);
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            bytes.extend_from_slice(&[4, o[0], o[1], o[2]]);
        }
        IpAddr::V6(v6) => {
            bytes.push(6);
            bytes.extend_from_slice(&v6.octets()[..8]);
        }
    }
    for part in [sender, rcpt] {
        bytes.push(0);
        let part = part.trim().trim_matches(['<', '>']);
        let cut = part.len().min(MAX_ADDRESS_BYTES);
        bytes.extend(part.as_bytes()[..cut].iter().map(u8::to_ascii_lowercase));
    }
    xxhash_rust::xxh3::xxh3_64(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ManualClock, Store, StoreConfig};

    fn greylist(clock: &Arc<ManualClock>) -> Greylist {
        let store = Store::new(&StoreConfig::default(), clock.clone()).unwrap();
        let config = GreylistConfig {
            enabled: true,
            delay_secs: 300,
            ..GreylistConfig::default()
        };
        Greylist::new(&config, Arc::new(store), 0).unwrap()
    }

    fn envelope(ip: &str, from: &str, rcpts: &[&str]) -> Envelope {
        Envelope {
            client_ip: ip.parse().ok(),
            mail_from: Some(from.into()),
            rcpt_to: rcpts.iter().map(|r| r.to_string()).collect(),
            ..Envelope::default()
        }
    }

    #[test]
    fn a_retry_after_the_delay_passes_and_keeps_passing() {
        let clock = Arc::new(ManualClock::new(1_800_000_000));
        let g = greylist(&clock);
        let e = envelope("192.0.2.10", "a@example.net", &["b@example.com"]);
        assert_eq!(g.check(&e), Outcome::Deferred { new: 1, waiting: 0 });
        // Too early, even retried every few seconds.
        for _ in 0..10 {
            clock.advance(20);
            assert_eq!(g.check(&e), Outcome::Deferred { new: 0, waiting: 1 });
        }
        clock.advance(200);
        assert_eq!(g.check(&e), Outcome::Passed { triples: 1 });
        // The same /24, another host: the same triple.
        clock.advance(86_400 * 5);
        let neighbour = envelope("192.0.2.99", "A@Example.net", &["<b@example.com>"]);
        assert_eq!(g.check(&neighbour), Outcome::Passed { triples: 1 });
        // Another network, sender or recipient: a new triple.
        for other in [
            envelope("192.0.3.10", "a@example.net", &["b@example.com"]),
            envelope("192.0.2.10", "x@example.net", &["b@example.com"]),
            envelope("192.0.2.10", "a@example.net", &["c@example.com"]),
        ] {
            assert_eq!(g.check(&other), Outcome::Deferred { new: 1, waiting: 0 });
        }
    }

    #[test]
    fn a_retry_after_the_expiry_starts_again() {
        let clock = Arc::new(ManualClock::new(1_800_000_000));
        let g = greylist(&clock);
        let e = envelope("2001:db8:1:2::7", "a@example.net", &["b@example.com"]);
        assert!(matches!(g.check(&e), Outcome::Deferred { .. }));
        clock.advance(86_400 * 2);
        assert_eq!(g.check(&e), Outcome::Deferred { new: 1, waiting: 0 });
        // The /64 is the network.
        clock.advance(400);
        let same_64 = envelope("2001:db8:1:2::8", "a@example.net", &["b@example.com"]);
        assert_eq!(g.check(&same_64), Outcome::Passed { triples: 1 });
    }

    #[test]
    fn a_message_checks_a_bounded_number_of_triples() {
        let clock = Arc::new(ManualClock::new(1_800_000_000));
        let g = greylist(&clock);
        let rcpts: Vec<String> = (0..1_000).map(|i| format!("r{i}@example.com")).collect();
        let refs: Vec<&str> = rcpts.iter().map(String::as_str).collect();
        let long = "x".repeat(100_000);
        let e = envelope("192.0.2.1", &long, &refs);
        assert_eq!(
            g.check(&e),
            Outcome::Deferred {
                new: MAX_TRIPLES,
                waiting: 0
            }
        );
        let no_ip = Envelope::default();
        assert_eq!(g.check(&no_ip), Outcome::Skipped("no client address"));
    }

    #[test]
    fn options_are_checked() {
        assert!(GreylistConfig::default().validate().is_ok());
        let bad = GreylistConfig {
            expire_secs: 10,
            delay_secs: 10,
            ..GreylistConfig::default()
        };
        assert_eq!(
            bad.validate().unwrap_err().to_string(),
            "greylist.expire_secs (10) must be greater than greylist.delay_secs (10)"
        );
    }
}

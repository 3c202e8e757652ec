//! Outbound mail: which messages are our own users' (`[outbound]`: the client authenticated, or
//! its address is in `networks`), the action thresholds they are judged by
//! (`[outbound.actions]`), what the reputation store keeps of them instead of inbound
//! reputation (the hashed Message-IDs replies are checked against and the (user, recipient)
//! pairs known correspondents are checked against, [`Outbound::sent`]), what an inbound
//! message earns from them ([`Outbound::inbound_facts`]), and the per-user limits that stop a
//! compromised account ([`Outbound::limit`], `[outbound.limits]`).
//!
//! Owns: [`OutboundConfig`] with [`OutboundConfigError`], the store kinds below. Never touches:
//! the rules (they read the facts through `msg:direction()`, `msg:reply()`,
//! `msg:known_correspondent()`), the verdict's thresholds or symbols (`scan` applies them),
//! sockets, metrics (the server counts the `OUTBOUND_LIMIT` symbol).
//!
//! Everything lives in the reputation store under namespace 0 and kinds outside the shingle
//! types' range, so several daemons on one Redis share it and an operator's `[scan] namespace`
//! for split traffic does not separate the Message-IDs a submission daemon stored from the
//! inbound daemon that checks replies against them. Keys are 64-bit hashes: no Message-ID or
//! address is stored as text.
//!
//! What a sender cannot buy: a reply counts only when one of the ids it names was stored by an
//! outbound scan (a random or guessed `In-Reply-To` finds nothing), and a known correspondent
//! counts only when the sender authenticated its From domain (an aligned DKIM pass, or an SPF
//! pass of an envelope sender in the From's organizational domain): a From header alone never
//! does.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use ipnet::IpNet;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::auth::{AuthResults, Status};
use crate::message::Envelope;
use crate::store::{Counter, Increment, ReputationStore, StoreKey};
use crate::verdict::{Action, ActionsConfig, VerdictConfig};

/// The symbol of a message over one of its user's limits (score 0; the configured action).
pub const OUTBOUND_LIMIT: &str = "OUTBOUND_LIMIT";

/// Store kinds (beside the greylist's 1001–1003, outside the shingle types' range).
const KIND_REPLY_ID: u16 = 1_010;
const KIND_CORRESPONDENT: u16 = 1_011;
const KIND_USER_MESSAGES: u16 = 1_012;
const KIND_USER_RCPT_PAIR: u16 = 1_013;
const KIND_USER_RECIPIENTS: u16 = 1_014;
const KIND_USER_SPAM: u16 = 1_015;
const KIND_USER_BURST: u16 = 1_016;
const KIND_USER_RCPT_SEEN: u16 = 1_017;

/// The namespace of the keys above, whatever `[scan] namespace` says (see the module header).
const NAMESPACE: u8 = 0;

/// Ids an inbound message's `In-Reply-To` and `References` are checked for at most: all of
/// `In-Reply-To`'s, then the newest of `References` (a thread's last messages are the ones our
/// user may have written). A header of thousands of ids costs no more store reads.
pub const MAX_REPLY_IDS: usize = 16;

/// Recipients of one message whose pairs are stored or checked at most.
pub const MAX_PAIRS: usize = 32;

/// Recipients of one message whose distinctness is checked in the store; past these each
/// recipient counts as a new one (a message to thousands costs a bounded number of reads and
/// can only count more, never less).
pub const MAX_DISTINCT_CHECKS: usize = 64;

/// Users whose over-limit log line and status entry are remembered at most.
const MAX_LIMITED_USERS: usize = 1_024;

/// Bytes of an id or address hashed at most.
const MAX_ID_BYTES: usize = 998;

/// `[outbound]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutboundConfig {
    /// Client networks whose mail is outbound without a login (a webmail host, an internal
    /// relay). An authenticated client is outbound wherever it connects from.
    pub networks: Vec<String>,
    /// Thresholds of outbound mail in rspamd's form; each one given replaces `[verdict]`'s.
    pub actions: ActionsConfig,
    /// Remember our users' Message-IDs and correspondents, and check inbound mail against them.
    pub replies: bool,
    /// How long a sent Message-ID (and a correspondent) is remembered, rounded up to the
    /// smallest of the store's windows (`[store] windows_secs`) that holds it.
    pub reply_ttl_secs: u64,
    /// `[outbound.limits]`.
    pub limits: LimitsConfig,
}

impl Default for OutboundConfig {
    fn default() -> Self {
        OutboundConfig {
            networks: Vec::new(),
            actions: ActionsConfig::default(),
            replies: true,
            reply_ttl_secs: 7 * 86_400,
            limits: LimitsConfig::default(),
        }
    }
}

/// `[outbound.limits]`: per authenticated user, over a sliding window. 0 turns a limit off.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// The sliding window of `messages`, `recipients` and `spam`.
    pub window_secs: u64,
    /// Messages a user may send in the window.
    pub messages: u64,
    /// Distinct recipients a user may send to in the window.
    pub recipients: u64,
    /// Messages of a user judged spam (`add header` or above by `[outbound.actions]`) in the
    /// window.
    pub spam: u64,
    /// The burst detector: messages a user may send within `burst_secs`.
    pub burst: u64,
    pub burst_secs: u64,
    /// What a message over a limit gets: `soft reject` (the MTA answers 4xx; the default),
    /// `quarantine` (held by the MTA), `discard` (accepted and dropped), or `reject`.
    pub action: Action,
    /// One log line per user over a limit per this many seconds.
    pub log_interval_secs: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            window_secs: 3_600,
            messages: 500,
            recipients: 500,
            spam: 20,
            burst: 120,
            burst_secs: 60,
            action: Action::SoftReject,
            log_interval_secs: 300,
        }
    }
}

/// Why `[outbound]` cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OutboundConfigError {
    #[error("outbound.networks: {0:?} is not a network (address or CIDR)")]
    Network(String),
    #[error("outbound.reply_ttl_secs must be greater than 0")]
    ReplyTtl,
    #[error("outbound.reply_ttl_secs = {0} is longer than the store's longest window ({1} s, [store] windows_secs)")]
    TtlPastWindows(u64, u64),
    #[error("outbound.limits.{0} must be greater than 0")]
    Zero(&'static str),
    #[error("outbound.limits.action must hold the message (soft reject, quarantine, discard or reject), not {0:?}")]
    Action(&'static str),
    #[error("outbound.actions: {0}")]
    Actions(#[from] crate::verdict::VerdictConfigError),
}

impl OutboundConfig {
    pub fn validate(&self) -> Result<(), OutboundConfigError> {
        networks(&self.networks)?;
        if self.reply_ttl_secs == 0 {
            return Err(OutboundConfigError::ReplyTtl);
        }
        let l = &self.limits;
        for (name, v) in [
            ("window_secs", l.window_secs),
            ("burst_secs", l.burst_secs),
            ("log_interval_secs", l.log_interval_secs),
        ] {
            if v == 0 {
                return Err(OutboundConfigError::Zero(name));
            }
        }
        if l.action < Action::SoftReject {
            return Err(OutboundConfigError::Action(l.action.as_str()));
        }
        Ok(())
    }

    /// The reply TTL against the store's windows (`[store] windows_secs`): it must fit the
    /// longest, as nothing older is kept.
    pub fn fits_windows(&self, windows_secs: &[u64]) -> Result<(), OutboundConfigError> {
        let longest = windows_secs.iter().copied().max().unwrap_or(0);
        if self.replies && self.reply_ttl_secs > longest {
            return Err(OutboundConfigError::TtlPastWindows(
                self.reply_ttl_secs,
                longest,
            ));
        }
        Ok(())
    }

    /// The thresholds outbound mail is judged by: `inbound`'s with `actions` over them.
    pub fn verdict(&self, inbound: &VerdictConfig) -> Result<VerdictConfig, OutboundConfigError> {
        let mut v = inbound.clone();
        self.actions.apply(&mut v);
        v.validate()?;
        Ok(v)
    }
}

fn networks(list: &[String]) -> Result<Vec<IpNet>, OutboundConfigError> {
    list.iter()
        .map(|s| {
            let s = s.trim();
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| OutboundConfigError::Network(s.to_string()))
        })
        .collect()
}

/// A message's direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Direction {
    #[default]
    Inbound,
    Outbound,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Inbound => "inbound",
            Direction::Outbound => "outbound",
        }
    }
}

/// What the store knows of an inbound message from our users' own mail.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InboundFacts {
    /// Ids of its `In-Reply-To`/`References` that an outbound scan stored.
    pub replied: u32,
    /// Messages the recipient sent to this (authenticated) sender in the reply window; 0 when
    /// the sender did not authenticate its From domain.
    pub correspondent: u64,
}

/// One limit a message went over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Over {
    pub limit: &'static str,
    pub count: u64,
    pub max: u64,
    pub window_secs: u64,
}

impl std::fmt::Display for Over {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} > {} in {} s",
            self.limit, self.count, self.max, self.window_secs
        )
    }
}

/// A user over a limit, for the status page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitedUser {
    pub user: String,
    /// Unix seconds (the store's clock) of the latest message over a limit.
    pub last: u64,
    /// The limit it went over, as `Over` prints it.
    pub reason: String,
    /// Messages over a limit since the daemon started.
    pub messages: u64,
}

/// `[outbound]` ready for scans.
pub struct Outbound {
    config: OutboundConfig,
    nets: Vec<IpNet>,
    store: Arc<dyn ReputationStore>,
    /// Index of the store window replies and correspondents are read over.
    window: usize,
    /// Users over a limit: when each was last logged, and the status page's entry.
    limited: Mutex<HashMap<String, (Instant, LimitedUser)>>,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbound")
            .field("config", &self.config)
            .finish()
    }
}

fn key(kind: u16, hash: u64) -> StoreKey {
    StoreKey {
        namespace: NAMESPACE,
        kind,
        hash,
    }
}

fn cut(s: &str) -> &str {
    if s.len() <= MAX_ID_BYTES {
        return s;
    }
    let mut end = MAX_ID_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A Message-ID as compared: without angle brackets and surrounding space (the local part is
/// case-sensitive, so it is kept as written).
fn id_hash(id: &str) -> Option<u64> {
    let id = id
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .trim();
    (!id.is_empty() && id.contains('@')).then(|| crate::shingle::hash_pair("message-id", cut(id)))
}

fn address(a: &str) -> String {
    cut(a.trim().trim_start_matches('<').trim_end_matches('>')).to_ascii_lowercase()
}

fn pair_hash(ours: &str, theirs: &str) -> u64 {
    crate::shingle::hash_pair(&address(ours), &address(theirs))
}

fn user_hash(user: &str) -> u64 {
    crate::shingle::hash_pair("user", cut(user))
}

impl Outbound {
    /// `config` checked (`OutboundConfig::validate`) over `store`.
    pub fn new(config: &OutboundConfig, store: Arc<dyn ReputationStore>) -> Outbound {
        let windows = store.windows_secs();
        let window = windows
            .iter()
            .enumerate()
            .filter(|(_, &w)| w >= config.reply_ttl_secs)
            .min_by_key(|(_, &w)| w)
            .map(|(i, _)| i)
            .unwrap_or_else(|| {
                // (The longest window: a TTL past what the store keeps cannot be honoured.)
                windows
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, &w)| w)
                    .map_or(0, |(i, _)| i)
            });
        Outbound {
            config: config.clone(),
            nets: networks(&config.networks).unwrap_or_default(),
            store,
            window,
            limited: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &OutboundConfig {
        &self.config
    }

    /// Outbound when the client authenticated or comes from one of `networks`.
    pub fn direction(&self, envelope: &Envelope) -> Direction {
        let authenticated = envelope
            .user
            .as_deref()
            .is_some_and(|u| !u.trim().is_empty());
        let trusted = envelope
            .client_ip
            .is_some_and(|ip| self.nets.iter().any(|n| n.contains(&ip)));
        if authenticated || trusted {
            Direction::Outbound
        } else {
            Direction::Inbound
        }
    }

    /// The store increments of an accepted outbound message: its Message-ID, and one per
    /// (sender, recipient) pair. `from`: the sender's address (From, else MAIL FROM).
    pub fn sent(
        &self,
        message_id: Option<&str>,
        from: Option<&str>,
        rcpt: &[String],
    ) -> Vec<Increment> {
        if !self.config.replies {
            return Vec::new();
        }
        let mut out = Vec::new();
        if let Some(h) = message_id.and_then(id_hash) {
            out.push(Increment::one(key(KIND_REPLY_ID, h), Counter::Seen));
        }
        if let Some(from) = from.filter(|f| f.contains('@')) {
            let mut seen = std::collections::HashSet::new();
            for r in rcpt.iter().filter(|r| r.contains('@')).take(MAX_PAIRS) {
                let h = pair_hash(from, r);
                if seen.insert(h) {
                    out.push(Increment::one(key(KIND_CORRESPONDENT, h), Counter::Seen));
                }
            }
        }
        out
    }

    /// What the store says of an inbound message: the ids it replies to that our users sent,
    /// and how often its recipient wrote to its sender, counted only when the sender
    /// authenticated its From domain (`auth`: the network checks; none offline). A store that
    /// does not answer gives nothing: no ham points on a guess.
    pub fn inbound_facts(
        &self,
        reply_ids: &[&str],
        from: Option<&str>,
        rcpt: &[String],
        auth: Option<&AuthResults>,
    ) -> InboundFacts {
        if !self.config.replies {
            return InboundFacts::default();
        }
        let mut keys: Vec<StoreKey> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for h in reply_ids.iter().filter_map(|id| id_hash(id)) {
            if seen.insert(h) && keys.len() < MAX_REPLY_IDS {
                keys.push(key(KIND_REPLY_ID, h));
            }
        }
        let ids = keys.len();
        let sender = from.filter(|f| auth.is_some_and(|a| authenticated(a, f)));
        if let Some(from) = sender {
            for r in rcpt.iter().filter(|r| r.contains('@')).take(MAX_PAIRS) {
                keys.push(key(KIND_CORRESPONDENT, pair_hash(r, from)));
            }
        }
        if keys.is_empty() {
            return InboundFacts::default();
        }
        let Ok(stats) = self.store.lookup_checked(&keys) else {
            return InboundFacts::default();
        };
        let seen_in = |w: &crate::store::WindowCounts| {
            w.windows
                .get(self.window)
                .map_or(0, |c| c[Counter::Seen as usize])
        };
        InboundFacts {
            replied: stats[..ids].iter().filter(|w| seen_in(w) > 0).count() as u32,
            correspondent: stats[ids..].iter().map(seen_in).max().unwrap_or(0),
        }
    }

    /// Counts one outbound message of an authenticated `user` against its limits and says
    /// which one it went over, if any. `spam`: the message was judged spam. Without a login
    /// (a trusted network) nothing is counted: the limits are an account's.
    pub fn limit(&self, user: &str, rcpt: &[String], spam: bool) -> Option<Over> {
        let l = &self.config.limits;
        let u = user_hash(user);
        let mut over = None;
        let mut note = |limit, r: crate::store::RateResult, max, window_secs| {
            if r.over && over.is_none() {
                over = Some(Over {
                    limit,
                    count: r.count,
                    max,
                    window_secs,
                });
            }
        };
        if l.burst > 0 {
            let r = self
                .store
                .hit(key(KIND_USER_BURST, u), l.burst, l.burst_secs);
            note("burst", r, l.burst, l.burst_secs);
        }
        if l.messages > 0 {
            let r = self
                .store
                .hit(key(KIND_USER_MESSAGES, u), l.messages, l.window_secs);
            note("messages", r, l.messages, l.window_secs);
        }
        if l.recipients > 0 {
            let unique = key(KIND_USER_RECIPIENTS, u);
            let mut distinct = std::collections::HashSet::new();
            for (i, r) in rcpt.iter().enumerate() {
                if !distinct.insert(address(r)) {
                    continue;
                }
                let new = i >= MAX_DISTINCT_CHECKS
                    || self.store.increment_unique(
                        key(
                            KIND_USER_RCPT_PAIR,
                            crate::shingle::hash_pair(user, &address(r)),
                        ),
                        key(KIND_USER_RCPT_SEEN, u),
                        l.window_secs,
                    );
                if new {
                    let r = self.store.hit(unique, l.recipients, l.window_secs);
                    if r.over {
                        // (Past the limit the message is held whatever the rest counts.)
                        note("recipients", r, l.recipients, l.window_secs);
                        break;
                    }
                }
            }
        }
        if spam && l.spam > 0 {
            let r = self
                .store
                .hit(key(KIND_USER_SPAM, u), l.spam, l.window_secs);
            note("spam", r, l.spam, l.window_secs);
        }
        if let Some(o) = &over {
            self.limited(user, o);
        }
        over
    }

    /// Remembers a user over a limit and logs it at most once per `log_interval_secs`.
    fn limited(&self, user: &str, over: &Over) {
        let now = Instant::now();
        let interval = std::time::Duration::from_secs(self.config.limits.log_interval_secs);
        let mut map = self.limited.lock();
        if map.len() >= MAX_LIMITED_USERS && !map.contains_key(user) {
            // Forget the entry logged longest ago: the table stays bounded under any number
            // of users.
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        let entry = map.entry(cut(user).to_string()).or_insert_with(|| {
            (
                now,
                LimitedUser {
                    user: cut(user).to_string(),
                    last: 0,
                    reason: String::new(),
                    messages: 0,
                },
            )
        });
        entry.1.last = self.store.now();
        entry.1.reason = over.to_string();
        entry.1.messages += 1;
        if entry.1.messages == 1 || now.duration_since(entry.0) >= interval {
            entry.0 = now;
            tracing::warn!(
                user = %entry.1.user,
                limit = over.limit,
                count = over.count,
                max = over.max,
                window_secs = over.window_secs,
                held = entry.1.messages,
                action = self.config.limits.action.as_str(),
                "outbound user over a limit (a compromised account?)"
            );
        }
    }

    /// Users over a limit, the latest first.
    pub fn limited_users(&self) -> Vec<LimitedUser> {
        let mut v: Vec<LimitedUser> = self
            .limited
            .lock()
            .values()
            .map(|(_, u)| u.clone())
            .collect();
        v.sort_by(|a, b| b.last.cmp(&a.last).then_with(|| a.user.cmp(&b.user)));
        v
    }
}

/// Whether `auth` shows the sender authenticated the domain of its From address `from`: an
/// aligned DKIM pass, or an SPF pass of an envelope sender in the same organizational domain.
fn authenticated(auth: &AuthResults, from: &str) -> bool {
    let Some((_, domain)) = from.rsplit_once('@') else {
        return false;
    };
    let org = crate::auth::organizational(domain);
    let dkim = auth.dkim.iter().any(|d| {
        d.result == Status::Pass
            && d.aligned
            && d.domain
                .as_deref()
                .is_some_and(|s| crate::auth::organizational(s) == org)
    });
    let spf = auth.spf.as_ref().is_some_and(|s| {
        s.result == Status::Pass
            && s.domain
                .as_deref()
                .is_some_and(|s| crate::auth::organizational(s) == org)
    });
    dkim || spf
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::MethodResult;
    use crate::store::{ManualClock, Store, StoreConfig};

    fn outbound(config: &OutboundConfig) -> (Outbound, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_700_000_000));
        let store = Store::new(&StoreConfig::default(), clock.clone()).unwrap();
        (Outbound::new(config, Arc::new(store)), clock)
    }

    fn env(user: Option<&str>, ip: &str) -> Envelope {
        Envelope {
            user: user.map(str::to_string),
            client_ip: ip.parse().ok(),
            ..Envelope::default()
        }
    }

    #[test]
    fn direction_by_login_or_network() {
        let cfg = OutboundConfig {
            networks: vec!["10.1.0.0/16".into(), "192.0.2.9".into()],
            ..OutboundConfig::default()
        };
        cfg.validate().unwrap();
        let (o, _) = outbound(&cfg);
        assert_eq!(
            o.direction(&env(Some("alice"), "203.0.113.5")),
            Direction::Outbound
        );
        assert_eq!(o.direction(&env(None, "10.1.2.3")), Direction::Outbound);
        assert_eq!(o.direction(&env(None, "192.0.2.9")), Direction::Outbound);
        assert_eq!(o.direction(&env(None, "192.0.2.10")), Direction::Inbound);
        assert_eq!(
            o.direction(&env(Some("  "), "203.0.113.5")),
            Direction::Inbound
        );
        assert_eq!(o.direction(&Envelope::default()), Direction::Inbound);
    }

    #[test]
    fn bad_options_are_refused() {
        let bad = |f: fn(&mut OutboundConfig)| {
            let mut c = OutboundConfig::default();
            f(&mut c);
            c.validate().unwrap_err()
        };
        assert!(matches!(
            bad(|c| c.networks = vec!["10.0.0.0/33".into()]),
            OutboundConfigError::Network(_)
        ));
        assert_eq!(bad(|c| c.reply_ttl_secs = 0), OutboundConfigError::ReplyTtl);
        assert_eq!(
            bad(|c| c.limits.window_secs = 0),
            OutboundConfigError::Zero("window_secs")
        );
        assert!(matches!(
            bad(|c| c.limits.action = Action::AddHeader),
            OutboundConfigError::Action(_)
        ));
        let c = OutboundConfig {
            actions: ActionsConfig {
                add_header: Some(100.0),
                ..ActionsConfig::default()
            },
            ..OutboundConfig::default()
        };
        assert!(c.verdict(&VerdictConfig::default()).is_err());
    }

    fn dkim_pass(domain: &str) -> AuthResults {
        AuthResults {
            dkim: vec![MethodResult {
                result: Status::Pass,
                domain: Some(domain.into()),
                aligned: true,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_reply_needs_an_id_we_sent_and_a_correspondent_needs_authentication() {
        let (o, clock) = outbound(&OutboundConfig::default());
        let rcpt = vec!["Bob@Partner.example".to_string()];
        o.store.record_many(&o.sent(
            Some("<abc.1@example.org>"),
            Some("alice@example.org"),
            &rcpt,
        ));
        let alice = vec!["alice@example.org".to_string()];
        let ids = ["<nothing@example.org>", "abc.1@example.org"];
        let f = o.inbound_facts(&ids, Some("bob@partner.example"), &alice, None);
        assert_eq!(
            f,
            InboundFacts {
                replied: 1,
                correspondent: 0
            }
        );
        // A random id: nothing; the same id in another case of its local part: nothing.
        let f = o.inbound_facts(
            &["<r4nd0m@example.org>", "<ABC.1@example.org>"],
            None,
            &alice,
            None,
        );
        assert_eq!(f.replied, 0);
        // The correspondent: only with the sender's domain authenticated.
        let pass = dkim_pass("partner.example");
        let f = o.inbound_facts(&[], Some("bob@partner.example"), &alice, Some(&pass));
        assert_eq!(f.correspondent, 1);
        let other = dkim_pass("elsewhere.example");
        let f = o.inbound_facts(&[], Some("bob@partner.example"), &alice, Some(&other));
        assert_eq!(f.correspondent, 0);
        let spf = AuthResults {
            spf: Some(MethodResult {
                result: Status::Pass,
                domain: Some("mail.partner.example".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            o.inbound_facts(&[], Some("bob@partner.example"), &alice, Some(&spf))
                .correspondent,
            1
        );
        let softfail = AuthResults {
            spf: Some(MethodResult {
                result: Status::SoftFail,
                domain: Some("partner.example".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            o.inbound_facts(&[], Some("bob@partner.example"), &alice, Some(&softfail))
                .correspondent,
            0
        );
        // Another of our users never wrote to bob.
        let carol = vec!["carol@example.org".to_string()];
        assert_eq!(
            o.inbound_facts(&[], Some("bob@partner.example"), &carol, Some(&pass))
                .correspondent,
            0
        );
        // Past the TTL (7 days: the 7-day window, 7–8 days) it is forgotten.
        clock.advance(9 * 86_400);
        let f = o.inbound_facts(&ids, Some("bob@partner.example"), &alice, Some(&pass));
        assert_eq!(f, InboundFacts::default());
    }

    #[test]
    fn huge_headers_cost_a_bounded_number_of_reads() {
        let (o, _) = outbound(&OutboundConfig::default());
        let many: Vec<String> = (0..10_000).map(|i| format!("<{i}@x.example>")).collect();
        let ids: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(o.inbound_facts(&ids, None, &[], None).replied, 0);
        let long = format!("<{}@x.example>", "a".repeat(1 << 20));
        let incs = o.sent(Some(&long), Some("a@b.example"), &many);
        assert_eq!(incs.len(), 1 + MAX_PAIRS);
    }

    #[test]
    fn limits_stop_one_user_and_not_another() {
        let cfg = OutboundConfig {
            limits: LimitsConfig {
                messages: 100,
                recipients: 50,
                burst: 0,
                ..LimitsConfig::default()
            },
            ..OutboundConfig::default()
        };
        let (o, _) = outbound(&cfg);
        let mut first_over = None;
        for i in 0..200 {
            let rcpt = vec![format!("r{i}@x.example")];
            if let Some(over) = o.limit("mallory", &rcpt, false) {
                first_over.get_or_insert((i, over));
            }
        }
        let (i, over) = first_over.unwrap();
        assert_eq!(i, 50);
        assert_eq!(over.limit, "recipients");
        // Messages to the same recipient count only against the message limit.
        let same = vec!["r0@x.example".to_string()];
        for _ in 0..100 {
            assert_eq!(o.limit("alice", &same, false), None);
        }
        assert_eq!(o.limit("alice", &same, false).unwrap().limit, "messages");
        assert_eq!(o.limit("bob", &same, false), None);
        let users = o.limited_users();
        assert_eq!(users.len(), 2);
        assert!(users
            .iter()
            .any(|u| u.user == "mallory" && u.messages == 150));
    }
}

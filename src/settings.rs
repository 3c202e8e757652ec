//! Per-recipient settings (`[[settings]]`, rspamd's `settings` module, SpamAssassin's
//! `user_prefs`): which entry applies to a recipient, and what it changes — thresholds, scores,
//! switched-off symbols, senders allowed or denied.
//!
//! Owns: the `[[settings]]` option type and its checks ([`SettingsEntry`],
//! [`SettingsError`]), the compiled table ([`SettingsTable`]) with its bounded lookup, and
//! each entry's compiled form ([`Profile`]). Never touches: the rules' hits or the verdict's
//! computation (`scan` applies a profile), the configuration file, sockets.
//!
//! **Precedence: the most specific match wins**, by the kind of key that matched, in this
//! order: a recipient address (`rcpts`), a recipient domain (`rcpt_domains`; a domain also
//! matches its subdomains, the longest listed one wins), an authenticated user (`users`), an
//! envelope sender address, then its domain (`senders`), a client network (`networks`; the
//! longest prefix wins). The recipient's own keys come first because each recipient gets its
//! own answer where the protocol allows it; the others describe the whole message. Two entries
//! claiming the same key (the same domain, address, user, sender or network) are refused: the
//! order of the file never decides.
//!
//! Every lookup is a hash-map probe per key (a domain: one per listed depth, at most
//! [`MAX_DOMAIN_LABELS`]; a network: one per listed prefix length), so its cost does not grow
//! with the number of entries (BENCHMARKS.md, "Settings").

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};

use crate::verdict::{ActionsConfig, VerdictConfig, VerdictConfigError};

/// Symbols the settings add to a verdict (score 0): a sender the settings deny (the action
/// forced to reject) and one they allow (the action by thresholds becomes `no action`).
pub const SETTINGS_DENY: &str = "SETTINGS_DENY";
pub const SETTINGS_ALLOW: &str = "SETTINGS_ALLOW";
/// An allowed sender's address without the authentication that would make it count.
pub const SETTINGS_ALLOW_UNVERIFIED: &str = "SETTINGS_ALLOW_UNVERIFIED";

/// Symbols shrike adds outside the rules, which an entry may score or switch off too
/// (`disabled = ["GREYLIST"]` skips greylisting for its recipients).
pub const SERVICE_SYMBOLS: [&str; 5] = [
    "STORE_UNAVAILABLE",
    "GREYLIST",
    "GREYLIST_PASS",
    "CLAM_VIRUS",
    "CLAM_VIRUS_FAIL",
];

/// A recipient domain is matched on at most this many of its rightmost labels: a longer name
/// costs no more lookups.
pub const MAX_DOMAIN_LABELS: usize = 8;

/// Longest address or user name looked up (RFC 5321's path limit); longer ones match nothing.
const MAX_KEY_BYTES: usize = 256;

/// One `[[settings]]` entry as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SettingsEntry {
    /// Unique; what `Settings-ID` and `rules list --settings` name.
    pub name: String,
    /// Recipient domains (each also matches its subdomains).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rcpt_domains: Vec<String>,
    /// Recipient addresses.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rcpts: Vec<String>,
    /// Authenticated users (SMTP AUTH: milter `{auth_authen}`, HTTP `User`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// Envelope senders: `user@domain`, or `@domain` / `*@domain` for a whole domain.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub senders: Vec<String>,
    /// Client networks (CIDR, or a bare address).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<String>,
    /// Thresholds replacing the global ones for this entry.
    pub actions: ActionsConfig,
    /// Symbol → score for this entry (0 turns the symbol off).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub scores: BTreeMap<String, f64>,
    /// Symbols or rule names off for this entry.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disabled: Vec<String>,
    /// Senders (From or envelope sender, in the forms of `senders`) whose mail gets `no action`
    /// — only when their domain is authenticated (aligned DKIM, or SPF): an address alone is
    /// forgeable.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow_senders: Vec<String>,
    /// Senders (From or envelope sender) whose mail is rejected.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny_senders: Vec<String>,
}

/// Why `[[settings]]` cannot be used. Each message names the entry.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    #[error("settings entry {0} has no name")]
    NoName(usize),
    #[error("settings \"{0}\" is defined twice")]
    DuplicateName(String),
    #[error("settings \"{first}\" and \"{second}\" both match {kind} {key}: which applies would depend on their order")]
    Overlap {
        first: String,
        second: String,
        kind: &'static str,
        key: String,
    },
    #[error("settings \"{name}\": {kind} {value:?} is not {expected}")]
    Invalid {
        name: String,
        kind: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("settings \"{name}\": scores.{symbol} must be a finite number")]
    NotFinite { name: String, symbol: String },
    #[error("settings \"{name}\": {error}")]
    Thresholds {
        name: String,
        error: VerdictConfigError,
    },
    #[error("settings \"{name}\": {which} name symbols no rule declares: {symbols}")]
    UnknownSymbols {
        name: String,
        which: &'static str,
        symbols: String,
    },
}

/// Sender patterns of one list: whole addresses and whole domains, lower-case.
#[derive(Debug, Clone, Default)]
pub struct SenderPatterns {
    addresses: FxHashSet<Box<str>>,
    domains: FxHashSet<Box<str>>,
}

impl SenderPatterns {
    fn new(name: &str, kind: &'static str, list: &[String]) -> Result<Self, SettingsError> {
        let mut p = SenderPatterns::default();
        for s in list {
            match sender_pattern(s) {
                Some(SenderKey::Address(a)) => p.addresses.insert(a.into()),
                Some(SenderKey::Domain(d)) => p.domains.insert(d.into()),
                None => {
                    return Err(SettingsError::Invalid {
                        name: name.into(),
                        kind,
                        value: s.clone(),
                        expected: "an address, @domain or *@domain",
                    })
                }
            };
        }
        Ok(p)
    }

    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty() && self.domains.is_empty()
    }

    /// The patterns, sorted, as `rules list` prints them.
    pub fn describe(&self) -> String {
        let mut all: Vec<String> = self
            .addresses
            .iter()
            .map(|a| a.to_string())
            .chain(self.domains.iter().map(|d| format!("@{d}")))
            .collect();
        all.sort();
        all.join(", ")
    }

    /// The pattern `address` matches, as written in lower case (`@domain` for a domain).
    pub fn matching(&self, address: &str) -> Option<String> {
        if address.len() > MAX_KEY_BYTES {
            return None;
        }
        let a = address.trim().to_ascii_lowercase();
        if self.addresses.contains(a.as_str()) {
            return Some(a);
        }
        let (_, domain) = a.rsplit_once('@')?;
        self.domains.contains(domain).then(|| format!("@{domain}"))
    }
}

enum SenderKey {
    Address(String),
    Domain(String),
}

/// `user@domain` → an address; `@domain` or `*@domain` → a domain; anything else: none.
fn sender_pattern(s: &str) -> Option<SenderKey> {
    let s = s.trim().to_ascii_lowercase();
    let domain_part = s.strip_prefix("*@").or_else(|| s.strip_prefix('@'));
    if let Some(d) = domain_part {
        return is_domain(d).then(|| SenderKey::Domain(d.to_string()));
    }
    let (local, domain) = s.rsplit_once('@')?;
    (!local.is_empty() && !local.contains('*') && is_domain(domain) && s.len() <= MAX_KEY_BYTES)
        .then_some(SenderKey::Address(s))
}

fn is_domain(d: &str) -> bool {
    !d.is_empty()
        && d.len() <= 253
        && d.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// One entry, compiled: what it changes.
#[derive(Debug, Clone)]
pub struct Profile {
    pub name: String,
    /// The global thresholds with this entry's `actions` over them.
    pub verdict: VerdictConfig,
    /// Whether `actions` changed any threshold (`rules list` says so).
    pub actions: ActionsConfig,
    pub scores: FxHashMap<String, f64>,
    pub disabled: FxHashSet<String>,
    pub allow: SenderPatterns,
    pub deny: SenderPatterns,
}

impl Profile {
    /// Whether this entry turns the symbol (of rule `rule`) off.
    pub fn is_off(&self, rule: Option<&str>, symbol: &str) -> bool {
        self.disabled.contains(symbol)
            || rule.is_some_and(|r| self.disabled.contains(r))
            || self.scores.get(symbol).is_some_and(|s| *s == 0.0)
    }

    /// The score this entry gives the symbol, if it changes it.
    pub fn score(&self, symbol: &str) -> Option<f64> {
        self.scores.get(symbol).copied()
    }
}

/// What one recipient's lookup is asked with.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<'a> {
    pub rcpt: Option<&'a str>,
    pub user: Option<&'a str>,
    pub sender: Option<&'a str>,
    pub client_ip: Option<IpAddr>,
}

/// How an entry matched, most specific first (the order of precedence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MatchKind {
    Rcpt,
    RcptDomain,
    User,
    SenderAddress,
    SenderDomain,
    Network,
}

/// Every `[[settings]]` entry, compiled for lookups. Empty by default.
#[derive(Debug, Clone, Default)]
pub struct SettingsTable {
    /// As written: what the table is compared by (a reload with the same entries is the same
    /// table).
    entries: Vec<SettingsEntry>,
    /// Symbols the configuration gives scores outside the rules (`[[dnsbl]] scores`): known to
    /// the unknown-symbol check.
    extra_symbols: BTreeSet<String>,
    profiles: Vec<Profile>,
    by_name: FxHashMap<String, u32>,
    rcpts: FxHashMap<Box<str>, u32>,
    domains: FxHashMap<Box<str>, u32>,
    /// The label counts the listed domains have (a lookup tries only those depths).
    domain_depths: Vec<usize>,
    users: FxHashMap<Box<str>, u32>,
    sender_addresses: FxHashMap<Box<str>, u32>,
    sender_domains: FxHashMap<Box<str>, u32>,
    /// Per prefix length present, longest first: network address → entry.
    v4: Vec<(u8, FxHashMap<u32, u32>)>,
    v6: Vec<(u8, FxHashMap<u128, u32>)>,
}

impl PartialEq for SettingsTable {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries && self.extra_symbols == other.extra_symbols
    }
}

impl SettingsTable {
    /// Compiles and checks the entries; `base` is the global thresholds each entry's `actions`
    /// move; `extra_symbols` names symbols scored outside the rules (DNS lists' own scores).
    pub fn new(
        entries: &[SettingsEntry],
        base: &VerdictConfig,
        extra_symbols: BTreeSet<String>,
    ) -> Result<SettingsTable, SettingsError> {
        let mut t = SettingsTable {
            entries: entries.to_vec(),
            extra_symbols,
            ..SettingsTable::default()
        };
        let mut depths = BTreeSet::new();
        let mut v4: BTreeMap<u8, FxHashMap<u32, u32>> = BTreeMap::new();
        let mut v6: BTreeMap<u8, FxHashMap<u128, u32>> = BTreeMap::new();
        for (i, e) in entries.iter().enumerate() {
            let idx = u32::try_from(i).unwrap_or(u32::MAX);
            let name = e.name.trim();
            if name.is_empty() {
                return Err(SettingsError::NoName(i + 1));
            }
            if t.by_name.insert(name.to_string(), idx).is_some() {
                return Err(SettingsError::DuplicateName(name.into()));
            }
            let invalid = |kind, value: &str, expected| SettingsError::Invalid {
                name: name.into(),
                kind,
                value: value.into(),
                expected,
            };
            for d in &e.rcpt_domains {
                let key = d.trim().trim_end_matches('.').to_ascii_lowercase();
                if !is_domain(&key) {
                    return Err(invalid("rcpt_domains", d, "a domain name"));
                }
                let labels = key.split('.').count();
                if labels > MAX_DOMAIN_LABELS {
                    return Err(invalid("rcpt_domains", d, "a domain of at most 8 labels"));
                }
                depths.insert(labels);
                claim(&mut t.domains, key, idx, entries, "rcpt_domains")?;
            }
            for r in &e.rcpts {
                match sender_pattern(r) {
                    Some(SenderKey::Address(a)) => claim(&mut t.rcpts, a, idx, entries, "rcpts")?,
                    _ => return Err(invalid("rcpts", r, "an address")),
                }
            }
            for u in &e.users {
                let key = u.trim().to_ascii_lowercase();
                if key.is_empty() || key.len() > MAX_KEY_BYTES {
                    return Err(invalid("users", u, "a user name"));
                }
                claim(&mut t.users, key, idx, entries, "users")?;
            }
            for s in &e.senders {
                match sender_pattern(s) {
                    Some(SenderKey::Address(a)) => {
                        claim(&mut t.sender_addresses, a, idx, entries, "senders")?
                    }
                    Some(SenderKey::Domain(d)) => {
                        claim(&mut t.sender_domains, d, idx, entries, "senders")?
                    }
                    None => return Err(invalid("senders", s, "an address, @domain or *@domain")),
                }
            }
            for n in &e.networks {
                let net: IpNet = match n.trim().parse::<IpNet>() {
                    Ok(net) => net.trunc(),
                    Err(_) => match n.trim().parse::<IpAddr>() {
                        Ok(ip) => IpNet::from(ip),
                        Err(_) => return Err(invalid("networks", n, "a network (CIDR)")),
                    },
                };
                let prefix = net.prefix_len();
                let taken = match net {
                    IpNet::V4(n) => v4
                        .entry(prefix)
                        .or_default()
                        .insert(u32::from(n.network()), idx),
                    IpNet::V6(n) => v6
                        .entry(prefix)
                        .or_default()
                        .insert(u128::from(n.network()), idx),
                };
                if let Some(other) = taken.filter(|&o| o != idx) {
                    return Err(overlap(entries, other, idx, "networks", net.to_string()));
                }
            }
            let mut verdict = base.clone();
            e.actions.apply(&mut verdict);
            verdict
                .validate()
                .map_err(|error| SettingsError::Thresholds {
                    name: name.into(),
                    error,
                })?;
            if let Some((symbol, _)) = e.scores.iter().find(|(_, v)| !v.is_finite()) {
                return Err(SettingsError::NotFinite {
                    name: name.into(),
                    symbol: symbol.clone(),
                });
            }
            t.profiles.push(Profile {
                name: name.to_string(),
                verdict,
                actions: e.actions.clone(),
                scores: e.scores.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                disabled: e.disabled.iter().cloned().collect(),
                allow: SenderPatterns::new(name, "allow_senders", &e.allow_senders)?,
                deny: SenderPatterns::new(name, "deny_senders", &e.deny_senders)?,
            });
        }
        t.domain_depths = depths.into_iter().rev().collect();
        t.v4 = v4.into_iter().rev().collect();
        t.v6 = v6.into_iter().rev().collect();
        Ok(t)
    }

    pub fn is_empty(&self) -> bool {
        self.profiles.is_empty()
    }

    pub fn profiles(&self) -> &[Profile] {
        &self.profiles
    }

    pub fn entries(&self) -> &[SettingsEntry] {
        &self.entries
    }

    /// The entry named `name` (`Settings-ID`, `rules list --settings`).
    pub fn by_name(&self, name: &str) -> Option<usize> {
        self.by_name.get(name.trim()).map(|&i| i as usize)
    }

    pub fn profile(&self, index: usize) -> Option<&Profile> {
        self.profiles.get(index)
    }

    /// The entry that applies, with how it matched: the most specific match (module header).
    pub fn lookup(&self, q: &Query<'_>) -> Option<(usize, MatchKind)> {
        if self.profiles.is_empty() {
            return None;
        }
        let hit = |i: &u32, kind| Some((*i as usize, kind));
        if let Some(rcpt) = q.rcpt.filter(|r| r.len() <= MAX_KEY_BYTES) {
            let rcpt = rcpt.trim().trim_matches(['<', '>']).to_ascii_lowercase();
            if let Some(i) = self.rcpts.get(rcpt.as_str()) {
                return hit(i, MatchKind::Rcpt);
            }
            if let Some((_, domain)) = rcpt.rsplit_once('@') {
                if let Some(i) = self.domain(domain.trim_end_matches('.')) {
                    return hit(i, MatchKind::RcptDomain);
                }
            }
        }
        if let Some(user) = q
            .user
            .filter(|u| u.len() <= MAX_KEY_BYTES && !self.users.is_empty())
        {
            if let Some(i) = self.users.get(user.trim().to_ascii_lowercase().as_str()) {
                return hit(i, MatchKind::User);
            }
        }
        if let Some(sender) = q.sender.filter(|s| {
            s.len() <= MAX_KEY_BYTES
                && !(self.sender_addresses.is_empty() && self.sender_domains.is_empty())
        }) {
            let sender = sender.trim().trim_matches(['<', '>']).to_ascii_lowercase();
            if let Some(i) = self.sender_addresses.get(sender.as_str()) {
                return hit(i, MatchKind::SenderAddress);
            }
            if let Some((_, domain)) = sender.rsplit_once('@') {
                if let Some(i) = self.sender_domains.get(domain) {
                    return hit(i, MatchKind::SenderDomain);
                }
            }
        }
        match q.client_ip? {
            IpAddr::V4(ip) => {
                let ip = u32::from(ip);
                self.v4.iter().find_map(|(prefix, nets)| {
                    let mask = u32::MAX.checked_shl(32 - u32::from(*prefix)).unwrap_or(0);
                    nets.get(&(ip & mask))
                })
            }
            IpAddr::V6(ip) => {
                let ip = u128::from(ip);
                self.v6.iter().find_map(|(prefix, nets)| {
                    let mask = u128::MAX.checked_shl(128 - u32::from(*prefix)).unwrap_or(0);
                    nets.get(&(ip & mask))
                })
            }
        }
        .and_then(|i| hit(i, MatchKind::Network))
    }

    /// The longest listed domain `domain` is or is under: one probe per listed depth.
    fn domain(&self, domain: &str) -> Option<&u32> {
        if self.domains.is_empty() || domain.len() > 253 {
            return None;
        }
        // Byte offsets where each suffix starts, rightmost labels first.
        let mut starts = [0usize; MAX_DOMAIN_LABELS + 1];
        let mut n = 0;
        starts[0] = domain.len();
        for (i, b) in domain.bytes().enumerate().rev() {
            if b == b'.' {
                n += 1;
                starts[n] = i + 1;
                if n == MAX_DOMAIN_LABELS {
                    break;
                }
            }
        }
        // The whole name is a suffix too when it has no more labels than the cap.
        if n < MAX_DOMAIN_LABELS {
            n += 1;
            starts[n] = 0;
        }
        // starts[k] is where the suffix of k labels begins (k >= 1).
        self.domain_depths.iter().find_map(|&depth| {
            let start = *starts.get(depth).filter(|_| depth <= n)?;
            self.domains.get(&domain[start..])
        })
    }

    /// Names in an entry's `scores` or `disabled` that `known` does not know (nor the symbols
    /// the settings add, nor the configuration's other scored symbols): the first entry with
    /// any, as an error naming them all.
    pub fn check_symbols(&self, known: impl Fn(&str) -> bool) -> Result<(), SettingsError> {
        let own = [SETTINGS_DENY, SETTINGS_ALLOW, SETTINGS_ALLOW_UNVERIFIED];
        let ok = |n: &str| known(n) || own.contains(&n) || self.extra_symbols.contains(n);
        for e in &self.entries {
            for (which, names) in [
                ("scores", e.scores.keys().collect::<Vec<_>>()),
                ("disabled", e.disabled.iter().collect()),
            ] {
                let unknown: BTreeSet<&str> = names
                    .into_iter()
                    .map(String::as_str)
                    .filter(|n| !ok(n))
                    .collect();
                if !unknown.is_empty() {
                    return Err(SettingsError::UnknownSymbols {
                        name: e.name.trim().to_string(),
                        which,
                        symbols: unknown.into_iter().collect::<Vec<_>>().join(", "),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Records that entry `idx` matches `key` of `kind`, refusing a key another entry holds.
fn claim(
    map: &mut FxHashMap<Box<str>, u32>,
    key: String,
    idx: u32,
    entries: &[SettingsEntry],
    kind: &'static str,
) -> Result<(), SettingsError> {
    match map.insert(key.clone().into(), idx) {
        Some(other) if other != idx => Err(overlap(entries, other, idx, kind, key)),
        _ => Ok(()),
    }
}

fn overlap(
    entries: &[SettingsEntry],
    first: u32,
    second: u32,
    kind: &'static str,
    key: String,
) -> SettingsError {
    let name = |i: u32| {
        entries
            .get(i as usize)
            .map_or_else(String::new, |e| e.name.trim().to_string())
    };
    SettingsError::Overlap {
        first: name(first),
        second: name(second),
        kind,
        key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(toml_text: &str) -> Result<SettingsTable, SettingsError> {
        #[derive(Deserialize)]
        struct File {
            settings: Vec<SettingsEntry>,
        }
        let f: File = toml::from_str(toml_text).unwrap();
        SettingsTable::new(&f.settings, &VerdictConfig::default(), BTreeSet::new())
    }

    fn name_of<'t>(t: &'t SettingsTable, q: Query<'_>) -> Option<(&'t str, MatchKind)> {
        t.lookup(&q)
            .map(|(i, k)| (t.profile(i).unwrap().name.as_str(), k))
    }

    const FILE: &str = r#"
        [[settings]]
        name = "school"
        rcpt_domains = ["school.example"]
        actions = { reject = 10.0, add_header = 5.0 }
        scores = { BODY_MONEY = 0.0 }
        [[settings]]
        name = "staff"
        rcpt_domains = ["staff.school.example"]
        [[settings]]
        name = "principal"
        rcpts = ["Principal@School.example"]
        [[settings]]
        name = "auth"
        users = ["alice"]
        [[settings]]
        name = "partner"
        senders = ["@partner.example"]
        [[settings]]
        name = "ceo"
        senders = ["ceo@partner.example"]
        [[settings]]
        name = "lan"
        networks = ["10.0.0.0/8"]
        [[settings]]
        name = "lab"
        networks = ["10.1.0.0/16", "2001:db8::/32"]
    "#;

    #[test]
    fn the_most_specific_match_wins() {
        let t = table(FILE).unwrap();
        let q = |rcpt, user, sender, ip: &str| Query {
            rcpt,
            user,
            sender,
            client_ip: ip.parse().ok(),
        };
        // Recipient address over its domain over user, sender, network.
        let all = |rcpt| {
            q(
                Some(rcpt),
                Some("Alice"),
                Some("ceo@partner.example"),
                "10.1.2.3",
            )
        };
        assert_eq!(
            name_of(&t, all("principal@school.example")),
            Some(("principal", MatchKind::Rcpt))
        );
        assert_eq!(
            name_of(&t, all("bob@school.example")),
            Some(("school", MatchKind::RcptDomain))
        );
        // The longest listed domain; subdomains match.
        assert_eq!(
            name_of(&t, all("bob@a.staff.SCHOOL.example")),
            Some(("staff", MatchKind::RcptDomain))
        );
        assert_eq!(
            name_of(&t, all("bob@notschool.example")),
            Some(("auth", MatchKind::User))
        );
        let no_user = q(
            Some("bob@x.example"),
            None,
            Some("ceo@partner.example"),
            "10.1.2.3",
        );
        assert_eq!(
            name_of(&t, no_user),
            Some(("ceo", MatchKind::SenderAddress))
        );
        let domain = q(
            Some("bob@x.example"),
            None,
            Some("news@partner.example"),
            "10.1.2.3",
        );
        assert_eq!(
            name_of(&t, domain),
            Some(("partner", MatchKind::SenderDomain))
        );
        // The longest prefix.
        let lab = q(Some("bob@x.example"), None, None, "10.1.2.3");
        assert_eq!(name_of(&t, lab), Some(("lab", MatchKind::Network)));
        let lan = q(None, None, None, "10.2.2.3");
        assert_eq!(name_of(&t, lan), Some(("lan", MatchKind::Network)));
        let v6 = q(None, None, None, "2001:db8:1::5");
        assert_eq!(name_of(&t, v6), Some(("lab", MatchKind::Network)));
        assert_eq!(name_of(&t, q(None, None, None, "192.0.2.1")), None);
        assert_eq!(name_of(&t, Query::default()), None);
        assert_eq!(t.by_name("lab"), Some(7));
    }

    #[test]
    fn overlapping_and_malformed_entries_are_refused_by_name() {
        for (text, message) in [
            (
                "[[settings]]\nname = \"a\"\nrcpt_domains = [\"x.example\"]\n\
                 [[settings]]\nname = \"b\"\nrcpt_domains = [\"X.example.\"]",
                "settings \"a\" and \"b\" both match rcpt_domains x.example: which applies would depend on their order",
            ),
            (
                "[[settings]]\nname = \"a\"\nnetworks = [\"10.0.0.0/8\"]\n\
                 [[settings]]\nname = \"b\"\nnetworks = [\"10.9.9.9/8\"]",
                "settings \"a\" and \"b\" both match networks 10.0.0.0/8: which applies would depend on their order",
            ),
            (
                "[[settings]]\nname = \"a\"\n[[settings]]\nname = \"a\"",
                "settings \"a\" is defined twice",
            ),
            ("[[settings]]\nrcpts = [\"a@b\"]", "settings entry 1 has no name"),
            (
                "[[settings]]\nname = \"a\"\nnetworks = [\"10.0.0.0/33\"]",
                "settings \"a\": networks \"10.0.0.0/33\" is not a network (CIDR)",
            ),
            (
                "[[settings]]\nname = \"a\"\ndeny_senders = [\"spam*\"]",
                "settings \"a\": deny_senders \"spam*\" is not an address, @domain or *@domain",
            ),
            (
                "[[settings]]\nname = \"a\"\nactions = { reject = 3.0 }",
                "settings \"a\": verdict thresholds must satisfy greylist <= add_header <= reject",
            ),
            (
                "[[settings]]\nname = \"a\"\nscores = { X = nan }",
                "settings \"a\": scores.X must be a finite number",
            ),
        ] {
            assert_eq!(table(text).unwrap_err().to_string(), message, "{text}");
        }
        // One entry may list a key twice.
        assert!(
            table("[[settings]]\nname = \"a\"\nrcpt_domains = [\"x.example\", \"x.example\"]")
                .is_ok()
        );
    }

    #[test]
    fn unknown_symbols_are_named() {
        let t = table(
            "[[settings]]\nname = \"s\"\nscores = { KNOWN = 1.0, TYPO_B = 2.0, TYPO_A = 0.0 }\n\
             disabled = [\"KNOWN\"]",
        )
        .unwrap();
        assert_eq!(
            t.check_symbols(|n| n == "KNOWN").unwrap_err().to_string(),
            "settings \"s\": scores name symbols no rule declares: TYPO_A, TYPO_B"
        );
        assert!(t
            .check_symbols(|n| n.starts_with("KNOWN") || n.starts_with("TYPO"))
            .is_ok());
    }

    #[test]
    fn sender_patterns_match_addresses_and_domains() {
        let p = SenderPatterns::new(
            "s",
            "deny_senders",
            &["*@spam.example".into(), "Bob@Partner.example".into()],
        )
        .unwrap();
        assert_eq!(
            p.matching("x@SPAM.example").as_deref(),
            Some("@spam.example")
        );
        assert_eq!(
            p.matching("bob@partner.example").as_deref(),
            Some("bob@partner.example")
        );
        assert_eq!(p.matching("eve@partner.example"), None);
        assert_eq!(p.matching("x@sub.spam.example"), None);
        assert_eq!(p.matching(&"a".repeat(300)), None);
    }

    /// Hostile recipients: very long names and many labels cost a bounded number of probes and
    /// match nothing they should not.
    #[test]
    fn hostile_recipients_are_bounded() {
        let t = table(FILE).unwrap();
        let deep = format!("x@{}school.example", "a.".repeat(100));
        assert_eq!(
            name_of(
                &t,
                Query {
                    rcpt: Some(&deep),
                    ..Query::default()
                }
            ),
            Some(("school", MatchKind::RcptDomain))
        );
        let long = format!("x@{}.school.example", "a".repeat(300));
        assert_eq!(
            name_of(
                &t,
                Query {
                    rcpt: Some(&long),
                    ..Query::default()
                }
            ),
            None
        );
        for odd in [
            "@",
            "",
            "x@",
            "x@.",
            "x@..school.example",
            "<bob@school.example>",
        ] {
            let _ = t.lookup(&Query {
                rcpt: Some(odd),
                ..Query::default()
            });
        }
        assert_eq!(
            name_of(
                &t,
                Query {
                    rcpt: Some("<bob@school.example>"),
                    ..Query::default()
                }
            ),
            Some(("school", MatchKind::RcptDomain))
        );
    }
}

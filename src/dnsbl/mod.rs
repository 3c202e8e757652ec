//! DNS block lists (DNSBL for addresses, URIBL/DBL for domains): the `[[dnsbl]]` zones with
//! their presets, the names a message asks about (`targets.rs`), the query names, and what an
//! answer means: a listing (a symbol of the zone's `returncodes`), or a refusal of our
//! resolver dressed as an address (`*_BLOCKED`, score 0, a rate-limited warning), which is
//! never a listing.
//!
//! Owns: zone configuration and checks (`DnsblConfigError`), query names, return-code mapping,
//! the blocked-resolver codes. Never touches: scans, rules (they read `ListHit`s).

mod targets;

pub use targets::{targets, targets_of, url_domains, Targets, MAX_URL_DOMAINS};

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// What a zone lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ZoneKind {
    Ip,
    Domain,
}

/// Which names of a message are asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// The connecting client's address (ip zones).
    ClientIp,
    /// The public addresses of the Received chain (ip zones).
    ReceivedIps,
    /// Registrable domains of the URLs in the message (domain zones).
    UrlDomains,
    /// The From header's domain (domain zones).
    FromDomain,
    /// The envelope sender's domain (domain zones).
    MailFromDomain,
    /// The HELO name's registrable domain (domain zones).
    Helo,
}

impl Check {
    fn kind(self) -> ZoneKind {
        match self {
            Check::ClientIp | Check::ReceivedIps => ZoneKind::Ip,
            _ => ZoneKind::Domain,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Check::ClientIp => "client_ip",
            Check::ReceivedIps => "received_ips",
            Check::UrlDomains => "url_domains",
            Check::FromDomain => "from_domain",
            Check::MailFromDomain => "mail_from_domain",
            Check::Helo => "helo",
        }
    }
}

/// One return code or several for a symbol.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Codes {
    One(String),
    Many(Vec<String>),
}

/// A `[[dnsbl]]` entry as written. A zone with a preset (Spamhaus ZEN and DBL, SURBL, URIBL)
/// needs only `zone`: the preset fills what is left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZoneConfig {
    pub zone: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ZoneKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Vec<Check>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub returncodes: Option<BTreeMap<String, Codes>>,
    /// Scores of this zone's symbols, for symbols no rule declares (a zone of your own): each
    /// hit adds its score to the verdict without a line of Lua. A rule's symbol keeps the rule's
    /// score (change it in `[scores]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scores: Option<BTreeMap<String, f64>>,
}

/// Why a `[[dnsbl]]` entry cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsblConfigError {
    #[error("dnsbl: {0:?} is not a DNS zone name")]
    Zone(String),
    #[error("dnsbl {zone}: `kind` is required (no preset for this zone)")]
    NoKind { zone: String },
    #[error("dnsbl {zone}: check {check} asks a {asks:?} zone, but the zone is {kind:?}")]
    CheckKind {
        zone: String,
        check: &'static str,
        asks: ZoneKind,
        kind: ZoneKind,
    },
    #[error("dnsbl {zone}: no checks")]
    NoChecks { zone: String },
    #[error("dnsbl {zone}: return code {code:?} of {symbol} is not an IPv4 address")]
    Code {
        zone: String,
        symbol: String,
        code: String,
    },
    #[error("dnsbl {zone}: {symbol:?} is not a symbol name (A-Z, 0-9, _)")]
    Symbol { zone: String, symbol: String },
    #[error("dnsbl {zone} is configured twice")]
    Duplicate { zone: String },
    #[error(
        "dnsbl {zone}: scores names {symbol}, which this zone never gives (its symbols: {known})"
    )]
    ScoreSymbol {
        zone: String,
        symbol: String,
        known: String,
    },
    #[error("dnsbl {zone}: the score of {symbol} must be a finite number, and 0 for {symbol} (a refusal of our resolver, never a listing)")]
    ScoreValue { zone: String, symbol: String },
}

/// A zone ready to query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    pub zone: String,
    pub kind: ZoneKind,
    pub checks: Vec<Check>,
    /// Return code → symbol; a listed name's codes outside it give `unknown_symbol`.
    pub codes: Vec<(Ipv4Addr, String)>,
    /// The symbol of an answer no return code names.
    pub unknown_symbol: String,
    /// The symbol of a refusal of our resolver.
    pub blocked_symbol: String,
    /// Codes that mean our resolver is refused (never a listing).
    pub blocked_codes: Vec<Ipv4Addr>,
    /// `scores`: symbol → score, for symbols no rule declares.
    pub scores: BTreeMap<String, ListScore>,
}

/// The score `[[dnsbl]] scores` gives a symbol: finite (checked when the zone is resolved), so
/// it compares as a whole number would.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct ListScore(pub f64);

impl Eq for ListScore {}

struct Preset {
    zone: &'static str,
    kind: ZoneKind,
    checks: &'static [Check],
    codes: &'static [(&'static str, &'static [&'static str])],
    prefix: &'static str,
}

/// rspamd's symbols for the lists its users know; off until a `[[dnsbl]]` names the zone
/// (their terms of use require the operator's consent, and often a subscription).
const PRESETS: &[Preset] = &[
    Preset {
        zone: "zen.spamhaus.org",
        kind: ZoneKind::Ip,
        checks: &[Check::ClientIp, Check::ReceivedIps],
        codes: &[
            ("RBL_SPAMHAUS_SBL", &["127.0.0.2"]),
            ("RBL_SPAMHAUS_CSS", &["127.0.0.3"]),
            (
                "RBL_SPAMHAUS_XBL",
                &["127.0.0.4", "127.0.0.5", "127.0.0.6", "127.0.0.7"],
            ),
            ("RBL_SPAMHAUS_DROP", &["127.0.0.9"]),
            ("RBL_SPAMHAUS_PBL", &["127.0.0.10", "127.0.0.11"]),
        ],
        prefix: "RBL_SPAMHAUS",
    },
    Preset {
        zone: "dbl.spamhaus.org",
        kind: ZoneKind::Domain,
        checks: &[Check::UrlDomains, Check::FromDomain, Check::MailFromDomain],
        codes: &[
            ("DBL_SPAM", &["127.0.1.2"]),
            ("DBL_PHISH", &["127.0.1.4"]),
            ("DBL_MALWARE", &["127.0.1.5"]),
            ("DBL_BOTNET", &["127.0.1.6"]),
            ("DBL_ABUSE", &["127.0.1.102"]),
            ("DBL_ABUSE_REDIR", &["127.0.1.103"]),
            ("DBL_ABUSE_PHISH", &["127.0.1.104"]),
            ("DBL_ABUSE_MALWARE", &["127.0.1.105"]),
            ("DBL_ABUSE_BOTNET", &["127.0.1.106"]),
        ],
        prefix: "DBL",
    },
    Preset {
        zone: "multi.surbl.org",
        kind: ZoneKind::Domain,
        checks: &[Check::UrlDomains],
        codes: &[
            ("SURBL_MULTI_ABUSE", &["127.0.0.64"]),
            ("SURBL_MULTI_MALWARE", &["127.0.0.16"]),
            ("SURBL_MULTI_PHISH", &["127.0.0.8"]),
            ("SURBL_MULTI_CR", &["127.0.0.128"]),
        ],
        prefix: "SURBL",
    },
    Preset {
        zone: "multi.uribl.com",
        kind: ZoneKind::Domain,
        checks: &[Check::UrlDomains],
        codes: &[
            ("URIBL_BLACK", &["127.0.0.2"]),
            ("URIBL_GREY", &["127.0.0.4"]),
            ("URIBL_RED", &["127.0.0.8"]),
        ],
        prefix: "URIBL",
    },
];

/// Spamhaus's error codes, which no list uses as a listing: 127.255.255.252 (typo in the zone
/// name), .254 (query through a public or open resolver), .255 (too many queries).
const SPAMHAUS_BLOCKED: [Ipv4Addr; 3] = [
    Ipv4Addr::new(127, 255, 255, 252),
    Ipv4Addr::new(127, 255, 255, 254),
    Ipv4Addr::new(127, 255, 255, 255),
];

fn is_symbol(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn symbol_of_zone(zone: &str) -> String {
    zone.to_ascii_uppercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

impl ZoneConfig {
    /// The zone with its preset applied, checked.
    pub fn resolve(&self) -> Result<Zone, DnsblConfigError> {
        let zone = self.zone.trim().trim_end_matches('.').to_ascii_lowercase();
        let valid = !zone.is_empty()
            && zone.len() < 200
            && zone.contains('.')
            && zone.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
        if !valid {
            return Err(DnsblConfigError::Zone(self.zone.clone()));
        }
        let preset = PRESETS.iter().find(|p| p.zone == zone);
        let kind = self
            .kind
            .or(preset.map(|p| p.kind))
            .ok_or_else(|| DnsblConfigError::NoKind { zone: zone.clone() })?;
        let checks: Vec<Check> = match (&self.checks, preset) {
            (Some(c), _) => c.clone(),
            (None, Some(p)) if p.kind == kind => p.checks.to_vec(),
            (None, _) => match kind {
                ZoneKind::Ip => vec![Check::ClientIp, Check::ReceivedIps],
                ZoneKind::Domain => vec![Check::UrlDomains],
            },
        };
        if checks.is_empty() {
            return Err(DnsblConfigError::NoChecks { zone });
        }
        for c in &checks {
            if c.kind() != kind {
                return Err(DnsblConfigError::CheckKind {
                    zone,
                    check: c.as_str(),
                    asks: c.kind(),
                    kind,
                });
            }
        }
        let mut codes = Vec::new();
        match (&self.returncodes, preset) {
            (Some(rc), _) => {
                for (symbol, c) in rc {
                    if !is_symbol(symbol) {
                        return Err(DnsblConfigError::Symbol {
                            zone,
                            symbol: symbol.clone(),
                        });
                    }
                    let list: Vec<&String> = match c {
                        Codes::One(s) => vec![s],
                        Codes::Many(v) => v.iter().collect(),
                    };
                    for code in list {
                        let ip = code
                            .parse::<Ipv4Addr>()
                            .map_err(|_| DnsblConfigError::Code {
                                zone: zone.clone(),
                                symbol: symbol.clone(),
                                code: code.clone(),
                            })?;
                        codes.push((ip, symbol.clone()));
                    }
                }
            }
            (None, Some(p)) => {
                for (symbol, list) in p.codes {
                    for code in *list {
                        if let Ok(ip) = code.parse() {
                            codes.push((ip, symbol.to_string()));
                        }
                    }
                }
            }
            (None, None) => {}
        }
        let prefix = preset.map_or_else(|| symbol_of_zone(&zone), |p| p.prefix.to_string());
        let mut blocked_codes = SPAMHAUS_BLOCKED.to_vec();
        if zone.ends_with("dbl.spamhaus.org") || zone.ends_with(".dq.spamhaus.net") {
            // DBL's answer to an address query.
            blocked_codes.push(Ipv4Addr::new(127, 0, 1, 255));
        }
        if zone.ends_with("uribl.com") || zone.ends_with("surbl.org") {
            // URIBL's and SURBL's answer to a refused resolver.
            blocked_codes.push(Ipv4Addr::new(127, 0, 0, 1));
        }
        let unknown_symbol =
            preset.map_or_else(|| symbol_of_zone(&zone), |p| format!("{}_LISTED", p.prefix));
        let blocked_symbol = format!("{prefix}_BLOCKED");
        let mut scores = BTreeMap::new();
        for (symbol, &score) in self.scores.iter().flatten() {
            let gives = |s: &str| {
                s == unknown_symbol || s == blocked_symbol || codes.iter().any(|(_, c)| c == s)
            };
            if !gives(symbol) {
                let mut known: Vec<&str> = codes.iter().map(|(_, c)| c.as_str()).collect();
                known.extend([unknown_symbol.as_str(), blocked_symbol.as_str()]);
                known.dedup();
                return Err(DnsblConfigError::ScoreSymbol {
                    zone,
                    symbol: symbol.clone(),
                    known: known.join(", "),
                });
            }
            if !score.is_finite() || (*symbol == blocked_symbol && score != 0.0) {
                return Err(DnsblConfigError::ScoreValue {
                    zone,
                    symbol: symbol.clone(),
                });
            }
            scores.insert(symbol.clone(), ListScore(score));
        }
        Ok(Zone {
            unknown_symbol,
            blocked_symbol,
            zone,
            kind,
            checks,
            codes,
            blocked_codes,
            scores,
        })
    }
}

/// Checks and resolves every zone.
pub fn resolve_all(zones: &[ZoneConfig]) -> Result<Vec<Zone>, DnsblConfigError> {
    let mut out: Vec<Zone> = Vec::new();
    for z in zones {
        let r = z.resolve()?;
        if out.iter().any(|o| o.zone == r.zone) {
            return Err(DnsblConfigError::Duplicate { zone: r.zone });
        }
        out.push(r);
    }
    Ok(out)
}

/// The name asked of `zone` for an address: its octets (IPv4) or nibbles (IPv6) reversed.
pub fn ip_query(ip: IpAddr, zone: &str) -> String {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            format!("{}.{}.{}.{}.{zone}", o[3], o[2], o[1], o[0])
        }
        IpAddr::V6(v6) => {
            let mut s = String::with_capacity(64 + zone.len());
            for b in v6.octets().iter().rev() {
                s.push(char::from_digit((b & 0xf) as u32, 16).unwrap_or('0'));
                s.push('.');
                s.push(char::from_digit((b >> 4) as u32, 16).unwrap_or('0'));
                s.push('.');
            }
            s.push_str(zone);
            s
        }
    }
}

/// A listing (or a refusal) found for a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListHit {
    /// The symbol: of the return code, `<ZONE>_LISTED`-like for an unnamed code, or
    /// `*_BLOCKED` for a refusal.
    pub symbol: String,
    pub zone: String,
    /// What was asked: the address or domain.
    pub name: String,
    /// Which check asked it (`client_ip`, `url_domains`, ...).
    pub check: &'static str,
    /// The answer's address.
    pub code: String,
    /// A refusal of our resolver, not a listing.
    pub blocked: bool,
    /// The score `[[dnsbl]] scores` gives the symbol, if it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<ListScore>,
}

/// What an answer means for `zone`: a hit per distinct meaning.
pub fn interpret(zone: &Zone, name: &str, check: Check, answers: &[Ipv4Addr]) -> Vec<ListHit> {
    let mut hits: Vec<ListHit> = Vec::new();
    for &a in answers {
        // An answer outside 127/8 is no DNSBL answer at all: a resolver that rewrites
        // NXDOMAIN, or a wildcard. Treated as a refusal, never a listing.
        let blocked = zone.blocked_codes.contains(&a) || a.octets()[0] != 127;
        let symbol = if blocked {
            warn_blocked(zone, a);
            zone.blocked_symbol.clone()
        } else {
            zone.codes
                .iter()
                .find(|(c, _)| *c == a)
                .map_or_else(|| zone.unknown_symbol.clone(), |(_, s)| s.clone())
        };
        if hits.iter().any(|h| h.symbol == symbol) {
            continue;
        }
        hits.push(ListHit {
            score: zone.scores.get(&symbol).copied(),
            symbol,
            zone: zone.zone.clone(),
            name: name.to_string(),
            check: check.as_str(),
            code: a.to_string(),
            blocked,
        });
    }
    hits
}

/// A zone's refusals are logged at most once per `BLOCKED_LOG_EVERY` (per zone), naming the
/// zone and the fix, with the count held back since the last line.
const BLOCKED_LOG_EVERY: Duration = Duration::from_secs(600);

/// Per zone: when its refusal was last logged, and refusals since.
static BLOCKED_LOG: std::sync::LazyLock<
    parking_lot::Mutex<std::collections::HashMap<String, (Instant, u64)>>,
> = std::sync::LazyLock::new(Default::default);

fn warn_blocked(zone: &Zone, code: Ipv4Addr) {
    let held = {
        let mut log = BLOCKED_LOG.lock();
        let now = Instant::now();
        match log.get_mut(&zone.zone) {
            Some((last, held)) if now.duration_since(*last) < BLOCKED_LOG_EVERY => {
                *held += 1;
                return;
            }
            Some((last, held)) => {
                *last = now;
                std::mem::take(held)
            }
            None => {
                // One entry per configured zone: bounded by the configuration.
                log.insert(zone.zone.clone(), (now, 0));
                0
            }
        }
    };
    tracing::warn!(
        zone = %zone.zone,
        code = %code,
        refused_since_last_line = held,
        "DNS list refused our resolver (not a listing; scored 0): query it through your own \
         recursive resolver, not a public or forwarding one, and check the zone name and your \
         query volume ([dns] servers)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(z: &str) -> Zone {
        ZoneConfig {
            zone: z.into(),
            kind: None,
            checks: None,
            returncodes: None,
            scores: None,
        }
        .resolve()
        .unwrap()
    }

    #[test]
    fn presets_fill_what_is_left_out() {
        let zen = zone("zen.spamhaus.org");
        assert_eq!(zen.kind, ZoneKind::Ip);
        assert_eq!(zen.checks, vec![Check::ClientIp, Check::ReceivedIps]);
        let hits = interpret(
            &zen,
            "192.0.2.1",
            Check::ClientIp,
            &["127.0.0.4".parse().unwrap()],
        );
        assert_eq!(hits[0].symbol, "RBL_SPAMHAUS_XBL");
        assert!(!hits[0].blocked);
        let uribl = zone("multi.uribl.com");
        assert_eq!(uribl.blocked_symbol, "URIBL_BLOCKED");
        let h = interpret(
            &uribl,
            "x.example",
            Check::UrlDomains,
            &["127.0.0.1".parse().unwrap()],
        );
        assert!(h[0].blocked);
        assert_eq!(h[0].symbol, "URIBL_BLOCKED");
    }

    #[test]
    fn blocked_codes_are_never_listings() {
        let dbl = zone("dbl.spamhaus.org");
        for code in [
            "127.255.255.252",
            "127.255.255.254",
            "127.255.255.255",
            "127.0.1.255",
            "10.0.0.1",
        ] {
            let h = interpret(
                &dbl,
                "x.example",
                Check::UrlDomains,
                &[code.parse().unwrap()],
            );
            assert_eq!(h.len(), 1);
            assert!(h[0].blocked, "{code}");
            assert_eq!(h[0].symbol, "DBL_BLOCKED");
        }
        let h = interpret(
            &dbl,
            "x.example",
            Check::UrlDomains,
            &["127.0.1.2".parse().unwrap()],
        );
        assert_eq!((h[0].symbol.as_str(), h[0].blocked), ("DBL_SPAM", false));
    }

    #[test]
    fn configured_codes_and_errors() {
        let c: ZoneConfig = toml::from_str(
            r#"zone = "bl.example.net"
kind = "ip"
checks = ["client_ip"]
returncodes = { EX_ONE = "127.0.0.2", EX_MANY = ["127.0.0.3", "127.0.0.4"] }"#,
        )
        .unwrap();
        let z = c.resolve().unwrap();
        let h = interpret(
            &z,
            "1.2.3.4",
            Check::ClientIp,
            &["127.0.0.4".parse().unwrap()],
        );
        assert_eq!(h[0].symbol, "EX_MANY");
        let h = interpret(
            &z,
            "1.2.3.4",
            Check::ClientIp,
            &["127.0.0.9".parse().unwrap()],
        );
        assert_eq!(h[0].symbol, "BL_EXAMPLE_NET");
        assert_eq!(z.blocked_symbol, "BL_EXAMPLE_NET_BLOCKED");
        let no_kind: ZoneConfig = toml::from_str("zone = \"bl.example.net\"").unwrap();
        assert!(matches!(
            no_kind.resolve(),
            Err(DnsblConfigError::NoKind { .. })
        ));
        let wrong: ZoneConfig =
            toml::from_str("zone = \"bl.example.net\"\nkind = \"ip\"\nchecks = [\"url_domains\"]")
                .unwrap();
        assert!(matches!(
            wrong.resolve(),
            Err(DnsblConfigError::CheckKind { .. })
        ));
        assert!(toml::from_str::<ZoneConfig>("zone = \"a.b\"\nsymbol = \"X\"").is_err());
    }

    #[test]
    fn query_names() {
        assert_eq!(
            ip_query("192.0.2.1".parse().unwrap(), "zen.example"),
            "1.2.0.192.zen.example"
        );
        let v6 = ip_query("2001:db8::1".parse().unwrap(), "z.example");
        assert!(v6.starts_with("1.0.0.0.0.0.0.0"), "{v6}");
        assert!(v6.ends_with("8.b.d.0.1.0.0.2.z.example"), "{v6}");
    }
}

//! DNS for the network checks: the `[dns]` options, the resolver (hickory, tokio) with its
//! TTL-honouring, size-bounded cache, and the resolver's health as `/health` and `/metrics`
//! report it.
//!
//! Owns: building one `TokioResolver` from `[dns]` (or the system's configuration), A and TXT
//! lookups with their outcome classified (answer, no such name, failure), the degraded flag.
//! Never touches: messages, rules, the scan workers (everything here is async and runs on the
//! tokio side; `netcheck` decides what to ask).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::TokioResolver;
use serde::{Deserialize, Serialize};

/// `[dns]`: where and how lookups go.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DnsConfig {
    /// Whether messages get network checks at all. None: on in `serve`, off in `scan` and
    /// `replay` (offline, so their results repeat).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Resolvers as `IP` or `IP:PORT` (port 53 by default); empty: the system's
    /// (`/etc/resolv.conf`).
    pub servers: Vec<String>,
    /// Time one query waits for an answer from one server.
    pub timeout_ms: u64,
    /// Tries of a query (over the servers) before it fails.
    pub attempts: usize,
    /// Answers the cache holds at most (each kept for its TTL, not longer).
    pub cache_size: u64,
    /// How long a message waits for its lookups before the rules run with what has arrived
    /// (late answers still fill the cache).
    pub message_budget_ms: u64,
    /// How long the SPF and DMARC results of an unsigned message are reused for the next
    /// message with the same client address, HELO, envelope sender and From domain (0: never).
    pub auth_memo_secs: u64,
}

impl Default for DnsConfig {
    fn default() -> Self {
        DnsConfig {
            enabled: None,
            servers: Vec::new(),
            timeout_ms: 1000,
            attempts: 2,
            cache_size: 32_768,
            message_budget_ms: 300,
            auth_memo_secs: 30,
        }
    }
}

/// Why `[dns]` cannot be used. Each message names the option.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsConfigError {
    #[error("dns.servers: {0:?} is not an IP address or IP:PORT")]
    Server(String),
    #[error("dns.{0} must be at least 1")]
    Zero(&'static str),
    #[error("dns: cannot read the system's resolver configuration: {0}")]
    System(String),
    #[error("dns: cannot build the resolver: {0}")]
    Build(String),
}

impl DnsConfig {
    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), DnsConfigError> {
        for s in &self.servers {
            parse_server(s)?;
        }
        for (v, name) in [
            (self.timeout_ms, "timeout_ms"),
            (self.attempts as u64, "attempts"),
            (self.cache_size, "cache_size"),
            (self.message_budget_ms, "message_budget_ms"),
        ] {
            if v == 0 {
                return Err(DnsConfigError::Zero(name));
            }
        }
        Ok(())
    }

    /// Whether network checks run, given the command's default.
    pub fn enabled_or(&self, default: bool) -> bool {
        self.enabled.unwrap_or(default)
    }

    pub fn budget(&self) -> Duration {
        Duration::from_millis(self.message_budget_ms)
    }

    pub fn auth_memo(&self) -> Duration {
        Duration::from_secs(self.auth_memo_secs)
    }
}

fn parse_server(s: &str) -> Result<SocketAddr, DnsConfigError> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| DnsConfigError::Server(s.to_string()))
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    Found(Vec<T>),
    /// NXDOMAIN or no record of the type: a definite "no".
    None,
    /// No usable answer (timeout, SERVFAIL, refused, network): "don't know".
    Failed(String),
}

/// The resolver's health: counts of lookups by outcome and when the last one failed or
/// succeeded, from which `degraded` is read.
#[derive(Debug, Default)]
pub struct DnsHealth {
    pub answered: AtomicU64,
    pub negative: AtomicU64,
    pub failed: AtomicU64,
    /// Messages whose checks did not all finish within the budget.
    pub over_budget: AtomicU64,
    /// Milliseconds since `epoch` of the last failure and the last answer (0: never).
    last_failure_ms: AtomicU64,
    last_answer_ms: AtomicU64,
    epoch: Option<Instant>,
}

/// A failure this recent, with no answer since, makes the resolver degraded.
const DEGRADED_WINDOW: Duration = Duration::from_secs(60);

impl DnsHealth {
    fn new() -> Self {
        DnsHealth {
            epoch: Some(Instant::now()),
            ..Default::default()
        }
    }

    fn now_ms(&self) -> u64 {
        // +1: 0 means never.
        self.epoch.map_or(0, |e| e.elapsed().as_millis() as u64 + 1)
    }

    pub fn record_failure(&self) {
        self.failed.fetch_add(1, Relaxed);
        self.last_failure_ms.store(self.now_ms(), Relaxed);
    }

    fn record_answer(&self, negative: bool) {
        if negative {
            self.negative.fetch_add(1, Relaxed);
        } else {
            self.answered.fetch_add(1, Relaxed);
        }
        self.last_answer_ms.store(self.now_ms(), Relaxed);
    }

    /// `n` answers and `negative` definite noes at once (nothing when both are zero).
    fn record_answers(&self, n: u64, negative: u64) {
        if n + negative == 0 {
            return;
        }
        self.answered.fetch_add(n, Relaxed);
        self.negative.fetch_add(negative, Relaxed);
        self.last_answer_ms.store(self.now_ms(), Relaxed);
    }

    /// Lookups failed within the last minute and none has been answered since.
    pub fn degraded(&self) -> bool {
        let failure = self.last_failure_ms.load(Relaxed);
        let answer = self.last_answer_ms.load(Relaxed);
        failure != 0
            && failure >= answer
            && self.now_ms().saturating_sub(failure) < DEGRADED_WINDOW.as_millis() as u64
    }
}

/// DNS list answers by query name, with the instant they expire.
type ACache = lru::LruCache<String, (Answer<std::net::Ipv4Addr>, Instant)>;

/// The resolver shared by every check (cheap to clone: one cache, one connection pool).
#[derive(Clone)]
pub struct Resolver {
    inner: TokioResolver,
    health: Arc<DnsHealth>,
    /// DNS list answers (A) by query name, until their TTL: a hit is answered without a task
    /// or hickory's lookup path (a message asks ~8 of them; hickory's cache still holds them
    /// too). Bounded by `cache_size`.
    a_cache: Arc<parking_lot::Mutex<ACache>>,
    /// How long one lookup may take before it fails: `timeout_ms` × `attempts`.
    patience: Duration,
    cache_size: usize,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").finish_non_exhaustive()
    }
}

impl Resolver {
    /// Builds the resolver of `[dns]` (must be called inside a tokio runtime's context only to
    /// resolve, not to build).
    pub fn new(config: &DnsConfig) -> Result<Resolver, DnsConfigError> {
        config.validate()?;
        let (rc, mut opts) = if config.servers.is_empty() {
            hickory_resolver::system_conf::read_system_conf()
                .map_err(|e| DnsConfigError::System(e.to_string()))?
        } else {
            let mut servers = Vec::new();
            for s in &config.servers {
                let addr = parse_server(s)?;
                let mut ns = NameServerConfig::udp_and_tcp(addr.ip());
                for c in &mut ns.connections {
                    c.port = addr.port();
                }
                servers.push(ns);
            }
            (
                ResolverConfig::from_parts(None, Vec::new(), servers),
                ResolverOpts::default(),
            )
        };
        opts.timeout = Duration::from_millis(config.timeout_ms);
        opts.attempts = config.attempts;
        opts.cache_size = config.cache_size;
        // Names are always absolute here (a DNSBL query, a DKIM key): never try search domains.
        opts.ndots = 0;
        opts.use_hosts_file = hickory_resolver::config::ResolveHosts::Never;
        let inner = TokioResolver::builder_with_config(rc, TokioRuntimeProvider::default())
            .with_options(opts)
            .build()
            .map_err(|e| DnsConfigError::Build(e.to_string()))?;
        let size = std::num::NonZeroUsize::new(config.cache_size as usize)
            .unwrap_or(std::num::NonZeroUsize::MIN);
        Ok(Resolver {
            inner,
            health: Arc::new(DnsHealth::new()),
            a_cache: Arc::new(parking_lot::Mutex::new(lru::LruCache::new(size))),
            cache_size: config.cache_size as usize,
            patience: Duration::from_millis(
                config.timeout_ms.saturating_mul(config.attempts as u64),
            ),
        })
    }

    /// The hickory resolver (mail-auth's verifiers use it: one cache for all).
    pub fn hickory(&self) -> &TokioResolver {
        &self.inner
    }

    pub fn health(&self) -> &Arc<DnsHealth> {
        &self.health
    }

    /// `[dns] cache_size`: the bound of each cache of answers.
    pub fn cache_size(&self) -> usize {
        self.cache_size
    }

    /// How long one lookup may take before it fails (`timeout_ms` × `attempts`).
    pub fn patience(&self) -> Duration {
        self.patience
    }

    /// The live cached answers of `names` (None: not cached, or expired), counted as answered
    /// lookups, under one lock and one reading of the clock (a message asks ~10 names, nearly
    /// all answered from the cache; no I/O: for the caller to skip spawning a lookup).
    pub fn cached_a_all(&self, names: &[String]) -> Vec<Option<Answer<std::net::Ipv4Addr>>> {
        let now = Instant::now();
        let (mut answered, mut negative) = (0u64, 0u64);
        let out: Vec<_> = {
            let mut cache = self.a_cache.lock();
            names
                .iter()
                .map(|name| match cache.get(name.as_str()) {
                    Some((answer, until)) if *until > now => {
                        if matches!(answer, Answer::None) {
                            negative += 1;
                        } else {
                            answered += 1;
                        }
                        Some(answer.clone())
                    }
                    Some(_) => {
                        cache.pop(name.as_str());
                        None
                    }
                    None => None,
                })
                .collect()
        };
        self.health.record_answers(answered, negative);
        out
    }

    /// Whether `name`'s answer is cached and live (no I/O, and not counted as a lookup).
    pub fn has_cached_a(&self, name: &str) -> bool {
        self.a_cache
            .lock()
            .peek(name)
            .is_some_and(|(_, until)| *until > Instant::now())
    }

    /// The IPv4 addresses of `name` (a DNS list query).
    pub async fn a(&self, name: &str) -> Answer<std::net::Ipv4Addr> {
        let fqdn = if name.ends_with('.') {
            name.to_string()
        } else {
            format!("{name}.")
        };
        let (answer, until) = match self.inner.lookup(fqdn.as_str(), RecordType::A).await {
            Ok(lookup) => {
                let found: Vec<_> = lookup
                    .answers()
                    .iter()
                    .filter_map(|r| match &r.data {
                        RData::A(a) => Some(a.0),
                        _ => None,
                    })
                    .collect();
                self.health.record_answer(found.is_empty());
                let until = lookup.valid_until();
                if found.is_empty() {
                    (Answer::None, Some(until))
                } else {
                    (Answer::Found(found), Some(until))
                }
            }
            Err(NetError::Dns(DnsError::NoRecordsFound(nr))) => {
                self.health.record_answer(true);
                // Negative answers are kept for their SOA's negative TTL (RFC 2308), else not.
                let until = nr
                    .negative_ttl
                    .map(|ttl| Instant::now() + Duration::from_secs(u64::from(ttl)));
                (Answer::None, until)
            }
            Err(e) => return self.failure(e),
        };
        if let Some(until) = until.filter(|u| *u > Instant::now()) {
            self.a_cache
                .lock()
                .put(name.to_string(), (answer.clone(), until));
        }
        answer
    }

    fn failure<T>(&self, e: NetError) -> Answer<T> {
        if let NetError::Dns(DnsError::NoRecordsFound(_)) = &e {
            self.health.record_answer(true);
            return Answer::None;
        }
        self.health.record_failure();
        Answer::Failed(e.to_string())
    }
}

/// Whether a mail-auth error is the resolver's (a temporary failure), as opposed to a record
/// that is missing or wrong.
pub(crate) fn note_auth_error(health: &DnsHealth, temporary: bool) {
    if temporary {
        health.record_failure();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_parse_with_and_without_port() {
        assert_eq!(
            parse_server("127.0.0.1:5300").unwrap(),
            "127.0.0.1:5300".parse().unwrap()
        );
        assert_eq!(parse_server("::1").unwrap(), "[::1]:53".parse().unwrap());
        assert!(parse_server("localhost").is_err());
        let bad = DnsConfig {
            servers: vec!["nope".into()],
            ..Default::default()
        };
        assert_eq!(bad.validate(), Err(DnsConfigError::Server("nope".into())));
        let zero = DnsConfig {
            message_budget_ms: 0,
            ..Default::default()
        };
        assert_eq!(
            zero.validate(),
            Err(DnsConfigError::Zero("message_budget_ms"))
        );
    }

    #[test]
    fn degraded_after_a_failure_until_an_answer() {
        let h = DnsHealth::new();
        assert!(!h.degraded());
        h.record_failure();
        assert!(h.degraded());
        std::thread::sleep(Duration::from_millis(2));
        h.record_answer(false);
        assert!(!h.degraded());
    }
}

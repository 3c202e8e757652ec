//! Who may do what: the `[access]` model every listener's requests are judged by.
//!
//! Owns: the roles (`Scan` < `Read` < `Admin`), the operation each request is (and the role it
//! needs), who a client is (its address, the address a trusted proxy names for it, or a Unix
//! socket peer's user), the networks and password hashes that grant a role, the checks a
//! browser's request must pass (Origin, Host, a non-simple request for a state change), and
//! the throttling of wrong passwords. Never touches: the protocols' encodings (the listeners
//! turn a [`Denied`] into 401/403/429 or spamd's `EX_NOPERM`).
//!
//! docs/security.md has the table this module implements.

use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use argon2::password_hash::{PasswordHash, PasswordVerifier};
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::HeaderMap;
use ipnet::IpNet;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::listen::LogThrottle;
use crate::secrets::secret_eq;

/// `[access]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessConfig {
    /// Clients that may do everything (learn, reload, read history, reputation, stat, metrics).
    pub admin_networks: Vec<String>,
    /// Clients that may read (history, reputation, stat, metrics, the UI's views).
    pub read_networks: Vec<String>,
    /// Proxies whose `X-Forwarded-For` names the client; a request from one is judged by the
    /// client it names, never by the proxy's own address.
    pub trusted_proxies: Vec<String>,
    /// The admin password as an Argon2 PHC string (`shrike passwd`), sent in a `Password`
    /// header or the UI's login form.
    pub password_hash: Option<String>,
    /// The read-only password, likewise.
    pub read_password_hash: Option<String>,
    /// Names clients may call the daemon by (`Host`) on admin requests, beside IP addresses and
    /// `localhost`: the names a proxy forwards.
    pub hostnames: Vec<String>,
    /// `/metrics` for every client (a Prometheus on another host without a password).
    pub public_metrics: bool,
    /// Mode of the Unix sockets shrike creates (octal).
    pub unix_socket_mode: String,
    /// Group of those sockets (a name or a number; empty: the daemon's).
    pub unix_socket_group: String,
}

impl Default for AccessConfig {
    fn default() -> Self {
        AccessConfig {
            admin_networks: vec!["127.0.0.1/32".into(), "::1/128".into()],
            read_networks: Vec::new(),
            trusted_proxies: Vec::new(),
            password_hash: None,
            read_password_hash: None,
            hostnames: Vec::new(),
            public_metrics: false,
            unix_socket_mode: "0660".into(),
            unix_socket_group: String::new(),
        }
    }
}

/// Why `[access]` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccessConfigError {
    #[error("access.{option}: {value:?} is not a network (ADDRESS/PREFIX or ADDRESS)")]
    Network { option: &'static str, value: String },
    #[error("access.{0} is empty: remove the line for no password")]
    EmptyHash(&'static str),
    #[error("access.{option} is not an Argon2 PHC string ($argon2id$v=19$...): {why}; make one with `shrike passwd`")]
    Hash { option: &'static str, why: String },
    #[error("access.unix_socket_mode: {0:?} is not an octal mode such as \"0660\"")]
    Mode(String),
    #[error("access.unix_socket_group: no group {0:?}")]
    Group(String),
}

impl AccessConfig {
    pub fn validate(&self) -> Result<(), AccessConfigError> {
        for (option, list) in [
            ("admin_networks", &self.admin_networks),
            ("read_networks", &self.read_networks),
            ("trusted_proxies", &self.trusted_proxies),
        ] {
            networks(option, list)?;
        }
        for (option, hash) in [
            ("password_hash", &self.password_hash),
            ("read_password_hash", &self.read_password_hash),
        ] {
            if let Some(h) = hash {
                check_hash(option, h)?;
            }
        }
        self.socket_mode()?;
        self.socket_group()?;
        Ok(())
    }

    /// `unix_socket_mode` as permission bits.
    pub fn socket_mode(&self) -> Result<u32, AccessConfigError> {
        let m = self.unix_socket_mode.trim();
        u32::from_str_radix(m.strip_prefix("0o").unwrap_or(m), 8)
            .ok()
            .filter(|m| *m <= 0o777)
            .ok_or_else(|| AccessConfigError::Mode(self.unix_socket_mode.clone()))
    }

    /// `unix_socket_group` as a group id (`None`: leave the daemon's).
    pub fn socket_group(&self) -> Result<Option<u32>, AccessConfigError> {
        let g = self.unix_socket_group.trim();
        if g.is_empty() {
            return Ok(None);
        }
        if let Ok(gid) = g.parse::<u32>() {
            return Ok(Some(gid));
        }
        match nix::unistd::Group::from_name(g) {
            Ok(Some(group)) => Ok(Some(group.gid.as_raw())),
            _ => Err(AccessConfigError::Group(g.to_string())),
        }
    }

    /// Whether a client that is not on loopback can be an admin without a password hash: the
    /// start-up warning for a daemon listening beyond loopback.
    pub fn admin_open_beyond_loopback(&self) -> bool {
        let wide = |list: &[String]| {
            networks("", list)
                .unwrap_or_default()
                .iter()
                .any(|n| !n.addr().is_loopback() || n.prefix_len() == 0)
        };
        wide(&self.admin_networks) || wide(&self.read_networks) || wide(&self.trusted_proxies)
    }
}

fn networks(option: &'static str, list: &[String]) -> Result<Vec<IpNet>, AccessConfigError> {
    list.iter()
        .map(|s| {
            let s = s.trim();
            s.parse::<IpNet>()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| AccessConfigError::Network {
                    option,
                    value: s.to_string(),
                })
        })
        .collect()
}

fn check_hash(option: &'static str, hash: &str) -> Result<(), AccessConfigError> {
    if hash.trim().is_empty() {
        return Err(AccessConfigError::EmptyHash(option));
    }
    let parsed = PasswordHash::new(hash.trim()).map_err(|e| AccessConfigError::Hash {
        option,
        why: e.to_string(),
    })?;
    if !parsed.algorithm.as_str().starts_with("argon2") {
        return Err(AccessConfigError::Hash {
            option,
            why: format!("algorithm {} is not Argon2", parsed.algorithm),
        });
    }
    Ok(())
}

/// A PHC string of `password` (Argon2id, the crate's default cost, a random salt): what
/// `shrike passwd` prints.
pub fn hash_password(password: &str) -> Result<String, String> {
    use argon2::password_hash::{rand_core::OsRng, PasswordHasher, SaltString};
    let salt = SaltString::generate(&mut OsRng);
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

/// What a client may do, in order: each role may do what the ones below it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Scan (every listener's clients), `/ping`, `/health`.
    Scan,
    /// Read mail metadata: history, reputation, stat, metrics, the UI's views and trial scans.
    Read,
    /// Change state: learn, reload.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Scan => "scan",
            Role::Read => "read",
            Role::Admin => "admin",
        }
    }
}

/// A request's operation, whatever protocol carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Scan,
    Health,
    Stat,
    Metrics,
    History,
    Reputation,
    /// The web UI's pages and JSON reads, and its trial scans.
    UiRead,
    Learn,
    Reload,
    /// rspamd's `/statreset`: the scan and learn counters of `/stat` back to zero.
    StatReset,
    /// The quarantine's list, views and original bytes: other people's mail, so admin only.
    QuarantineRead,
    /// A quarantined message released, learned or deleted.
    QuarantineWrite,
}

impl Operation {
    /// The role it needs.
    pub fn needs(self, config: &AccessConfig) -> Role {
        match self {
            Operation::Scan | Operation::Health => Role::Scan,
            Operation::Metrics if config.public_metrics => Role::Scan,
            Operation::Stat
            | Operation::Metrics
            | Operation::History
            | Operation::Reputation
            | Operation::UiRead => Role::Read,
            Operation::Learn
            | Operation::Reload
            | Operation::StatReset
            | Operation::QuarantineRead
            | Operation::QuarantineWrite => Role::Admin,
        }
    }

    /// Whether it changes state: a browser's request for it must prove it was not sent by a
    /// page of another site.
    pub fn changes_state(self) -> bool {
        matches!(
            self,
            Operation::Learn
                | Operation::Reload
                | Operation::StatReset
                | Operation::QuarantineWrite
        )
    }
}

/// A connection's other end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Tcp(IpAddr),
    /// A Unix-socket client: whether it runs as the daemon's user or root.
    Unix {
        same_user: bool,
    },
}

/// Who a request comes from, as the access model judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    Ip(IpAddr),
    Unix {
        same_user: bool,
    },
    /// A trusted proxy's request without a usable `X-Forwarded-For`: nobody in particular.
    Unknown,
}

impl Client {
    /// The throttling key: the address (an IPv6 client by its /64, which one host holds
    /// whole), or one key for all Unix-socket and unknown clients.
    fn key(self) -> u128 {
        match self {
            Client::Ip(IpAddr::V4(a)) => u128::from(u32::from(a)),
            Client::Ip(IpAddr::V6(a)) => (u128::from(a) >> 64) << 64 | 1,
            Client::Unix { .. } | Client::Unknown => 2,
        }
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Client::Ip(ip) => write!(f, "{ip}"),
            Client::Unix { .. } => f.write_str("unix socket"),
            Client::Unknown => f.write_str("unknown client behind a proxy"),
        }
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No credentials, or wrong ones, where a password could grant it (HTTP 401).
    #[error("{0}")]
    Unauthenticated(String),
    /// Nothing this client can send grants it, or a browser sent it for another site (403).
    #[error("{0}")]
    Forbidden(String),
    /// Too many wrong passwords from this client: try again after this long (429).
    #[error("too many wrong passwords from this client; retry in {} s", .0.as_secs().max(1))]
    Throttled(Duration),
}

/// The access model of a running daemon.
pub struct Access {
    pub config: AccessConfig,
    admin: Vec<IpNet>,
    read: Vec<IpNet>,
    proxies: Vec<IpNet>,
    /// Admin passwords: the PHC hash, and `[http] password` in plain text (rspamd's).
    admin_hash: Option<String>,
    admin_plain: Option<String>,
    read_hash: Option<String>,
    throttle: Throttle,
    /// Argon2 costs ~20 MiB and tens of milliseconds a verification: one at a time, so that
    /// guessers on many addresses take at most one core from scanning.
    verifying: tokio::sync::Semaphore,
    /// Passwords verified lately (a SHA-256 under a random key), so that a client sending the
    /// right one on every request pays Argon2 once.
    verified: Mutex<Vec<([u8; 32], Role)>>,
    cache_key: [u8; 32],
    /// Wrong passwords so far (`shrike_auth_failures_total`).
    pub failures: AtomicU64,
    /// Requests refused by the model (`shrike_access_denied_total`).
    pub denied: AtomicU64,
}

impl Access {
    /// The model of a validated configuration; `plain` is `[http] password`.
    pub fn new(config: &AccessConfig, plain: Option<&str>) -> Access {
        let nets = |option, list: &[String]| networks(option, list).unwrap_or_default();
        let mut cache_key = [0u8; 32];
        if getrandom(&mut cache_key).is_err() {
            tracing::error!("no kernel randomness: verified passwords are not cached");
        }
        Access {
            admin: nets("admin_networks", &config.admin_networks),
            read: nets("read_networks", &config.read_networks),
            proxies: nets("trusted_proxies", &config.trusted_proxies),
            admin_hash: config
                .password_hash
                .clone()
                .filter(|h| !h.trim().is_empty()),
            admin_plain: plain.filter(|p| !p.is_empty()).map(str::to_owned),
            read_hash: config
                .read_password_hash
                .clone()
                .filter(|h| !h.trim().is_empty()),
            throttle: Throttle::default(),
            verifying: tokio::sync::Semaphore::new(1),
            verified: Mutex::new(Vec::new()),
            cache_key,
            failures: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            config: config.clone(),
        }
    }

    /// Whether any password is configured (the UI offers its login form then).
    pub fn has_password(&self) -> bool {
        self.admin_hash.is_some() || self.admin_plain.is_some() || self.read_hash.is_some()
    }

    /// The `Password` header to check: none when it is empty (an empty one is no password) or
    /// when no password is configured (nothing it could match).
    pub fn sent_password<'h>(&self, headers: &'h HeaderMap) -> Option<&'h [u8]> {
        headers
            .get("password")
            .map(|v| v.as_bytes())
            .filter(|v| !v.is_empty() && self.has_password())
    }

    /// Whether an admin password is configured.
    pub fn has_admin_password(&self) -> bool {
        self.admin_hash.is_some() || self.admin_plain.is_some()
    }

    /// Who sent a request that came from `peer` with these headers: the peer, or for a trusted
    /// proxy the right-most address of `X-Forwarded-For` that is not itself a trusted proxy.
    /// Any other peer's `X-Forwarded-For` is ignored.
    pub fn client(&self, peer: Peer, headers: Option<&HeaderMap>) -> Client {
        let ip = match peer {
            Peer::Unix { same_user } => return Client::Unix { same_user },
            Peer::Tcp(ip) => canonical(ip),
        };
        let Some(headers) = headers else {
            return match self.proxies.iter().any(|n| n.contains(&ip)) {
                true => Client::Unknown,
                false => Client::Ip(ip),
            };
        };
        if !self.proxies.iter().any(|n| n.contains(&ip)) {
            // A proxy nobody declared (on loopback, it would make every client an admin): its
            // requests are nobody's in particular.
            if FORWARDING.iter().any(|h| headers.contains_key(*h)) {
                if UNDECLARED_LOG.allow().is_some() {
                    tracing::warn!(
                        peer = %ip,
                        "a request with X-Forwarded-For (or Forwarded, X-Real-IP) from a peer \
                         not in access.trusted_proxies is judged as an unknown client"
                    );
                }
                return Client::Unknown;
            }
            return Client::Ip(ip);
        }
        let mut hops = Vec::new();
        for value in headers.get_all("x-forwarded-for") {
            let Ok(text) = value.to_str() else {
                return Client::Unknown;
            };
            for hop in text.split(',') {
                match parse_hop(hop) {
                    Some(ip) => hops.push(ip),
                    None => return Client::Unknown,
                }
            }
        }
        let mut client = None;
        for hop in hops.iter().rev() {
            client = Some(*hop);
            if !self.proxies.iter().any(|n| n.contains(hop)) {
                break;
            }
        }
        client.map_or(Client::Unknown, Client::Ip)
    }

    /// The role a client has without a password.
    pub fn network_role(&self, client: Client) -> Role {
        match client {
            // The daemon's own user (or root) owns the socket file: it could read the data
            // directory anyway. Others were let in by the socket's mode and group to scan.
            Client::Unix { same_user: true } => Role::Admin,
            Client::Unix { .. } | Client::Unknown => Role::Scan,
            Client::Ip(ip) if self.admin.iter().any(|n| n.contains(&ip)) => Role::Admin,
            Client::Ip(ip) if self.read.iter().any(|n| n.contains(&ip)) => Role::Read,
            Client::Ip(_) => Role::Scan,
        }
    }

    /// The role a password grants (`None`: it is none of them), checked in constant time
    /// against a plain password and with Argon2 against a hash.
    async fn password_role(&self, given: &[u8]) -> Option<Role> {
        if given.is_empty() {
            return None;
        }
        let digest = self.digest(given);
        if let Some(role) = self
            .verified
            .lock()
            .iter()
            .find(|(d, _)| secret_eq(d, &digest))
            .map(|(_, r)| *r)
        {
            return Some(role);
        }
        if self
            .admin_plain
            .as_deref()
            .is_some_and(|p| secret_eq(given, p.as_bytes()))
        {
            return Some(Role::Admin);
        }
        let hashes: Vec<(String, Role)> = [
            (self.admin_hash.clone(), Role::Admin),
            (self.read_hash.clone(), Role::Read),
        ]
        .into_iter()
        .filter_map(|(h, r)| h.map(|h| (h, r)))
        .collect();
        if hashes.is_empty() {
            return None;
        }
        let _one = self.verifying.acquire().await.ok()?;
        let given = given.to_vec();
        let role = tokio::task::spawn_blocking(move || {
            hashes.into_iter().find_map(|(hash, role)| {
                let parsed = PasswordHash::new(&hash).ok()?;
                argon2::Argon2::default()
                    .verify_password(&given, &parsed)
                    .ok()
                    .map(|_| role)
            })
        })
        .await
        .ok()
        .flatten()?;
        let mut verified = self.verified.lock();
        if verified.len() >= 16 {
            verified.remove(0);
        }
        verified.push((digest, role));
        Some(role)
    }

    fn digest(&self, given: &[u8]) -> [u8; 32] {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(self.cache_key);
        h.update(given);
        h.finalize().into()
    }

    /// Judges a password sent by `client`: the role it grants, or why not. Wrong ones are
    /// counted, logged at most once per interval, and make the client wait (exponentially
    /// longer with each, up to a minute) before its next try is even checked.
    pub async fn check_password(&self, client: Client, given: &[u8]) -> Result<Role, Denied> {
        if let Some(wait) = self.throttle.blocked(client.key()) {
            return Err(Denied::Throttled(wait));
        }
        match self.password_role(given).await {
            Some(role) => {
                self.throttle.forget(client.key());
                Ok(role)
            }
            None => {
                let failures = self.failures.fetch_add(1, Relaxed) + 1;
                let wait = self.throttle.failed(client.key());
                if let Some(held) = WRONG_LOG.allow() {
                    tracing::warn!(
                        %client,
                        wrong_passwords_total = failures,
                        held_back = held,
                        next_try_in_ms = wait.as_millis() as u64,
                        "wrong password"
                    );
                }
                Err(Denied::Unauthenticated("wrong password".into()))
            }
        }
    }

    /// Judges an HTTP request for `op` from `peer`: the role it has, or why it is refused.
    /// Scanning and `/health` pass without any check.
    pub async fn authorize_http(
        &self,
        op: Operation,
        peer: Peer,
        headers: &HeaderMap,
    ) -> Result<Role, Denied> {
        let needs = op.needs(&self.config);
        if needs == Role::Scan {
            return Ok(Role::Scan);
        }
        let result = self.judge_http(op, needs, peer, headers).await;
        if result.is_err() {
            self.denied.fetch_add(1, Relaxed);
        }
        result
    }

    async fn judge_http(
        &self,
        op: Operation,
        needs: Role,
        peer: Peer,
        headers: &HeaderMap,
    ) -> Result<Role, Denied> {
        self.browser_checks(headers)?;
        if op.changes_state() && !not_simple(headers) {
            return Err(Denied::Forbidden(
                "a state-changing request needs a Content-Type such as message/rfc822 (or the \
                 Password header): a page of another site can send text/plain"
                    .into(),
            ));
        }
        let client = self.client(peer, Some(headers));
        let role = self.network_role(client);
        if role >= needs {
            return Ok(role);
        }
        if let Some(given) = self.sent_password(headers) {
            let granted = self.check_password(client, given).await?;
            return if granted >= needs {
                Ok(granted)
            } else {
                Err(Denied::Forbidden(format!(
                    "the {} password does not allow this",
                    granted.as_str()
                )))
            };
        }
        Err(self.refusal(needs, client))
    }

    /// The refusal of a client without credentials: 401 where a password could let it in.
    pub fn refusal(&self, needs: Role, client: Client) -> Denied {
        let could = match needs {
            Role::Scan => true,
            Role::Read => self.has_password(),
            Role::Admin => self.has_admin_password(),
        };
        let what = format!("this needs the {} role ({client} has none)", needs.as_str());
        if could {
            Denied::Unauthenticated(format!("{what}: send the password"))
        } else {
            Denied::Forbidden(what)
        }
    }

    /// The checks a browser's request must pass: an `Origin`, when sent, naming the host the
    /// request is addressed to or a configured name (else a page of another site sent it); a
    /// `Host` that is an address, `localhost` or a configured name (else a DNS-rebinding page,
    /// whose own name resolves to the daemon, could read what the daemon answers).
    pub fn browser_checks(&self, headers: &HeaderMap) -> Result<(), Denied> {
        if !self.origin_ok(headers) {
            return Err(Denied::Forbidden(
                "the request's Origin is another site".into(),
            ));
        }
        if !self.host_ok(headers) {
            return Err(Denied::Forbidden(
                "the Host header names the daemon by a name it does not know \
                 (an address, localhost, or access.hostnames)"
                    .into(),
            ));
        }
        Ok(())
    }

    pub fn origin_ok(&self, headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get("origin").and_then(|o| o.to_str().ok()) else {
            return true;
        };
        let Some((_, authority)) = origin.split_once("://") else {
            return false;
        };
        let host = headers
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default();
        authority.eq_ignore_ascii_case(host) || self.known_name(host_name(authority))
    }

    pub fn host_ok(&self, headers: &HeaderMap) -> bool {
        let Some(host) = headers.get(HOST).and_then(|h| h.to_str().ok()) else {
            // HTTP/1.0 clients (rspamc) send none: nothing for a page to rebind.
            return true;
        };
        let name = host_name(host);
        name.eq_ignore_ascii_case("localhost")
            || name.parse::<IpAddr>().is_ok()
            || self.known_name(name)
    }

    fn known_name(&self, name: &str) -> bool {
        let name = name.trim_end_matches('.');
        self.config
            .hostnames
            .iter()
            .any(|h| h.trim_end_matches('.').eq_ignore_ascii_case(name))
    }
}

/// Headers a proxy adds to name its client.
const FORWARDING: [&str; 3] = ["x-forwarded-for", "forwarded", "x-real-ip"];

static UNDECLARED_LOG: std::sync::LazyLock<LogThrottle> =
    std::sync::LazyLock::new(|| LogThrottle::new(Duration::from_secs(60)));

static WRONG_LOG: std::sync::LazyLock<LogThrottle> =
    std::sync::LazyLock::new(|| LogThrottle::new(Duration::from_secs(10)));

/// The host of an authority (`host:port`, `[v6]:port`), without the port or brackets.
fn host_name(authority: &str) -> &str {
    match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority
            .rsplit_once(':')
            .map_or(authority, |(h, _)| h)
            .trim(),
    }
}

/// One `X-Forwarded-For` entry: an address, maybe with a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    hop.parse::<std::net::SocketAddr>()
        .ok()
        .map(|s| canonical(s.ip()))
}

/// An IPv4-mapped IPv6 address as the IPv4 one (a dual-stack listener's peers).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether a request is one a page of another site cannot send without a CORS preflight
/// (which shrike never grants): a `Content-Type` other than the three a form or a no-cors
/// fetch may use, or a header no browser adds on its own (`Password`, the UI's
/// `X-CSRF-Token`, rspamc's `Flags`, `Filename`, and the rspamd protocol's envelope headers).
pub fn not_simple(headers: &HeaderMap) -> bool {
    const PROOF: [&str; 14] = [
        "password",
        "x-csrf-token",
        "x-requested-with",
        "flags",
        "filename",
        "deliver-to",
        "rcpt",
        "ip",
        "helo",
        "hostname",
        "queue-id",
        "settings-id",
        "compression",
        "user",
    ];
    if PROOF.iter().any(|h| headers.contains_key(*h)) {
        return true;
    }
    let Some(ct) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        // A fetch of a Blob without a type sends none.
        return false;
    };
    let essence = ct.split(';').next().unwrap_or_default().trim();
    ![
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ]
    .iter()
    .any(|s| essence.eq_ignore_ascii_case(s))
}

fn getrandom(buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

/// Wrong passwords per client: after the n-th in a row, its next try is refused unchecked for
/// 250 ms × 2^(n−1), at most a minute. Forgotten after a right one, or 15 minutes without a
/// wrong one; at most `CLIENTS` clients remembered (the least recent forgotten first).
struct Throttle {
    clients: Mutex<lru::LruCache<u128, Strikes>>,
}

const CLIENTS: usize = 16_384;
const FIRST_WAIT: Duration = Duration::from_millis(250);
const LONGEST_WAIT: Duration = Duration::from_secs(60);
const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);

struct Strikes {
    count: u32,
    until: Instant,
    last: Instant,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle {
            clients: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(CLIENTS).expect("CLIENTS > 0"),
            )),
        }
    }
}

impl Throttle {
    /// How long `key` must still wait, if it must.
    fn blocked(&self, key: u128) -> Option<Duration> {
        let now = Instant::now();
        let mut map = self.clients.lock();
        let s = map.peek(&key)?;
        if now.duration_since(s.last) > FORGET_AFTER {
            map.pop(&key);
            return None;
        }
        s.until.checked_duration_since(now).filter(|d| !d.is_zero())
    }

    /// Counts a wrong password: how long the client waits now.
    fn failed(&self, key: u128) -> Duration {
        let now = Instant::now();
        let mut map = self.clients.lock();
        let count = map
            .peek(&key)
            .filter(|s| now.duration_since(s.last) <= FORGET_AFTER)
            .map_or(0, |s| s.count)
            .saturating_add(1);
        let wait = FIRST_WAIT
            .saturating_mul(1u32 << (count - 1).min(16))
            .min(LONGEST_WAIT);
        map.put(
            key,
            Strikes {
                count,
                until: now + wait,
                last: now,
            },
        );
        wait
    }

    fn forget(&self, key: u128) {
        self.clients.lock().pop(&key);
    }
}

/// A request's headers from name-value pairs (the server's unit tests).
#[cfg(test)]
pub(super) fn test_headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            *k,
            hyper::header::HeaderValue::from_str(v).expect("header value"),
        );
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_headers as headers;

    fn model(toml_text: &str) -> Access {
        let c: AccessConfig = toml::from_str(toml_text).expect("config");
        c.validate().expect("valid");
        Access::new(&c, None)
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn networks_give_roles_and_everyone_else_scans() {
        let a = model("read_networks = [\"10.0.0.0/8\"]\nadmin_networks = [\"127.0.0.1\"]");
        assert_eq!(a.network_role(Client::Ip(ip("127.0.0.1"))), Role::Admin);
        assert_eq!(a.network_role(Client::Ip(ip("127.0.0.2"))), Role::Scan);
        assert_eq!(a.network_role(Client::Ip(ip("10.1.2.3"))), Role::Read);
        assert_eq!(a.network_role(Client::Ip(ip("::1"))), Role::Scan);
        assert_eq!(
            a.network_role(Client::Unix { same_user: true }),
            Role::Admin
        );
        assert_eq!(
            a.network_role(Client::Unix { same_user: false }),
            Role::Scan
        );
        assert_eq!(a.network_role(Client::Unknown), Role::Scan);
        // A dual-stack listener's mapped address is the IPv4 one.
        let mapped = a.client(Peer::Tcp(ip("::ffff:127.0.0.1")), None);
        assert_eq!(mapped, Client::Ip(ip("127.0.0.1")));
    }

    #[test]
    fn only_a_trusted_proxy_names_the_client_and_never_counts_as_itself() {
        let a = model("trusted_proxies = [\"127.0.0.1/32\", \"192.0.2.0/24\"]");
        let xff = |v: &str| headers(&[("x-forwarded-for", v)]);
        let proxy = Peer::Tcp(ip("127.0.0.1"));
        assert_eq!(a.client(proxy, Some(&HeaderMap::new())), Client::Unknown);
        assert_eq!(
            a.client(proxy, Some(&xff("203.0.113.9"))),
            Client::Ip(ip("203.0.113.9"))
        );
        // A client's own forged entry is left of the one the proxy appends.
        assert_eq!(
            a.client(proxy, Some(&xff("127.0.0.1, 203.0.113.9"))),
            Client::Ip(ip("203.0.113.9"))
        );
        // Proxies in a chain are skipped; a port is allowed.
        assert_eq!(
            a.client(proxy, Some(&xff("198.51.100.7:4711, 192.0.2.5"))),
            Client::Ip(ip("198.51.100.7"))
        );
        for bad in ["", "not-an-address", "203.0.113.9, ", "1.2.3.4 5.6.7.8"] {
            assert_eq!(a.client(proxy, Some(&xff(bad))), Client::Unknown, "{bad:?}");
        }
        // Anyone else's forwarding header makes it a proxy nobody declared: nobody in
        // particular, whatever its own address.
        assert_eq!(
            a.client(Peer::Tcp(ip("203.0.113.9")), Some(&xff("127.0.0.1"))),
            Client::Unknown
        );
        let none = model("");
        for header in ["x-forwarded-for", "forwarded", "x-real-ip"] {
            let h = headers(&[(header, "198.51.100.1")]);
            assert_eq!(
                none.client(Peer::Tcp(ip("127.0.0.1")), Some(&h)),
                Client::Unknown
            );
        }
        assert_eq!(
            none.client(Peer::Tcp(ip("127.0.0.1")), Some(&HeaderMap::new())),
            Client::Ip(ip("127.0.0.1"))
        );
    }

    #[test]
    fn browsers_must_name_this_site_and_send_what_no_other_site_can() {
        let a = model("hostnames = [\"mail.example.org\"]");
        assert!(a
            .browser_checks(&headers(&[("host", "127.0.0.1:11333")]))
            .is_ok());
        assert!(a.browser_checks(&headers(&[("host", "[::1]:1")])).is_ok());
        assert!(a
            .browser_checks(&headers(&[("host", "mail.example.org")]))
            .is_ok());
        assert!(a
            .browser_checks(&headers(&[("host", "rebind.evil.example:11333")]))
            .is_err());
        assert!(a
            .browser_checks(&headers(&[
                ("host", "127.0.0.1:11333"),
                ("origin", "https://evil.example")
            ]))
            .is_err());
        assert!(a
            .browser_checks(&headers(&[
                ("host", "127.0.0.1:11333"),
                ("origin", "https://mail.example.org")
            ]))
            .is_ok());
        assert!(!not_simple(&headers(&[("content-type", "text/plain")])));
        assert!(!not_simple(&headers(&[(
            "content-type",
            "application/x-www-form-urlencoded; charset=x"
        )])));
        assert!(!not_simple(&HeaderMap::new()));
        assert!(not_simple(&headers(&[("content-type", "message/rfc822")])));
        assert!(not_simple(&headers(&[
            ("content-type", "text/plain"),
            ("flags", "body_block")
        ])));
    }

    #[tokio::test]
    async fn hashes_grant_their_roles_and_wrong_guesses_wait_longer_each_time() {
        let admin = hash_password("w-pass").unwrap();
        let read = hash_password("r-pass").unwrap();
        let a = model(&format!(
            "password_hash = \"{admin}\"\nread_password_hash = \"{read}\"\nadmin_networks = []"
        ));
        let c = Client::Ip(ip("203.0.113.1"));
        assert_eq!(a.check_password(c, b"w-pass").await, Ok(Role::Admin));
        assert_eq!(a.check_password(c, b"r-pass").await, Ok(Role::Read));
        // Cached: the same answer again.
        assert_eq!(a.check_password(c, b"w-pass").await, Ok(Role::Admin));
        assert!(matches!(
            a.check_password(c, b"guess").await,
            Err(Denied::Unauthenticated(_))
        ));
        // Throttled now, even with the right password, until the wait has passed.
        assert!(matches!(
            a.check_password(c, b"w-pass").await,
            Err(Denied::Throttled(_))
        ));
        let other = Client::Ip(ip("203.0.113.2"));
        assert_eq!(a.check_password(other, b"w-pass").await, Ok(Role::Admin));
        let t = Throttle::default();
        let waits: Vec<Duration> = (0..12).map(|_| t.failed(7)).collect();
        assert_eq!(waits[0], FIRST_WAIT);
        assert_eq!(waits[1], FIRST_WAIT * 2);
        assert_eq!(waits[11], LONGEST_WAIT);
        assert!(t.blocked(7).is_some());
        t.forget(7);
        assert!(t.blocked(7).is_none());
    }

    #[test]
    fn bad_settings_are_named() {
        for (text, what) in [
            ("admin_networks = [\"10.0.0.0/33\"]", "not a network"),
            ("password_hash = \"\"", "is empty"),
            ("password_hash = \"s3cret\"", "PHC"),
            ("unix_socket_mode = \"rw\"", "octal"),
            ("unix_socket_group = \"no-such-group-here\"", "no group"),
        ] {
            let c: AccessConfig = toml::from_str(text).unwrap();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(what), "{text}: {e}");
        }
        let c = AccessConfig::default();
        assert!(!c.admin_open_beyond_loopback());
        let open: AccessConfig = toml::from_str("admin_networks = [\"0.0.0.0/0\"]").unwrap();
        assert!(open.admin_open_beyond_loopback());
    }
}

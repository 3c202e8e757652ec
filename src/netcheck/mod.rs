//! The network stage of a scan: everything a message asks of DNS (SPF, DKIM, DMARC and ARC
//! through `auth`; the DNS lists through `dnsbl`), started together on the tokio side as soon
//! as the message and its envelope are in, and collected under the message's budget
//! (`[dns] message_budget_ms`) into `NetChecks`, plain data the scan worker hands to the rules.
//! The worker never waits on the network: the waiting happens here, in the connection's task,
//! before the message is queued; what has not arrived by the deadline is a temporary failure
//! for the rules, and keeps running in its own task to fill the resolver's cache.
//!
//! Owns: `NetChecks`, `Checker` (resolver, authenticator, zones, budget) and its counters.
//! Never touches: the scan workers, Lua, the store.

use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use mail_auth::MessageAuthenticator;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::auth::{AuthResults, MethodResult, Piece, Status};
use crate::dns::{Answer, Resolver};
use crate::dnsbl::{self, Check, ListHit, Zone, ZoneKind};
use crate::message::{Envelope, Limits};

/// List queries one message makes at most.
const MAX_LIST_QUERIES: usize = 96;
/// Messages whose authentication may run at once (each task holds a copy of its message, and
/// runs past the budget to fill the cache): beyond, a message gets temporary failures at once,
/// so a dead resolver under a flood costs bounded memory.
const MAX_IN_FLIGHT: usize = 2048;
/// `[dns] auth_memo_secs`'s default.
const DEFAULT_AUTH_MEMO: Duration = Duration::from_secs(30);
const LATE: &str = "no answer within the message's DNS budget";
const SHED: &str = "too many messages waiting for DNS";

/// What the network said of one message (everything `Default`: checks not run).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetChecks {
    /// Whether checks ran at all (false offline: rules see every method as not available).
    pub ran: bool,
    pub auth: AuthResults,
    /// Listings and refusals, in zone order.
    pub lists: Vec<ListHit>,
    /// Zones with a query that failed or did not answer in time.
    pub list_failures: Vec<String>,
    /// Whether every lookup finished within the budget.
    pub complete: bool,
    /// Time spent waiting, microseconds.
    pub waited_us: u64,
    /// With `[arc]`: the ARC set sealing the message with these results (header lines), or
    /// why there is none; the scan adds it to mail it accepts.
    pub arc_seal: Option<Result<String, String>>,
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct CheckCounters {
    pub messages: AtomicU64,
    pub over_budget: AtomicU64,
    pub list_queries: AtomicU64,
    pub wait_us: AtomicU64,
    /// Messages that got no checks because `MAX_IN_FLIGHT` were running.
    pub shed: AtomicU64,
}

/// Runs a message's network checks.
pub struct Checker {
    resolver: Resolver,
    auth: MessageAuthenticator,
    zones: Arc<Vec<Zone>>,
    budget: Duration,
    /// A message's lookups are abandoned this long after they started (the budget, then one
    /// more lookup's time for late answers to reach the cache).
    task_limit: Duration,
    in_flight: Arc<tokio::sync::Semaphore>,
    /// mail-auth's parsed-record caches.
    caches: Arc<crate::auth::AuthCaches>,
    host: Arc<str>,
    /// `[arc]`'s sealer, when on.
    sealer: Option<Arc<crate::sign::Sealer>>,
    /// The scan's `[limits]`: the URL domains asked are those of the message as the scan
    /// worker will parse it.
    limits: Limits,
    pub counters: CheckCounters,
}

impl std::fmt::Debug for Checker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checker")
            .field("zones", &self.zones.len())
            .field("budget", &self.budget)
            .finish_non_exhaustive()
    }
}

impl Checker {
    /// `host` is our own name: the authserv-id, and SPF's `%{r}`.
    pub fn new(resolver: Resolver, zones: Vec<Zone>, budget: Duration, host: &str) -> Checker {
        let auth = MessageAuthenticator(resolver.hickory().clone());
        let cache_size = resolver.cache_size();
        Checker {
            task_limit: budget + resolver.patience(),
            resolver,
            auth,
            zones: Arc::new(zones),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            caches: Arc::new(crate::auth::AuthCaches::new(cache_size, DEFAULT_AUTH_MEMO)),
            budget,
            host: Arc::from(host),
            sealer: None,
            limits: Limits::default(),
            counters: CheckCounters::default(),
        }
    }

    /// The scan's `[limits]` (default: `Limits::default()`), under which the URL domains the
    /// lists are asked about are found.
    /// Seals each message with `[arc]`'s key once its results are known.
    pub fn with_sealer(mut self, sealer: Option<Arc<crate::sign::Sealer>>) -> Checker {
        self.sealer = sealer;
        self
    }

    pub fn with_limits(mut self, limits: Limits) -> Checker {
        self.limits = limits;
        self
    }

    /// Unsigned messages' results reused for `ttl` (default 30 s; zero: never).
    pub fn with_auth_memo(mut self, ttl: Duration) -> Checker {
        self.caches = Arc::new(crate::auth::AuthCaches::new(
            self.resolver.cache_size(),
            ttl,
        ));
        self
    }

    /// At most `n` messages' authentication in flight (default 2048).
    pub fn with_max_in_flight(mut self, n: usize) -> Checker {
        self.in_flight = Arc::new(tokio::sync::Semaphore::new(n));
        self
    }

    /// Unsigned messages answered from the results memo.
    pub fn auth_memo_hits(&self) -> u64 {
        self.caches.memo.hits()
    }

    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// `/health`'s word for DNS: `degraded` while lookups fail (within the last minute, with
    /// no answer since), else `ok`.
    pub fn health_word(&self) -> &'static str {
        if self.resolver.health().degraded() {
            "degraded"
        } else {
            "ok"
        }
    }

    /// The checks' lines of `/metrics` (Prometheus text format).
    pub fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write;
        let h = self.resolver.health();
        let c = &self.counters;
        let _ = writeln!(
            out,
            "# HELP shrike_dns_lookups_total DNS lookups of the network checks by outcome.\n\
             # TYPE shrike_dns_lookups_total counter\n\
             shrike_dns_lookups_total{{outcome=\"answer\"}} {}\n\
             shrike_dns_lookups_total{{outcome=\"negative\"}} {}\n\
             shrike_dns_lookups_total{{outcome=\"failed\"}} {}\n\
             # HELP shrike_dns_degraded 1 while DNS lookups fail (within the last minute, none answered since).\n\
             # TYPE shrike_dns_degraded gauge\n\
             shrike_dns_degraded {}\n\
             # HELP shrike_dns_messages_total Messages given network checks.\n\
             # TYPE shrike_dns_messages_total counter\n\
             shrike_dns_messages_total {}\n\
             # HELP shrike_dns_over_budget_total Messages whose checks did not all finish within dns.message_budget_ms.\n\
             # TYPE shrike_dns_over_budget_total counter\n\
             shrike_dns_over_budget_total {}\n\
             # HELP shrike_dns_list_queries_total DNS list queries made.\n\
             # TYPE shrike_dns_list_queries_total counter\n\
             shrike_dns_list_queries_total {}\n\
             # HELP shrike_dns_wait_seconds_total Time messages waited for their checks.\n\
             # TYPE shrike_dns_wait_seconds_total counter\n\
             shrike_dns_wait_seconds_total {}\n\
             # HELP shrike_dns_shed_total Messages given no checks because too many were in flight.\n\
             # TYPE shrike_dns_shed_total counter\n\
             shrike_dns_shed_total {}\n\
             # HELP shrike_dns_auth_memo_hits_total Unsigned messages whose SPF and DMARC results were reused (dns.auth_memo_secs).\n\
             # TYPE shrike_dns_auth_memo_hits_total counter\n\
             shrike_dns_auth_memo_hits_total {}",
            h.answered.load(Relaxed),
            h.negative.load(Relaxed),
            h.failed.load(Relaxed),
            u8::from(h.degraded()),
            c.messages.load(Relaxed),
            c.over_budget.load(Relaxed),
            c.list_queries.load(Relaxed),
            c.wait_us.load(Relaxed) as f64 / 1e6,
            c.shed.load(Relaxed),
            self.caches.memo.hits(),
        );
    }

    /// Starts the lookups a message's header section and envelope call for, before its body
    /// has arrived (the milter has them at end of headers, and the body can take longer than
    /// the lookups): the DNS lists' queries of the client, Received, From, sender and HELO
    /// names, and what authentication will ask (`auth::prefetch`). Nothing is returned: the
    /// answers land in the caches that `check` reads at end of message. One task, counted
    /// against the same in-flight bound as `check` (none when it is reached), and stopped after
    /// the same time as `check`'s.
    pub fn prefetch(&self, head: &[u8], envelope: &Envelope) {
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            return;
        };
        let (auth, caches, resolver, zones) = (
            self.auth.clone(),
            self.caches.clone(),
            self.resolver.clone(),
            self.zones.clone(),
        );
        let host = self.host.clone();
        // The header section as a message with an empty body, parsed once in the task for the
        // lists' names and for authentication.
        let mut raw = Vec::with_capacity(head.len() + 2);
        raw.extend_from_slice(head);
        raw.extend_from_slice(b"\r\n");
        let envelope = envelope.clone();
        let limit = self.task_limit;
        tokio::spawn(async move {
            let parsed = mail_auth::AuthenticatedMessage::parse(&raw);
            let mut queries: Vec<String> = Vec::new();
            if !zones.is_empty() {
                let headers = parsed.as_ref().map_or(&[][..], |m| &m.headers[..]);
                let t = dnsbl::targets_of(headers, &envelope);
                for (_, _, _, query) in list_queries(&zones, &t) {
                    if queries.len() < MAX_LIST_QUERIES
                        && !queries.contains(&query)
                        && !resolver.has_cached_a(&query)
                    {
                        queries.push(query);
                    }
                }
            }
            let lists = async {
                let mut set = tokio::task::JoinSet::new();
                for q in queries {
                    let resolver = resolver.clone();
                    set.spawn(async move { resolver.a(&q).await });
                }
                while set.join_next().await.is_some() {}
            };
            let mail_from = bare_address(envelope.mail_from.as_deref());
            let smtp = crate::auth::Smtp {
                ip: envelope.client_ip,
                helo: envelope.helo.as_deref().unwrap_or_default(),
                mail_from: &mail_from,
                host: &host,
            };
            let authenticate = async {
                if let Some(msg) = &parsed {
                    crate::auth::prefetch(&auth, &caches, msg, smtp).await;
                }
            };
            let _ = tokio::time::timeout(limit, async { tokio::join!(lists, authenticate) }).await;
            drop(permit);
        });
    }

    /// Starts every lookup of `raw` and returns what arrived within the budget.
    pub async fn check(&self, raw: &[u8], envelope: &Envelope) -> NetChecks {
        let start = Instant::now();
        let deadline = tokio::time::Instant::now() + self.budget;
        self.counters.messages.fetch_add(1, Relaxed);

        let mut out = NetChecks {
            ran: true,
            ..Default::default()
        };
        let mut got = Got::default();
        let mail_from = bare_address(envelope.mail_from.as_deref());
        // One parse of the header section serves the memo and the lists' targets.
        let parsed = mail_auth::AuthenticatedMessage::parse(raw);
        let memoized = parsed
            .as_ref()
            .filter(|_| self.sealer.is_none())
            .and_then(|m| {
                crate::auth::memoized(
                    &self.caches,
                    m,
                    crate::auth::Smtp {
                        ip: envelope.client_ip,
                        helo: envelope.helo.as_deref().unwrap_or_default(),
                        mail_from: &mail_from,
                        host: &self.host,
                    },
                )
            });
        let mut auth_open = memoized.is_none();
        for p in memoized.into_iter().flatten() {
            got.take(p, &mut out.auth);
        }

        // Authentication: one task, which sends each result as it is known.
        let (atx, mut arx) = mpsc::unbounded_channel::<Piece>();
        let permit = if auth_open {
            self.in_flight.clone().try_acquire_owned().ok()
        } else {
            None
        };
        let shed = auth_open && permit.is_none();
        if let Some(permit) = permit {
            let auth = self.auth.clone();
            let caches = self.caches.clone();
            let health = self.resolver.health().clone();
            let host = self.host.clone();
            let sealer = self.sealer.clone();
            let raw: Arc<[u8]> = Arc::from(raw);
            let ip = envelope.client_ip;
            let helo = envelope.helo.clone().unwrap_or_default();
            let limit = self.task_limit;
            let mut task = Box::pin(async move {
                let smtp = crate::auth::Smtp {
                    ip,
                    helo: &helo,
                    mail_from: &mail_from,
                    host: &host,
                };
                let verify = crate::auth::verify(
                    &auth,
                    &health,
                    &caches,
                    &raw,
                    smtp,
                    &atx,
                    sealer.as_deref(),
                );
                let _ = tokio::time::timeout(limit, verify).await;
                drop(permit);
            });
            // Polled here first: with every record cached (or the results memoized) it is done
            // at once, and spawning a task, with the wake-up across threads that comes with it,
            // would cost more than the work. Only a task that waits on the network is spawned.
            let waiting =
                std::future::poll_fn(|cx| Poll::Ready(task.as_mut().poll(cx).is_pending())).await;
            if waiting {
                tokio::spawn(task);
            }
        } else {
            if shed {
                self.counters.shed.fetch_add(1, Relaxed);
            }
            drop(atx);
        }

        // Lists: answered from the cache, else one task per distinct query.
        let mut hits: Vec<(usize, ListHit)> = Vec::new();
        let (ltx, mut lrx) = mpsc::unbounded_channel::<(usize, Vec<ListHit>, bool)>();
        let mut pending_lists = 0usize;
        if !self.zones.is_empty() && !shed {
            let urls = self
                .zones
                .iter()
                .any(|z| z.checks.contains(&Check::UrlDomains));
            let headers = parsed.as_ref().map_or(&[][..], |m| &m.headers[..]);
            let mut t = dnsbl::targets_of(headers, envelope);
            if urls {
                t.url_domains = dnsbl::url_domains(raw, &self.limits);
            }
            let mut asked: Vec<String> = Vec::new();
            let mut queries = Vec::new();
            for (zi, check, name, query) in list_queries(&self.zones, &t) {
                if asked.contains(&query) || asked.len() >= MAX_LIST_QUERIES {
                    continue;
                }
                asked.push(query);
                queries.push((zi, check, name));
            }
            let cached = self.resolver.cached_a_all(&asked);
            for (((zi, check, name), query), cached) in queries.into_iter().zip(&asked).zip(cached)
            {
                let zone = &self.zones[zi];
                if let Some(answer) = cached {
                    if let Answer::Found(a) = answer {
                        hits.extend(
                            dnsbl::interpret(zone, &name.to_string(), check, &a)
                                .into_iter()
                                .map(|h| (zi, h)),
                        );
                    }
                    continue;
                }
                let query = query.clone();
                pending_lists += 1;
                let name = name.to_string();
                let (resolver, zones, ltx) =
                    (self.resolver.clone(), self.zones.clone(), ltx.clone());
                tokio::spawn(async move {
                    let zone = &zones[zi];
                    let (hits, failed) = match resolver.a(&query).await {
                        Answer::Found(a) => (dnsbl::interpret(zone, &name, check, &a), false),
                        Answer::None => (Vec::new(), false),
                        Answer::Failed(_) => (Vec::new(), true),
                    };
                    let _ = ltx.send((zi, hits, failed));
                });
            }
            self.counters
                .list_queries
                .fetch_add(asked.len() as u64, Relaxed);
        }
        drop(ltx);
        drop(parsed);

        let mut failed_zones: Vec<usize> = Vec::new();
        // Created once and polled last (`biased`): with everything answered from the caches the
        // loop ends without it ever being polled, so no timer is registered for the message.
        let timer = tokio::time::sleep_until(deadline);
        tokio::pin!(timer);
        while auth_open || pending_lists > 0 {
            tokio::select! {
                biased;
                p = arx.recv(), if auth_open => match p {
                    Some(Piece::Seal(seal)) => out.arc_seal = Some(seal),
                    Some(p) => got.take(p, &mut out.auth),
                    None => auth_open = false,
                },
                l = lrx.recv(), if pending_lists > 0 => match l {
                    Some((zi, h, failed)) => {
                        pending_lists -= 1;
                        hits.extend(h.into_iter().map(|h| (zi, h)));
                        if failed && !failed_zones.contains(&zi) {
                            failed_zones.push(zi);
                        }
                    }
                    None => pending_lists = 0,
                },
                _ = &mut timer => break,
            }
        }
        out.complete = !auth_open && pending_lists == 0;
        if pending_lists > 0 {
            // Unanswered list queries count as failed zones; which ones is not tracked per
            // query, so every zone still owed an answer is named.
            for zi in 0..self.zones.len() {
                if !failed_zones.contains(&zi) && !hits.iter().any(|(z, _)| *z == zi) {
                    failed_zones.push(zi);
                }
            }
        }
        got.fill_missing(raw, &mut out.auth, if shed { SHED } else { LATE });
        hits.sort_by_key(|(zi, _)| *zi);
        out.lists = hits.into_iter().map(|(_, h)| h).collect();
        failed_zones.sort_unstable();
        out.list_failures = failed_zones
            .into_iter()
            .map(|zi| self.zones[zi].zone.clone())
            .collect();
        let waited = start.elapsed();
        out.waited_us = waited.as_micros() as u64;
        self.counters.wait_us.fetch_add(out.waited_us, Relaxed);
        if !out.complete {
            self.counters.over_budget.fetch_add(1, Relaxed);
            self.resolver.health().over_budget.fetch_add(1, Relaxed);
        }
        out
    }
}

/// An envelope address without its angle brackets (empty: none, a bounce).
fn bare_address(a: Option<&str>) -> String {
    a.map(|m| {
        m.trim()
            .trim_start_matches('<')
            .trim_end_matches('>')
            .to_string()
    })
    .unwrap_or_default()
}

/// A name a list is asked about: an address (asked of IP lists reversed) or a domain.
#[derive(Clone, Copy)]
enum Name<'a> {
    Ip(IpAddr),
    Domain(&'a str),
}

impl std::fmt::Display for Name<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Name::Ip(ip) => ip.fmt(f),
            Name::Domain(d) => f.write_str(d),
        }
    }
}

/// Every list query of a message's targets, zone by zone in order: (zone index, check, name,
/// query), repeats included (the callers bound and deduplicate).
fn list_queries<'t>(
    zones: &'t [Zone],
    t: &'t dnsbl::Targets,
) -> impl Iterator<Item = (usize, Check, Name<'t>, String)> + 't {
    zones.iter().enumerate().flat_map(move |(zi, zone)| {
        zone.checks.iter().flat_map(move |&check| {
            names(t, check)
                .into_iter()
                .filter_map(move |name| Some((zi, check, name, list_query(zone, name)?)))
        })
    })
}

/// What `zone` is asked about `name` (None: an IP list is not asked about domains).
fn list_query(zone: &Zone, name: Name<'_>) -> Option<String> {
    match (zone.kind, name) {
        (ZoneKind::Ip, Name::Ip(ip)) => Some(dnsbl::ip_query(ip, &zone.zone)),
        (ZoneKind::Ip, Name::Domain(_)) => None,
        (ZoneKind::Domain, name) => Some(format!("{name}.{}", zone.zone)),
    }
}

/// The names of one check.
fn names(t: &dnsbl::Targets, check: Check) -> Vec<Name<'_>> {
    match check {
        Check::ClientIp => t.client_ip.map(Name::Ip).into_iter().collect(),
        Check::ReceivedIps => t.received_ips.iter().copied().map(Name::Ip).collect(),
        Check::UrlDomains => t.url_domains.iter().map(|d| Name::Domain(d)).collect(),
        Check::FromDomain => domain(&t.from_domain),
        Check::MailFromDomain => domain(&t.mail_from_domain),
        Check::Helo => domain(&t.helo),
    }
}

fn domain(d: &Option<String>) -> Vec<Name<'_>> {
    match d {
        Some(d) => vec![Name::Domain(d)],
        None => Vec::new(),
    }
}

/// Which authentication results arrived.
#[derive(Default)]
struct Got {
    spf: bool,
    helo: bool,
    dkim: bool,
    arc: bool,
    dmarc: bool,
}

impl Got {
    fn take(&mut self, p: Piece, a: &mut AuthResults) {
        match p {
            Piece::From(d) => a.from_domain = d,
            Piece::Spf(r) => {
                self.spf = true;
                a.spf = Some(r);
            }
            Piece::Helo(r) => {
                self.helo = true;
                a.helo = Some(r);
            }
            Piece::Dkim(r) => {
                self.dkim = true;
                a.dkim = r;
            }
            Piece::Arc(r) => {
                self.arc = true;
                a.arc = Some(r);
            }
            Piece::Dmarc(r) => {
                self.dmarc = true;
                a.dmarc = Some(r);
            }
            Piece::Seal(_) => {}
        }
    }

    /// Results that did not arrive are temporary failures (DKIM: one per signature the
    /// message carries; ARC: only when it carries a seal).
    fn fill_missing(&self, raw: &[u8], a: &mut AuthResults, why: &str) {
        if !self.spf {
            a.spf = Some(MethodResult::temp(why));
        }
        if !self.helo {
            a.helo = Some(MethodResult::temp(why));
        }
        if !self.dmarc {
            let mut r = MethodResult::temp(why);
            r.domain = a.from_domain.clone();
            a.dmarc = Some(r);
        }
        if self.dkim && self.arc {
            return;
        }
        let (dkim, arc) = signature_headers(raw);
        if !self.dkim {
            a.dkim = (0..dkim).map(|_| MethodResult::temp(why)).collect();
        }
        if !self.arc {
            a.arc = Some(if arc {
                MethodResult::temp(why)
            } else {
                MethodResult::of(Status::None)
            });
        }
    }
}

/// DKIM-Signature headers in the header section, and whether there is an ARC-Seal.
fn signature_headers(raw: &[u8]) -> (usize, bool) {
    let end = memchr::memmem::find(raw, b"\r\n\r\n").unwrap_or(raw.len());
    let head = &raw[..end];
    let (mut dkim, mut arc) = (0, false);
    for line in crate::message::lines(head) {
        let starts = |p: &[u8]| line.len() >= p.len() && line[..p.len()].eq_ignore_ascii_case(p);
        if starts(b"dkim-signature:") {
            dkim += 1;
        } else if starts(b"arc-seal:") {
            arc = true;
        }
    }
    (dkim, arc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_results_are_temporary_failures() {
        let raw = b"DKIM-Signature: a\r\nDkim-Signature: b\r\nFrom: x@y.example\r\n\r\nbody";
        let mut a = AuthResults::default();
        let mut got = Got::default();
        got.take(Piece::From(Some("y.example".into())), &mut a);
        got.take(Piece::Spf(MethodResult::of(Status::Pass)), &mut a);
        got.fill_missing(raw, &mut a, LATE);
        assert_eq!(a.spf.unwrap().result, Status::Pass);
        assert_eq!(a.dkim.len(), 2);
        assert!(a.dkim.iter().all(|d| d.result == Status::TempError));
        let dmarc = a.dmarc.unwrap();
        assert_eq!(dmarc.result, Status::TempError);
        assert_eq!(dmarc.domain.as_deref(), Some("y.example"));
        assert_eq!(a.arc.unwrap().result, Status::None);
    }
}

/// Why the network checks cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetcheckError {
    #[error(transparent)]
    Dns(#[from] crate::dns::DnsConfigError),
    #[error(transparent)]
    Dnsbl(#[from] crate::dnsbl::DnsblConfigError),
}

/// The checker of `[dns]`, `[[dnsbl]]` and `[auth]` for a scan under `limits`, or None when
/// `[dns] enabled` (or, unset, the command's default `default_on`) says off.
pub fn from_config(
    dns: &crate::dns::DnsConfig,
    zones: &[crate::dnsbl::ZoneConfig],
    auth: &crate::auth::AuthConfig,
    limits: &Limits,
    default_on: bool,
) -> Result<Option<Checker>, NetcheckError> {
    if !dns.enabled_or(default_on) {
        return Ok(None);
    }
    let resolver = Resolver::new(dns)?;
    let zones = crate::dnsbl::resolve_all(zones)?;
    Ok(Some(
        Checker::new(resolver, zones, dns.budget(), &auth.authserv_id())
            .with_auth_memo(dns.auth_memo())
            .with_limits(limits.clone()),
    ))
}

//! Daemon counters and latency histograms, rendered for `GET /metrics` (Prometheus text format)
//! and `GET /stat`.
//!
//! Owns: the numbers the daemon keeps about itself. Every update is a relaxed atomic add, so
//! the scan workers and the socket tasks never wait on each other to count.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::pool::PoolError;
use crate::verdict::Action;

/// Upper bounds of the latency buckets, seconds.
const BUCKETS: [f64; 16] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 10.0,
];

/// A latency histogram with fixed buckets.
#[derive(Debug, Default)]
pub struct Histogram {
    /// Per bucket (not cumulative); the last slot is +Inf.
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let slot = BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BUCKETS.len());
        self.counts[slot].fetch_add(1, Relaxed);
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// The `q` quantile (0–1) in seconds, as the upper bound of the bucket it falls in (the
    /// largest bound for the +Inf bucket); `None` before the first observation.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let counts: Vec<u64> = self.counts.iter().map(|c| c.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(
                    BUCKETS
                        .get(i)
                        .copied()
                        .unwrap_or(BUCKETS[BUCKETS.len() - 1]),
                );
            }
        }
        Some(BUCKETS[BUCKETS.len() - 1])
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, bound) in BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        cumulative += self.counts[BUCKETS.len()].load(Relaxed);
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}"
        );
        let sum = self.sum_nanos.load(Relaxed) as f64 / 1e9;
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}

/// The pipeline stages timed per scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Waiting for a worker.
    Queue,
    Analyze,
    Lookup,
    Rules,
    /// A worker's whole job.
    Total,
    /// Waiting for the message's network checks (DNS), before it is queued.
    Dns,
}

/// Stage label values, in `Stage` order.
pub const STAGE_NAMES: [&str; 6] = ["queue", "analyze", "lookup", "rules", "total", "dns"];

/// Everything the daemon counts.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Scans by action, indexed like `Action::ALL`.
    pub scans: [AtomicU64; Action::ALL.len()],
    /// Learns the classifier took, by class (what it counts too).
    pub learned_spam: AtomicU64,
    pub learned_ham: AtomicU64,
    /// Learns of a message the classifier had already learned as that class: acknowledged,
    /// neither trained again nor added to the store.
    pub duplicate_spam: AtomicU64,
    pub duplicate_ham: AtomicU64,
    /// Learns refused, by `ops::LEARN_REFUSALS` reason.
    pub learns_refused: [AtomicU64; super::ops::LEARN_REFUSALS.len()],
    /// Requests refused because the scan queue was full.
    pub busy: AtomicU64,
    /// Scans that did not answer within the scan timeout.
    pub timeouts: AtomicU64,
    /// Scan workers restarted after a panic.
    pub worker_restarts: AtomicU64,
    /// Scan workers replaced because they were stuck on one message.
    pub workers_replaced: AtomicU64,
    pub http_requests: AtomicU64,
    /// HTTP requests answered with a 4xx or 5xx status.
    pub http_errors: AtomicU64,
    pub http_connections: AtomicU64,
    pub milter_connections: AtomicU64,
    pub milter_messages: AtomicU64,
    /// Milter connections closed on a protocol error.
    pub milter_protocol_errors: AtomicU64,
    /// Outbound messages of authenticated users held for being over a limit
    /// (`[outbound.limits]`).
    pub outbound_limited: AtomicU64,
    /// Outbound messages scanned (an authenticated client or `[outbound] networks`).
    pub outbound_scans: AtomicU64,
    /// Messages answered with the configured fallback (busy, timeout, error).
    pub milter_fallbacks: AtomicU64,
    /// spamd-protocol requests read (SpamAssassin's and rspamd's legacy one, on either port).
    pub spamd_requests: AtomicU64,
    /// Of those, rspamd's legacy `RSPAMC/1.x` requests.
    pub spamd_legacy_requests: AtomicU64,
    /// spamd-protocol requests answered with an error code.
    pub spamd_errors: AtomicU64,
    /// spamd-protocol connections that arrived on the HTTP port.
    pub spamd_on_http: AtomicU64,
    /// Indexed by `Stage`.
    pub stages: [Histogram; STAGE_NAMES.len()],
    /// Scans by action per minute over the last day (the web UI's Status chart).
    pub activity: super::activity::Activity,
    /// What `/stat` counts from: the counts at its last `/statreset` (zero before any).
    /// `/metrics` never goes back: Prometheus counters only grow.
    stat_base: parking_lot::Mutex<StatCounts>,
}

/// The counts `/stat` (and rspamd's `/auth`) report, since start or the last `/statreset`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StatCounts {
    /// Scans by action, indexed like `Action::ALL`.
    pub scans: [u64; Action::ALL.len()],
    pub learned_spam: u64,
    pub learned_ham: u64,
    pub duplicate_spam: u64,
    pub duplicate_ham: u64,
    pub http_connections: u64,
    pub milter_connections: u64,
}

impl StatCounts {
    pub fn scanned(&self) -> u64 {
        self.scans.iter().sum()
    }

    /// Scans whose action is one of these.
    pub fn of(&self, actions: &[Action]) -> u64 {
        Action::ALL
            .iter()
            .zip(&self.scans)
            .filter(|(a, _)| actions.contains(a))
            .map(|(_, n)| n)
            .sum()
    }

    fn minus(&self, base: &StatCounts) -> StatCounts {
        let mut d = *self;
        for (n, b) in d.scans.iter_mut().zip(&base.scans) {
            *n = n.saturating_sub(*b);
        }
        for (n, b) in [
            (&mut d.learned_spam, base.learned_spam),
            (&mut d.learned_ham, base.learned_ham),
            (&mut d.duplicate_spam, base.duplicate_spam),
            (&mut d.duplicate_ham, base.duplicate_ham),
            (&mut d.http_connections, base.http_connections),
            (&mut d.milter_connections, base.milter_connections),
        ] {
            *n = n.saturating_sub(b);
        }
        d
    }
}

impl Metrics {
    /// Counts a scan the pool did not answer (queue full, or past the scan timeout).
    pub fn not_scanned(&self, e: &PoolError) {
        match e {
            PoolError::Busy => self.busy.fetch_add(1, Relaxed),
            PoolError::Timeout => self.timeouts.fetch_add(1, Relaxed),
            PoolError::Stopped => 0,
        };
    }

    /// Counts an acknowledged learn: spam or ham, first or duplicate.
    pub fn learned(&self, ham: bool, duplicate: bool) {
        let counter = match (ham, duplicate) {
            (false, false) => &self.learned_spam,
            (true, false) => &self.learned_ham,
            (false, true) => &self.duplicate_spam,
            (true, true) => &self.duplicate_ham,
        };
        counter.fetch_add(1, Relaxed);
    }

    /// Counts a learn refused for `reason` (one of `ops::LEARN_REFUSALS`).
    pub fn learn_refused(&self, reason: &str) {
        if let Some(i) = super::ops::LEARN_REFUSALS.iter().position(|r| *r == reason) {
            self.learns_refused[i].fetch_add(1, Relaxed);
        }
    }

    pub fn scanned(&self, action: Action) {
        if let Some(i) = Action::ALL.iter().position(|&a| a == action) {
            self.scans[i].fetch_add(1, Relaxed);
            self.activity.count(i);
        }
    }

    pub fn stage(&self, stage: Stage, d: Duration) {
        self.stages[stage as usize].observe(d);
    }

    fn stat_now(&self) -> StatCounts {
        StatCounts {
            scans: std::array::from_fn(|i| self.scans[i].load(Relaxed)),
            learned_spam: self.learned_spam.load(Relaxed),
            learned_ham: self.learned_ham.load(Relaxed),
            duplicate_spam: self.duplicate_spam.load(Relaxed),
            duplicate_ham: self.duplicate_ham.load(Relaxed),
            http_connections: self.http_connections.load(Relaxed),
            milter_connections: self.milter_connections.load(Relaxed),
        }
    }

    /// `/stat`'s counts: since start, or since the last `/statreset`.
    pub fn stat(&self) -> StatCounts {
        self.stat_now().minus(&self.stat_base.lock())
    }

    /// rspamd's `/statreset`: the counts so far (what it answers), and `/stat` counts from
    /// zero again.
    pub fn reset_stat(&self) -> StatCounts {
        let mut base = self.stat_base.lock();
        let now = self.stat_now();
        let since = now.minus(&base);
        *base = now;
        since
    }

    pub fn total_scans(&self) -> u64 {
        self.scans.iter().map(|c| c.load(Relaxed)).sum()
    }

    /// Renders the daemon's own counters; `server` adds store, engine and queue figures.
    pub fn render(&self, out: &mut String) {
        counter_header(out, "shrike_scans_total", "Messages scanned, by action.");
        for (i, action) in Action::ALL.iter().enumerate() {
            let _ = writeln!(
                out,
                "shrike_scans_total{{action=\"{}\"}} {}",
                action.as_str(),
                self.scans[i].load(Relaxed)
            );
        }
        counter_header(
            out,
            "shrike_learns_total",
            "Learns acknowledged, by class; duplicate=\"true\": the classifier had already learned the message (not trained again, no complaint or rescue).",
        );
        for (class, duplicate, n) in [
            ("spam", false, &self.learned_spam),
            ("spam", true, &self.duplicate_spam),
            ("ham", false, &self.learned_ham),
            ("ham", true, &self.duplicate_ham),
        ] {
            let _ = writeln!(
                out,
                "shrike_learns_total{{class=\"{class}\",duplicate=\"{duplicate}\"}} {}",
                n.load(Relaxed)
            );
        }
        counter_header(
            out,
            "shrike_learns_refused_total",
            "Learns not taken (nothing learned, acknowledged or recorded), by reason.",
        );
        for (reason, n) in super::ops::LEARN_REFUSALS.iter().zip(&self.learns_refused) {
            let _ = writeln!(
                out,
                "shrike_learns_refused_total{{reason=\"{reason}\"}} {}",
                n.load(Relaxed)
            );
        }
        for (name, help, value) in [
            (
                "shrike_busy_total",
                "Requests refused because the scan queue was full.",
                &self.busy,
            ),
            (
                "shrike_scan_timeouts_total",
                "Scans not answered within the scan timeout.",
                &self.timeouts,
            ),
            (
                "shrike_worker_restarts_total",
                "Scan workers rebuilt after a panic.",
                &self.worker_restarts,
            ),
            (
                "shrike_workers_replaced_total",
                "Scan workers replaced by fresh ones because one message held them past server.stuck_worker_ms.",
                &self.workers_replaced,
            ),
            (
                "shrike_http_requests_total",
                "HTTP requests served.",
                &self.http_requests,
            ),
            (
                "shrike_http_errors_total",
                "HTTP requests answered with 4xx or 5xx.",
                &self.http_errors,
            ),
            (
                "shrike_http_connections_total",
                "HTTP connections accepted.",
                &self.http_connections,
            ),
            (
                "shrike_spamd_requests_total",
                "spamd-protocol requests read (SPAMC and legacy RSPAMC).",
                &self.spamd_requests,
            ),
            (
                "shrike_spamd_legacy_requests_total",
                "rspamd legacy protocol (RSPAMC/1.x) requests read.",
                &self.spamd_legacy_requests,
            ),
            (
                "shrike_spamd_errors_total",
                "spamd-protocol requests answered with an error code.",
                &self.spamd_errors,
            ),
            (
                "shrike_spamd_on_http_total",
                "spamd-protocol connections detected on the HTTP port.",
                &self.spamd_on_http,
            ),
            (
                "shrike_milter_connections_total",
                "Milter connections accepted.",
                &self.milter_connections,
            ),
            (
                "shrike_milter_messages_total",
                "Messages judged over milter.",
                &self.milter_messages,
            ),
            (
                "shrike_milter_protocol_errors_total",
                "Milter connections closed on a protocol error.",
                &self.milter_protocol_errors,
            ),
            (
                "shrike_milter_fallbacks_total",
                "Milter messages answered with the fallback action.",
                &self.milter_fallbacks,
            ),
            (
                "shrike_outbound_scans_total",
                "Outbound messages scanned (an authenticated client or [outbound] networks).",
                &self.outbound_scans,
            ),
            (
                "shrike_outbound_limited_total",
                "Outbound messages of authenticated users over a limit ([outbound.limits]).",
                &self.outbound_limited,
            ),
        ] {
            counter_header(out, name, help);
            let _ = writeln!(out, "{name} {}", value.load(Relaxed));
        }
        let _ = writeln!(
            out,
            "# HELP shrike_stage_seconds Wall time per pipeline stage (queue: waiting for a worker).\n\
             # TYPE shrike_stage_seconds histogram"
        );
        for (histogram, stage) in self.stages.iter().zip(STAGE_NAMES) {
            histogram.render(out, "shrike_stage_seconds", &format!("stage=\"{stage}\""));
        }
    }
}

pub fn counter_header(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
}

pub fn gauge(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
    );
}

/// Escapes a Prometheus label value.
pub fn label(value: &str) -> String {
    let mut s = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(30));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        let mut out = String::new();
        h.render(&mut out, "x", "");
        assert!(out.contains("x_bucket{le=\"0.00005\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.005\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"10\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_count 3\n"), "{out}");
        assert_eq!(h.count(), 3);
    }

    #[test]
    fn scans_by_action() {
        let m = Metrics::default();
        m.scanned(Action::Reject);
        m.scanned(Action::Reject);
        m.scanned(Action::NoAction);
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.contains("shrike_scans_total{action=\"reject\"} 2\n"));
        assert!(out.contains("shrike_scans_total{action=\"no action\"} 1\n"));
        assert_eq!(m.total_scans(), 3);
        assert_eq!(label("a\"b\\c"), "a\\\"b\\\\c");
    }
}

//! The listeners' side of the decision history: a scan or learn through the pool, and its
//! record handed to the history's writer (which never makes the reply wait).
//!
//! A listener scans with `daemon.recorded("NAME").scan(request, timeout)` instead of
//! `daemon.pool.scan(request, timeout)`: one call that scans and records.

use std::time::Instant;

use super::pool::{LearnReply, PoolError, ScanReply, ScanRequest};
use super::Daemon;
use crate::history::{Kind, Record};
use crate::message::Envelope;
use crate::store::Counter;

impl Daemon {
    /// The worker pool, recording what it answers in the decision history under `listener`
    /// (`http`, `milter`, `spamd`): `daemon.recorded("spamd").scan(request, timeout)` where a
    /// listener would call `daemon.pool.scan(request, timeout)`.
    pub fn recorded(&self, listener: &'static str) -> Recorded<'_> {
        Recorded {
            daemon: self,
            listener,
        }
    }

    /// Records an acknowledged learn (`Counter::Complaint` spam, `Counter::Rescue` ham).
    pub fn record_learn(
        &self,
        listener: &'static str,
        counter: Counter,
        envelope: &Envelope,
        size: usize,
        learned: &LearnReply,
        start: Instant,
    ) {
        if !self.history.enabled() {
            return;
        }
        let mut r = Record {
            time_us: crate::history::now_us(),
            kind: if counter == Counter::Rescue {
                Kind::LearnHam
            } else {
                Kind::LearnSpam
            },
            ..Record::default()
        }
        .with_envelope(envelope);
        r.listener = listener.to_string();
        r.message_id = learned.message_id.clone();
        r.size = size as u64;
        r.scan_us = start.elapsed().as_micros() as u64;
        r.duplicate = learned.duplicate;
        self.history.record(r);
    }
}

/// The pool seen through the decision history ([`Daemon::recorded`]).
pub struct Recorded<'a> {
    daemon: &'a Daemon,
    listener: &'static str,
}

impl Recorded<'_> {
    /// Scans a message as `Pool::scan` does and records the verdict. A message the pool did
    /// not answer (busy, timeout) has no verdict and no record.
    pub async fn scan(
        self,
        mut request: ScanRequest,
        timeout: std::time::Duration,
    ) -> Result<ScanReply, PoolError> {
        let d = self.daemon;
        request.keep = d.quarantine.actions();
        if !d.history.enabled() && request.keep.is_empty() {
            return d.pool.scan(request, timeout).await;
        }
        let start = Instant::now();
        let envelope = request.envelope.clone();
        let size = request.raw.len() as u64;
        let mut result = d.pool.scan(request, timeout).await;
        if let Ok(answer) = &mut result {
            // The record and the kept message share their time: the entry's id starts with it.
            let time_us = crate::history::now_us();
            if let Some(raw) = answer.kept.take() {
                let mut m = crate::quarantine::Meta::new(time_us, &answer.verdict, &envelope);
                m.listener = self.listener.to_string();
                m.message_id = answer.message_id.clone();
                m.from = answer.from.clone();
                m.subject = Some(answer.subject.clone()).filter(|s| !s.is_empty());
                m.size = raw.len() as u64;
                d.quarantine.submit(m, raw);
            }
            if d.history.enabled() {
                let mut r = Record::from_verdict(&answer.verdict).with_envelope(&envelope);
                r.time_us = time_us;
                r.listener = self.listener.to_string();
                r.message_id = answer.message_id.clone();
                r.from = answer.from.clone();
                r.subject = Some(answer.subject.clone()).filter(|s| !s.is_empty());
                r.size = size;
                r.scan_us = start.elapsed().as_micros() as u64;
                d.history.record(r);
            }
        }
        result
    }
}

/// Runs a `/history` query (its query string) off the I/O threads: the status and JSON body.
pub(super) async fn history_query(daemon: &Daemon, query: &str) -> (http::StatusCode, String) {
    use crate::history::query::{self, Query, QueryError};
    use http::StatusCode;
    if !daemon.history.enabled() {
        return (
            StatusCode::NOT_FOUND,
            crate::proto::rspamd::error_body("the decision history is off ([history] enabled)"),
        );
    }
    let pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let parsed = Query::parse(
        pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        crate::history::now_us(),
    );
    let mut q = match parsed {
        Ok(q) => q,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                crate::proto::rspamd::error_body(&e.to_string()),
            )
        }
    };
    // A page is bounded: the client pages on with the cursor.
    q.limit = q.limit.min(MAX_PAGE);
    let dir = daemon.config.server.data_dir.join(crate::history::DIR);
    match tokio::task::spawn_blocking(move || query::run(&dir, &q)).await {
        Ok(Ok(page)) => (StatusCode::OK, page.to_json().to_string()),
        Ok(Err(e @ QueryError::Io { .. })) => {
            tracing::error!(error = %e, "history query failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                crate::proto::rspamd::error_body(&e.to_string()),
            )
        }
        Ok(Err(e)) => (
            StatusCode::BAD_REQUEST,
            crate::proto::rspamd::error_body(&e.to_string()),
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            crate::proto::rspamd::error_body(&e.to_string()),
        ),
    }
}

/// Most records in one `/history` page.
const MAX_PAGE: usize = 1000;

/// The history's part of `/health`.
pub(super) fn history_health(daemon: &Daemon) -> serde_json::Value {
    use std::sync::atomic::Ordering::Relaxed;
    match daemon.history.stats() {
        None => serde_json::json!({ "enabled": false }),
        Some(s) => serde_json::json!({
            "enabled": true,
            "written": s.written.load(Relaxed),
            "dropped": s.dropped.load(Relaxed),
            "write_errors": s.write_errors.load(Relaxed),
            "bytes": s.bytes.load(Relaxed),
            "segments": s.segments.load(Relaxed),
        }),
    }
}

/// The history's counters in `/metrics`.
pub(super) fn history_metrics(daemon: &Daemon, out: &mut String) {
    use super::metrics::{counter_header, gauge};
    use std::fmt::Write as _;
    use std::sync::atomic::Ordering::Relaxed;
    let Some(s) = daemon.history.stats() else {
        return;
    };
    for (name, help, value) in [
        (
            "shrike_history_records_total",
            "Records written to the decision history.",
            s.written.load(Relaxed),
        ),
        (
            "shrike_history_dropped_total",
            "Records dropped because the history writer's queue was full.",
            s.dropped.load(Relaxed),
        ),
        (
            "shrike_history_write_errors_total",
            "History batches that could not be written.",
            s.write_errors.load(Relaxed),
        ),
    ] {
        counter_header(out, name, help);
        let _ = writeln!(out, "{name} {value}");
    }
    gauge(
        out,
        "shrike_history_bytes",
        "Bytes of the decision history on disk.",
        s.bytes.load(Relaxed),
    );
}

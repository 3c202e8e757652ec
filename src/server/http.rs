//! The HTTP server (hyper 1.x): rspamd's protocol (`/checkv2`, `/learnspam`, `/learnham`,
//! `/ping`, `/stat`, `/statreset`, `/counters`, `/auth`; the fuzzy storage's commands answered
//! "not supported") and shrike's own endpoints (`/metrics`, `/health`, `/reload`,
//! `/reputation`).
//!
//! Owns: routing, request limits (body size, header size and count, read timeouts, connection
//! count), and the HTTP encoding of what `access` decides and `ops` does. Scans go to the
//! worker pool.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Semaphore};

use super::access::{Denied, Operation, Peer};
use super::budget::{grow, Protocol, Reservation};
use super::listen::{accept_loop, Listener, LogThrottle, Stream};
use super::metrics::{counter_header, gauge, label, StatCounts};
use super::ops::{LearnError, Learned};
use super::pool::{PoolError, ScanRequest};
use super::sniff::{sniff, Sniffed};
use super::Daemon;
use crate::engine::RuleCounters;
use crate::proto::compress::{unzstd, Inflate};
use crate::proto::headers::spam_headers;
use crate::proto::rspamd::{check_reply, error_body, CheckRequest, ReplyExtras};
use crate::store::Counter;

/// `[http]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// `ADDR:PORT`, `unix:PATH`, or `off`.
    pub listen: String,
    /// Largest message accepted (beyond: 413).
    pub max_body_bytes: usize,
    /// Open connections; more get 503 with `Retry-After: 1` and are closed.
    pub max_connections: usize,
    /// Largest request head (request line and headers).
    pub max_header_bytes: usize,
    /// Most request headers.
    pub max_headers: usize,
    /// Seconds a client has to send a request head (also the keep-alive idle limit).
    pub header_read_timeout_secs: u64,
    /// Seconds a client has to send the body.
    pub body_read_timeout_secs: u64,
    /// rspamd's controller password, in plain text: sent in a `Password` header it grants the
    /// admin role, as `[access] password_hash` does (prefer that). Not empty (`validate`); read
    /// it through `password()`.
    pub password: Option<String>,
}

impl HttpConfig {
    /// The password clients may send, if one is set. An empty one is none: it must never let
    /// a client in that sends an empty `Password` header (`config check` refuses it anyway).
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref().filter(|p| !p.is_empty())
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: "127.0.0.1:11333".into(),
            max_body_bytes: 50 * 1024 * 1024,
            max_connections: 1024,
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            header_read_timeout_secs: 30,
            body_read_timeout_secs: 60,
            password: None,
        }
    }
}

/// Serves HTTP until `stop` turns true: at shutdown, once the requests the listener was
/// answering are answered (`server::run`); until then it answers as a stopping daemon does.
pub async fn run(
    listener: Listener,
    daemon: Arc<Daemon>,
    limit: Arc<Semaphore>,
    stop: watch::Receiver<bool>,
) {
    let stop_each = stop.clone();
    let refusal = over_limit_reply();
    accept_loop(
        listener,
        limit,
        stop,
        "HTTP",
        Some(refusal),
        move |stream, peer| {
            daemon.metrics.http_connections.fetch_add(1, Relaxed);
            let (daemon, stop) = (daemon.clone(), stop_each.clone());
            async move {
                match stream {
                    Stream::Tcp(s) => serve_connection(s, peer, daemon, stop).await,
                    Stream::Unix(s) => serve_connection(s, peer, daemon, stop).await,
                }
            }
        },
    )
    .await;
}

/// What a connection over `max_connections` gets before it is closed: a 503 with Retry-After,
/// as a full queue answers, rather than a closed socket.
fn over_limit_reply() -> Bytes {
    let body = error_body("too many connections");
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into()
}

/// The warning for a check refused because the queue is full, at most once per this interval:
/// under overload there are thousands a second (each counted in `shrike_busy_total`).
static BUSY_LOG: std::sync::LazyLock<LogThrottle> =
    std::sync::LazyLock::new(|| LogThrottle::new(Duration::from_secs(10)));

async fn serve_connection<S>(
    io: S,
    peer: Peer,
    daemon: Arc<Daemon>,
    mut stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let c = &daemon.config.http;
    let io = match sniff(io, Duration::from_secs(c.header_read_timeout_secs.max(1))).await {
        Sniffed::Http(io) => io,
        Sniffed::Spamd(io) => {
            daemon.metrics.spamd_on_http.fetch_add(1, Relaxed);
            // spamd carries no X-Forwarded-For: a proxy's spamd client is nobody in particular.
            let role = daemon.access.network_role(daemon.access.client(peer, None));
            if let Err(e) = super::spamd::connection(io, &daemon, role).await {
                tracing::debug!(error = %e, ?peer, "spamd connection on the HTTP port closed");
            }
            return;
        }
        Sniffed::Gone => return,
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(c.header_read_timeout_secs.max(1)))
        // (`validate` refuses smaller values; these guard a config built in code)
        .max_buf_size(c.max_header_bytes.max(super::MIN_HTTP_HEADER_BYTES))
        .max_headers(c.max_headers.max(super::MIN_HTTP_HEADERS));
    let service = {
        let daemon = daemon.clone();
        hyper::service::service_fn(move |req| {
            let daemon = daemon.clone();
            async move { Ok::<_, Infallible>(handle(req, &daemon, peer).await) }
        })
    };
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, ?peer, "HTTP connection ended with an error");
            }
        }
        _ = stop.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

type Reply = Response<Full<Bytes>>;

fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn json(status: StatusCode, body: String) -> Reply {
    reply(status, "application/json", body)
}

fn error(status: StatusCode, message: &str) -> Reply {
    json(status, error_body(message))
}

/// Counts a request in `Daemon::http_in_flight` for as long as it lives.
struct InFlight<'a>(&'a Daemon);

impl<'a> InFlight<'a> {
    fn new(daemon: &'a Daemon) -> InFlight<'a> {
        daemon.http_in_flight.fetch_add(1, Relaxed);
        InFlight(daemon)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.http_in_flight.fetch_sub(1, Relaxed);
    }
}

async fn handle(req: Request<Incoming>, daemon: &Arc<Daemon>, peer: Peer) -> Reply {
    let _counted = InFlight::new(daemon);
    daemon.metrics.http_requests.fetch_add(1, Relaxed);
    let path = req.uri().path().trim_end_matches('/').to_owned();
    let method = req.method().clone();
    let stopping = !daemon.ready.load(Relaxed);
    let mut r = route(req, &method, &path, daemon, peer).await;
    if r.status().is_client_error() || r.status().is_server_error() {
        daemon.metrics.http_errors.fetch_add(1, Relaxed);
        tracing::debug!(%method, path, status = %r.status(), "HTTP request refused");
    }
    if stopping {
        // Each connection ends with its next answer: the listener closes once the requests
        // in flight are answered.
        r.headers_mut()
            .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

async fn route(
    req: Request<Incoming>,
    method: &Method,
    path: &str,
    daemon: &Arc<Daemon>,
    peer: Peer,
) -> Reply {
    if super::ui::owns(path) {
        return super::ui::handle(req, path, daemon, peer).await;
    }
    if super::quarantine::owns(path) {
        return super::quarantine::handle(req, path, daemon, peer).await;
    }
    let op = match (method, path) {
        (&Method::GET, "/ping") => return reply(StatusCode::OK, "text/plain", "pong\r\n"),
        (&Method::POST, "/checkv2" | "/check" | "/symbols") => Operation::Scan,
        (&Method::POST, "/learnspam" | "/learnham") => Operation::Learn,
        (&Method::GET, "/stat" | "/counters" | "/auth") => Operation::Stat,
        // rspamc sends GET; rspamd takes any method.
        (&Method::GET | &Method::POST, "/statreset") => Operation::StatReset,
        // rspamd's fuzzy storage (a plugin's commands there): shrike's fuzzy body hashes are
        // reputation shingles, learned with the message, not a store of their own.
        (_, "/fuzzyadd" | "/fuzzydel" | "/fuzzydelhash") => {
            let mut r = error(
                StatusCode::NOT_IMPLEMENTED,
                "fuzzy storage is not supported: shrike has no fuzzy hash store to add to or \
                 delete from; learn the message (learn_spam, learn_ham) instead",
            );
            // rspamc prints the status line, not the body.
            r.extensions_mut()
                .insert(hyper::ext::ReasonPhrase::from_static(
                    b"Fuzzy storage is not supported by shrike",
                ));
            return r;
        }
        (&Method::GET, "/metrics") => Operation::Metrics,
        (&Method::GET, "/health") => Operation::Health,
        (&Method::POST, "/reload") => Operation::Reload,
        (&Method::GET, "/reputation") => Operation::Reputation,
        (&Method::GET, "/history") => Operation::History,
        (
            _,
            "/ping" | "/checkv2" | "/check" | "/symbols" | "/learnspam" | "/learnham" | "/stat"
            | "/counters" | "/auth" | "/statreset" | "/metrics" | "/health" | "/reload"
            | "/reputation" | "/history",
        ) => return error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
        _ => return error(StatusCode::NOT_FOUND, "no such endpoint"),
    };
    if let Err(denied) = daemon.access.authorize_http(op, peer, req.headers()).await {
        return refused(&denied);
    }
    if matches!(op, Operation::Scan | Operation::Learn) && !daemon.ready.load(Relaxed) {
        // Shutting down: what is queued is finished, nothing new is taken.
        return pool_error(PoolError::Stopped);
    }
    match op {
        Operation::Scan => check(req, daemon).await,
        Operation::Learn if path == "/learnham" => learn(req, daemon, Counter::Rescue).await,
        Operation::Learn => learn(req, daemon, Counter::Complaint).await,
        Operation::Stat if path == "/counters" => json(StatusCode::OK, counters(daemon)),
        Operation::Stat if path == "/auth" => json(StatusCode::OK, auth(daemon)),
        Operation::Stat => json(StatusCode::OK, stat(daemon, &daemon.metrics.stat())),
        Operation::StatReset => {
            let before = daemon.metrics.reset_stat();
            tracing::info!("statistics reset (/statreset)");
            json(StatusCode::OK, stat(daemon, &before))
        }
        Operation::Metrics => reply(StatusCode::OK, "text/plain; version=0.0.4", metrics(daemon)),
        Operation::Health => health(daemon),
        Operation::Reload => reload(daemon).await,
        Operation::Reputation => reputation(req.uri().query().unwrap_or(""), daemon),
        Operation::History => history(&req, daemon).await,
        Operation::UiRead | Operation::QuarantineRead | Operation::QuarantineWrite => {
            error(StatusCode::NOT_FOUND, "no such endpoint")
        }
    }
}

/// A request the access model refused: 401 (a password could let it in), 403 (nothing this
/// client sends can), 429 with Retry-After (too many wrong passwords).
pub(super) fn refused(denied: &Denied) -> Reply {
    let status = match denied {
        Denied::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
        Denied::Forbidden(_) => StatusCode::FORBIDDEN,
        Denied::Throttled(_) => StatusCode::TOO_MANY_REQUESTS,
    };
    let mut r = error(status, &denied.to_string());
    if let Denied::Throttled(wait) = denied {
        if let Ok(v) = HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
            r.headers_mut().insert(RETRY_AFTER, v);
        }
    }
    r
}

/// Reads the whole body within the size, time and memory limits; a zstd body (`Compression:
/// zstd`) is inflated, as far as the budget grants. The body comes with its share of the
/// budget.
async fn body(req: Request<Incoming>, daemon: &Daemon) -> Result<(Vec<u8>, Reservation), Reply> {
    let zstd = match compressed(req.headers()) {
        None => false,
        Some(encoding) if encoding == "zstd" => {
            // rspamc names a shared dictionary by id; shrike has none (0 means none).
            let dictionary = req
                .headers()
                .get("dictionary")
                .map(|v| v.as_bytes().trim_ascii());
            if dictionary.is_some_and(|d| !d.is_empty() && d != b"0") {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    "zstd dictionaries are not supported; compress without one",
                ));
            }
            true
        }
        Some(encoding) => {
            return Err(error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                &format!(
                "compressed bodies ({encoding}) are not supported; send zstd or the raw message"
            ),
            ))
        }
    };
    let (packed, held) = read_body(req, daemon).await?;
    if !zstd {
        return Ok((packed, held));
    }
    let max = daemon.config.http.max_body_bytes;
    let budget = daemon.budget.clone();
    let Some(turn) = budget.inflation_turn(daemon.scan_timeout()).await else {
        daemon.metrics.not_scanned(&PoolError::Timeout);
        return Err(pool_error(PoolError::Timeout));
    };
    // Off the runtime's threads: 50 MB take tens of milliseconds to decompress. A client that
    // goes away meanwhile does not stop it; its turn and reservation are given back when it ends.
    let inflated = tokio::task::spawn_blocking(move || {
        let _turn = turn;
        let mut out = budget.none();
        let result = unzstd(&packed, max, &mut |total| out.resize(total).is_ok());
        // The compressed body and its share go back as soon as it is read.
        drop((packed, held));
        result.map(|raw| (raw, out))
    })
    .await;
    match inflated {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(Inflate::TooLarge(_))) => Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("message larger than {max} bytes once decompressed"),
        )),
        Ok(Err(Inflate::Refused)) => Err(over_budget(daemon)),
        Ok(Err(e)) => Err(error(StatusCode::BAD_REQUEST, &e.to_string())),
        Err(e) => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("decompressing the body: {e}"),
        )),
    }
}

/// Reads a request's body as sent, at most `http.max_body_bytes` (beyond: 413) within
/// `body_read_timeout_secs` (beyond: 408), each byte granted by the budget before it is
/// allocated (refused: 503): a declared `Content-Length` is reserved whole before the first
/// byte is read, a chunked body's reservation grows as it arrives.
pub(super) async fn read_body(
    req: Request<Incoming>,
    daemon: &Daemon,
) -> Result<(Vec<u8>, Reservation), Reply> {
    let c = &daemon.config.http;
    let max = c.max_body_bytes;
    let too_large = || {
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("message larger than {max} bytes"),
        )
    };
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut held = match declared {
        Some(n) if n > max as u64 => return Err(too_large()),
        Some(n) => daemon
            .budget
            .reserve(n as usize)
            .map_err(|_| over_budget(daemon))?,
        None => daemon.budget.none(),
    };
    let mut buf = Vec::with_capacity(held.bytes());
    let mut incoming = req.into_body();
    let read = async {
        while let Some(frame) = incoming.frame().await {
            let frame = frame
                .map_err(|e| error(StatusCode::BAD_REQUEST, &format!("reading the body: {e}")))?;
            // (trailers carry no message bytes)
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if buf.len() + data.len() > max {
                return Err(too_large());
            }
            grow(&mut buf, &mut held, data.len(), max).map_err(|_| over_budget(daemon))?;
            buf.extend_from_slice(&data);
        }
        Ok(())
    };
    let timeout = Duration::from_secs(c.body_read_timeout_secs.max(1));
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(())) => Ok((buf, held)),
        Ok(Err(r)) => Err(r),
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            "the body did not arrive in time",
        )),
    }
}

/// The answer to a message refused because the bytes in flight fill the budget: 503 with
/// Retry-After, as a full queue gets; counted and logged (at most once per 10 s) by the budget.
pub(super) fn over_budget(daemon: &Daemon) -> Reply {
    daemon.budget.refused(Protocol::Http);
    let mut r = error(
        StatusCode::SERVICE_UNAVAILABLE,
        "the messages in flight fill the memory budget; retry later",
    );
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

fn pool_error(e: PoolError) -> Reply {
    let mut r = error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string());
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

async fn check(req: Request<Incoming>, daemon: &Arc<Daemon>) -> Reply {
    let start = Instant::now();
    let request = CheckRequest::from_headers(req.headers());
    for (header, value) in &request.ignored {
        tracing::debug!(header, value, "ignored an unusable request header");
    }
    let (raw, held) = match body(req, daemon).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let scan = ScanRequest {
        raw,
        held,
        envelope: request.envelope,
        lists: true,
        checks: None,
        keep: Default::default(),
    };
    let answer = match daemon
        .recorded("http")
        .scan(scan, daemon.scan_timeout())
        .await
    {
        Ok(a) => a,
        Err(e) => {
            daemon.metrics.not_scanned(&e);
            if e != PoolError::Busy {
                tracing::warn!(error = %e, "check not scanned");
            } else if let Some(held) = BUSY_LOG.allow() {
                tracing::warn!(error = %e, refused_since_last_line = held, "check not scanned");
            }
            return pool_error(e);
        }
    };
    let v = &answer.verdict;
    // A verdict under a settings entry answers with that entry's thresholds.
    let entry_thresholds = v.settings.as_deref().and_then(|name| {
        let generation = daemon.scanner.engine().generation();
        let table = &generation.overrides.settings;
        table
            .by_name(name)
            .and_then(|i| table.profile(i))
            .map(|p| p.verdict.thresholds())
    });
    let add_headers = spam_headers(v, daemon.config.scan.verdict.add_header);
    let remove_headers = add_headers.iter().map(|(n, _)| n.clone()).collect();
    let body = check_reply(
        v,
        ReplyExtras {
            message_id: answer.message_id.as_deref(),
            subject: Some(answer.subject.as_str()),
            urls: &answer.urls,
            emails: &answer.emails,
            time_real: start.elapsed().as_secs_f64(),
            thresholds: entry_thresholds.as_ref().unwrap_or(&daemon.thresholds),
            add_headers,
            remove_headers,
        },
    );
    match serde_json::to_string(&body) {
        Ok(s) => json(StatusCode::OK, s),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// The coding a client declares for its body (`rspamc -z` sends `Compression: zstd`; others
/// `Content-Encoding`), lower-cased; `None` for none or identity.
fn compressed(headers: &hyper::HeaderMap) -> Option<String> {
    for name in ["compression", "content-encoding"] {
        if let Some(v) = headers.get(name) {
            let v = String::from_utf8_lossy(v.as_bytes())
                .trim()
                .to_ascii_lowercase();
            if !v.is_empty() && v != "identity" {
                return Some(v);
            }
        }
    }
    None
}

async fn learn(req: Request<Incoming>, daemon: &Arc<Daemon>, counter: Counter) -> Reply {
    let envelope = CheckRequest::from_headers(req.headers()).envelope;
    let (raw, held) = match body(req, daemon).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    match daemon.learn("http", raw, held, counter, &envelope).await {
        Ok(l) => json(StatusCode::OK, learned_json(&l).to_string()),
        Err(e) => learn_refused(e),
    }
}

/// What `/learnspam`, `/learnham` and the UI's learn answer for a learn taken.
pub(super) fn learned_json(l: &Learned) -> serde_json::Value {
    serde_json::json!({
        "success": true,
        "class": l.class(),
        "keys": l.keys,
        "message-id": l.message_id,
        "trained": l.trained,
        // The classifier had already learned this message (Message-ID, else body): it was
        // not trained again and the store got no complaint or rescue.
        "duplicate": l.duplicate,
    })
}

/// A learn not taken: 503 (with Retry-After when the queue was full or slow).
pub(super) fn learn_refused(e: LearnError) -> Reply {
    match e {
        LearnError::Pool(e) => pool_error(e),
        e => error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

/// `GET /history?…`: the decision history, newest first.
async fn history(req: &Request<Incoming>, daemon: &Arc<Daemon>) -> Reply {
    let query = req.uri().query().unwrap_or("").to_owned();
    let (status, body) = super::record::history_query(daemon, &query).await;
    json(status, body)
}

async fn reload(daemon: &Arc<Daemon>) -> Reply {
    match daemon.reload_async().await {
        Ok(generation) => json(
            StatusCode::OK,
            serde_json::json!({"success": true, "generation": generation}).to_string(),
        ),
        Err(e) => json(
            StatusCode::UNPROCESSABLE_ENTITY,
            serde_json::json!({
                "success": false,
                "error": e,
                "generation": daemon.scanner.engine().generation().id,
            })
            .to_string(),
        ),
    }
}

fn health(daemon: &Daemon) -> Reply {
    let ready = daemon.ready.load(Relaxed);
    let engine = daemon.scanner.engine().health();
    let persistence_error = daemon.persist_health.degraded();
    let body = serde_json::json!({
        "ready": ready,
        "generation": engine.generation,
        "rules": engine.rules,
        "rules_location": engine.location,
        "reloads": engine.reloads,
        "reload_failures": engine.reload_failures,
        "last_reload_error": engine.last_error,
        "uptime": daemon.started.elapsed().as_secs(),
        "queue": daemon.pool.depth(),
        // "ok", or "degraded" while replaced workers are still held by the message they were
        // stuck on (the pool serves at full strength meanwhile, with extra threads).
        "workers": if daemon.pool.stuck() == 0 { "ok" } else { "degraded" },
        "stuck_workers": daemon.pool.stuck(),
        "dns": daemon.pool.checker().map_or("off", |c| c.health_word()),
        "history": super::record::history_health(daemon),
        "quarantine": super::quarantine::health(daemon),
        // "memory", or a shared backend's "ok" / "degraded" (scans go on without reputation).
        "store": daemon.scanner.store().status().map_or("memory", |s| {
            if s.degraded { "degraded" } else { "ok" }
        }),
        "store_error": daemon.scanner.store().status().filter(|s| s.degraded).map(|s| s.detail),
        // The data directory: "degraded" while a write there fails (learns are refused until
        // they can be written; snapshots are tried again).
        "persistence": if persistence_error.is_some() { "degraded" } else { "ok" },
        "persistence_error": persistence_error,
        // clamd: "off" without `[antivirus] servers`, "degraded" while it fails (scans go on
        // with CLAM_VIRUS_FAIL).
        "antivirus": daemon.scanner.antivirus().map_or("off", |a| {
            if a.degraded().is_some() { "degraded" } else { "ok" }
        }),
        "antivirus_error": daemon.scanner.antivirus().and_then(|a| a.degraded()),
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    json(status, body.to_string())
}

/// `/stat` (and, with the counts before their reset, `/statreset`): rspamd's fields where they
/// exist, counted since start or the last `/statreset`.
fn stat(daemon: &Daemon, counts: &StatCounts) -> String {
    use crate::verdict::Action;
    let actions: BTreeMap<&str, u64> = Action::ALL
        .iter()
        .zip(&counts.scans)
        .map(|(a, n)| (a.as_str(), *n))
        .collect();
    let spam_actions: Vec<Action> = Action::ALL
        .into_iter()
        .filter(|a| *a >= Action::AddHeader)
        .collect();
    let spam = counts.of(&spam_actions);
    let scanned = counts.scanned();
    // Duplicates apart: what was learned agrees with what the classifier counts.
    let learned = counts.learned_spam + counts.learned_ham;
    let store = daemon.store.stats();
    let classifier = daemon.scanner.classifier();
    let (clf_spam, clf_ham) = classifier.learned();
    let (bayes_spam, bayes_ham) = classifier.bayes_learned();
    let (stack_weights, (stack_spam, stack_ham)) = classifier.stack();
    serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime": daemon.started.elapsed().as_secs(),
        "read_only": false,
        "scanned": scanned,
        "learned": learned,
        "learned_spam": counts.learned_spam,
        "learned_ham": counts.learned_ham,
        "duplicate_learns": {"spam": counts.duplicate_spam, "ham": counts.duplicate_ham},
        "actions": actions,
        "spam_count": spam,
        "ham_count": scanned - spam.min(scanned),
        "connections": counts.http_connections,
        "control_connections": 0,
        "milter_connections": counts.milter_connections,
        "total_learns": learned,
        "statfiles": [],
        "fuzzy_hashes": {},
        "store": store,
        "classifier": {
            "ready": classifier.ready(),
            "learned_spam": clf_spam,
            "learned_ham": clf_ham,
            // naive Bayes keeps its own totals: after an upgrade from a snapshot without its
            // counts it is silent until it has learned `min_learned` of each class again
            "bayes": {
                "ready": classifier.bayes_ready(),
                "learned_spam": bayes_spam,
                "learned_ham": bayes_ham,
            },
            // the one verdict's weights (FTRL, Bayes, FTRL when Bayes is torn) and the
            // held-out messages they were fitted on; FTRL alone until min_learned of each
            "stack": {
                "weights": stack_weights,
                "learned_spam": stack_spam,
                "learned_ham": stack_ham,
            },
        },
        "rules_generation": daemon.scanner.engine().generation().id,
    })
    .to_string()
}

/// rspamd's `/auth`, which `rspamc uptime` reads: version, uptime and the action counts in its
/// names (`probable`: add header and rewrite subject).
fn auth(daemon: &Daemon) -> String {
    use crate::verdict::Action;
    let c = daemon.metrics.stat();
    serde_json::json!({
        "auth": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "uptime": daemon.started.elapsed().as_secs(),
        "clean": c.of(&[Action::NoAction]),
        "probable": c.of(&[Action::AddHeader, Action::RewriteSubject]),
        "greylist": c.of(&[Action::Greylist]),
        "reject": c.of(&[Action::Reject]),
        "soft_reject": c.of(&[Action::SoftReject]),
        "scanned": c.scanned(),
        "learned": c.learned_spam + c.learned_ham,
        "read_only": false,
        "error": "none",
    })
    .to_string()
}

/// rspamd's `/counters` (`rspamc counters`): one object per symbol of the serving generation,
/// in rspamd's shape: `symbol`, `weight` (its score), `frequency` (hits a second since the
/// generation was built), `frequency_stddev` (not kept: 0), `hits` and `time` (milliseconds a
/// run, on average). The counters are the rule's: the symbols of a multi-symbol rule each show
/// its hits and time, as rspamd's virtual symbols show their parent's.
fn counters(daemon: &Daemon) -> String {
    let generation = daemon.scanner.engine().generation();
    let age = generation.built_at.elapsed().as_secs_f64().max(1.0);
    let round = |x: f64, digits: i32| {
        let p = 10f64.powi(digits);
        (x * p).round() / p
    };
    let mut out = Vec::new();
    for (rule, c) in generation.rules.iter().zip(&generation.counters) {
        let hits = c.hits.load(Relaxed);
        let runs = c.runs.load(Relaxed);
        let ms = if runs == 0 {
            0.0
        } else {
            c.nanos.load(Relaxed) as f64 / runs as f64 / 1e6
        };
        for symbol in rule.symbols.iter().filter(|s| !s.off) {
            out.push(serde_json::json!({
                "symbol": symbol.name,
                "weight": round(symbol.score, 3),
                "frequency": round(hits as f64 / age, 6),
                "frequency_stddev": 0.0,
                "hits": hits,
                "time": round(ms, 3),
            }));
        }
    }
    serde_json::Value::Array(out).to_string()
}

fn metrics(daemon: &Daemon) -> String {
    let mut out = String::with_capacity(16 * 1024);
    daemon.metrics.render(&mut out);
    daemon.budget.render(&mut out);
    for (name, help, value) in [
        (
            "shrike_auth_failures_total",
            "Wrong passwords (Password header, web UI login).",
            &daemon.access.failures,
        ),
        (
            "shrike_access_denied_total",
            "Requests the access model refused (401, 403, 429).",
            &daemon.access.denied,
        ),
    ] {
        counter_header(&mut out, name, help);
        let _ = writeln!(out, "{name} {}", value.load(Relaxed));
    }
    if let Some(av) = daemon.scanner.antivirus() {
        for (name, help, value) in [
            (
                "shrike_antivirus_scans_total",
                "Messages sent to clamd.",
                &av.scans,
            ),
            (
                "shrike_antivirus_viruses_total",
                "Messages clamd found a virus in.",
                &av.viruses,
            ),
            (
                "shrike_antivirus_failures_total",
                "Messages clamd could not scan (CLAM_VIRUS_FAIL).",
                &av.failures,
            ),
        ] {
            counter_header(&mut out, name, help);
            let _ = writeln!(out, "{name} {}", value.load(Relaxed));
        }
    }
    if let Some(status) = daemon.scanner.store().status() {
        gauge(
            &mut out,
            "shrike_store_degraded",
            "1 while the shared reputation store is failing (scans go on without it).",
            u8::from(status.degraded),
        );
        for (name, help, value, is_gauge) in status.metrics {
            use std::fmt::Write as _;
            let kind = if is_gauge { "gauge" } else { "counter" };
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
    }
    if let Some(c) = daemon.pool.checker() {
        c.render_metrics(&mut out);
    }
    {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "# HELP shrike_persist_errors_total Failed writes to the data directory (WAL, snapshots, classifier journal).\n\
             # TYPE shrike_persist_errors_total counter\nshrike_persist_errors_total {}",
            daemon.persist_health.errors()
        );
    }
    gauge(
        &mut out,
        "shrike_persist_degraded",
        "1 while a write to the data directory fails (learns are refused meanwhile).",
        u8::from(daemon.persist_health.degraded().is_some()),
    );
    gauge(
        &mut out,
        "shrike_queue_depth",
        "Messages waiting for a scan worker.",
        daemon.pool.depth(),
    );
    gauge(
        &mut out,
        "shrike_queue_capacity",
        "Size of the scan queue.",
        daemon.pool.capacity(),
    );
    gauge(
        &mut out,
        "shrike_workers",
        "Scan worker threads.",
        daemon.pool.workers(),
    );
    gauge(
        &mut out,
        "shrike_workers_stuck",
        "Replaced scan workers still held by the message they were stuck on.",
        daemon.pool.stuck(),
    );
    gauge(
        &mut out,
        "shrike_uptime_seconds",
        "Seconds since start.",
        daemon.started.elapsed().as_secs(),
    );
    let store = daemon.store.stats();
    gauge(
        &mut out,
        "shrike_store_keys",
        "Reputation keys in memory.",
        store.keys,
    );
    gauge(
        &mut out,
        "shrike_store_rate_keys",
        "Rate counters (ratelimit keys) in memory.",
        store.rate_keys,
    );
    gauge(
        &mut out,
        "shrike_store_bytes",
        "Approximate bytes held by the store.",
        store.approx_bytes,
    );
    counter_header(
        &mut out,
        "shrike_store_evictions_total",
        "Keys evicted at the memory bound.",
    );
    let _ = writeln!(out, "shrike_store_evictions_total {}", store.evictions);
    super::record::history_metrics(daemon, &mut out);
    super::quarantine::metrics(daemon, &mut out);
    let engine = daemon.scanner.engine();
    let h = engine.health();
    gauge(
        &mut out,
        "shrike_rules_generation",
        "Rule-set generation serving.",
        h.generation,
    );
    counter_header(
        &mut out,
        "shrike_reloads_total",
        "Rule reloads that succeeded.",
    );
    let _ = writeln!(out, "shrike_reloads_total {}", h.reloads);
    counter_header(
        &mut out,
        "shrike_reload_failures_total",
        "Rule reloads that failed.",
    );
    let _ = writeln!(out, "shrike_reload_failures_total {}", h.reload_failures);
    counter_header(
        &mut out,
        "shrike_rule_states_built_total",
        "Lua states built by the scan workers (each builds one at start and one per new generation, before its first message where it can).",
    );
    let _ = writeln!(out, "shrike_rule_states_built_total {}", h.states_built);
    let _ = writeln!(
        out,
        "# HELP shrike_last_reload_error 1 with the error while the last reload failed.\n\
         # TYPE shrike_last_reload_error gauge"
    );
    match &h.last_error {
        Some(e) => {
            let first = e.lines().next().unwrap_or_default();
            let _ = writeln!(
                out,
                "shrike_last_reload_error{{error=\"{}\"}} 1",
                label(first)
            );
        }
        None => {
            let _ = writeln!(out, "shrike_last_reload_error{{error=\"\"}} 0");
        }
    }
    let generation = engine.generation();
    type Field = fn(&RuleCounters) -> f64;
    let fields: [(&str, &str, Field); 5] = [
        (
            "shrike_rule_runs_total",
            "Rule runs (current generation; flushed every few hundred scans).",
            |c| c.runs.load(Relaxed) as f64,
        ),
        (
            "shrike_rule_hits_total",
            "Rule hits (current generation).",
            |c| c.hits.load(Relaxed) as f64,
        ),
        (
            "shrike_rule_errors_total",
            "Rule errors (current generation).",
            |c| c.errors.load(Relaxed) as f64,
        ),
        (
            "shrike_rule_timeouts_total",
            "Rules stopped by their CPU budget (current generation).",
            |c| c.timeouts.load(Relaxed) as f64,
        ),
        (
            "shrike_rule_seconds_total",
            "Time spent in each rule (current generation; read on one scan in 8, counted 8 times).",
            |c| c.nanos.load(Relaxed) as f64 / 1e9,
        ),
    ];
    for (name, help, field) in fields {
        counter_header(&mut out, name, help);
        for (rule, c) in generation.rules.iter().zip(&generation.counters) {
            let _ = writeln!(out, "{name}{{rule=\"{}\"}} {}", label(&rule.name), field(c));
        }
    }
    out
}

/// `GET /reputation?type=T&value=V` (or `&hash=H`).
pub(super) fn reputation(query: &str, daemon: &Daemon) -> Reply {
    match daemon.reputation(query) {
        Ok(v) => json(StatusCode::OK, v.to_string()),
        Err(why) => error(StatusCode::BAD_REQUEST, &why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressed_bodies_are_named() {
        let mut h = hyper::HeaderMap::new();
        assert_eq!(compressed(&h), None);
        h.insert("Content-Encoding", HeaderValue::from_static("identity"));
        assert_eq!(compressed(&h), None);
        h.insert("Compression", HeaderValue::from_static("zstd"));
        assert_eq!(compressed(&h).as_deref(), Some("zstd"));
    }
}

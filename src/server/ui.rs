//! The web UI: its files (compiled into the binary from `ui/`), its login sessions, and the
//! JSON endpoints its pages read (`/ui/api/…`).
//!
//! Owns: `GET /` (the app, or the login form), `GET /ui/*` (assets), `POST /ui/login`,
//! `POST /ui/logout`, `/ui/api/*`. Access follows the admin endpoints: a loopback client, the
//! `Password` header, or a session cookie that `POST /ui/login` sets after checking the same
//! password. The cookie is HttpOnly and SameSite=Strict; every state-changing request (POST)
//! must also carry the page's CSRF token in `X-CSRF-Token`, which a page of another site can
//! neither read nor send (a custom header needs a CORS preflight shrike never grants). No secret
//! ever goes into a URL.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, COOKIE, HOST, LOCATION, SET_COOKIE};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use parking_lot::Mutex;

use super::pool::{PoolError, ScanRequest};
use super::Daemon;
use crate::proto::rspamd::{error_body, CheckRequest};
use crate::secrets::secret_eq;
use crate::store::Counter;
use crate::verdict::Action;

type Reply = Response<Full<Bytes>>;

const INDEX: &str = include_str!("../../ui/index.html");
const LOGIN: &str = include_str!("../../ui/login.html");
const APP_JS: &str = include_str!("../../ui/app.js");
const STYLE: &str = include_str!("../../ui/style.css");

/// The session cookie's name.
const COOKIE_NAME: &str = "shrike_ui";
/// A session lasts this long after its login.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Most sessions at once; a new login beyond it ends the oldest.
const MAX_SESSIONS: usize = 64;
/// Largest login form read.
const MAX_LOGIN_BYTES: usize = 4096;

/// The UI's login sessions, and the CSRF token of loopback clients (who need no login).
pub struct Sessions {
    by_token: Mutex<HashMap<String, Session>>,
    loopback_csrf: String,
}

struct Session {
    csrf: String,
    created: Instant,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            by_token: Mutex::new(HashMap::new()),
            loopback_csrf: random_token(),
        }
    }
}

impl Sessions {
    /// A new session: its cookie token and CSRF token.
    fn open(&self) -> (String, String) {
        let (token, csrf) = (random_token(), random_token());
        let mut map = self.by_token.lock();
        map.retain(|_, s| s.created.elapsed() < SESSION_TTL);
        if map.len() >= MAX_SESSIONS {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.created)
                .map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(
            token.clone(),
            Session {
                csrf: csrf.clone(),
                created: Instant::now(),
            },
        );
        (token, csrf)
    }

    /// The CSRF token of a live session.
    fn csrf(&self, token: &str) -> Option<String> {
        let map = self.by_token.lock();
        map.get(token)
            .filter(|s| s.created.elapsed() < SESSION_TTL)
            .map(|s| s.csrf.clone())
    }

    fn close(&self, token: &str) {
        self.by_token.lock().remove(token);
    }
}

/// 32 random bytes as hex, from the kernel.
fn random_token() -> String {
    use std::io::Read;
    let mut b = [0u8; 32];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if read.is_err() {
        // No kernel randomness: a token nobody can guess is impossible, so none matches.
        tracing::error!("no /dev/urandom: web UI sessions are disabled");
        return String::new();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// How a request is allowed in: the CSRF token its state-changing requests must carry
/// (`None`: a `Password`-header client, which no other site's page can imitate).
enum Access {
    Csrf(String),
    Header,
}

fn cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE_NAME)
        .map(|(_, v)| v.to_string())
}

/// A loopback client named the daemon by a loopback address or `localhost`: anything else
/// could be a DNS-rebinding page of another site that resolves its own name to 127.0.0.1.
pub(super) fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(HOST).and_then(|h| h.to_str().ok()) else {
        return true;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn access(headers: &HeaderMap, daemon: &Daemon, local: bool) -> Option<Access> {
    if let Some(csrf) = cookie(headers)
        .filter(|t| !t.is_empty())
        .and_then(|t| daemon.ui.csrf(&t))
    {
        return Some(Access::Csrf(csrf));
    }
    if local && loopback_host(headers) && !daemon.ui.loopback_csrf.is_empty() {
        return Some(Access::Csrf(daemon.ui.loopback_csrf.clone()));
    }
    let password = daemon.config.http.password()?;
    headers
        .get("password")
        .is_some_and(|v| secret_eq(v.as_bytes(), password.as_bytes()))
        .then_some(Access::Header)
}

/// A POST from a page of this daemon: its CSRF token, and an Origin (when sent) naming this
/// host.
fn csrf_ok(headers: &HeaderMap, access: &Access) -> bool {
    let Access::Csrf(expected) = access else {
        return true;
    };
    let token_ok = headers
        .get("x-csrf-token")
        .is_some_and(|v| secret_eq(v.as_bytes(), expected.as_bytes()));
    token_ok && origin_ok(headers)
}

pub(super) fn origin_ok(headers: &HeaderMap) -> bool {
    match headers.get("origin").and_then(|o| o.to_str().ok()) {
        None => true,
        Some(origin) => {
            let host = headers
                .get(HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default();
            origin
                .split_once("://")
                .is_some_and(|(_, rest)| rest.eq_ignore_ascii_case(host))
        }
    }
}

fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    // "same-origin", not "no-referrer": under the latter a browser sends `Origin: null` with the
    // page's own form posts, which the Origin check must refuse.
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    r
}

fn json(status: StatusCode, body: String) -> Reply {
    reply(status, "application/json", body)
}

fn error(status: StatusCode, message: &str) -> Reply {
    json(status, error_body(message))
}

fn see_other(to: &'static str) -> Reply {
    let mut r = reply(StatusCode::SEE_OTHER, "text/plain", "");
    r.headers_mut()
        .insert(LOCATION, HeaderValue::from_static(to));
    r
}

/// Whether `path` is the UI's (`/`, `/ui`, `/ui/…`).
pub(super) fn owns(path: &str) -> bool {
    path.is_empty() || path == "/ui" || path.starts_with("/ui/")
}

/// Serves a UI request (`path` without its trailing slash).
pub(super) async fn handle(
    req: Request<Incoming>,
    path: &str,
    daemon: &Arc<Daemon>,
    local: bool,
) -> Reply {
    let method = req.method().clone();
    match (&method, path) {
        (&Method::GET, "/ui/style.css") => return reply(StatusCode::OK, "text/css", STYLE),
        (&Method::GET, "/ui/login") => return login_page(),
        (&Method::POST, "/ui/login") => return login(req, daemon).await,
        _ => {}
    }
    let Some(access) = access(req.headers(), daemon, local) else {
        return match (&method, path) {
            (&Method::GET, "" | "/ui") => login_page(),
            (&Method::POST, "/ui/logout") => see_other("/"),
            _ => error(
                StatusCode::FORBIDDEN,
                "the web UI needs a loopback client, the password or a login",
            ),
        };
    };
    if method == Method::POST && !csrf_ok(req.headers(), &access) {
        return error(StatusCode::FORBIDDEN, "missing or wrong CSRF token");
    }
    match (&method, path) {
        (&Method::GET, "" | "/ui") => reply(StatusCode::OK, "text/html; charset=utf-8", INDEX),
        (&Method::GET, "/ui/app.js") => reply(StatusCode::OK, "text/javascript", APP_JS),
        (&Method::POST, "/ui/logout") => logout(req.headers(), daemon),
        (&Method::GET, "/ui/api/session") => json(
            StatusCode::OK,
            serde_json::json!({
                "csrf": match &access { Access::Csrf(c) => c.as_str(), Access::Header => "" },
                "login": cookie(req.headers()).is_some_and(|t| daemon.ui.csrf(&t).is_some()),
                "password_set": daemon.config.http.password().is_some(),
            })
            .to_string(),
        ),
        (&Method::GET, "/ui/api/status") => json(StatusCode::OK, status(daemon).to_string()),
        (&Method::GET, "/ui/api/rules") => json(StatusCode::OK, rules(daemon).to_string()),
        (&Method::GET, "/ui/api/history") => {
            let query = req.uri().query().unwrap_or("").to_owned();
            let (status, body) = super::record::history_query(daemon, &query).await;
            json(status, body)
        }
        (&Method::GET, "/ui/api/reputation") => {
            super::http::reputation(req.uri().query().unwrap_or(""), daemon)
        }
        (&Method::POST, "/ui/api/test") => test(req, daemon).await,
        (&Method::POST, "/ui/api/learn") => learn(req, daemon).await,
        _ => error(StatusCode::NOT_FOUND, "no such page"),
    }
}

fn login_page() -> Reply {
    reply(StatusCode::OK, "text/html; charset=utf-8", LOGIN)
}

async fn login(req: Request<Incoming>, daemon: &Daemon) -> Reply {
    if !origin_ok(req.headers()) {
        return error(StatusCode::FORBIDDEN, "login from another site");
    }
    let Some(password) = daemon.config.http.password().map(str::to_owned) else {
        return error(
            StatusCode::FORBIDDEN,
            "no password is configured ([http] password): the web UI is for loopback clients only",
        );
    };
    let form = match Limited::new(req.into_body(), MAX_LOGIN_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => return error(StatusCode::PAYLOAD_TOO_LARGE, "login form too large"),
    };
    let given = url::form_urlencoded::parse(&form)
        .find(|(k, _)| k == "password")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    if !secret_eq(given.as_bytes(), password.as_bytes()) {
        // Slows a password guesser down to a guess a second per connection.
        tokio::time::sleep(Duration::from_secs(1)).await;
        tracing::warn!("web UI login with a wrong password");
        return see_other("/ui/login#failed");
    }
    let (token, _) = daemon.ui.open();
    let mut r = see_other("/");
    let cookie = format!(
        "{COOKIE_NAME}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        SESSION_TTL.as_secs()
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(SET_COOKIE, v);
    }
    r
}

fn logout(headers: &HeaderMap, daemon: &Daemon) -> Reply {
    if let Some(token) = cookie(headers) {
        daemon.ui.close(&token);
    }
    let mut r = json(StatusCode::OK, r#"{"success":true}"#.into());
    r.headers_mut().insert(
        SET_COOKIE,
        HeaderValue::from_static("shrike_ui=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
    );
    r
}

/// The Status page's figures.
fn status(daemon: &Daemon) -> serde_json::Value {
    use super::metrics::{Stage, STAGE_NAMES};
    let m = &daemon.metrics;
    let now = super::activity::now_minute();
    let hour = m.activity.last(now, 60);
    let day = m.activity.last(now, super::activity::MINUTES);
    let names: Vec<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
    // The day in 10-minute bars (144), the hour in 1-minute ones.
    let day10: Vec<Vec<u64>> = day
        .chunks(10)
        .map(|c| {
            (0..names.len())
                .map(|a| c.iter().map(|m| m[a]).sum())
                .collect()
        })
        .collect();
    let per_minute = |n: usize| -> f64 {
        // Whole minutes only: the current one is still filling.
        let full = &hour[hour.len().saturating_sub(n + 1)..hour.len() - 1];
        full.iter().map(|m| m.iter().sum::<u64>()).sum::<u64>() as f64 / (n as f64 * 60.0)
    };
    let latency: serde_json::Map<String, serde_json::Value> = [
        Stage::Queue,
        Stage::Analyze,
        Stage::Lookup,
        Stage::Rules,
        Stage::Total,
    ]
    .iter()
    .map(|&s| {
        let h = &m.stages[s as usize];
        (
            STAGE_NAMES[s as usize].to_string(),
            serde_json::json!({
                "count": h.count(),
                "p50": h.quantile(0.5),
                "p90": h.quantile(0.9),
                "p99": h.quantile(0.99),
            }),
        )
    })
    .collect();
    let engine = daemon.scanner.engine();
    let health = engine.health();
    let totals: serde_json::Map<String, serde_json::Value> = Action::ALL
        .iter()
        .enumerate()
        .map(|(i, a)| (a.as_str().to_string(), m.scans[i].load(Relaxed).into()))
        .collect();
    serde_json::json!({
        "version": env!("CARGO_PKG_VERSION"),
        "uptime": daemon.started.elapsed().as_secs(),
        "now_minute": now,
        "actions": names,
        "hour": hour,
        "day": day10,
        "totals": totals,
        "scanned": m.total_scans(),
        "learned_spam": m.learned_spam.load(Relaxed),
        "learned_ham": m.learned_ham.load(Relaxed),
        "busy": m.busy.load(Relaxed),
        "timeouts": m.timeouts.load(Relaxed),
        "throughput_1m": per_minute(1),
        "throughput_5m": per_minute(5),
        "latency": latency,
        "queue": daemon.pool.depth(),
        "queue_capacity": daemon.pool.capacity(),
        "workers": daemon.pool.workers(),
        "generation": health.generation,
        "rules": health.rules,
        "reloads": health.reloads,
        "reload_failures": health.reload_failures,
        "last_reload_error": health.last_error,
        "store": daemon.store.stats(),
        "history": super::record::history_health(daemon),
        "shingle_types": crate::shingle::Kind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>(),
    })
}

/// The Rules page: every rule of the serving generation with its counters.
fn rules(daemon: &Daemon) -> serde_json::Value {
    let engine = daemon.scanner.engine();
    let generation = engine.generation();
    let rules: Vec<serde_json::Value> = generation
        .rules
        .iter()
        .zip(&generation.counters)
        .map(|(rule, c)| {
            let (runs, hits, nanos) = (
                c.runs.load(Relaxed),
                c.hits.load(Relaxed),
                c.nanos.load(Relaxed),
            );
            serde_json::json!({
                "name": rule.name,
                "file": rule.file,
                "shadow": rule.shadow,
                "share": rule.share,
                "symbols": rule.symbols.iter().map(|s| serde_json::json!({
                    "name": s.name,
                    "score": s.score,
                    "description": s.description,
                    "group": s.group,
                })).collect::<Vec<_>>(),
                "runs": runs,
                "hits": hits,
                "hit_rate": if runs == 0 { 0.0 } else { hits as f64 / runs as f64 },
                "mean_us": if runs == 0 { 0.0 } else { nanos as f64 / runs as f64 / 1000.0 },
                "errors": c.errors.load(Relaxed),
                "timeouts": c.timeouts.load(Relaxed),
            })
        })
        .collect();
    serde_json::json!({
        "generation": generation.id,
        "build_ms": generation.build_time.as_secs_f64() * 1000.0,
        "rules": rules,
    })
}

/// Reads a message body for the Test page or a learn (the HTTP listener's size, time and
/// memory limits), with its share of the byte budget.
async fn message(
    req: Request<Incoming>,
    daemon: &Daemon,
) -> Result<(Vec<u8>, super::budget::Reservation), Reply> {
    let (raw, held) = super::http::read_body(req, daemon).await?;
    if raw.is_empty() {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "no message: paste or upload one",
        ));
    }
    Ok((raw, held))
}

fn pool_error(e: PoolError) -> Reply {
    error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
}

/// `POST /ui/api/test`: a trial scan through the worker pool; nothing counted or recorded.
async fn test(req: Request<Incoming>, daemon: &Daemon) -> Reply {
    let envelope = CheckRequest::from_headers(req.headers()).envelope;
    let (raw, held) = match message(req, daemon).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let request = ScanRequest {
        raw,
        held,
        envelope,
        lists: false,
        checks: None,
    };
    match daemon.pool.test(request, daemon.scan_timeout()).await {
        Ok(report) => json(StatusCode::OK, report.to_string()),
        Err(e) => pool_error(e),
    }
}

/// `POST /ui/api/learn?class=spam|ham`: learns the posted message, as `/learnspam` does.
async fn learn(req: Request<Incoming>, daemon: &Daemon) -> Reply {
    let start = Instant::now();
    let class = url::form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "class")
        .map(|(_, v)| v.into_owned());
    let counter = match class.as_deref() {
        Some("spam") => Counter::Complaint,
        Some("ham") => Counter::Rescue,
        _ => return error(StatusCode::BAD_REQUEST, "need ?class=spam or ?class=ham"),
    };
    let envelope = CheckRequest::from_headers(req.headers()).envelope;
    let (raw, held) = match message(req, daemon).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let size = raw.len();
    let learned = match daemon
        .pool
        .learn(raw, held, counter, daemon.scan_timeout())
        .await
    {
        Ok(l) => l,
        Err(e) => return pool_error(e),
    };
    if let Err(e) = super::http::durable(daemon, &learned).await {
        // Logged by the data directory's health, at most once per 10 s.
        tracing::debug!(error = %e, "learn not made durable");
        return error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string());
    }
    daemon.record_learn("ui", counter, &envelope, size, &learned, start);
    json(
        StatusCode::OK,
        serde_json::json!({
            "success": true,
            "class": class,
            "keys": learned.keys,
            "trained": learned.trained,
            "message-id": learned.message_id,
        })
        .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).expect("header value"));
        }
        h
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let h = headers(&[("cookie", "a=1; shrike_ui=abc; b=2")]);
        assert_eq!(cookie(&h).as_deref(), Some("abc"));
        assert_eq!(cookie(&headers(&[("cookie", "shrike_uix=1")])), None);
    }

    #[test]
    fn loopback_clients_must_name_a_loopback_host() {
        for ok in [
            "127.0.0.1:11333",
            "localhost:8080",
            "[::1]:11333",
            "localhost",
        ] {
            assert!(loopback_host(&headers(&[("host", ok)])), "{ok}");
        }
        for bad in ["evil.example:11333", "10.0.0.1:11333", "[2001:db8::1]:80"] {
            assert!(!loopback_host(&headers(&[("host", bad)])), "{bad}");
        }
    }

    #[test]
    fn posts_need_the_token_and_a_matching_origin() {
        let access = Access::Csrf("t0k".into());
        let good = [("host", "127.0.0.1:1"), ("x-csrf-token", "t0k")];
        assert!(csrf_ok(&headers(&good), &access));
        assert!(!csrf_ok(&headers(&[("host", "127.0.0.1:1")]), &access));
        assert!(!csrf_ok(
            &headers(&[("host", "127.0.0.1:1"), ("x-csrf-token", "t0x")]),
            &access
        ));
        let mut foreign = headers(&good);
        foreign.insert("origin", HeaderValue::from_static("http://evil.example"));
        assert!(!csrf_ok(&foreign, &access));
        let mut own = headers(&good);
        own.insert("origin", HeaderValue::from_static("http://127.0.0.1:1"));
        assert!(csrf_ok(&own, &access));
        assert!(csrf_ok(&HeaderMap::new(), &Access::Header));
    }

    #[test]
    fn sessions_open_find_and_close() {
        let s = Sessions::default();
        assert_eq!(s.loopback_csrf.len(), 64);
        let (token, csrf) = s.open();
        assert_ne!(token, csrf);
        assert_eq!(s.csrf(&token).as_deref(), Some(csrf.as_str()));
        assert_eq!(s.csrf("nope"), None);
        s.close(&token);
        assert_eq!(s.csrf(&token), None);
        for _ in 0..MAX_SESSIONS + 5 {
            s.open();
        }
        assert!(s.by_token.lock().len() <= MAX_SESSIONS);
    }
}

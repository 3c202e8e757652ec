//! The web UI: its files (compiled into the binary from `ui/`), its login sessions, and the
//! JSON endpoints its pages read (`/ui/api/…`).
//!
//! Owns: `GET /` (the app, or the login form), `GET /ui/*` (assets), `POST /ui/login`,
//! `POST /ui/logout`, `/ui/api/*`. Access follows `[access]`: a client of the admin or read
//! networks, the `Password` header, or a session cookie that `POST /ui/login` sets after
//! checking the same passwords (its role is the password's). Views need the read role, a learn
//! the admin role. The cookie is HttpOnly and SameSite=Strict; every state-changing request (POST)
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
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use parking_lot::Mutex;

use super::access::{Client, Denied, Operation, Peer, Role};
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

/// The UI's login sessions, and the CSRF token of clients a network lets in (who need no
/// login).
pub struct Sessions {
    by_token: Mutex<HashMap<String, Session>>,
    network_csrf: String,
}

struct Session {
    csrf: String,
    role: Role,
    created: Instant,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            by_token: Mutex::new(HashMap::new()),
            network_csrf: random_token(),
        }
    }
}

impl Sessions {
    /// A new session of `role`: its cookie token and CSRF token.
    fn open(&self, role: Role) -> (String, String) {
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
                role,
                created: Instant::now(),
            },
        );
        (token, csrf)
    }

    /// The CSRF token and role of a live session.
    fn csrf(&self, token: &str) -> Option<(String, Role)> {
        let map = self.by_token.lock();
        map.get(token)
            .filter(|s| s.created.elapsed() < SESSION_TTL)
            .map(|s| (s.csrf.clone(), s.role))
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

/// How a request is allowed in, with its role: the CSRF token its state-changing requests
/// must carry, or none for a `Password`-header client (no other site's page can send that
/// header).
enum Access {
    Csrf(String, Role),
    Header(Role),
}

impl Access {
    fn role(&self) -> Role {
        match self {
            Access::Csrf(_, r) | Access::Header(r) => *r,
        }
    }
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

/// The session, network or password a UI request comes with; every one of them only with a
/// `Host` and `Origin` of this daemon (`Access::browser_checks`).
async fn access(headers: &HeaderMap, daemon: &Daemon, peer: Peer) -> Result<Access, Denied> {
    let model = &daemon.access;
    model.browser_checks(headers)?;
    if let Some((csrf, role)) = cookie(headers)
        .filter(|t| !t.is_empty())
        .and_then(|t| daemon.ui.csrf(&t))
    {
        return Ok(Access::Csrf(csrf, role));
    }
    let client = model.client(peer, Some(headers));
    let role = model.network_role(client);
    if role >= Role::Read && !daemon.ui.network_csrf.is_empty() {
        return Ok(Access::Csrf(daemon.ui.network_csrf.clone(), role));
    }
    if let Some(given) = model.sent_password(headers) {
        return model
            .check_password(client, given)
            .await
            .map(Access::Header);
    }
    Err(model.refusal(Role::Read, client))
}

/// A POST from a page of this daemon: its CSRF token (the Origin was checked with the Host).
fn csrf_ok(headers: &HeaderMap, access: &Access) -> bool {
    let Access::Csrf(expected, _) = access else {
        return true;
    };
    headers
        .get("x-csrf-token")
        .is_some_and(|v| secret_eq(v.as_bytes(), expected.as_bytes()))
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
    peer: Peer,
) -> Reply {
    let method = req.method().clone();
    match (&method, path) {
        (&Method::GET, "/ui/style.css") => return reply(StatusCode::OK, "text/css", STYLE),
        (&Method::GET, "/ui/login") => return login_page(),
        (&Method::POST, "/ui/login") => return login(req, daemon, peer).await,
        _ => {}
    }
    let access = match access(req.headers(), daemon, peer).await {
        Ok(a) => a,
        Err(denied) => {
            daemon.access.denied.fetch_add(1, Relaxed);
            return match (&method, path, &denied) {
                (&Method::GET, "" | "/ui", Denied::Unauthenticated(_)) => login_page(),
                (&Method::POST, "/ui/logout", _) => see_other("/"),
                _ => super::http::refused(&denied),
            };
        }
    };
    if method == Method::POST && !csrf_ok(req.headers(), &access) {
        return error(StatusCode::FORBIDDEN, "missing or wrong CSRF token");
    }
    let quarantine = path
        .strip_prefix("/ui/api")
        .filter(|p| super::quarantine::owns(p));
    let op = match (&method, path) {
        (&Method::POST, "/ui/api/learn") => Operation::Learn,
        _ if quarantine.is_some() => super::quarantine::operation(&method),
        _ => Operation::UiRead,
    };
    if access.role() < op.needs(&daemon.access.config) {
        daemon.access.denied.fetch_add(1, Relaxed);
        return error(
            StatusCode::FORBIDDEN,
            &format!(
                "this needs the admin role; this login has the {} role",
                access.role().as_str()
            ),
        );
    }
    if let Some(p) = quarantine {
        let query = req.uri().query().unwrap_or("").to_owned();
        return super::quarantine::api(daemon, &method, &p["/quarantine".len()..], &query, "ui")
            .await;
    }
    match (&method, path) {
        (&Method::GET, "" | "/ui") => reply(StatusCode::OK, "text/html; charset=utf-8", INDEX),
        (&Method::GET, "/ui/app.js") => reply(StatusCode::OK, "text/javascript", APP_JS),
        (&Method::POST, "/ui/logout") => logout(req.headers(), daemon),
        (&Method::GET, "/ui/api/session") => json(
            StatusCode::OK,
            serde_json::json!({
                "csrf": match &access { Access::Csrf(c, _) => c.as_str(), Access::Header(_) => "" },
                "role": access.role().as_str(),
                "login": cookie(req.headers()).is_some_and(|t| daemon.ui.csrf(&t).is_some()),
                "password_set": daemon.access.has_password(),
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

async fn login(req: Request<Incoming>, daemon: &Daemon, peer: Peer) -> Reply {
    if let Err(denied) = daemon.access.browser_checks(req.headers()) {
        return super::http::refused(&denied);
    }
    if !daemon.access.has_password() {
        return error(
            StatusCode::FORBIDDEN,
            "no password is configured (access.password_hash): the web UI is for the clients of \
             access.admin_networks and read_networks only",
        );
    }
    let client: Client = daemon.access.client(peer, Some(req.headers()));
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
    let role = match daemon.access.check_password(client, given.as_bytes()).await {
        Ok(role) => role,
        // (counted and logged by the access model)
        Err(Denied::Throttled(_)) => return see_other("/ui/login#wait"),
        Err(_) => return see_other("/ui/login#failed"),
    };
    let (token, _) = daemon.ui.open(role);
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
        "duplicate_spam": m.duplicate_spam.load(Relaxed),
        "duplicate_ham": m.duplicate_ham.load(Relaxed),
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
        "outbound_limited": daemon.scanner.outbound().limited_users(),
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
    // `[[settings]]` as the generation carries them: what each entry matches and changes,
    // with its thresholds as they apply (the global ones with its `actions` over them).
    let table = &generation.overrides.settings;
    let settings: Vec<serde_json::Value> = table
        .entries()
        .iter()
        .zip(table.profiles())
        .map(|(entry, profile)| {
            let mut v = serde_json::to_value(entry).unwrap_or_default();
            v["thresholds"] = serde_json::json!(profile.verdict.thresholds());
            v
        })
        .collect();
    serde_json::json!({
        "generation": generation.id,
        "build_ms": generation.build_time.as_secs_f64() * 1000.0,
        "rules": rules,
        "settings": settings,
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
        keep: Default::default(),
    };
    match daemon.pool.test(request, daemon.scan_timeout()).await {
        Ok(report) => json(StatusCode::OK, report.to_string()),
        Err(e) => pool_error(e),
    }
}

/// `POST /ui/api/learn?class=spam|ham`: learns the posted message, as `/learnspam` does.
async fn learn(req: Request<Incoming>, daemon: &Daemon) -> Reply {
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
    match daemon.learn("ui", raw, held, counter, &envelope).await {
        Ok(l) => json(StatusCode::OK, super::http::learned_json(&l).to_string()),
        Err(e) => super::http::learn_refused(e),
    }
}

#[cfg(test)]
mod tests {
    use super::super::access::test_headers as headers;
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let h = headers(&[("cookie", "a=1; shrike_ui=abc; b=2")]);
        assert_eq!(cookie(&h).as_deref(), Some("abc"));
        assert_eq!(cookie(&headers(&[("cookie", "shrike_uix=1")])), None);
    }

    #[test]
    fn posts_need_the_token() {
        let access = Access::Csrf("t0k".into(), Role::Admin);
        assert!(csrf_ok(&headers(&[("x-csrf-token", "t0k")]), &access));
        assert!(!csrf_ok(&HeaderMap::new(), &access));
        assert!(!csrf_ok(&headers(&[("x-csrf-token", "t0x")]), &access));
        assert!(csrf_ok(&HeaderMap::new(), &Access::Header(Role::Read)));
    }

    #[test]
    fn sessions_open_find_and_close() {
        let s = Sessions::default();
        assert_eq!(s.network_csrf.len(), 64);
        let (token, csrf) = s.open(Role::Read);
        assert_ne!(token, csrf);
        assert_eq!(s.csrf(&token), Some((csrf, Role::Read)));
        assert_eq!(s.csrf("nope"), None);
        s.close(&token);
        assert_eq!(s.csrf(&token), None);
        for _ in 0..MAX_SESSIONS + 5 {
            s.open(Role::Admin);
        }
        assert!(s.by_token.lock().len() <= MAX_SESSIONS);
    }
}

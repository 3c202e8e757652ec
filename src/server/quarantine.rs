//! The quarantine over HTTP: the admin's JSON API (`/quarantine…`, and the web UI's
//! `/ui/api/quarantine…`, both calling the operations of `ops.rs`), and the per-recipient
//! pages a signed link opens (`/quarantine/r/TOKEN…`): plain HTML made here with every
//! value escaped, served under a policy that allows no script and nothing from elsewhere.
//! Also the quarantine's part of `/health` and `/metrics`.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_DISPOSITION, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};

use super::access::{Operation, Peer};
use super::ops::QuarantineOpError;
use super::Daemon;
use crate::proto::rspamd::error_body;
use crate::quarantine::links::{now_secs, LinkError};
use crate::store::Counter;

type Reply = Response<Full<Bytes>>;

/// What every quarantine answer carries: nothing it holds may run, load or be framed.
const CSP_JSON: &str = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'";
const CSP_PAGE: &str = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
                        frame-ancestors 'none'; base-uri 'none'";

fn reply(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static(if content_type.starts_with("text/html") {
            CSP_PAGE
        } else {
            CSP_JSON
        }),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    r
}

fn json(status: StatusCode, v: &serde_json::Value) -> Reply {
    reply(status, "application/json", v.to_string())
}

fn failed(e: &QuarantineOpError) -> Reply {
    use crate::quarantine::store::BodyError;
    let status = match e {
        QuarantineOpError::Off | QuarantineOpError::NotFound => StatusCode::NOT_FOUND,
        QuarantineOpError::Body(BodyError::Deleted) => StatusCode::GONE,
        QuarantineOpError::Bad(_) => StatusCode::BAD_REQUEST,
        QuarantineOpError::AlreadyReleased(_) | QuarantineOpError::Busy => StatusCode::CONFLICT,
        QuarantineOpError::Release(crate::quarantine::release::ReleaseError::Relay { .. }) => {
            StatusCode::BAD_GATEWAY
        }
        QuarantineOpError::Release(_) => StatusCode::BAD_REQUEST,
        QuarantineOpError::Learn(_) => StatusCode::SERVICE_UNAVAILABLE,
        QuarantineOpError::Body(_) | QuarantineOpError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    reply(status, "application/json", error_body(&e.to_string()))
}

/// Whether `path` is the quarantine's (`/quarantine`, `/quarantine/…`).
pub(super) fn owns(path: &str) -> bool {
    path == "/quarantine" || path.starts_with("/quarantine/")
}

/// The operation a request of the admin API needs (`None`: not the admin API's).
pub(super) fn operation(method: &Method) -> Operation {
    if method == Method::GET || method == Method::HEAD {
        Operation::QuarantineRead
    } else {
        Operation::QuarantineWrite
    }
}

/// Serves `/quarantine…` on the HTTP listener: a per-recipient link's pages, or the admin API
/// after the access model lets the request in.
pub(super) async fn handle(
    req: Request<Incoming>,
    path: &str,
    daemon: &Arc<Daemon>,
    peer: Peer,
) -> Reply {
    let rest = &path["/quarantine".len()..];
    if let Some(link) = rest.strip_prefix("/r/") {
        return link_page(req.method(), link, daemon).await;
    }
    let op = operation(req.method());
    if let Err(denied) = daemon.access.authorize_http(op, peer, req.headers()).await {
        return super::http::refused(&denied);
    }
    let query = req.uri().query().unwrap_or("").to_owned();
    api(daemon, req.method(), rest, &query, "http").await
}

fn param(query: &str, name: &str) -> Option<String> {
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The admin API (`rest` is the path after `/quarantine`), for `by` (`http`, `ui`).
pub(super) async fn api(
    daemon: &Daemon,
    method: &Method,
    rest: &str,
    query: &str,
    by: &'static str,
) -> Reply {
    if rest.is_empty() {
        return match *method {
            Method::GET => match daemon.quarantine_list(query).await {
                Ok(v) => json(StatusCode::OK, &v),
                Err(e) => failed(&e),
            },
            _ => reply(
                StatusCode::METHOD_NOT_ALLOWED,
                "application/json",
                error_body("method not allowed"),
            ),
        };
    }
    let rest = &rest[1..];
    let (id, action) = rest.split_once('/').unwrap_or((rest, ""));
    match (method, action) {
        (&Method::GET, "") => match daemon.quarantine_view(id).await {
            Ok(v) => json(StatusCode::OK, &v),
            Err(e) => failed(&e),
        },
        (&Method::GET, "raw") => match daemon.quarantine_raw(id).await {
            Ok((meta, raw)) => {
                // Never shown inline: the bytes are a download.
                let mut r = reply(StatusCode::OK, "application/octet-stream", raw);
                if let Ok(v) =
                    HeaderValue::from_str(&format!("attachment; filename=\"{}.eml\"", meta.id))
                {
                    r.headers_mut().insert(CONTENT_DISPOSITION, v);
                }
                r
            }
            Err(e) => failed(&e),
        },
        (&Method::POST, "release") => {
            let force = param(query, "force").is_some_and(|v| v == "1" || v == "true");
            match daemon.quarantine_release(id, by, None, force).await {
                Ok(r) => json(
                    StatusCode::OK,
                    &serde_json::json!({"success": true, "rcpt": r.rcpt, "reply": r.reply}),
                ),
                Err(e) => failed(&e),
            }
        }
        (&Method::POST, "learn") => {
            let counter = match param(query, "class").as_deref() {
                Some("spam") => Counter::Complaint,
                Some("ham") => Counter::Rescue,
                _ => {
                    return failed(&QuarantineOpError::Bad(
                        "need ?class=spam or ?class=ham".into(),
                    ))
                }
            };
            match daemon.quarantine_learn(id, by, counter).await {
                Ok(l) => json(StatusCode::OK, &super::http::learned_json(&l)),
                Err(e) => failed(&e),
            }
        }
        (&Method::POST, "delete") | (&Method::DELETE, "") => {
            match daemon.quarantine_delete(id, by).await {
                Ok(()) => json(StatusCode::OK, &serde_json::json!({"success": true})),
                Err(e) => failed(&e),
            }
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            "application/json",
            error_body("no such quarantine endpoint"),
        ),
    }
}

/// HTML text with `& < > " '` escaped.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn page(status: StatusCode, title: &str, body: &str) -> Reply {
    let html = format!(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}\
         td,th{{padding:.3em .6em;border-bottom:1px solid #ccc;text-align:left}}\
         pre{{white-space:pre-wrap;background:#f6f6f6;padding:1em}}</style></head>\
         <body><h1>{}</h1>{body}</body></html>",
        esc(title),
        esc(title)
    );
    reply(status, "text/html; charset=utf-8", html)
}

/// A per-recipient link: `TOKEN` (the list), `TOKEN/view/ID`, `POST TOKEN/release/ID`.
async fn link_page(method: &Method, link: &str, daemon: &Daemon) -> Reply {
    let (token, rest) = link.split_once('/').unwrap_or((link, ""));
    let Some(key) = &daemon.links else {
        return page(
            StatusCode::NOT_FOUND,
            "Not found",
            "<p>The quarantine is off.</p>",
        );
    };
    let rcpt = match key.verify(token, now_secs()) {
        Ok(r) => r,
        Err(e) => {
            daemon.access.denied.fetch_add(1, Relaxed);
            let status = match e {
                LinkError::Expired => StatusCode::GONE,
                _ => StatusCode::FORBIDDEN,
            };
            return page(
                status,
                "Link not valid",
                &format!("<p>{}</p>", esc(&e.to_string())),
            );
        }
    };
    let base = format!("/quarantine/r/{token}");
    let (what, id) = rest.split_once('/').unwrap_or((rest, ""));
    match (method, what) {
        (&Method::GET, "") => match daemon.quarantine_of(&rcpt).await {
            Ok(entries) => {
                let mut rows = String::new();
                for (m, state) in &entries {
                    let released = state.released_to(Some(&rcpt));
                    rows.push_str(&format!(
                        "<tr class=\"entry\"><td>{}</td><td>{}</td><td><a href=\"{base}/view/{}\">{}</a></td><td>{:.2}</td><td>{}</td></tr>",
                        esc(&crate::history::format_time(m.time_us)[..19]),
                        esc(m.from.as_deref().or(m.sender.as_deref()).unwrap_or("")),
                        esc(&m.id),
                        esc(m.subject.as_deref().unwrap_or("(no subject)")),
                        m.score,
                        if released {
                            "released".to_string()
                        } else {
                            format!(
                                "<form method=\"post\" action=\"{base}/release/{}\"><button type=\"submit\">Release</button></form>",
                                esc(&m.id)
                            )
                        }
                    ));
                }
                let body = if entries.is_empty() {
                    "<p>No quarantined mail.</p>".to_string()
                } else {
                    format!(
                        "<table><tr><th>Time (UTC)</th><th>From</th><th>Subject</th><th>Score</th><th></th></tr>{rows}</table>"
                    )
                };
                page(
                    StatusCode::OK,
                    &format!("Quarantined mail for {rcpt}"),
                    &body,
                )
            }
            Err(e) => failed(&e),
        },
        (&Method::GET, "view") => {
            let v = match daemon.quarantine_view(id).await {
                Ok(v) => v,
                Err(e) => return failed(&e),
            };
            let rcpts: Vec<String> = v["entry"]["rcpt"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let mine = rcpts
                .iter()
                .any(|r| crate::quarantine::normal_address(r) == rcpt);
            if !mine {
                return page(
                    StatusCode::NOT_FOUND,
                    "Not found",
                    "<p>No such message.</p>",
                );
            }
            let headers: String = v["headers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|h| Some((h[0].as_str()?, h[1].as_str()?)))
                .filter(|(n, _)| {
                    ["from", "to", "cc", "subject", "date", "reply-to"]
                        .contains(&n.to_ascii_lowercase().as_str())
                })
                .map(|(n, val)| format!("{}: {}\n", esc(n), esc(val)))
                .collect();
            let body = format!(
                "<p><a href=\"{base}\">Back</a></p><pre class=\"headers\">{headers}</pre><pre class=\"text\">{}</pre>",
                esc(v["text"].as_str().unwrap_or(""))
            );
            page(
                StatusCode::OK,
                v["subject"].as_str().unwrap_or("(no subject)"),
                &body,
            )
        }
        (&Method::POST, "release") => {
            match daemon
                .quarantine_release(id, "link", Some(&rcpt), false)
                .await
            {
                Ok(_) => page(
                    StatusCode::OK,
                    "Released",
                    &format!(
                        "<p>The message was sent on to {}.</p><p><a href=\"{base}\">Back</a></p>",
                        esc(&rcpt)
                    ),
                ),
                Err(e) => {
                    let r = failed(&e);
                    page(
                        r.status(),
                        "Not released",
                        &format!(
                            "<p>{}</p><p><a href=\"{base}\">Back</a></p>",
                            esc(&e.to_string())
                        ),
                    )
                }
            }
        }
        _ => page(StatusCode::NOT_FOUND, "Not found", "<p>No such page.</p>"),
    }
}

/// The quarantine's part of `/health`.
pub(super) fn health(daemon: &Daemon) -> serde_json::Value {
    match daemon.quarantine.stats() {
        None => serde_json::json!({ "enabled": false }),
        Some(s) => serde_json::json!({
            "enabled": true,
            "stored": s.stored.load(Relaxed),
            "dropped": s.dropped.load(Relaxed),
            "too_large": s.too_large.load(Relaxed),
            "write_errors": s.write_errors.load(Relaxed),
            "bytes": s.bytes.load(Relaxed),
            "queued_bytes": s.queued_bytes.load(Relaxed),
        }),
    }
}

/// The quarantine's counters in `/metrics`.
pub(super) fn metrics(daemon: &Daemon, out: &mut String) {
    use super::metrics::{counter_header, gauge};
    use std::fmt::Write as _;
    let Some(s) = daemon.quarantine.stats() else {
        return;
    };
    for (name, help, value) in [
        (
            "shrike_quarantine_stored_total",
            "Refused messages kept in the quarantine.",
            s.stored.load(Relaxed),
        ),
        (
            "shrike_quarantine_dropped_total",
            "Refused messages not kept because the quarantine writer's queue was full.",
            s.dropped.load(Relaxed),
        ),
        (
            "shrike_quarantine_too_large_total",
            "Refused messages not kept because they alone exceed a quarter of max_bytes.",
            s.too_large.load(Relaxed),
        ),
        (
            "shrike_quarantine_write_errors_total",
            "Quarantine entries that could not be written.",
            s.write_errors.load(Relaxed),
        ),
    ] {
        counter_header(out, name, help);
        let _ = writeln!(out, "{name} {value}");
    }
    gauge(
        out,
        "shrike_quarantine_bytes",
        "Bytes of the quarantine on disk.",
        s.bytes.load(Relaxed),
    );
}

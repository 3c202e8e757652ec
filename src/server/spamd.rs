//! The spamd server: SpamAssassin's spamd protocol on a dedicated listener (`[spamd] listen`,
//! off by default), for `spamc` and what speaks like it.
//!
//! Owns: the I/O of a spamd connection: reading one request into the codec's `Decoder`,
//! handing the message to the scan workers as `/checkv2` does (no envelope), writing the reply
//! and closing (spamd serves one request a connection). Also the `[spamd]` options. The wire
//! format is `proto::spamd`'s.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{watch, Semaphore};

use super::http::durable;
use super::listen::{accept_loop, Listener, LogThrottle, Stream};
use super::pool::ScanRequest;
use super::Daemon;
use crate::message::Envelope;
use crate::proto::compress::{unzlib, Inflate};
use crate::proto::rspamd::CheckRequest;
use crate::proto::spamd::{
    error_reply, legacy_reply, pong, rewrite_reply, tell_reply, verdict_reply, Decoder, Exit,
    MessageClass, Method, Protocol, Request, Tell,
};
use crate::store::Counter;

/// Warnings a client can cause at will (malformed requests, checks the pool refused) are
/// logged at most once per this interval each; the metrics count every one.
static BAD_REQUEST_LOG: LazyLock<LogThrottle> =
    LazyLock::new(|| LogThrottle::new(Duration::from_secs(10)));
static NOT_SCANNED_LOG: LazyLock<LogThrottle> =
    LazyLock::new(|| LogThrottle::new(Duration::from_secs(10)));

/// The largest request head (request line and headers) accepted.
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// `[spamd]`: the listener and its limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpamdConfig {
    /// `ADDR:PORT`, `unix:PATH`, or `off`.
    pub listen: String,
    /// Open connections; more are closed at once.
    pub max_connections: usize,
    /// Seconds a client has to send its whole request.
    pub read_timeout_secs: u64,
    /// Largest message accepted (beyond: `SPAMD/1.0 65 Message too big`).
    pub max_body_bytes: usize,
}

impl Default for SpamdConfig {
    fn default() -> Self {
        SpamdConfig {
            listen: "off".into(),
            max_connections: 1024,
            read_timeout_secs: 60,
            max_body_bytes: 50 * 1024 * 1024,
        }
    }
}

/// Serves spamd connections until `stop` turns true.
pub async fn run(
    listener: Listener,
    daemon: Arc<Daemon>,
    limit: Arc<Semaphore>,
    stop: watch::Receiver<bool>,
) {
    accept_loop(listener, limit, stop, "spamd", None, move |stream, peer| {
        let daemon = daemon.clone();
        let local = peer.is_none_or(|p| p.ip().is_loopback());
        async move {
            let result = match stream {
                Stream::Tcp(s) => connection(s, &daemon, local).await,
                Stream::Unix(s) => connection(s, &daemon, local).await,
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "spamd connection closed");
            }
        }
    })
    .await;
}

/// Reads one request, answers it and closes. `local`: the client is on loopback or a Unix
/// socket, so it may TELL (learn), as it may `/learnspam` over HTTP.
pub(super) async fn connection<S>(mut io: S, daemon: &Daemon, local: bool) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let c = &daemon.config.spamd;
    let mut decoder = Decoder::new(MAX_HEAD_BYTES, c.max_body_bytes);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(c.read_timeout_secs.max(1));
    let request = loop {
        match decoder.request() {
            Ok(Some(r)) => break r,
            Ok(None) => {}
            Err(e) => {
                if let Some(held) = BAD_REQUEST_LOG.allow() {
                    tracing::warn!(error = %e, since_last_line = held, "spamd: bad request");
                }
                daemon.metrics.spamd_errors.fetch_add(1, Relaxed);
                io.write_all(&e.reply()).await?;
                io.shutdown().await?;
                // The client may still be sending the message: read and drop it for a moment,
                // so that closing with unread bytes does not reset the reply away.
                let mut sink = vec![0u8; 16 * 1024];
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    while matches!(io.read(&mut sink).await, Ok(n) if n > 0) {}
                })
                .await;
                return Ok(());
            }
        }
        let n = match tokio::time::timeout_at(deadline, io.read_buf(decoder.buffer())).await {
            Ok(read) => read?,
            Err(_) => {
                tracing::debug!("spamd: request not complete before the read timeout");
                return Ok(());
            }
        };
        if n == 0 {
            // The client half-closed: a SPAMC/1.0 or 1.1 message ends here.
            match decoder.finish() {
                Ok(Some(r)) => break r,
                Ok(None) => return Ok(()),
                Err(e) => {
                    daemon.metrics.spamd_errors.fetch_add(1, Relaxed);
                    io.write_all(&e.reply()).await?;
                    return io.shutdown().await;
                }
            }
        }
    };
    daemon.metrics.spamd_requests.fetch_add(1, Relaxed);
    if request.protocol == Protocol::Rspamc {
        daemon.metrics.spamd_legacy_requests.fetch_add(1, Relaxed);
    }
    let reply = match answer(request, daemon, local).await {
        Ok(reply) => reply,
        Err((exit, text)) => {
            daemon.metrics.spamd_errors.fetch_add(1, Relaxed);
            error_reply(exit, &text)
        }
    };
    io.write_all(&reply).await?;
    io.shutdown().await
}

/// An error reply's code and text.
type Refusal = (Exit, String);

/// The reply to a whole request.
async fn answer(request: Request, daemon: &Daemon, local: bool) -> Result<Vec<u8>, Refusal> {
    let threshold = daemon.config.verdict.add_header;
    let method = request.method;
    match method {
        Method::Ping => return Ok(pong(request.protocol)),
        Method::Skip => return Ok(Vec::new()),
        _ => {}
    }
    let tell = match method {
        Method::Tell if !local => {
            tracing::warn!("spamd: TELL from a remote client refused");
            return Err((
                Exit::NoPerm,
                "TELL needs a loopback or Unix-socket client".into(),
            ));
        }
        Method::Tell => Some(request.tell().map_err(|e| {
            tracing::warn!(error = %e, "spamd: bad TELL");
            (e.exit(), e.to_string())
        })?),
        _ => None,
    };
    let envelope = match request.protocol {
        // The legacy protocol carries rspamd's envelope headers (Exim sends From, Rcpt, IP,
        // Helo, Hostname, Queue-Id and User).
        Protocol::Rspamc => CheckRequest::from_headers(&request.headers).envelope,
        // spamd's `User` is the local account to scan for, not the authenticated sender.
        Protocol::Spamc => Envelope::default(),
    };
    let (protocol, minor) = (request.protocol, request.minor);
    let coding = request.compression();
    let message = decompressed(request.body, coding, daemon.config.spamd.max_body_bytes).await?;
    if let Some(tell) = tell {
        return learn(message, tell, minor, daemon).await;
    }
    let rewrite = matches!(method, Method::Process | Method::Headers);
    let original = rewrite.then(|| message.clone());
    let scan = ScanRequest {
        raw: message,
        envelope,
        lists: false,
        checks: None,
    };
    let answer = daemon
        .recorded("spamd")
        .scan(scan, daemon.scan_timeout())
        .await
        .map_err(|e| {
            daemon.metrics.not_scanned(&e);
            if let Some(held) = NOT_SCANNED_LOG.allow() {
                tracing::warn!(error = %e, since_last_line = held, "spamd: check not scanned");
            }
            (Exit::TempFail, e.to_string())
        })?;
    let verdict = &answer.verdict;
    Ok(match (protocol, original) {
        (Protocol::Rspamc, _) => legacy_reply(verdict, threshold),
        (Protocol::Spamc, Some(original)) => rewrite_reply(
            method == Method::Headers,
            minor,
            verdict,
            threshold,
            &original,
        ),
        (Protocol::Spamc, None) => verdict_reply(method, minor, verdict, threshold),
    })
}

/// The message, decompressed under the body limit when the client sent `Compress: zlib`.
async fn decompressed(
    body: Vec<u8>,
    coding: Option<String>,
    max: usize,
) -> Result<Vec<u8>, Refusal> {
    let Some(coding) = coding else {
        return Ok(body);
    };
    if coding != "zlib" {
        return Err((
            Exit::Protocol,
            format!("Unsupported Compress: {coding} (zlib only)"),
        ));
    }
    let packed = body;
    // Off the runtime's threads: a large message takes milliseconds to inflate.
    match tokio::task::spawn_blocking(move || unzlib(&packed, max)).await {
        Ok(Ok(raw)) => Ok(raw),
        Ok(Err(e @ Inflate::TooLarge(_))) => {
            tracing::warn!(error = %e, "spamd: compressed message refused");
            Err((Exit::DataErr, "Message too big".into()))
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "spamd: compressed message refused");
            Err((Exit::DataErr, e.to_string()))
        }
        Err(e) => Err((Exit::Software, e.to_string())),
    }
}

/// TELL: `Set` learns the message as its class, as `/learnspam` and `/learnham` do (durable
/// before the reply). `Remove` (forget) is refused: shrike's counters and classifier cannot
/// take a learn back; learning the other class corrects one.
async fn learn(
    message: Vec<u8>,
    tell: Tell,
    minor: u32,
    daemon: &Daemon,
) -> Result<Vec<u8>, Refusal> {
    if tell.remove {
        tracing::warn!("spamd: TELL Remove (forget) refused");
        return Err((
            Exit::Unavailable,
            "Forgetting is not supported; learn the message as the other class instead".into(),
        ));
    }
    let counter = match tell.class {
        Some(MessageClass::Ham) => Counter::Rescue,
        _ => Counter::Complaint,
    };
    let (size, start) = (message.len(), std::time::Instant::now());
    let learned = daemon
        .pool
        .learn(message, counter, daemon.scan_timeout())
        .await
        .map_err(|e| {
            daemon.metrics.not_scanned(&e);
            tracing::warn!(error = %e, "spamd: TELL not learned");
            (Exit::TempFail, e.to_string())
        })?;
    if let Err(e) = durable(daemon, &learned).await {
        // Logged by the data directory's health, at most once per 10 s.
        tracing::debug!(error = %e, "spamd: learn not made durable");
        return Err((Exit::TempFail, e.to_string()));
    }
    daemon.record_learn(
        "spamd",
        counter,
        &Envelope::default(),
        size,
        &learned,
        start,
    );
    Ok(tell_reply(minor, learned.trained, false))
}

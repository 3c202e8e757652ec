//! The spamd server: SpamAssassin's spamd protocol on a dedicated listener (`[spamd] listen`,
//! off by default), for `spamc` and what speaks like it.
//!
//! Owns: the I/O of a spamd connection: reading one request into the codec's `Decoder`,
//! handing the message to the scan workers as `/checkv2` does (no envelope), writing the reply
//! and closing (spamd serves one request a connection). Also the `[spamd]` options. The wire
//! format is `proto::spamd`'s.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{watch, Semaphore};

use super::listen::{accept_loop, Listener, Stream};
use super::pool::ScanRequest;
use super::Daemon;
use crate::proto::spamd::{error_reply, pong, rewrite_reply, verdict_reply, Decoder, Exit, Method};

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
    accept_loop(listener, limit, stop, "spamd", None, move |stream, _| {
        let daemon = daemon.clone();
        async move {
            let result = match stream {
                Stream::Tcp(s) => connection(s, &daemon).await,
                Stream::Unix(s) => connection(s, &daemon).await,
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "spamd connection closed");
            }
        }
    })
    .await;
}

/// Reads one request, answers it and closes.
async fn connection<S>(mut io: S, daemon: &Daemon) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let c = &daemon.config.spamd;
    let mut decoder = Decoder::new(MAX_HEAD_BYTES, c.max_body_bytes);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(c.read_timeout_secs.max(1));
    let mut buf = vec![0u8; 64 * 1024];
    let request = loop {
        match decoder.request() {
            Ok(Some(r)) => break r,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "spamd: bad request");
                io.write_all(&e.reply()).await?;
                io.shutdown().await?;
                // The client may still be sending the message: read and drop it for a moment,
                // so that closing with unread bytes does not reset the reply away.
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    while matches!(io.read(&mut buf).await, Ok(n) if n > 0) {}
                })
                .await;
                return Ok(());
            }
        }
        let n = match tokio::time::timeout_at(deadline, io.read(&mut buf)).await {
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
                    io.write_all(&e.reply()).await?;
                    return io.shutdown().await;
                }
            }
        }
        decoder.feed(&buf[..n]);
    };
    let reply = match request.method {
        Method::Ping => pong(),
        Method::Skip => return Ok(()),
        method => {
            let rewrite = matches!(method, Method::Process | Method::Headers);
            let message = if rewrite {
                request.body.clone()
            } else {
                Vec::new()
            };
            let scan = ScanRequest {
                raw: request.body,
                envelope: Default::default(),
                lists: false,
                checks: None,
            };
            match daemon.pool.scan(scan, daemon.scan_timeout()).await {
                Ok(answer) if rewrite => rewrite_reply(
                    method == Method::Headers,
                    request.minor,
                    &answer.verdict,
                    daemon.config.verdict.add_header,
                    &message,
                ),
                Ok(answer) => verdict_reply(
                    method,
                    request.minor,
                    &answer.verdict,
                    daemon.config.verdict.add_header,
                ),
                Err(e) => {
                    daemon.metrics.not_scanned(&e);
                    tracing::warn!(error = %e, "spamd: check not scanned");
                    error_reply(Exit::TempFail, &e.to_string())
                }
            }
        }
    };
    io.write_all(&reply).await?;
    io.shutdown().await
}

//! Tells a spamd (or legacy rspamd) client from an HTTP one on the HTTP port, as rspamd does, so
//! Exim's `spamd_address = 127.0.0.1 11333` works without a second listener.
//!
//! Owns: reading a connection's first bytes until the protocol is known, and giving them back
//! ([`Rewind`]) to whichever protocol serves the connection. The test itself is the codec's
//! (`proto::spamd::sniff`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

use crate::proto::spamd;

/// A stream whose first bytes were already read: they are read again first.
pub struct Rewind<S> {
    prefix: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S> Rewind<S> {
    pub fn new(prefix: Vec<u8>, inner: S) -> Rewind<S> {
        Rewind {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.at);
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What a connection turned out to speak.
pub enum Sniffed<S> {
    Http(Rewind<S>),
    Spamd(Rewind<S>),
    /// Closed, failed or silent past `timeout` before saying anything.
    Gone,
}

/// Reads until the first bytes tell the protocol (at most a few bytes past the first read,
/// which usually holds the whole request). Undecidable input is left to HTTP, which answers
/// 400 to it.
pub async fn sniff<S: AsyncRead + Unpin>(mut io: S, timeout: Duration) -> Sniffed<S> {
    let mut first = Vec::with_capacity(8192);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match spamd::sniff(&first) {
            Some(true) => return Sniffed::Spamd(Rewind::new(first, io)),
            Some(false) => return Sniffed::Http(Rewind::new(first, io)),
            None => {}
        }
        if first.len() == first.capacity() {
            first.reserve(8192);
        }
        match tokio::time::timeout_at(deadline, io.read_buf(&mut first)).await {
            Ok(Ok(0)) if first.is_empty() => return Sniffed::Gone,
            Ok(Ok(0)) => return Sniffed::Http(Rewind::new(first, io)),
            Ok(Ok(_)) => {}
            Ok(Err(_)) | Err(_) => return Sniffed::Gone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn through(bytes: &[u8], pieces: usize) -> (String, Vec<u8>) {
        let (mut client, server) = tokio::io::duplex(64);
        let owned = bytes.to_vec();
        let writer = tokio::spawn(async move {
            for chunk in owned.chunks(owned.len().div_ceil(pieces).max(1)) {
                client.write_all(chunk).await.unwrap();
                tokio::task::yield_now().await;
            }
            client.shutdown().await.unwrap();
        });
        let (kind, mut stream) = match sniff(server, Duration::from_secs(5)).await {
            Sniffed::Http(s) => ("http", s),
            Sniffed::Spamd(s) => ("spamd", s),
            Sniffed::Gone => return ("gone".into(), Vec::new()),
        };
        let mut all = Vec::new();
        stream.read_to_end(&mut all).await.unwrap();
        writer.await.unwrap();
        (kind.into(), all)
    }

    #[tokio::test]
    async fn each_protocol_is_told_and_gets_every_byte_back() {
        for (bytes, kind) in [
            (
                &b"POST /checkv2 HTTP/1.1\r\nContent-Length: 0\r\n\r\n"[..],
                "http",
            ),
            (b"GET /ping HTTP/1.1\r\n\r\n", "http"),
            (b"HEAD / HTTP/1.1\r\n\r\n", "http"),
            (b"PUT / HTTP/1.1\r\n\r\n", "http"),
            (b"CHECK SPAMC/1.5\r\nContent-length: 2\r\n\r\nhi", "spamd"),
            (b"HEADERS SPAMC/1.5\r\nContent-length: 2\r\n\r\nhi", "spamd"),
            (b"PROCESS SPAMC/1.5\r\nContent-length: 2\r\n\r\nhi", "spamd"),
            (b"PING SPAMC/1.5\r\n\r\n", "spamd"),
            (b"CHECK RSPAMC/1.3\r\nContent-length: 2\r\n\r\nhi", "spamd"),
            (b"REPORT_IFSPAM SPAMC/1.2\r\n\r\n", "spamd"),
            (b"TELL SPAMC/1.5\r\n\r\n", "spamd"),
            (b"garbage", "http"),
            (b"CHE", "http"),
        ] {
            for pieces in [1, 2, bytes.len()] {
                let (got, all) = through(bytes, pieces).await;
                assert_eq!(
                    got,
                    kind,
                    "{:?} in {pieces}",
                    String::from_utf8_lossy(bytes)
                );
                assert_eq!(all, bytes, "bytes given back");
            }
        }
        assert_eq!(through(b"", 1).await.0, "gone");
    }

    #[tokio::test]
    async fn a_silent_client_is_dropped_at_the_timeout() {
        let (_client, server) = tokio::io::duplex(64);
        let started = std::time::Instant::now();
        assert!(matches!(
            sniff(server, Duration::from_millis(50)).await,
            Sniffed::Gone
        ));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

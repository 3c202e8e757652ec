//! SpamAssassin's spamd protocol (`spamd/PROTOCOL`), as `spamc`, Exim and amavis speak it, and
//! rspamd's legacy protocol (`CHECK RSPAMC/1.3`, Exim's `variant=rspamd`), which shares its
//! framing: a request line `METHOD SPAMC/1.x` (or `RSPAMC/1.x`), headers, a blank line and
//! `Content-length` bytes of message; a reply `SPAMD/1.1 0 EX_OK` with
//! `Spam: True ; 15.0 / 5.0` (or `RSPAMD/1.3 0 EX_OK` with `Metric: default; True; …`).
//!
//! Owns: parsing requests from bytes fed in any pieces ([`Decoder`], in `decode`), the
//! replies' bytes (`reply` for spamd, `rspamc` for the legacy protocol), and the sysexits codes
//! of the error replies. Never touches: sockets, the scan, decompression (`proto::compress`).

mod decode;
mod reply;
mod rspamc;
#[cfg(test)]
mod tests;

use http::HeaderMap;

pub use decode::{sniff, Decoder};
pub use reply::{client_score, pong, rewrite_reply, tell_reply, verdict_reply};
pub use rspamc::legacy_reply;

/// Which protocol the request line names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `SPAMC/1.x`: SpamAssassin's.
    Spamc,
    /// `RSPAMC/1.x`: rspamd's legacy protocol.
    Rspamc,
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Check,
    Symbols,
    Report,
    ReportIfSpam,
    Process,
    Headers,
    Ping,
    Skip,
    /// Learn (or forget) the message as spam or ham.
    Tell,
}

impl Method {
    pub(crate) fn parse(s: &[u8]) -> Option<Method> {
        Some(match s {
            b"CHECK" => Method::Check,
            b"SYMBOLS" => Method::Symbols,
            b"REPORT" => Method::Report,
            b"REPORT_IFSPAM" => Method::ReportIfSpam,
            b"PROCESS" => Method::Process,
            b"HEADERS" => Method::Headers,
            b"PING" => Method::Ping,
            b"SKIP" => Method::Skip,
            b"TELL" => Method::Tell,
            _ => return None,
        })
    }

    /// PING and SKIP are answered on the request line alone (spamc sends no headers with them).
    pub(crate) fn bodiless(self) -> bool {
        matches!(self, Method::Ping | Method::Skip)
    }
}

/// A whole request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    pub protocol: Protocol,
    /// The minor version of `SPAMC/1.x` (`SPAMC/1.5`: 5).
    pub minor: u32,
    /// Every request header (`User`, `Compress`, TELL's `Message-class`, `Set` and `Remove`,
    /// and the legacy protocol's envelope: `From`, `Rcpt`, `IP`, `Helo`, `Queue-Id`, …).
    pub headers: HeaderMap,
    /// The message as sent (still compressed under `Compress: zlib`).
    pub body: Vec<u8>,
}

/// The class a TELL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageClass {
    Spam,
    Ham,
}

/// What a TELL asks: `Message-class: spam` with `Set: local` learns, `Remove: local` forgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tell {
    pub class: Option<MessageClass>,
    /// `Set` names a database (local or remote; shrike has one, and counts both as it).
    pub set: bool,
    pub remove: bool,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    }

    /// The `User` header.
    pub fn user(&self) -> Option<&str> {
        self.header("user").filter(|u| !u.is_empty())
    }

    /// The `Compress` header's coding, lower-cased (`zlib` from `spamc -z`).
    pub fn compression(&self) -> Option<String> {
        self.header("compress")
            .filter(|c| !c.is_empty())
            .map(str::to_ascii_lowercase)
    }

    /// TELL's headers, checked as spamd checks them.
    pub fn tell(&self) -> Result<Tell, SpamdError> {
        let class = match self.header("message-class").map(str::to_ascii_lowercase) {
            None => None,
            Some(c) if c == "spam" => Some(MessageClass::Spam),
            Some(c) if c == "ham" => Some(MessageClass::Ham),
            Some(_) => return Err(SpamdError::BadTell("unknown Message-class")),
        };
        let names = |h: &str| {
            self.header(h)
                .is_some_and(|v| v.split(',').any(|d| matches!(d.trim(), "local" | "remote")))
        };
        let tell = Tell {
            class,
            set: names("set"),
            remove: names("remove"),
        };
        if !tell.set && !tell.remove {
            return Err(SpamdError::BadTell(
                "neither Set nor Remove names a database",
            ));
        }
        if tell.set && tell.class.is_none() {
            return Err(SpamdError::BadTell("Set without a Message-class"));
        }
        Ok(tell)
    }
}

/// sysexits(3) codes that spamd answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// EX_DATAERR: the message cannot be taken (too big).
    DataErr = 65,
    /// EX_UNAVAILABLE: the method is known but not served.
    Unavailable = 69,
    /// EX_SOFTWARE: an internal error.
    Software = 70,
    /// EX_TEMPFAIL: no verdict now (queue full, timeout); try again.
    TempFail = 75,
    /// EX_PROTOCOL: the request is malformed.
    Protocol = 76,
    /// EX_NOPERM: not allowed to this client (TELL from a remote client).
    NoPerm = 77,
}

/// Why a request cannot be read; each answers with an error reply ([`SpamdError::reply`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpamdError {
    #[error("request head longer than {0} bytes")]
    HeadTooLong(usize),
    #[error("message of {length} bytes exceeds the limit of {limit}")]
    BodyTooBig { length: usize, limit: usize },
    /// A message without `Content-length` (protocol 1.0 and 1.1) ran past the limit.
    #[error("message longer than the limit of {limit} bytes")]
    StreamTooBig { limit: usize },
    #[error("bad request line")]
    BadRequestLine,
    #[error("unknown method")]
    UnknownMethod,
    #[error("bad protocol version")]
    BadVersion,
    #[error("bad header line")]
    BadHeader,
    #[error("bad Content-length")]
    BadContentLength,
    #[error("missing Content-length")]
    MissingContentLength,
    #[error("bad TELL: {0}")]
    BadTell(&'static str),
}

impl SpamdError {
    /// The sysexits code this error is answered with.
    pub fn exit(&self) -> Exit {
        match self {
            SpamdError::BodyTooBig { .. } | SpamdError::StreamTooBig { .. } => Exit::DataErr,
            _ => Exit::Protocol,
        }
    }

    /// The error reply spamd gives: `SPAMD/1.0 76 Bad header line`.
    pub fn reply(&self) -> Vec<u8> {
        let text = match self {
            SpamdError::HeadTooLong(_) => "Request head too long",
            SpamdError::BodyTooBig { .. } | SpamdError::StreamTooBig { .. } => "Message too big",
            SpamdError::BadRequestLine => "Bad request line",
            SpamdError::UnknownMethod => "Unknown method",
            SpamdError::BadVersion => "Bad protocol version",
            SpamdError::BadHeader => "Bad header line",
            SpamdError::BadContentLength => "Bad Content-length",
            SpamdError::MissingContentLength => "Missing Content-length",
            SpamdError::BadTell(why) => why,
        };
        error_reply(self.exit(), text)
    }
}

/// `SPAMD/1.0 CODE TEXT\r\n`: an error reply.
pub fn error_reply(exit: Exit, text: &str) -> Vec<u8> {
    format!("SPAMD/1.0 {} {text}\r\n", exit as u8).into_bytes()
}

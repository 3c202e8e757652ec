//! SpamAssassin's spamd protocol (`spamd/PROTOCOL`), as `spamc` speaks it: a request line
//! `METHOD SPAMC/1.x`, headers, a blank line and `Content-length` bytes of message; a reply
//! `SPAMD/1.1 0 EX_OK` with `Spam: True ; 15.0 / 5.0` and, by method, a body.
//!
//! Owns: parsing requests from bytes fed in any pieces ([`Decoder`]), the replies' bytes, and
//! the sysexits codes of the error replies. Never touches: sockets, the scan.

use crate::proto::headers::{is_spam_header, spam_headers};
use crate::verdict::{Action, Verdict};

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
}

impl Method {
    fn parse(s: &[u8]) -> Option<Method> {
        Some(match s {
            b"CHECK" => Method::Check,
            b"SYMBOLS" => Method::Symbols,
            b"REPORT" => Method::Report,
            b"REPORT_IFSPAM" => Method::ReportIfSpam,
            b"PROCESS" => Method::Process,
            b"HEADERS" => Method::Headers,
            b"PING" => Method::Ping,
            b"SKIP" => Method::Skip,
            _ => return None,
        })
    }

    /// PING and SKIP are answered on the request line alone (spamc sends no headers with them).
    fn bodiless(self) -> bool {
        matches!(self, Method::Ping | Method::Skip)
    }
}

/// A whole request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// The minor version of `SPAMC/1.x` (`SPAMC/1.5`: 5).
    pub minor: u32,
    /// The `User` header.
    pub user: Option<String>,
    pub body: Vec<u8>,
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
}

/// Why a request cannot be read; each answers with an error reply ([`SpamdError::reply`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpamdError {
    #[error("request head longer than {0} bytes")]
    HeadTooLong(usize),
    #[error("message of {length} bytes exceeds the limit of {limit}")]
    BodyTooBig { length: usize, limit: usize },
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
}

impl SpamdError {
    /// The sysexits code this error is answered with.
    pub fn exit(&self) -> Exit {
        match self {
            SpamdError::BodyTooBig { .. } => Exit::DataErr,
            _ => Exit::Protocol,
        }
    }

    /// The error reply spamd gives: `SPAMD/1.0 76 Bad header line`.
    pub fn reply(&self) -> Vec<u8> {
        let text = match self {
            SpamdError::HeadTooLong(_) => "Request head too long",
            SpamdError::BodyTooBig { .. } => "Message too big",
            SpamdError::BadRequestLine => "Bad request line",
            SpamdError::UnknownMethod => "Unknown method",
            SpamdError::BadVersion => "Bad protocol version",
            SpamdError::BadHeader => "Bad header line",
            SpamdError::BadContentLength => "Bad Content-length",
            SpamdError::MissingContentLength => "Missing Content-length",
        };
        error_reply(self.exit(), text)
    }
}

/// `SPAMD/1.0 CODE TEXT\r\n`: an error reply.
pub fn error_reply(exit: Exit, text: &str) -> Vec<u8> {
    format!("SPAMD/1.0 {} {text}\r\n", exit as u8).into_bytes()
}

/// The request head parsed, waiting for its body.
#[derive(Debug)]
struct Head {
    method: Method,
    minor: u32,
    user: Option<String>,
    /// `Content-length`; none under protocol 1.0 and 1.1, whose message runs to the end of
    /// the client's stream (the client half-closes).
    length: Option<usize>,
    /// Where the body starts in the buffer.
    start: usize,
}

/// Reads one request from bytes fed in any pieces.
#[derive(Debug)]
pub struct Decoder {
    buf: Vec<u8>,
    max_head: usize,
    max_body: usize,
    head: Option<Head>,
}

impl Decoder {
    /// A head (request line and headers) over `max_head` bytes, or a `Content-length` over
    /// `max_body`, is an error.
    pub fn new(max_head: usize, max_body: usize) -> Decoder {
        Decoder {
            buf: Vec::new(),
            max_head,
            max_body,
            head: None,
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The request once it has all arrived; `Ok(None)` while more is needed. An error is final.
    pub fn request(&mut self) -> Result<Option<Request>, SpamdError> {
        if self.head.is_none() {
            match self.parse_head()? {
                Some(h) => self.head = Some(h),
                None => return Ok(None),
            }
        }
        let Some(head) = &self.head else {
            return Ok(None);
        };
        let have = self.buf.len() - head.start;
        let Some(length) = head.length else {
            if have > self.max_body {
                return Err(SpamdError::BodyTooBig {
                    length: have,
                    limit: self.max_body,
                });
            }
            return Ok(None);
        };
        if have < length {
            return Ok(None);
        }
        let end = head.start + length;
        Ok(Some(self.take_request(end)))
    }

    /// The parsed head with the body `buf[head.start..end]`, moved out of the buffer (a message
    /// can be 50 MB: no second copy).
    fn take_request(&mut self, end: usize) -> Request {
        let head = self.head.take().expect("a head was parsed");
        let mut body = std::mem::take(&mut self.buf);
        body.truncate(end);
        body.drain(..head.start);
        Request {
            method: head.method,
            minor: head.minor,
            user: head.user,
            body,
        }
    }

    /// The client closed its side: a protocol 1.0/1.1 request without `Content-length` is
    /// complete (its message is what arrived); any other unfinished request stays `Ok(None)`.
    pub fn finish(&mut self) -> Result<Option<Request>, SpamdError> {
        if let Some(r) = self.request()? {
            return Ok(Some(r));
        }
        match &self.head {
            Some(head) if head.length.is_none() => Ok(Some(self.take_request(self.buf.len()))),
            _ => Ok(None),
        }
    }

    fn parse_head(&self) -> Result<Option<Head>, SpamdError> {
        let mut lines = Lines {
            buf: &self.buf,
            pos: 0,
        };
        let Some(first) = lines.next() else {
            return self.wait();
        };
        let (method, minor) = request_line(first)?;
        if method.bodiless() {
            return Ok(Some(Head {
                method,
                minor,
                user: None,
                length: Some(0),
                start: lines.pos,
            }));
        }
        if minor < 2 {
            // SPAMC/1.0 and 1.1: no headers; the message follows the request line.
            return Ok(Some(Head {
                method,
                minor,
                user: None,
                length: None,
                start: lines.pos,
            }));
        }
        let (mut length, mut user) = (None, None);
        loop {
            let Some(line) = lines.next() else {
                return self.wait();
            };
            if line.is_empty() {
                break;
            }
            let colon = line
                .iter()
                .position(|&b| b == b':')
                .ok_or(SpamdError::BadHeader)?;
            let name = &line[..colon];
            let value = std::str::from_utf8(&line[colon + 1..])
                .map_err(|_| SpamdError::BadHeader)?
                .trim();
            if name.is_empty() || name.iter().any(|b| b.is_ascii_whitespace()) {
                return Err(SpamdError::BadHeader);
            }
            if name.eq_ignore_ascii_case(b"content-length") {
                let n: usize = value.parse().map_err(|_| SpamdError::BadContentLength)?;
                if n > self.max_body {
                    return Err(SpamdError::BodyTooBig {
                        length: n,
                        limit: self.max_body,
                    });
                }
                length = Some(n);
            } else if name.eq_ignore_ascii_case(b"user") {
                user = Some(value.to_owned());
            }
        }
        if lines.pos > self.max_head {
            return Err(SpamdError::HeadTooLong(self.max_head));
        }
        Ok(Some(Head {
            method,
            minor,
            user,
            length: Some(length.ok_or(SpamdError::MissingContentLength)?),
            start: lines.pos,
        }))
    }

    /// More bytes are needed, unless the head is already over its limit.
    fn wait(&self) -> Result<Option<Head>, SpamdError> {
        if self.buf.len() > self.max_head {
            Err(SpamdError::HeadTooLong(self.max_head))
        } else {
            Ok(None)
        }
    }
}

/// The complete lines of a buffer (ended by `\n`, a `\r` before it dropped).
struct Lines<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Lines<'a> {
    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = &self.buf[self.pos..];
        let end = rest.iter().position(|&b| b == b'\n')?;
        self.pos += end + 1;
        let line = &rest[..end];
        Some(line.strip_suffix(b"\r").unwrap_or(line))
    }
}

/// `CHECK SPAMC/1.5`.
fn request_line(line: &[u8]) -> Result<(Method, u32), SpamdError> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(proto), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(SpamdError::BadRequestLine);
    };
    let method = Method::parse(method).ok_or(SpamdError::UnknownMethod)?;
    let minor = proto
        .strip_prefix(b"SPAMC/1.")
        .and_then(|m| std::str::from_utf8(m).ok())
        .and_then(|m| m.parse::<u32>().ok())
        .ok_or(SpamdError::BadVersion)?;
    Ok((method, minor))
}

/// `SPAMD/1.5 0 PONG\r\n`.
pub fn pong() -> Vec<u8> {
    b"SPAMD/1.5 0 PONG\r\n".to_vec()
}

/// The reply to a scanned CHECK, SYMBOLS, REPORT or REPORT_IFSPAM request (`method`, protocol
/// `1.minor`): spam when the action is add header or worse, against the add-header
/// `threshold`. Content-length is sent from protocol 1.3 on, as spamd does.
pub fn verdict_reply(method: Method, minor: u32, verdict: &Verdict, threshold: f64) -> Vec<u8> {
    let spam = is_spam(verdict);
    let body = match method {
        Method::Symbols => {
            let mut names = verdict
                .symbols
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(",");
            if minor < 3 {
                names.push_str("\r\n");
            }
            names
        }
        Method::Report => report(verdict, threshold),
        Method::ReportIfSpam if spam => report(verdict, threshold),
        _ => String::new(),
    };
    let mut out = format!("SPAMD/1.1 0 EX_OK\r\n{}", spam_line(verdict, threshold));
    if minor >= 3 {
        out.push_str(&format!("Content-length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    out.push_str(&body);
    out.into_bytes()
}

/// Spam for spamd's clients: the action is add header or worse (the threshold reported is the
/// add-header one).
fn is_spam(verdict: &Verdict) -> bool {
    verdict.action >= Action::AddHeader
}

/// `Spam: True ; 15.0 / 6.0`, with its line end: one decimal, as spamc and Exim parse it.
fn spam_line(verdict: &Verdict, threshold: f64) -> String {
    let spam = if is_spam(verdict) { "True" } else { "False" };
    format!("Spam: {spam} ; {:.1} / {threshold:.1}\r\n", verdict.score)
}

/// The reply to a scanned PROCESS (`head_only` false) or HEADERS (true) request: the message
/// (or its header section) with the X-Spam-* headers the milter adds, forged ones removed
/// first. From protocol 1.3 the `Spam` header comes with it; before, only `Content-length`.
pub fn rewrite_reply(
    head_only: bool,
    minor: u32,
    verdict: &Verdict,
    threshold: f64,
    message: &[u8],
) -> Vec<u8> {
    let body = rewrite(message, &spam_headers(verdict, threshold), head_only);
    let mut out = String::from("SPAMD/1.1 0 EX_OK\r\n");
    if minor >= 3 {
        out.push_str(&spam_line(verdict, threshold));
    }
    out.push_str(&format!("Content-length: {}\r\n\r\n", body.len()));
    let mut out = out.into_bytes();
    out.extend_from_slice(&body);
    out
}

/// `message` with the X-Spam-* headers (and their continuation lines) removed and `headers`
/// appended to its header section, in the message's own line endings; only the header
/// section and the blank line after it when `head_only`.
fn rewrite(message: &[u8], headers: &[(String, String)], head_only: bool) -> Vec<u8> {
    let crlf = message
        .iter()
        .position(|&b| b == b'\n')
        .is_none_or(|i| i > 0 && message[i - 1] == b'\r');
    let eol: &[u8] = if crlf { b"\r\n" } else { b"\n" };
    let mut out = Vec::with_capacity(message.len() + 256);
    let mut pos = 0;
    let mut dropping = false;
    let mut separator = None;
    while pos < message.len() {
        let end = message[pos..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(message.len(), |i| pos + i + 1);
        let line = &message[pos..end];
        if line == b"\n" || line == b"\r\n" {
            separator = Some(pos);
            break;
        }
        if line[0] == b' ' || line[0] == b'\t' {
            if !dropping {
                out.extend_from_slice(line);
            }
        } else {
            dropping = is_spam_header(line);
            if !dropping {
                out.extend_from_slice(line);
            }
        }
        pos = end;
    }
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.extend_from_slice(eol);
    }
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        for (i, part) in value.split('\n').enumerate() {
            if i > 0 {
                out.extend_from_slice(eol);
            }
            out.extend_from_slice(part.as_bytes());
        }
        out.extend_from_slice(eol);
    }
    match separator {
        Some(at) if head_only => {
            let blank = &message[at..];
            let len = if blank.starts_with(b"\r\n") { 2 } else { 1 };
            out.extend_from_slice(&blank[..len]);
        }
        Some(at) => out.extend_from_slice(&message[at..]),
        None => out.extend_from_slice(eol),
    }
    out
}

/// A short report in the shape of SpamAssassin's: the score, then one line a symbol.
fn report(verdict: &Verdict, threshold: f64) -> String {
    let mut out = format!(
        "Content analysis details:   ({:.1} points, {:.1} required)\r\n\r\n \
         pts rule name              description\r\n\
         ---- ---------------------- --------------------------------------------------\r\n",
        verdict.score, threshold
    );
    for s in verdict.symbols.values() {
        out.push_str(&format!(
            "{:>4.1} {:<22} {}\r\n",
            s.score,
            s.name,
            s.description.as_deref().unwrap_or("")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::SymbolHit;
    use std::collections::BTreeMap;

    const MAX_HEAD: usize = 1024;
    const MAX_BODY: usize = 4096;

    /// Every split of `bytes` into two feeds, and a byte at a time, gives the same result.
    fn decode_every_split(bytes: &[u8]) -> Result<Option<Request>, SpamdError> {
        let mut whole = Decoder::new(MAX_HEAD, MAX_BODY);
        whole.feed(bytes);
        let expected = whole.request();
        for cut in 0..=bytes.len() {
            let mut d = Decoder::new(MAX_HEAD, MAX_BODY);
            d.feed(&bytes[..cut]);
            let early = d.request();
            if let Ok(Some(r)) = &early {
                // Complete before the cut: only possible when the rest is past the request.
                assert_eq!(early, expected, "cut at {cut}");
                let _ = r;
                continue;
            }
            if early.is_err() {
                assert_eq!(early, expected, "error at cut {cut}");
                continue;
            }
            d.feed(&bytes[cut..]);
            assert_eq!(d.request(), expected, "cut at {cut}");
        }
        let mut d = Decoder::new(MAX_HEAD, MAX_BODY);
        let mut last = Ok(None);
        for b in bytes {
            d.feed(std::slice::from_ref(b));
            last = d.request();
            if !matches!(last, Ok(None)) {
                break;
            }
        }
        assert_eq!(last, expected, "byte at a time");
        expected
    }

    #[test]
    fn check_request_split_at_every_offset() {
        let bytes = b"CHECK SPAMC/1.5\r\nContent-length: 5\r\nUser: bob\r\n\r\nhello";
        let r = decode_every_split(bytes).unwrap().unwrap();
        assert_eq!(
            r,
            Request {
                method: Method::Check,
                minor: 5,
                user: Some("bob".into()),
                body: b"hello".to_vec(),
            }
        );
    }

    #[test]
    fn every_method_parses() {
        for (name, method) in [
            ("CHECK", Method::Check),
            ("SYMBOLS", Method::Symbols),
            ("REPORT", Method::Report),
            ("REPORT_IFSPAM", Method::ReportIfSpam),
            ("PROCESS", Method::Process),
            ("HEADERS", Method::Headers),
        ] {
            let bytes = format!("{name} SPAMC/1.2\r\ncontent-LENGTH: 2\r\nX-Other: y\r\n\r\nab");
            let r = decode_every_split(bytes.as_bytes()).unwrap().unwrap();
            assert_eq!((r.method, r.minor, r.body), (method, 2, b"ab".to_vec()));
            assert_eq!(r.user, None);
        }
    }

    #[test]
    fn ping_and_skip_end_at_the_request_line() {
        for (bytes, method) in [
            (&b"PING SPAMC/1.5\r\n"[..], Method::Ping),
            (&b"PING SPAMC/1.5\r\n\r\n"[..], Method::Ping),
            (&b"SKIP SPAMC/1.5\r\n"[..], Method::Skip),
        ] {
            let r = decode_every_split(bytes).unwrap().unwrap();
            assert_eq!((r.method, r.minor, r.body), (method, 5, Vec::new()));
        }
    }

    #[test]
    fn protocol_1_0_messages_run_to_the_end_of_the_stream() {
        let bytes = b"SYMBOLS SPAMC/1.0\r\nSubject: x\r\n\r\nbody";
        for cut in 0..=bytes.len() {
            let mut d = Decoder::new(MAX_HEAD, MAX_BODY);
            d.feed(&bytes[..cut]);
            assert_eq!(d.request(), Ok(None), "cut at {cut}");
            d.feed(&bytes[cut..]);
            assert_eq!(d.request(), Ok(None), "cut at {cut}");
            let r = d.finish().unwrap().unwrap();
            assert_eq!((r.method, r.minor), (Method::Symbols, 0));
            assert_eq!(r.body, b"Subject: x\r\n\r\nbody");
        }
        let mut d = Decoder::new(MAX_HEAD, MAX_BODY);
        d.feed(b"CHECK SPAMC/1.1\r\n");
        d.feed(&[b'a'; MAX_BODY + 1]);
        assert_eq!(
            d.request(),
            Err(SpamdError::BodyTooBig {
                length: MAX_BODY + 1,
                limit: MAX_BODY
            })
        );
        // From 1.2 on, Content-length is required; an unfinished head stays unfinished.
        let mut d = Decoder::new(MAX_HEAD, MAX_BODY);
        d.feed(b"CHECK SPAMC/1.5\r\nUser: x\r\n");
        assert_eq!(d.finish(), Ok(None));
    }

    #[test]
    fn incomplete_until_the_whole_body() {
        let mut d = Decoder::new(MAX_HEAD, MAX_BODY);
        d.feed(b"CHECK SPAMC/1.5\r\nContent-length: 3\r\n\r\nab");
        assert_eq!(d.request(), Ok(None));
        d.feed(b"c");
        assert_eq!(d.request().unwrap().unwrap().body, b"abc");
    }

    #[test]
    fn malformed_requests_are_typed_errors() {
        for (bytes, err) in [
            (&b"HELLO SPAMC/1.5\r\n\r\n"[..], SpamdError::UnknownMethod),
            (&b"CHECK HTTP/1.1\r\n\r\n"[..], SpamdError::BadVersion),
            (&b"CHECK SPAMC/1.x\r\n\r\n"[..], SpamdError::BadVersion),
            (&b"CHECK\r\n\r\n"[..], SpamdError::BadRequestLine),
            (
                &b"CHECK SPAMC/1.5 extra\r\n"[..],
                SpamdError::BadRequestLine,
            ),
            (
                &b"CHECK SPAMC/1.5\r\nno colon here\r\n\r\n"[..],
                SpamdError::BadHeader,
            ),
            (
                &b"CHECK SPAMC/1.5\r\nContent-length: -1\r\n\r\n"[..],
                SpamdError::BadContentLength,
            ),
            (
                &b"CHECK SPAMC/1.5\r\nUser: x\r\n\r\n"[..],
                SpamdError::MissingContentLength,
            ),
            (
                &b"CHECK SPAMC/1.5\r\nContent-length: 4097\r\n\r\n"[..],
                SpamdError::BodyTooBig {
                    length: 4097,
                    limit: MAX_BODY,
                },
            ),
        ] {
            assert_eq!(
                decode_every_split(bytes),
                Err(err),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn a_head_over_the_limit_is_an_error_even_unfinished() {
        let mut d = Decoder::new(MAX_HEAD, MAX_BODY);
        d.feed(b"CHECK SPAMC/1.5\r\nX-Pad: ");
        d.feed(&[b'a'; MAX_HEAD]);
        assert_eq!(d.request(), Err(SpamdError::HeadTooLong(MAX_HEAD)));
        let mut d = Decoder::new(MAX_HEAD, MAX_BODY);
        d.feed(&[b'C'; MAX_HEAD + 1]);
        assert_eq!(d.request(), Err(SpamdError::HeadTooLong(MAX_HEAD)));
    }

    #[test]
    fn error_replies_carry_sysexits_codes() {
        assert_eq!(
            SpamdError::BadHeader.reply(),
            b"SPAMD/1.0 76 Bad header line\r\n"
        );
        assert_eq!(
            SpamdError::BodyTooBig {
                length: 9,
                limit: 1
            }
            .reply(),
            b"SPAMD/1.0 65 Message too big\r\n"
        );
        assert_eq!(
            error_reply(Exit::TempFail, "Service busy"),
            b"SPAMD/1.0 75 Service busy\r\n"
        );
        assert_eq!(pong(), b"SPAMD/1.5 0 PONG\r\n");
    }

    fn verdict(score: f64, action: Action, symbols: &[(&str, f64)]) -> Verdict {
        let symbols: BTreeMap<String, SymbolHit> = symbols
            .iter()
            .map(|&(n, s)| {
                (
                    n.to_owned(),
                    SymbolHit {
                        name: n.to_owned(),
                        score: s,
                        description: None,
                        options: Vec::new(),
                    },
                )
            })
            .collect();
        Verdict {
            score,
            action,
            symbols,
            shadow: BTreeMap::new(),
            required_score: None,
            generation: 1,
            probability: None,
        }
    }

    #[test]
    fn check_replies_are_byte_exact() {
        let spam = verdict(15.0, Action::Reject, &[("GTUBE", 15.0)]);
        assert_eq!(
            verdict_reply(Method::Check, 5, &spam, 5.0),
            b"SPAMD/1.1 0 EX_OK\r\nSpam: True ; 15.0 / 5.0\r\nContent-length: 0\r\n\r\n"
        );
        let ham = verdict(-0.25, Action::NoAction, &[]);
        assert_eq!(
            verdict_reply(Method::Check, 2, &ham, 6.0),
            b"SPAMD/1.1 0 EX_OK\r\nSpam: False ; -0.2 / 6.0\r\n\r\n"
        );
    }

    #[test]
    fn symbols_replies_list_the_names() {
        let v = verdict(
            7.25,
            Action::AddHeader,
            &[("B_RULE", 2.0), ("A_RULE", 5.25)],
        );
        assert_eq!(
            verdict_reply(Method::Symbols, 5, &v, 6.0),
            b"SPAMD/1.1 0 EX_OK\r\nSpam: True ; 7.2 / 6.0\r\nContent-length: 13\r\n\r\nA_RULE,B_RULE"
        );
        assert_eq!(
            verdict_reply(Method::Symbols, 2, &v, 6.0),
            b"SPAMD/1.1 0 EX_OK\r\nSpam: True ; 7.2 / 6.0\r\n\r\nA_RULE,B_RULE\r\n"
        );
    }

    #[test]
    fn process_and_headers_replies_rewrite_the_message() {
        let v = verdict(7.0, Action::AddHeader, &[("A_RULE", 7.0)]);
        let message = b"Subject: hi\r\nX-Spam-Status: Yes, forged\r\n\tcontinued\r\nFrom: a@b\r\n\r\nbody\r\n";
        let added = "X-Spam-Score: 7.00 / 6.00\r\n\
                     X-Spam-Status: Yes, score=7.00 required=6.00 action=add header generation=1\r\n\
                     X-Spam-Symbols: A_RULE(7.00)\r\n";
        let rewritten = format!("Subject: hi\r\nFrom: a@b\r\n{added}\r\nbody\r\n");
        assert_eq!(
            String::from_utf8(rewrite_reply(false, 5, &v, 6.0, message)).unwrap(),
            format!(
                "SPAMD/1.1 0 EX_OK\r\nSpam: True ; 7.0 / 6.0\r\nContent-length: {}\r\n\r\n{rewritten}",
                rewritten.len()
            )
        );
        let head = format!("Subject: hi\r\nFrom: a@b\r\n{added}\r\n");
        assert_eq!(
            String::from_utf8(rewrite_reply(true, 2, &v, 6.0, message)).unwrap(),
            format!(
                "SPAMD/1.1 0 EX_OK\r\nContent-length: {}\r\n\r\n{head}",
                head.len()
            )
        );
        // Bare newlines stay bare; a message of headers only gets its blank line.
        let bare = rewrite(
            b"Subject: x\n",
            &[("X-Spam-Score".into(), "1 / 2".into())],
            false,
        );
        assert_eq!(bare, b"Subject: x\nX-Spam-Score: 1 / 2\n\n");
    }

    #[test]
    fn report_replies_and_report_ifspam_only_for_spam() {
        let v = verdict(15.0, Action::Reject, &[("GTUBE", 15.0)]);
        let body = "Content analysis details:   (15.0 points, 5.0 required)\r\n\r\n \
                    pts rule name              description\r\n\
                    ---- ---------------------- --------------------------------------------------\r\n\
                    15.0 GTUBE                  \r\n";
        let expected = format!(
            "SPAMD/1.1 0 EX_OK\r\nSpam: True ; 15.0 / 5.0\r\nContent-length: {}\r\n\r\n{body}",
            body.len()
        );
        assert_eq!(
            verdict_reply(Method::Report, 5, &v, 5.0),
            expected.as_bytes()
        );
        assert_eq!(
            verdict_reply(Method::ReportIfSpam, 5, &v, 5.0),
            expected.as_bytes()
        );
        let ham = verdict(1.0, Action::NoAction, &[]);
        assert_eq!(
            verdict_reply(Method::ReportIfSpam, 5, &ham, 5.0),
            b"SPAMD/1.1 0 EX_OK\r\nSpam: False ; 1.0 / 5.0\r\nContent-length: 0\r\n\r\n"
        );
    }
}

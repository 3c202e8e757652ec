use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

use super::{Method, Protocol, Request, SpamdError};

/// The request head parsed, waiting for its body.
#[derive(Debug)]
struct Head {
    method: Method,
    protocol: Protocol,
    minor: u32,
    headers: HeaderMap,
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

    /// The buffer bytes are read into: a reader appends to it directly (`read_buf`, which
    /// fills only the room there is), then calls [`Decoder::request`]. Its capacity is first
    /// grown to [`Decoder::next_capacity`], so a caller that accounts for memory knows each
    /// allocation before it happens.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        let want = self.next_capacity();
        if want > self.buf.capacity() {
            self.buf.reserve_exact(want - self.buf.len());
        }
        &mut self.buf
    }

    /// The buffer's capacity now.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The capacity [`Decoder::buffer`] gives the buffer: room for a read's worth past what
    /// has arrived, doubling what is held as more arrives, never more than the request can
    /// still need. Nothing is set aside for bytes that have not arrived: a `Content-length`
    /// of 50 MB followed by ten bytes holds a read's worth, not 50 MB.
    pub fn next_capacity(&self) -> usize {
        const READ: usize = 16 * 1024;
        let (len, cap) = (self.buf.len(), self.buf.capacity());
        // The most the request can still need, one byte past a limit so that passing it shows.
        let bound = match &self.head {
            Some(Head {
                length: Some(n),
                start,
                ..
            }) => start.saturating_add(*n),
            Some(Head {
                length: None,
                start,
                ..
            }) => start.saturating_add(self.max_body).saturating_add(1),
            None => self.max_head.saturating_add(1),
        };
        let room = READ.min(bound.saturating_sub(len)).max(1);
        if cap.saturating_sub(len) >= room {
            return cap;
        }
        len.saturating_add(READ)
            .max(cap.saturating_mul(2))
            .min(bound)
            .max(len + 1)
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
                // How far past the limit depends on how the bytes arrived: not reported.
                return Err(SpamdError::StreamTooBig {
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
            protocol: head.protocol,
            minor: head.minor,
            headers: head.headers,
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
        let (method, protocol, minor) = request_line(first)?;
        if method.bodiless() {
            return Ok(Some(Head {
                method,
                protocol,
                minor,
                headers: HeaderMap::new(),
                length: Some(0),
                start: lines.pos,
            }));
        }
        if protocol == Protocol::Spamc && minor < 2 {
            // SPAMC/1.0 and 1.1: no headers; the message follows the request line.
            return Ok(Some(Head {
                method,
                protocol,
                minor,
                headers: HeaderMap::new(),
                length: None,
                start: lines.pos,
            }));
        }
        let mut length = None;
        let mut headers = HeaderMap::new();
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
            let name = HeaderName::from_bytes(&line[..colon]).map_err(|_| SpamdError::BadHeader)?;
            let value = line[colon + 1..].trim_ascii();
            if name == http::header::CONTENT_LENGTH {
                let n: usize = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .ok_or(SpamdError::BadContentLength)?;
                if n > self.max_body {
                    return Err(SpamdError::BodyTooBig {
                        length: n,
                        limit: self.max_body,
                    });
                }
                length = Some(n);
            } else {
                let value = HeaderValue::from_bytes(value).map_err(|_| SpamdError::BadHeader)?;
                headers.append(name, value);
            }
        }
        if lines.pos > self.max_head {
            return Err(SpamdError::HeadTooLong(self.max_head));
        }
        Ok(Some(Head {
            method,
            protocol,
            minor,
            headers,
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

/// `CHECK SPAMC/1.5`, or rspamd's legacy `CHECK RSPAMC/1.3`.
fn request_line(line: &[u8]) -> Result<(Method, Protocol, u32), SpamdError> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(proto), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(SpamdError::BadRequestLine);
    };
    let method = Method::parse(method).ok_or(SpamdError::UnknownMethod)?;
    let (protocol, minor) = if let Some(m) = proto.strip_prefix(b"SPAMC/1.") {
        (Protocol::Spamc, m)
    } else if let Some(m) = proto.strip_prefix(b"RSPAMC/1.") {
        (Protocol::Rspamc, m)
    } else {
        return Err(SpamdError::BadVersion);
    };
    let minor = std::str::from_utf8(minor)
        .ok()
        .and_then(|m| m.parse::<u32>().ok())
        .ok_or(SpamdError::BadVersion)?;
    // The legacy protocol answers checks only: what it cannot reply to is refused up front.
    if protocol == Protocol::Rspamc
        && matches!(method, Method::Process | Method::Headers | Method::Tell)
    {
        return Err(SpamdError::UnknownMethod);
    }
    Ok((method, protocol, minor))
}

/// Whether a connection's first bytes start a spamd or legacy rspamd request rather than
/// HTTP: `Some(true)` once the first word is a spamd method followed by a space, `Some(false)`
/// once it cannot be, `None` while too few bytes have arrived to tell.
pub fn sniff(first: &[u8]) -> Option<bool> {
    const METHODS: [&[u8]; 9] = [
        b"CHECK ",
        b"SYMBOLS ",
        b"REPORT ",
        b"REPORT_IFSPAM ",
        b"PROCESS ",
        b"HEADERS ",
        b"PING ",
        b"SKIP ",
        b"TELL ",
    ];
    let mut undecided = false;
    for m in METHODS {
        let n = first.len().min(m.len());
        if first[..n] == m[..n] {
            if n == m.len() {
                return Some(true);
            }
            undecided = true;
        }
    }
    (!undecided).then_some(false)
}

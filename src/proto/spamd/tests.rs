use super::reply::rewrite;
use super::*;
use crate::verdict::{Action, SymbolHit, Verdict};
use http::HeaderMap;
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
    let mut headers = HeaderMap::new();
    headers.insert("user", "bob".parse().unwrap());
    assert_eq!(
        r,
        Request {
            method: Method::Check,
            protocol: Protocol::Spamc,
            minor: 5,
            headers,
            body: b"hello".to_vec(),
        }
    );
    assert_eq!(r.user(), Some("bob"));
    assert_eq!(r.compression(), None);
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
        assert_eq!((r.method, r.minor, &r.body[..]), (method, 2, &b"ab"[..]));
        assert_eq!(r.user(), None);
        assert_eq!(r.protocol, Protocol::Spamc);
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
        Err(SpamdError::StreamTooBig { limit: MAX_BODY })
    );
    // The same error however the bytes arrive.
    let mut stream = b"CHECK SPAMC/1.1\r\n".to_vec();
    stream.resize(stream.len() + MAX_BODY + 100, b'b');
    assert_eq!(
        decode_every_split(&stream),
        Err(SpamdError::StreamTooBig { limit: MAX_BODY })
    );
    assert_eq!(
        SpamdError::StreamTooBig { limit: 1 }.reply(),
        b"SPAMD/1.0 65 Message too big\r\n"
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
    assert_eq!(pong(Protocol::Spamc), b"SPAMD/1.5 0 PONG\r\n");
    assert_eq!(pong(Protocol::Rspamc), b"RSPAMD/1.3 0 PONG\r\n");
    assert_eq!(
        SpamdError::BadTell("Set without a Message-class").reply(),
        b"SPAMD/1.0 76 Set without a Message-class\r\n"
    );
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
        dkim_signature: None,
        arc_seal: Vec::new(),
        settings: None,
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
    let message =
        b"Subject: hi\r\nX-Spam-Status: Yes, forged\r\n\tcontinued\r\nFrom: a@b\r\n\r\nbody\r\n";
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

#[test]
fn tell_requests_split_at_every_offset_and_are_checked() {
    let bytes =
        b"TELL SPAMC/1.5\r\nMessage-class: spam\r\nSet: local\r\nContent-length: 3\r\n\r\nabc";
    let r = decode_every_split(bytes).unwrap().unwrap();
    assert_eq!((r.method, r.body.as_slice()), (Method::Tell, &b"abc"[..]));
    assert_eq!(
        r.tell(),
        Ok(Tell {
            class: Some(MessageClass::Spam),
            set: true,
            remove: false
        })
    );
    let tell = |headers: &str| {
        let bytes = format!("TELL SPAMC/1.5\r\n{headers}Content-length: 0\r\n\r\n");
        decode_every_split(bytes.as_bytes())
            .unwrap()
            .unwrap()
            .tell()
    };
    assert_eq!(
        tell("Message-class: HAM\r\nSet: local, remote\r\n").map(|t| (t.class, t.set)),
        Ok((Some(MessageClass::Ham), true))
    );
    assert_eq!(
        tell("Remove: local\r\n").map(|t| (t.class, t.remove)),
        Ok((None, true))
    );
    assert!(matches!(
        tell("Set: local\r\n"),
        Err(SpamdError::BadTell(_))
    ));
    assert!(matches!(
        tell("Message-class: spam\r\n"),
        Err(SpamdError::BadTell(_))
    ));
    assert!(matches!(
        tell("Message-class: eggs\r\nSet: local\r\n"),
        Err(SpamdError::BadTell(_))
    ));
    assert!(matches!(
        tell("Message-class: spam\r\nSet: elsewhere\r\n"),
        Err(SpamdError::BadTell(_))
    ));
}

#[test]
fn tell_replies_say_what_was_done() {
    assert_eq!(
        tell_reply(5, true, false),
        b"SPAMD/1.1 0 EX_OK\r\nDidSet: local\r\nContent-length: 0\r\n\r\n"
    );
    assert_eq!(
        tell_reply(5, false, false),
        b"SPAMD/1.1 0 EX_OK\r\nContent-length: 0\r\n\r\n"
    );
    assert_eq!(
        tell_reply(2, false, true),
        b"SPAMD/1.1 0 EX_OK\r\nDidRemove: local\r\n\r\n"
    );
}

#[test]
fn compressed_requests_name_their_coding() {
    let bytes = b"CHECK SPAMC/1.5\r\nCompress: ZLIB\r\nContent-length: 2\r\n\r\nxy";
    let r = decode_every_split(bytes).unwrap().unwrap();
    assert_eq!(r.compression().as_deref(), Some("zlib"));
    assert_eq!(r.body, b"xy");
}

/// Exim's `variant=rspamd` request, byte for byte as its spam.c writes it.
const EXIM_RSPAMD: &[u8] =
    b"CHECK RSPAMC/1.3\r\nContent-length: 5\r\nQueue-Id: 1abcDE-000001-XY\r\n\
From: <a@example.org>\r\nRecipient-Number: 2\r\nRcpt: <b@example.net>\r\nRcpt: <c@example.net>\r\n\
Helo: mx.example.org\r\nHostname: mx.example.org\r\nIP: 192.0.2.7\r\nUser: alice\r\n\r\nhello";

#[test]
fn legacy_rspamc_requests_split_at_every_offset_and_carry_the_envelope() {
    let r = decode_every_split(EXIM_RSPAMD).unwrap().unwrap();
    assert_eq!(
        (r.method, r.protocol, r.minor, r.body.as_slice()),
        (Method::Check, Protocol::Rspamc, 3, &b"hello"[..])
    );
    let env = crate::proto::rspamd::CheckRequest::from_headers(&r.headers).envelope;
    assert_eq!(env.mail_from.as_deref(), Some("a@example.org"));
    assert_eq!(env.rcpt_to, ["b@example.net", "c@example.net"]);
    assert_eq!(env.client_ip, Some("192.0.2.7".parse().unwrap()));
    assert_eq!(env.helo.as_deref(), Some("mx.example.org"));
    assert_eq!(env.queue_id.as_deref(), Some("1abcDE-000001-XY"));
    assert_eq!(env.user.as_deref(), Some("alice"));
    let sym = decode_every_split(b"SYMBOLS RSPAMC/1.2\r\nContent-length: 1\r\n\r\nx")
        .unwrap()
        .unwrap();
    assert_eq!(
        (sym.method, sym.protocol),
        (Method::Symbols, Protocol::Rspamc)
    );
    // The legacy protocol has headers at every version, and checks only.
    assert_eq!(
        decode_every_split(b"CHECK RSPAMC/1.0\r\n\r\n"),
        Err(SpamdError::MissingContentLength)
    );
    for refused in ["PROCESS", "HEADERS", "TELL"] {
        let bytes = format!("{refused} RSPAMC/1.3\r\nContent-length: 0\r\n\r\n");
        assert_eq!(
            decode_every_split(bytes.as_bytes()),
            Err(SpamdError::UnknownMethod)
        );
    }
}

#[test]
fn legacy_replies_are_what_exim_parses() {
    let spam = verdict(15.0, Action::Reject, &[("GTUBE", 15.0), ("X_B", -1.5)]);
    assert_eq!(
        String::from_utf8(legacy_reply(&spam, 6.0)).unwrap(),
        "RSPAMD/1.3 0 EX_OK\r\nMetric: default; True; 15.00 / 6.00 / 0.0\r\n\
         Action: reject\r\nSymbol: GTUBE(15.00)\r\nSymbol: X_B(-1.50)\r\n"
    );
    let ham = verdict(1.25, Action::NoAction, &[]);
    assert_eq!(
        String::from_utf8(legacy_reply(&ham, 6.0)).unwrap(),
        "RSPAMD/1.3 0 EX_OK\r\nMetric: default; False; 1.25 / 6.00 / 0.0\r\nAction: no action\r\n"
    );
}

#[test]
fn a_forced_action_moves_the_reported_score_to_its_side_of_the_threshold() {
    // GTUBE: score 0, reject forced. Clients that compare score with threshold must see spam.
    let gtube = verdict(0.0, Action::Reject, &[("GTUBE", 0.0)]);
    assert_eq!(client_score(&gtube, 6.0, 0.1), 6.0);
    assert!(
        String::from_utf8(verdict_reply(Method::Check, 5, &gtube, 6.0))
            .unwrap()
            .contains("Spam: True ; 6.0 / 6.0\r\n")
    );
    assert!(String::from_utf8(legacy_reply(&gtube, 6.0))
        .unwrap()
        .contains("Metric: default; True; 6.00 / 6.00 / 0.0\r\n"));
    // An allow-listed message over the threshold: just under it.
    let allowed = verdict(9.0, Action::NoAction, &[]);
    assert!((client_score(&allowed, 6.0, 0.1) - 5.9).abs() < 1e-9);
    assert!((client_score(&allowed, 6.0, 0.01) - 5.99).abs() < 1e-9);
    // Agreeing verdicts keep their score.
    assert_eq!(
        client_score(&verdict(7.5, Action::AddHeader, &[]), 6.0, 0.1),
        7.5
    );
    assert_eq!(
        client_score(&verdict(-2.0, Action::NoAction, &[]), 6.0, 0.1),
        -2.0
    );
}

#[test]
fn sniffing_tells_spamd_methods_from_http_methods_in_a_few_bytes() {
    for http in [
        "GET", "POST", "PUT", "HEAD", "DELETE", "OPTIONS", "PATCH", "CONNECT", "TRACE",
    ] {
        let line = format!("{http} / HTTP/1.1\r\n");
        assert_eq!(sniff(line.as_bytes()), Some(false), "{http}");
        // Decided by the first byte that differs from every spamd method.
        assert!(
            (0..line.len()).any(|n| sniff(&line.as_bytes()[..n]) == Some(false)),
            "{http}"
        );
    }
    for spamd in [
        "CHECK",
        "SYMBOLS",
        "REPORT",
        "REPORT_IFSPAM",
        "PROCESS",
        "HEADERS",
        "PING",
        "SKIP",
        "TELL",
    ] {
        let line = format!("{spamd} SPAMC/1.5\r\n");
        assert_eq!(sniff(line.as_bytes()), Some(true), "{spamd}");
        assert_eq!(sniff(&line.as_bytes()[..spamd.len()]), None, "{spamd}");
    }
    assert_eq!(sniff(b""), None);
    assert_eq!(sniff(b"REPORTX"), Some(false));
}

/// Appends up to `n` bytes of `from` the way a socket read does: into the room `buffer()`
/// made, never past it.
fn read_into(d: &mut Decoder, from: &mut &[u8]) -> usize {
    let buf = d.buffer();
    let n = (buf.capacity() - buf.len()).min(from.len());
    buf.extend_from_slice(&from[..n]);
    *from = &from[n..];
    n
}

#[test]
fn a_declared_length_is_not_allocated_before_its_bytes_arrive() {
    let max = 100 << 20;
    let mut d = Decoder::new(64 * 1024, max);
    let mut wire: &[u8] = b"CHECK SPAMC/1.5\r\nContent-length: 104857600\r\n\r\n0123456789";
    while !wire.is_empty() {
        read_into(&mut d, &mut wire);
        assert_eq!(d.request(), Ok(None));
    }
    // The head and ten bytes of a declared 100 MiB: a read's worth is held, not 100 MiB.
    assert!(d.capacity() <= 64 * 1024, "{}", d.capacity());
    assert!(d.next_capacity() <= 64 * 1024, "{}", d.next_capacity());
    // As the body arrives the buffer doubles with it: never more than twice what arrived
    // and a read.
    let body = vec![b'x'; 3 << 20];
    let mut rest: &[u8] = &body;
    let mut arrived = 56;
    while !rest.is_empty() {
        let before = d.capacity();
        let next = d.next_capacity();
        arrived += read_into(&mut d, &mut rest);
        assert!(
            d.capacity() == before || d.capacity() == next,
            "{} {before} {next}",
            d.capacity()
        );
        assert!(
            d.capacity() <= 2 * arrived + 32 * 1024,
            "{} {arrived}",
            d.capacity()
        );
        assert_eq!(d.request(), Ok(None));
    }
}

#[test]
fn the_buffer_never_passes_what_the_request_needs() {
    let mut d = Decoder::new(MAX_HEAD, MAX_BODY);
    let request = with_length(b"CHECK SPAMC/1.5\r\n", &[b'y'; 3000]);
    let mut wire: &[u8] = &request;
    let mut got = None;
    while got.is_none() {
        assert!(read_into(&mut d, &mut wire) > 0);
        assert!(
            d.capacity() <= request.len().max(16 * 1024),
            "{}",
            d.capacity()
        );
        got = d.request().unwrap();
    }
    assert_eq!(got.unwrap().body, vec![b'y'; 3000]);
    // A stream without a length (SPAMC/1.1) is bounded by the body limit, one byte past it.
    let mut d = Decoder::new(MAX_HEAD, MAX_BODY);
    let mut wire: &[u8] = b"CHECK SPAMC/1.1\r\n";
    read_into(&mut d, &mut wire);
    assert_eq!(d.request(), Ok(None));
    let big = vec![b'z'; 2 * MAX_BODY];
    let mut rest: &[u8] = &big;
    loop {
        read_into(&mut d, &mut rest);
        assert!(d.capacity() <= 17 + MAX_BODY + 1, "{}", d.capacity());
        if d.request().is_err() {
            break;
        }
    }
}

fn with_length(head: &[u8], body: &[u8]) -> Vec<u8> {
    let mut r = head.to_vec();
    r.extend_from_slice(format!("Content-length: {}\r\n\r\n", body.len()).as_bytes());
    r.extend_from_slice(body);
    r
}

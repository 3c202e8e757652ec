//! Fuzzes the spamd codec (`shrike::proto::spamd`): SpamAssassin's protocol and rspamd's legacy
//! one, with arbitrary client bytes.
//!
//! Input: one mode byte, then the stream. Mode bits 0-4 choose how the stream is split into
//! `feed` calls; bits 5-6 the body limit. The target checks that the decoder never panics, that
//! every split gives the result of feeding the stream at once (the request, or the same
//! error), that the body never exceeds its limit, that `finish` after a half-close agrees, and
//! that every reply built from a decoded request (each method's, the legacy one, the rewrite
//! of the message, TELL's checks, the envelope headers, bounded decompression) is well formed.
#![no_main]

use std::collections::BTreeMap;

#[path = "split.rs"]
mod split;

use libfuzzer_sys::fuzz_target;
use shrike::proto::compress::{unzlib, unzstd, Inflate};
use shrike::proto::rspamd::CheckRequest;
use shrike::proto::spamd::{
    client_score, legacy_reply, rewrite_reply, sniff, verdict_reply, Decoder, Method, Protocol,
};
use shrike::verdict::{Action, SymbolHit, Verdict};
use split::chunk_len;

const MAX_HEAD: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, stream)) = data.split_first() else {
        return;
    };
    let max_body = match (mode >> 5) & 3 {
        0 => 0,
        1 => 64,
        2 => 4096,
        _ => 1 << 20,
    };
    let mut whole = Decoder::new(MAX_HEAD, max_body);
    whole.feed(stream);
    let expected = whole.request();
    let finished = if matches!(expected, Ok(None)) {
        whole.finish()
    } else {
        expected.clone()
    };

    let mut split = Decoder::new(MAX_HEAD, max_body);
    let mut rest = stream;
    let mut step = 0;
    let mut got = Ok(None);
    while !rest.is_empty() {
        let n = chunk_len(mode & 0x1f, step, rest.len()).clamp(1, rest.len());
        step += 1;
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        split.feed(chunk);
        got = split.request();
        if !matches!(got, Ok(None)) {
            break;
        }
    }
    if matches!(got, Ok(None)) {
        assert_eq!(expected, Ok(None));
    } else {
        assert_eq!(got, expected, "a split changed the result");
    }

    // What the protocol sniffer says agrees with the decoder on the request line.
    if let Ok(Some(request)) = &finished {
        assert_eq!(sniff(stream), Some(true));
        assert!(request.body.len() <= max_body);
        if request.protocol == Protocol::Rspamc {
            assert!(!matches!(
                request.method,
                Method::Process | Method::Headers | Method::Tell
            ));
        }
        if matches!(request.method, Method::Ping | Method::Skip) {
            assert!(request.body.is_empty());
        }
        let _ = request.user();
        let _ = request.compression();
        let _ = request.tell();
        let _ = CheckRequest::from_headers(&request.headers);
        inflate(&request.body);
        replies(request.method, request.minor, &request.body);
    }
});

/// Bounded decompression under a grant of 64 KiB: the output never passes its limit, and
/// nothing is held past what was granted.
fn inflate(body: &[u8]) {
    type Inflater = fn(&[u8], usize, &mut dyn FnMut(usize) -> bool) -> Result<Vec<u8>, Inflate>;
    for inflater in [unzlib as Inflater, unzstd] {
        let mut held = 0;
        let out = inflater(body, 4096, &mut |total| {
            if total > 64 * 1024 {
                return false;
            }
            held = total;
            true
        });
        match out {
            Ok(out) => {
                assert!(out.len() <= 4096);
                assert_eq!(held, out.capacity(), "ends holding the output alone");
            }
            Err(Inflate::TooLarge(_) | Inflate::Refused | Inflate::Invalid(..)) => {}
        }
    }
}

fn replies(method: Method, minor: u32, body: &[u8]) {
    let mut symbols = BTreeMap::new();
    symbols.insert(
        "GTUBE".to_string(),
        SymbolHit {
            name: "GTUBE".into(),
            score: 0.0,
            description: Some(String::from_utf8_lossy(&body[..body.len().min(40)]).into()),
            options: vec![String::from_utf8_lossy(body).into()],
        },
    );
    for action in [Action::NoAction, Action::Reject] {
        let verdict = Verdict {
            score: 3.5,
            action,
            symbols: symbols.clone(),
            ..Verdict::default()
        };
        let score = client_score(&verdict, 6.0, 0.1);
        assert_eq!(score >= 6.0, action == Action::Reject);
        let reply = verdict_reply(method, minor, &verdict, 6.0);
        assert!(reply.starts_with(b"SPAMD/1.1 0 EX_OK\r\nSpam: "));
        let reply = legacy_reply(&verdict, 6.0);
        assert!(reply.starts_with(b"RSPAMD/1.3 0 EX_OK\r\nMetric: default; "));
        for head_only in [false, true] {
            let reply = rewrite_reply(head_only, minor, &verdict, 6.0, body);
            let text = String::from_utf8_lossy(&reply);
            assert!(text.contains("X-Spam-Status: "), "{text}");
            // The Content-length sent is the length of what follows the blank line.
            let end = reply
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .expect("a header section")
                + 4;
            let head = String::from_utf8_lossy(&reply[..end]);
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-length: "))
                .expect("Content-length")
                .trim()
                .parse()
                .unwrap();
            assert_eq!(length, reply.len() - end);
        }
    }
}

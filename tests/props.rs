//! Property tests: no input panics the pipeline, and its output keeps its invariants.

#[allow(dead_code)]
mod common;

use proptest::prelude::*;
use shrike::message::{prepare, Envelope, Limits};
use shrike::scan::analyze;
use shrike::verdict::Verdict;

fn check(raw: &[u8]) {
    let limits = Limits {
        max_message_bytes: 64 * 1024,
        ..Limits::default()
    };
    let input = prepare(raw, &limits);
    let a = analyze(&input, &Envelope::default(), &limits);
    // Invariants that hold for any input.
    for h in &a.entities.hosts {
        assert_eq!(*h, h.to_lowercase(), "host not lower-case");
    }
    assert!(a.message.body.display.len() <= limits.max_text_bytes);
    let verdict = Verdict::default();
    serde_json::to_string(&a.report("p", &verdict)).expect("report serializes");
}

/// Bytes that look like mail: header-ish lines, boundaries, encodings, markup, junk.
fn mailish() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"From: a@example.com\n".to_vec()),
        Just(b"Subject: =?utf-8?B?0J/RgNC40LLQtdGC?= =?koi8-r?Q?=F0=D2?=\n".to_vec()),
        Just(b"Content-Type: multipart/mixed; boundary=\"b\"\n".to_vec()),
        Just(b"Content-Type: message/rfc822\n".to_vec()),
        Just(b"Content-Type: text/html; charset=windows-1251\n".to_vec()),
        Just(b"Content-Transfer-Encoding: base64\n".to_vec()),
        Just(b"Content-Transfer-Encoding: quoted-printable\n".to_vec()),
        Just(b"Content-Disposition: attachment; filename*=utf-8''%D0%A1.exe\n".to_vec()),
        Just(b"Received: from x ([IPv6:2001:db8::1]) by y\n".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"--b\n".to_vec()),
        Just(b"--b--\n".to_vec()),
        Just(b"<a href='http://0x7f.1/'>www.example.com</a><script>x</script>\n".to_vec()),
        Just(b"SGVsbG8gd29y=ZA==\n".to_vec()),
        Just(b"=E2=80=8B=\n".to_vec()),
        Just(
            "пример.испытание/путь www.example.co.uk bob@example.org\n"
                .as_bytes()
                .to_vec()
        ),
        proptest::collection::vec(any::<u8>(), 0..40),
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..4096)) {
        check(&raw);
    }

    #[test]
    fn mail_like_bytes_never_panic(raw in mailish()) {
        check(&raw);
        check(&common::to_crlf(&raw));
    }
}

/// Fixtures cut at every length and with bytes flipped: damaged real mail never panics.
#[test]
fn damaged_fixtures_never_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).expect("tests/data") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "eml") {
            continue;
        }
        let raw = std::fs::read(&path).expect("fixture");
        for cut in (0..raw.len()).step_by(7) {
            check(&raw[..cut]);
        }
        let mut flipped = raw.clone();
        for i in (0..flipped.len()).step_by(13) {
            flipped[i] ^= 0x5a;
        }
        check(&flipped);
        checked += 1;
    }
    assert!(checked >= 15);
}

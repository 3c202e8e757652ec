//! SpamAssassin's spamd protocol and rspamd's legacy one, against the daemon as a real process:
//! the real `spamc` (check, symbols, report, process, headers, ping, learn) on the dedicated
//! `[spamd]` listener and on the HTTP port (detected from the request line), spamd's
//! `Compress: zlib` and the legacy `CHECK RSPAMC/1.3` byte for byte as their clients send
//! them, malformed requests, and what TELL must not do.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use daemon::{Daemon, Options};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(data(name)).expect("test message")
}

const HAM: &str = "daemon/ham.eml";

/// A daemon with the spamd listener on; its port.
fn spamd_daemon(dir: &Path) -> (Daemon, u16) {
    let port = daemon::free_port();
    let d = Daemon::start(
        dir,
        Options {
            config: Some(format!("[spamd]\nlisten = \"127.0.0.1:{port}\"\n")),
            ..Options::default()
        },
    );
    (d, port)
}

/// `spamc` against `port`, with the message on stdin; (exit code, stdout).
fn spamc(port: u16, args: &[&str], message: &str) -> (i32, String) {
    let out = Command::new("spamc")
        .args(["-d", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(std::fs::File::open(data(message)).expect("test message"))
        .output()
        .expect("spamc is installed (scripts/test.sh installs it)");
    (
        out.status.code().expect("spamc exited"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// One request on a fresh connection; the whole reply (the daemon closes after it).
fn exchange(port: u16, request: &[u8]) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    reply
}

fn with_body(head: &str, body: &[u8]) -> Vec<u8> {
    let mut request = format!("{head}Content-length: {}\r\n\r\n", body.len()).into_bytes();
    request.extend_from_slice(body);
    request
}

/// The whole spamc surface, once on each port: the dedicated listener, and the HTTP port where
/// the request line tells spamd from HTTP.
#[test]
fn real_spamc_checks_processes_lists_symbols_and_pings_on_both_ports() {
    let dir = tempfile::tempdir().unwrap();
    let (d, spamd_port) = spamd_daemon(dir.path());
    for port in [spamd_port, d.http] {
        // -c: exit 1 for spam, and score/threshold (the add-header threshold, 6.0 by default).
        // GTUBE forces reject with a score of 0: the score told to spamc is moved up to the
        // threshold, so that clients comparing the two (Exim) act as shrike decided.
        let (code, text) = spamc(port, &["-c"], "gtube.eml");
        assert_eq!(code, 1, "{text}\n{}", d.log_text());
        assert_eq!(text.trim(), "6.0/6.0", "{text}");
        let (code, text) = spamc(port, &["-c"], HAM);
        assert_eq!(code, 0, "{text}");
        let (score, threshold) = text.trim().split_once('/').expect("score/threshold");
        assert!(score.parse::<f64>().unwrap() < 6.0, "{text}");
        assert_eq!(threshold, "6.0", "{text}");
        // -y: the symbols.
        let (code, text) = spamc(port, &["-y"], "gtube.eml");
        assert_eq!(code, 0, "{text}");
        assert!(text.split(',').any(|s| s.trim() == "GTUBE"), "{text}");
        // -R: the report, with the score line spamc prints first.
        let (code, text) = spamc(port, &["-R"], "gtube.eml");
        assert_eq!(code, 0, "{text}");
        assert!(text.starts_with("6.0/6.0\n"), "{text}");
        assert!(text.contains("GTUBE"), "{text}");
        let (_, text) = spamc(port, &["-r"], HAM);
        assert!(!text.contains("Content analysis details"), "{text}");
        // Default (PROCESS): the message back with the X-Spam-* headers the milter adds.
        let (code, text) = spamc(port, &[], "gtube.eml");
        assert_eq!(code, 0, "{text}");
        assert!(text.contains("X-Spam-Status: Yes, score="), "{text}");
        assert!(text.contains("X-Spam-Symbols: "), "{text}");
        assert!(
            text.contains("GTUBE-STANDARD-ANTI-UBE-TEST-EMAIL"),
            "{text}"
        );
        let (_, text) = spamc(port, &[], HAM);
        assert!(text.contains("X-Spam-Status: No, score="), "{text}");
        // --headers (HEADERS): shrike returns the header section only; spamc appends the body
        // it kept, so the body appears once.
        let (code, text) = spamc(port, &["--headers"], "gtube.eml");
        assert_eq!(code, 0, "{text}");
        assert!(text.contains("X-Spam-Status: Yes"), "{text}");
        assert_eq!(text.matches("GTUBE-STANDARD").count(), 1, "{text}");
        // -K: ping (spamc prints the version and code of the PONG it parsed).
        let (code, text) = spamc(port, &["-K"], HAM);
        assert_eq!(code, 0, "{text}");
        assert_eq!(text.trim(), "SPAMD/1.5 0", "{text}");
    }
    assert!(d.metric("shrike_spamd_on_http_total") >= 8);
    assert!(d.metric("shrike_spamd_requests_total") >= 16);
    // HTTP on the same port is untouched.
    assert_eq!(d.get("/ping").text(), "pong\r\n");
    let r = d.post("/checkv2", &[], &read("gtube.eml"));
    assert_eq!(r.json()["action"], "reject", "{}", r.text());
}

/// `spamc -L spam|ham` learns, durably, as `/learnspam` and `/learnham` do; a second learn of
/// the same message says it was already learned; `-L forget` is refused (shrike cannot take a
/// learn back) and changes nothing.
#[test]
fn real_spamc_learns_spam_and_ham_once_and_forget_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (d, port) = spamd_daemon(dir.path());
    let learned = |d: &Daemon| (d.learns("spam"), d.learns("ham"));
    assert_eq!(learned(&d), (0, 0));
    let (code, text) = spamc(port, &["-L", "spam"], "gtube.eml");
    assert_eq!(code, 0, "{text}\n{}", d.log_text());
    assert_eq!(text.trim(), "Message successfully un/learned");
    assert_eq!(learned(&d), (1, 0));
    let (code, text) = spamc(port, &["-L", "spam"], "gtube.eml");
    assert_eq!(code, 0, "{text}");
    assert_eq!(text.trim(), "Message was already un/learned");
    assert_eq!(
        d.metric("shrike_learns_total{class=\"spam\",duplicate=\"true\"}"),
        1,
        "the repeat is counted apart"
    );
    // Over the HTTP port too.
    let (code, text) = spamc(d.http, &["-L", "ham"], HAM);
    assert_eq!(code, 0, "{text}");
    assert_eq!(text.trim(), "Message successfully un/learned");
    assert_eq!(learned(&d), (2, 1));
    let (code, text) = spamc(port, &["-L", "forget"], HAM);
    // The daemon answers EX_UNAVAILABLE (69); spamc reports any failed TELL as EX_IOERR (74).
    assert_eq!(code, 74, "forget is refused: {text}");
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/integrations.md"))
            .unwrap();
    assert!(
        doc.contains("`-L forget` is refused: spamc exits 74"),
        "docs/integrations.md says what spamc does"
    );
    assert_eq!(learned(&d), (2, 1), "a refused forget learns nothing");
    assert!(
        d.log_text().contains("TELL Remove (forget) refused"),
        "{}",
        d.log_text()
    );
    // TELL with a bad class is a protocol error naming it.
    let reply = exchange(
        port,
        &with_body(
            "TELL SPAMC/1.5\r\nMessage-class: eggs\r\nSet: local\r\n",
            b"x",
        ),
    );
    assert_eq!(reply, "SPAMD/1.0 76 bad TELL: unknown Message-class\r\n");
    assert_eq!(learned(&d), (2, 1));
    // Over a Unix socket (local too).
    drop(d);
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("spamd.sock");
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(format!("[spamd]\nlisten = \"unix:{}\"\n", sock.display())),
            ..Options::default()
        },
    );
    let out = Command::new("spamc")
        .arg("-U")
        .arg(&sock)
        .args(["-L", "spam"])
        .stdin(std::fs::File::open(data(HAM)).unwrap())
        .output()
        .expect("spamc");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Message successfully un/learned",
        "{}",
        d.log_text()
    );
    assert_eq!(learned(&d), (1, 0));
}

/// spamc built with zlib sends `Compress: zlib` and the Content-length of the compressed
/// message (Debian's spamc is built without it, so its bytes are made here as libspamc makes
/// them, with `compress2`'s zlib format). A compressed bomb is refused without expanding.
#[test]
fn compress_zlib_requests_are_inflated_within_the_body_limit() {
    use flate2::{write::ZlibEncoder, Compression};
    let dir = tempfile::tempdir().unwrap();
    let port = daemon::free_port();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(format!(
                "[spamd]\nlisten = \"127.0.0.1:{port}\"\nmax_body_bytes = 1048576\n"
            )),
            ..Options::default()
        },
    );
    let zlib = |bytes: &[u8]| {
        let mut e = ZlibEncoder::new(Vec::new(), Compression::default());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    };
    let packed = zlib(&read("gtube.eml"));
    let reply = exchange(
        port,
        &with_body("SYMBOLS SPAMC/1.5\r\nCompress: zlib\r\n", &packed),
    );
    assert!(
        reply.starts_with("SPAMD/1.1 0 EX_OK\r\nSpam: True ; 6.0 / 6.0\r\n"),
        "{reply}\n{}",
        d.log_text()
    );
    assert!(reply.contains("GTUBE"), "{reply}");
    // 64 MiB of zeros in ~64 kB: under the 1 MiB limit as sent, over it once inflated.
    let bomb = zlib(&vec![0u8; 64 << 20]);
    assert!(bomb.len() < 1 << 20);
    let reply = exchange(
        port,
        &with_body("CHECK SPAMC/1.5\r\nCompress: zlib\r\n", &bomb),
    );
    assert_eq!(reply, "SPAMD/1.0 65 Message too big\r\n");
    let reply = exchange(
        port,
        &with_body("CHECK SPAMC/1.5\r\nCompress: zlib\r\n", b"not zlib"),
    );
    assert!(
        reply.starts_with("SPAMD/1.0 65 invalid zlib body"),
        "{reply}"
    );
    let reply = exchange(
        port,
        &with_body("CHECK SPAMC/1.5\r\nCompress: lzma\r\n", b"x"),
    );
    assert!(
        reply.starts_with("SPAMD/1.0 76 Unsupported Compress"),
        "{reply}"
    );
    // Still serving.
    let (code, _) = spamc(port, &["-c"], "gtube.eml");
    assert_eq!(code, 1);
}

/// rspamd's legacy protocol as Exim's `variant=rspamd` sends it (spam.c, byte for byte), on the
/// HTTP port as rspamd serves it: the `Metric` line Exim's sscanf reads, the action, and the
/// envelope headers used as the envelope.
#[test]
fn legacy_rspamc_check_gets_the_metric_reply_exim_parses() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start(dir.path(), Options::default());
    let exim = |body: &[u8]| {
        format!(
            "CHECK RSPAMC/1.3\r\nContent-length: {}\r\nQueue-Id: 1wAbCd-000Xyz-7Q\r\n\
             From: <sender@example.org>\r\nRecipient-Number: 1\r\nRcpt: <bob@example.com>\r\n\
             Helo: mail.example.org\r\nIP: 192.0.2.44\r\n\r\n",
            body.len()
        )
        .into_bytes()
        .into_iter()
        .chain(body.iter().copied())
        .collect::<Vec<u8>>()
    };
    let reply = exchange(d.http, &exim(&read("gtube.eml")));
    assert!(
        reply.starts_with(
            "RSPAMD/1.3 0 EX_OK\r\nMetric: default; True; 6.00 / 6.00 / 0.0\r\nAction: reject\r\n"
        ),
        "{reply}\n{}",
        d.log_text()
    );
    assert!(reply.contains("Symbol: GTUBE(0.00)\r\n"), "{reply}");
    let reply = exchange(d.http, &exim(&read(HAM)));
    assert!(
        reply.starts_with("RSPAMD/1.3 0 EX_OK\r\nMetric: default; False; "),
        "{reply}"
    );
    assert!(reply.contains("\r\nAction: no action\r\n"), "{reply}");
    // SYMBOLS and PING in the legacy protocol.
    let reply = exchange(
        d.http,
        &with_body("SYMBOLS RSPAMC/1.3\r\n", &read("gtube.eml")),
    );
    assert!(reply.contains("Symbol: GTUBE("), "{reply}");
    assert_eq!(
        exchange(d.http, b"PING RSPAMC/1.3\r\n\r\n"),
        "RSPAMD/1.3 0 PONG\r\n"
    );
    assert!(d.metric("shrike_spamd_legacy_requests_total") >= 4);
}

#[test]
fn a_malformed_spamd_request_gets_a_protocol_error_and_the_daemon_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (d, port) = spamd_daemon(dir.path());
    assert_eq!(
        exchange(port, b"CHECK SPAMC/1.5\r\nthis is no header\r\n\r\n"),
        "SPAMD/1.0 76 Bad header line\r\n"
    );
    assert_eq!(
        exchange(port, b"FROB SPAMC/1.5\r\n\r\n"),
        "SPAMD/1.0 76 Unknown method\r\n"
    );
    // The same on the HTTP port once the request line is spamd's; what is not goes to HTTP.
    assert_eq!(
        exchange(d.http, b"CHECK SPAMC/9.9\r\n\r\n"),
        "SPAMD/1.0 76 Bad protocol version\r\n"
    );
    assert!(exchange(d.http, b"FROB / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 4"));
    // SPAMC/1.0: no headers, the message runs to the client's half-close.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"SYMBOLS SPAMC/1.0\r\n").unwrap();
    s.write_all(&read("gtube.eml")).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(
        reply.starts_with("SPAMD/1.1 0 EX_OK\r\nSpam: True ; 6.0 / 6.0\r\n\r\n"),
        "{reply}"
    );
    assert!(
        reply.ends_with("GTUBE\r\n") || reply.contains("GTUBE,"),
        "{reply}"
    );
    // A message over max_body_bytes (50 MiB) is refused on its Content-length, while the client
    // is still sending it.
    let mut big = b"CHECK SPAMC/1.5\r\nContent-length: 52428801\r\n\r\n".to_vec();
    big.resize(big.len() + 256 * 1024, b'a');
    assert_eq!(exchange(port, &big), "SPAMD/1.0 65 Message too big\r\n");
    let reply = exchange(port, &with_body("CHECK SPAMC/1.5\r\n", &read("gtube.eml")));
    assert_eq!(
        reply,
        "SPAMD/1.1 0 EX_OK\r\nSpam: True ; 6.0 / 6.0\r\nContent-length: 0\r\n\r\n"
    );
    assert!(d.metric("shrike_spamd_errors_total") >= 4);
}

/// A local address that is not loopback (the route to a documentation address; no packet is
/// sent).
fn non_loopback_ip() -> std::net::IpAddr {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    s.connect("192.0.2.123:9").expect("a route off loopback");
    let ip = s.local_addr().unwrap().ip();
    assert!(!ip.is_loopback(), "{ip}");
    ip
}

/// TELL needs the admin role, by address (spamd has no password): a client outside
/// `access.admin_networks` is refused and nothing is learned, while its checks are served.
#[test]
fn tell_from_a_remote_client_is_refused_and_learns_nothing() {
    let ip = non_loopback_ip();
    let dir = tempfile::tempdir().unwrap();
    let port = daemon::free_port();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(format!("[spamd]\nlisten = \"{ip}:{port}\"\n")),
            ..Options::default()
        },
    );
    let exchange_from = |request: &[u8]| {
        let mut s = std::net::TcpStream::connect((ip, port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(request).unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        reply
    };
    let gtube = read("gtube.eml");
    let reply = exchange_from(&with_body(
        "TELL SPAMC/1.5\r\nMessage-class: spam\r\nSet: local\r\n",
        &gtube,
    ));
    assert_eq!(
        reply,
        "SPAMD/1.0 77 TELL needs a client in access.admin_networks (or the daemon's user on a \
         Unix socket)\r\n"
    );
    assert_eq!(d.learns("spam"), 0);
    let reply = exchange_from(&with_body("CHECK SPAMC/1.5\r\n", &gtube));
    assert!(
        reply.starts_with("SPAMD/1.1 0 EX_OK\r\nSpam: True"),
        "{reply}"
    );
}

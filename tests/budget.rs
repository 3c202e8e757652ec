//! The byte budget (`[server] inflight_bytes`) against the daemon as a real process: many
//! concurrent zstd bombs keep its memory within the budget plus a margin and are each answered
//! (200, 413 or 503), a spamd client declaring a huge `Content-length` costs nothing until its
//! bytes arrive, and with the budget held by uploads in progress every protocol refuses new
//! work cleanly (HTTP 503, spamd 75, the milter fallback) until they are gone.

#[allow(dead_code)]
#[path = "common/daemon.rs"]
mod daemon;
#[allow(dead_code)]
#[path = "common/mta.rs"]
mod mta;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use daemon::{wait_until, Daemon, Options};
use mta::{Mta, POSTFIX};
use shrike::proto::milter::{Command, Reply};

const MIB: usize = 1 << 20;

fn read(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name),
    )
    .expect("test message")
}

const HAM: &str = "daemon/ham.eml";

/// A field of `/proc/PID/status` in bytes (`VmHWM`: the peak resident set; `VmRSS`, `VmSize`).
fn status_bytes(pid: i32, field: &str) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: usize = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in {status}"));
    kb * 1024
}

/// `len` bytes of one letter, zstd-compressed: a few kilobytes that inflate to `len`.
fn bomb(len: usize) -> Vec<u8> {
    let bomb =
        zstd::encode_all(std::io::Read::take(std::io::repeat(b'a'), len as u64), 3).expect("zstd");
    assert!(bomb.len() < 64 * 1024, "{}", bomb.len());
    bomb
}

/// 40 clients at once, each posting a zstd body that inflates to 12 MiB (within the 16 MiB
/// body limit) or 30 MiB (past it), against a 64 MiB budget: each is answered 200, 413 or 503;
/// none inflating past the limit is scanned, none within it is called too large; the daemon's
/// peak resident memory stays within the budget and a margin; /metrics counts the refusals;
/// every byte is given back; and a normal message is scanned at once after.
#[test]
fn concurrent_zstd_bombs_are_answered_within_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 64 * MIB;
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(format!(
                "[server]\ninflight_bytes = {budget}\n\
                 [http]\nmax_body_bytes = {limit}\n\
                 [spamd]\nmax_body_bytes = {limit}\n\
                 [limits]\nmax_message_bytes = {limit}\n",
                limit = 16 * MIB
            )),
            workers: Some(2),
            ..Options::default()
        },
    );
    assert_eq!(d.metric("shrike_budget_bytes"), budget as u64);
    let (small, large) = (bomb(12 * MIB), bomb(30 * MIB));
    let port = d.http;
    let started = std::time::Instant::now();
    let clients: Vec<_> = (0..40)
        .map(|i| {
            let body = if i % 2 == 0 {
                small.clone()
            } else {
                large.clone()
            };
            std::thread::spawn(move || {
                let r = daemon::http(port, "POST", "/checkv2", &[("Compression", "zstd")], &body)
                    .expect("an answer");
                (i % 2 == 0, r)
            })
        })
        .collect();
    let replies: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let peak = status_bytes(d.pid(), "VmHWM");

    let status = |within: bool, code: u16| {
        replies
            .iter()
            .filter(|(w, r)| *w == within && r.status == code)
            .count()
    };
    // 503s over the budget; on a slow machine others may have waited out the scan timeout
    // for a turn to decompress.
    let unavailable: Vec<_> = replies.iter().filter(|(_, r)| r.status == 503).collect();
    let refused: Vec<_> = unavailable
        .iter()
        .filter(|(_, r)| r.text().contains("memory budget"))
        .collect();
    for (within, r) in &replies {
        match (within, r.status) {
            (true, 200 | 503) | (false, 413 | 503) => {}
            _ => panic!("within the limit: {within}; got {} {}", r.status, r.text()),
        }
    }
    assert_eq!(replies.len(), 40);
    assert!(status(false, 200) == 0, "a body past the limit was scanned");
    assert!(
        status(true, 413) == 0,
        "a body within the limit was called too large"
    );
    assert!(!refused.is_empty(), "nothing refused with a 64 MiB budget");
    for (_, r) in &unavailable {
        assert_eq!(r.header("retry-after"), Some("1"), "{}", r.text());
        assert!(
            r.text().contains("memory budget") || r.text().contains("scan timeout"),
            "{}",
            r.text()
        );
    }
    assert_eq!(
        d.metric("shrike_budget_refused_total{protocol=\"http\"}"),
        refused.len() as u64
    );
    assert_eq!(
        d.metric("shrike_budget_refused_total{protocol=\"milter\"}"),
        0
    );
    // Without the budget 40 bodies of 12 to 16 MiB would be held at once (about 600 MiB).
    assert!(
        peak < budget + 256 * MIB,
        "peak resident memory {} MiB with a budget of {} MiB",
        peak / MIB,
        budget / MIB
    );
    // Every reservation is given back once its request is answered and scanned.
    wait_until("the budget given back", 30, || {
        d.metric("shrike_budget_inflight_bytes") == 0
    });
    let r = d.post("/checkv2", &[], &read(HAM));
    assert_eq!(r.status, 200, "{}", r.text());
    let log = d.log_text();
    let warnings = log.matches("memory budget (server.inflight_bytes)").count();
    let most = 2 + started.elapsed().as_secs() as usize / 10;
    assert!(
        warnings >= 1 && warnings <= most.min(refused.len()),
        "{warnings} refusal warnings for {} refusals (at most one per 10 s):\n{log}",
        refused.len()
    );
}

/// A spamd client that declares a 4 GB `Content-length` and sends ten bytes costs the daemon a
/// read's worth, not 4 GB; when it closes, the connection ends without a reply or an error
/// and what it held is given back.
#[test]
fn a_huge_declared_spamd_length_costs_nothing_until_its_bytes_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let declared: u64 = 4_000_000_000;
    let d = Daemon::start(
        dir.path(),
        Options {
            // A limit that lets the declared length through to the decoder.
            config: Some("[spamd]\nmax_body_bytes = 5000000000\n".into()),
            ..Options::default()
        },
    );
    let size_before = status_bytes(d.pid(), "VmSize");
    let rss_before = status_bytes(d.pid(), "VmRSS");
    let hwm_before = status_bytes(d.pid(), "VmHWM");
    let mut clients: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", d.http)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            write!(
                s,
                "CHECK SPAMC/1.5\r\nContent-length: {declared}\r\n\r\n0123456789"
            )
            .unwrap();
            s
        })
        .collect();
    // Each connection holds its decoder's buffer, a read's worth.
    wait_until("four spamd requests read", 30, || {
        d.metric("shrike_spamd_on_http_total") == 4
            && d.metric("shrike_budget_inflight_bytes") >= 4 * 16 * 1024
    });
    let held = d.metric("shrike_budget_inflight_bytes");
    assert!(
        held <= 4 * 64 * 1024,
        "{held} bytes held for 40 bytes of message"
    );
    let size = status_bytes(d.pid(), "VmSize");
    let rss = status_bytes(d.pid(), "VmRSS");
    assert!(
        size < size_before + 1024 * MIB,
        "virtual size grew by {} MiB",
        (size - size_before) / MIB
    );
    assert!(
        rss < rss_before + 64 * MIB,
        "resident memory grew by {} MiB",
        (rss.saturating_sub(rss_before)) / MIB
    );
    let hwm = status_bytes(d.pid(), "VmHWM");
    assert!(
        hwm < hwm_before + 64 * MIB,
        "peak resident memory grew by {} MiB",
        (hwm - hwm_before) / MIB
    );
    // The clients give up: each connection ends cleanly (no reply, no reset).
    for s in &mut clients {
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).expect("a clean close");
        assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
    }
    wait_until("the budget given back", 30, || {
        d.metric("shrike_budget_inflight_bytes") == 0
    });
    assert_eq!(d.metric("shrike_spamd_errors_total"), 0);
    assert_eq!(
        d.metric("shrike_budget_refused_total{protocol=\"spamd\"}"),
        0
    );
    let r = d.post("/checkv2", &[], &read(HAM));
    assert_eq!(r.status, 200, "{}", r.text());
}

/// A milter transaction for `raw` after the connection's negotiation and connect steps.
fn milter_message(raw: &[u8]) -> Vec<Command> {
    let text = String::from_utf8_lossy(raw).replace("\r\n", "\n");
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    let mut cmds = vec![
        Command::OptNeg(POSTFIX),
        Command::Connect {
            hostname: b"mail.example.org".to_vec(),
            family: b'4',
            port: 40000,
            address: b"192.0.2.44".to_vec(),
        },
        Command::Helo(b"mail.example.org".to_vec()),
        Command::Mail(vec![b"<sender@example.net>".to_vec()]),
        Command::Rcpt(vec![b"<bob@example.com>".to_vec()]),
        Command::Data,
    ];
    cmds.extend(mta::header_commands(head.lines(), "\n"));
    cmds.push(Command::EndOfHeaders);
    cmds.push(Command::Body(body.replace('\n', "\r\n").into_bytes()));
    cmds.push(Command::EndOfMessage(Vec::new()));
    cmds
}

/// The milter's final reply to `raw`.
fn milter_verdict(port: u16, raw: &[u8]) -> Vec<Reply> {
    let mut m = Mta::connect(port);
    m.send(&milter_message(raw));
    assert!(matches!(m.until_final()[..], [Reply::OptNeg(_)]));
    m.until_final()
}

/// A spamd CHECK of `raw` on `port`; the reply.
fn spamd_check(port: u16, raw: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut request = format!("CHECK SPAMC/1.5\r\nContent-length: {}\r\n\r\n", raw.len());
    request.push_str(&String::from_utf8_lossy(raw));
    // The daemon may answer before the whole request is read.
    let _ = s.write_all(request.as_bytes());
    let mut reply = String::new();
    s.read_to_string(&mut reply)
        .expect("a reply and a clean close");
    reply
}

/// Four uploads in progress that declared 16 MiB each hold the whole 64 MiB budget before any
/// of their bytes arrive. Meanwhile each protocol refuses new messages as it refuses them over
/// a full queue: HTTP 503 with Retry-After, spamd `EX_TEMPFAIL`, the milter its fallback
/// (tempfail); a body over the size limit still gets 413. None of them is scanned. Once the
/// uploads' clients go away the budget is whole again and every protocol scans.
#[test]
fn with_the_budget_held_every_protocol_refuses_new_work_until_it_is_given_back() {
    let dir = tempfile::tempdir().unwrap();
    let (budget, limit) = (64 * MIB, 16 * MIB);
    let spamd = daemon::free_port();
    let d = Daemon::start(
        dir.path(),
        Options {
            config: Some(format!(
                "[server]\ninflight_bytes = {budget}\n\
                 [http]\nmax_body_bytes = {limit}\n\
                 [spamd]\nmax_body_bytes = {limit}\nlisten = \"127.0.0.1:{spamd}\"\n\
                 [limits]\nmax_message_bytes = {limit}\n"
            )),
            ..Options::default()
        },
    );
    let ham = read(HAM);
    let uploads: Vec<TcpStream> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", d.http)).unwrap();
            write!(
                s,
                "POST /checkv2 HTTP/1.1\r\nHost: x\r\nContent-Length: {limit}\r\n\r\nFrom: a"
            )
            .unwrap();
            s
        })
        .collect();
    wait_until("the uploads holding the budget", 30, || {
        d.metric("shrike_budget_inflight_bytes") == budget as u64
    });

    let r = d.post("/checkv2", &[], &ham);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(r.text().contains("memory budget"), "{}", r.text());
    let r = d.post("/checkv2", &[("Compression", "zstd")], &bomb(MIB));
    assert_eq!(r.status, 503, "{}", r.text());
    // Too large is still too large (told from the declared length, before any byte is sent).
    let mut s = TcpStream::connect(("127.0.0.1", d.http)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /checkv2 HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        limit + 1
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 413 "), "{reply}");
    // spamd, on its listener and on the HTTP port.
    for port in [spamd, d.http] {
        let reply = spamd_check(port, &ham);
        assert!(reply.starts_with("SPAMD/1.0 75 "), "{reply}");
        assert!(!reply.contains("Spam:"), "{reply}");
    }
    // The milter answers with its fallback, and the connection stays usable.
    let replies = milter_verdict(d.milter, &ham);
    assert!(
        matches!(&replies[..], [Reply::ReplyCode(t)] if t.starts_with("451 4.7.1")),
        "{replies:?}"
    );
    assert_eq!(
        d.metric("shrike_budget_refused_total{protocol=\"http\"}"),
        2
    );
    assert_eq!(
        d.metric("shrike_budget_refused_total{protocol=\"spamd\"}"),
        2
    );
    assert_eq!(
        d.metric("shrike_budget_refused_total{protocol=\"milter\"}"),
        1
    );
    assert_eq!(d.metric("shrike_milter_fallbacks_total"), 1);
    let stat = d.get("/stat").json();
    assert_eq!(stat["scanned"], 0, "nothing refused was scanned");
    assert_eq!(
        d.metric("shrike_budget_inflight_bytes"),
        budget as u64,
        "a refusal holds nothing"
    );

    // The uploads' clients go away: what they held comes back, and every protocol scans.
    drop(uploads);
    wait_until("the budget given back", 30, || {
        d.metric("shrike_budget_inflight_bytes") == 0
    });
    let r = d.post("/checkv2", &[], &ham);
    assert_eq!(r.status, 200, "{}", r.text());
    let reply = spamd_check(spamd, &ham);
    assert!(reply.starts_with("SPAMD/1.1 0 EX_OK"), "{reply}");
    let replies = milter_verdict(d.milter, &ham);
    assert_eq!(replies.last(), Some(&Reply::Accept), "{replies:?}");
    assert_eq!(d.get("/stat").json()["scanned"], 3);
    wait_until("the budget given back after the scans", 30, || {
        d.metric("shrike_budget_inflight_bytes") == 0
    });
}

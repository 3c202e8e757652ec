// The adversarial corpus of tests/data/hostile/ (written by scripts/hostile_corpus.py), shared by
// tests/hostile.rs and examples/hostile_times.rs: the messages, the envelope each is delivered
// with, the thread's CPU clock, and what must not be in a verdict.

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use shrike::message::Envelope;
use shrike::verdict::Verdict;

/// One message of the corpus, inflated.
pub struct Hostile {
    /// The file name without `.eml.gz`.
    pub name: String,
    pub raw: Vec<u8>,
}

/// tests/data/hostile, or `$SHRIKE_HOSTILE_DIR` (a corpus written with `--scale`, to see how
/// a scan's cost grows with the message).
pub fn dir() -> PathBuf {
    std::env::var_os("SHRIKE_HOSTILE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hostile"))
}

/// Every `*.eml.gz` of the corpus whose name contains `filter`, by name. Panics when the
/// directory is missing or a file does not inflate: the corpus is committed, so either is a
/// broken checkout.
pub fn load(filter: &str) -> Vec<Hostile> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("tests/data/hostile exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.ends_with(".eml.gz") && name.contains(filter)
        })
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let file = std::fs::File::open(&p).expect("corpus file readable");
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(file)
                .read_to_end(&mut raw)
                .unwrap_or_else(|e| panic!("{} does not inflate: {e}", p.display()));
            let name = p.file_name().unwrap().to_string_lossy();
            Hostile {
                name: name.trim_end_matches(".eml.gz").to_string(),
                raw,
            }
        })
        .collect()
}

/// The envelope an MTA would hand over with the message: a client, its HELO, the sender, and
/// the recipients (for `recipients_50k`, the 50,000 its README entry names).
pub fn envelope(name: &str) -> Envelope {
    let rcpt_to = if name == "recipients_50k" {
        (0..50_000)
            .map(|i| format!("user{i}@d{}.example", i % 97))
            .collect()
    } else {
        vec!["rcpt@example.org".to_string()]
    };
    Envelope {
        client_ip: Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10))),
        helo: Some("mail.sender.example".into()),
        mail_from: Some("bounce@sender.example".into()),
        rcpt_to,
        ..Envelope::default()
    }
}

/// CPU time the calling thread has used: what a scan costs its worker, whatever else the
/// machine runs.
pub fn thread_cpu() -> Duration {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .expect("clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec() as u64, ts.tv_nsec() as u32)
}

/// What a verdict of the default rules must not show for any message: no rules ran, a rule that
/// failed or was stopped, rules skipped because the message's budget ran out (reported among
/// `RULE_TIMEOUT`'s options as "(message): N rules skipped: message budget exhausted").
pub fn problems(v: &Verdict) -> Vec<String> {
    let mut out = Vec::new();
    if v.generation == 0 {
        out.push("no rule set judged it".to_string());
    }
    for symbol in [shrike::engine::RULE_TIMEOUT, shrike::engine::RULE_ERROR] {
        for option in v.symbols.get(symbol).iter().flat_map(|h| &h.options) {
            out.push(format!("{symbol} {option}"));
        }
    }
    out
}

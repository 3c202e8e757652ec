//! Rule tests (`*.test`, docs/rules.md): directives, a blank line, then a message. Each file
//! runs against a fresh in-memory store, so files do not see each other's statistics.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::classify::Class;
use crate::engine::RuleLocation;
use crate::message::{prepare, Envelope};
use crate::store::{Counter, StoreConfig};
use crate::verdict::Action;

use super::{InMemoryError, ScanSettings, Scanner};

/// Most prior scans a test may ask for.
pub const MAX_REPEAT: usize = 10_000;

/// A parsed test file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleTest {
    pub expect: Vec<String>,
    pub expect_not: Vec<String>,
    pub action: Option<Action>,
    pub envelope: Envelope,
    pub seen: usize,
    pub seen_rcpts: usize,
    pub complain: usize,
    pub rescue: usize,
    /// Classifier training: the test message as spam, as ham, and stock examples of both.
    pub train_spam: usize,
    pub train_ham: usize,
    pub train_background: usize,
    /// Network check results the rules see (`auth` and `dnsbl` directives): a rule test runs
    /// offline, so it states what DNS would have said.
    pub net: Option<crate::netcheck::NetChecks>,
    /// Outbound mail our users sent before (`sent FROM RCPT [MESSAGE-ID]`): what replies and
    /// known correspondents are checked against.
    pub sent: Vec<(String, String, Option<String>)>,
    pub message: Vec<u8>,
}

/// Stock examples for `train-background`: the classifier learns them as ham and spam.
const STOCK_HAM: &[u8] = b"From: Ann Lee <ann@colleagues.example>\nTo: bob@example.org\n\
Subject: notes from the review meeting\nMessage-ID: <r1@colleagues.example>\n\n\
Hi Bob, here are my notes from the review meeting. We agreed to ship the parser\n\
change next week and to revisit the test plan on Thursday. Thanks, Ann\n";
const STOCK_SPAM: &[u8] = b"From: Best Offers <win@prizes.example>\nTo: bob@example.org\n\
Subject: claim your free prize now\nMessage-ID: <p1@prizes.example>\n\n\
Congratulations! You have been selected to claim a free prize. Act now, click\n\
http://prizes.example/claim and enter your card number to receive it today.\n";

/// Why a test file cannot be parsed; each names the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("line {line}: no blank line between directives and the message")]
    NoBlankLine { line: usize },
    #[error("line {line}: {word} needs a count up to {MAX_REPEAT}")]
    Count { line: usize, word: String },
    #[error("line {line}: unknown action {arg:?}")]
    Action { line: usize, arg: String },
    #[error("line {line}: bad IP {arg:?}: {error}")]
    Ip {
        line: usize,
        arg: String,
        error: std::net::AddrParseError,
    },
    #[error(
        "line {line}: {arg:?}: want `auth METHOD RESULT [DOMAIN [POLICY|aligned]]` or \
         `dnsbl SYMBOL ZONE NAME [blocked]`"
    )]
    Net { line: usize, arg: String },
    #[error("line {line}: unknown directive {word:?}")]
    Directive { line: usize, word: String },
    #[error("the message is empty")]
    EmptyMessage,
}

/// Why no test could run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{}: {error}", dir.display())]
    ReadDir { dir: PathBuf, error: std::io::Error },
    /// The store configuration or the rule set.
    #[error(transparent)]
    Scanner(#[from] InMemoryError),
}

/// Parses a test file; errors name the line.
pub fn parse(text: &[u8]) -> Result<RuleTest, ParseError> {
    let mut t = RuleTest::default();
    let mut pos = 0;
    let mut line_no = 0;
    loop {
        let end = memchr::memchr(b'\n', &text[pos..]).map_or(text.len(), |i| pos + i);
        let line = String::from_utf8_lossy(&text[pos..end]);
        let line = line.trim_end_matches('\r').trim();
        line_no += 1;
        let next = (end + 1).min(text.len());
        if line.is_empty() {
            t.message = text[next..].to_vec();
            break;
        }
        if end >= text.len() {
            return Err(ParseError::NoBlankLine { line: line_no });
        }
        pos = next;
        if line.starts_with('#') {
            continue;
        }
        let (word, arg) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let arg = arg.trim();
        let count = || -> Result<usize, ParseError> {
            arg.parse::<usize>()
                .ok()
                .filter(|n| *n <= MAX_REPEAT)
                .ok_or_else(|| ParseError::Count {
                    line: line_no,
                    word: word.to_string(),
                })
        };
        match word {
            "expect" => t.expect.push(arg.to_string()),
            "expect-not" => t.expect_not.push(arg.to_string()),
            "action" => {
                t.action = Some(Action::parse(arg).ok_or_else(|| ParseError::Action {
                    line: line_no,
                    arg: arg.to_string(),
                })?)
            }
            "ip" => {
                t.envelope.client_ip =
                    Some(arg.parse::<IpAddr>().map_err(|error| ParseError::Ip {
                        line: line_no,
                        arg: arg.to_string(),
                        error,
                    })?)
            }
            "helo" => t.envelope.helo = Some(arg.to_string()),
            "from" => t.envelope.mail_from = Some(arg.to_string()),
            "rcpt" => t.envelope.rcpt_to.push(arg.to_string()),
            "user" => t.envelope.user = Some(arg.to_string()),
            "sent" => {
                let w: Vec<&str> = arg.split_whitespace().collect();
                match w[..] {
                    [from, rcpt] => t.sent.push((from.into(), rcpt.into(), None)),
                    [from, rcpt, id] => t.sent.push((from.into(), rcpt.into(), Some(id.into()))),
                    _ => {
                        return Err(ParseError::Directive {
                            line: line_no,
                            word: word.to_string(),
                        })
                    }
                }
            }
            "seen" => t.seen = count()?,
            "seen-rcpts" => t.seen_rcpts = count()?,
            "complain" => t.complain = count()?,
            "rescue" => t.rescue = count()?,
            "train-spam" => t.train_spam = count()?,
            "train-ham" => t.train_ham = count()?,
            "train-background" => t.train_background = count()?,
            "auth" | "dnsbl" => {
                let net = t.net.get_or_insert_with(|| crate::netcheck::NetChecks {
                    ran: true,
                    complete: true,
                    ..Default::default()
                });
                net_directive(net, word, arg).ok_or_else(|| ParseError::Net {
                    line: line_no,
                    arg: arg.to_string(),
                })?;
            }
            _ => {
                return Err(ParseError::Directive {
                    line: line_no,
                    word: word.to_string(),
                })
            }
        }
    }
    if t.message.is_empty() {
        return Err(ParseError::EmptyMessage);
    }
    Ok(t)
}

/// `auth METHOD RESULT [DOMAIN [POLICY|aligned]]` (METHOD: spf, helo, dkim (one per
/// signature), dmarc, arc; RESULT as in RFC 8601) or `dnsbl SYMBOL ZONE NAME [blocked]`.
fn net_directive(net: &mut crate::netcheck::NetChecks, word: &str, arg: &str) -> Option<()> {
    use crate::auth::{MethodResult, Status};
    let w: Vec<&str> = arg.split_whitespace().collect();
    if word == "dnsbl" {
        let (symbol, zone, name) = (w.first()?, w.get(1)?, w.get(2)?);
        let blocked = match w.get(3) {
            None => false,
            Some(&"blocked") => true,
            Some(_) => return None,
        };
        net.lists.push(crate::dnsbl::ListHit {
            symbol: symbol.to_string(),
            zone: zone.to_string(),
            name: name.to_string(),
            check: "rule_test",
            code: "127.0.0.2".into(),
            blocked,
            score: None,
        });
        return Some(());
    }
    let result = match *w.get(1)? {
        "pass" => Status::Pass,
        "fail" => Status::Fail,
        "softfail" => Status::SoftFail,
        "neutral" => Status::Neutral,
        "temperror" => Status::TempError,
        "permerror" => Status::PermError,
        "none" => Status::None,
        _ => return None,
    };
    let mut m = MethodResult {
        result,
        domain: w.get(2).map(|d| d.to_string()),
        ..Default::default()
    };
    match (w[0], w.get(3)) {
        ("dkim", Some(&"aligned")) => m.aligned = true,
        ("dmarc", Some(p)) => m.policy = Some(p.to_string()),
        (_, None) => {}
        _ => return None,
    }
    let a = &mut net.auth;
    match w[0] {
        "spf" => a.spf = Some(m),
        "helo" => a.helo = Some(m),
        "dkim" => a.dkim.push(m),
        "dmarc" => a.dmarc = Some(m),
        "arc" => a.arc = Some(m),
        _ => return None,
    }
    Some(())
}

/// The outcome of one test file.
#[derive(Debug, Clone, PartialEq)]
pub struct TestResult {
    pub file: PathBuf,
    /// Empty when the test passed.
    pub failures: Vec<String>,
    /// What the test's final scan ran and hit (`run_dir_traced`).
    pub trace: Option<Trace>,
}

/// What a test's final scan did: the lines of each rule's own file it ran, the symbols it hit,
/// and what the test expected (`nearmiss` reads them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    /// Rule name → lines of its file run.
    pub lines: BTreeMap<String, BTreeSet<u32>>,
    /// Rule name → those of its lines that are in its `check` function itself.
    pub check_lines: BTreeMap<String, BTreeSet<u32>>,
    /// Symbols hit, applied or shadow.
    pub hit: BTreeSet<String>,
    pub expect: Vec<String>,
    pub expect_not: Vec<String>,
}

/// Runs every `*.test` in `dir` against the rules at `rules`, each with a fresh in-memory store
/// configured by `store`.
pub fn run_dir(
    settings: &ScanSettings,
    store: &StoreConfig,
    rules: &RuleLocation,
    dir: &Path,
) -> Result<Vec<TestResult>, RunError> {
    run_dir_with(settings, store, rules, dir, false)
}

/// `run_dir`, with each test's `Trace` (a line hook on the final scans: slower).
pub fn run_dir_traced(
    settings: &ScanSettings,
    store: &StoreConfig,
    rules: &RuleLocation,
    dir: &Path,
) -> Result<Vec<TestResult>, RunError> {
    run_dir_with(settings, store, rules, dir, true)
}

fn run_dir_with(
    settings: &ScanSettings,
    store: &StoreConfig,
    rules: &RuleLocation,
    dir: &Path,
    trace: bool,
) -> Result<Vec<TestResult>, RunError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|error| RunError::ReadDir {
            dir: dir.to_path_buf(),
            error,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "test"))
        .collect();
    files.sort();
    let mut results = Vec::new();
    for file in files {
        let (failures, trace) = match std::fs::read(&file) {
            Ok(text) => match parse(&text) {
                Ok(test) => run_test(settings, store, rules, &test, trace)?,
                Err(e) => (vec![e.to_string()], None),
            },
            Err(e) => (vec![e.to_string()], None),
        };
        results.push(TestResult {
            file,
            failures,
            trace,
        });
    }
    Ok(results)
}

/// Runs one test; the `Err` is a store or rule-set load error (no test can run). The `Ok` lists
/// the test's failures.
pub fn run_one(
    settings: &ScanSettings,
    store: &StoreConfig,
    rules: &RuleLocation,
    test: &RuleTest,
) -> Result<Vec<String>, InMemoryError> {
    run_test(settings, store, rules, test, false).map(|(failures, _)| failures)
}

/// `run_one`, and with `trace` the final scan's `Trace`.
fn run_test(
    settings: &ScanSettings,
    store: &StoreConfig,
    rules: &RuleLocation,
    test: &RuleTest,
    trace: bool,
) -> Result<(Vec<String>, Option<Trace>), InMemoryError> {
    let scanner = Scanner::in_memory(settings, store, rules.clone())?;
    let mut worker = scanner.worker();
    if trace {
        worker.rules().trace_lines();
    }
    let input = prepare(&test.message, &settings.limits);
    for (from, rcpt, id) in &test.sent {
        let sent = scanner
            .outbound()
            .sent(id.as_deref(), Some(from), std::slice::from_ref(rcpt));
        scanner.store().record_many(&sent);
    }
    for _ in 0..test.seen {
        let s = worker.scan_with(&input, &test.envelope, test.net.as_ref());
        scanner.apply(&s.updates);
    }
    for i in 0..test.seen_rcpts {
        let mut envelope = test.envelope.clone();
        envelope.rcpt_to = vec![format!("rcpt{i}@recipients.example")];
        let s = worker.scan_with(&input, &envelope, test.net.as_ref());
        scanner.apply(&s.updates);
    }
    for (n, counter) in [
        (test.complain, Counter::Complaint),
        (test.rescue, Counter::Rescue),
    ] {
        if n > 0 {
            let analysis = super::analyze(&input, &test.envelope, &settings.limits);
            for _ in 0..n {
                scanner.learn(&analysis, counter);
            }
        }
    }
    // Classifier training repeats a message on purpose, so it bypasses the once-per-message rule.
    let stock_ham = prepare(STOCK_HAM, &settings.limits);
    let stock_spam = prepare(STOCK_SPAM, &settings.limits);
    for (n, input, class) in [
        (test.train_background, &stock_ham, Class::Ham),
        (test.train_background, &stock_spam, Class::Spam),
        (test.train_spam, &input, Class::Spam),
        (test.train_ham, &input, Class::Ham),
    ] {
        if n == 0 {
            continue;
        }
        // Nothing of these scans is recorded, so the features are the same every time.
        let scanned = worker.scan_with(input, &test.envelope, test.net.as_ref());
        let features = scanner.features(&scanned);
        for _ in 0..n {
            scanner.classifier().train(&features, class, None);
        }
    }
    // (only the final scan's lines count)
    worker.rules().take_lines();
    let s = worker.scan_with(&input, &test.envelope, test.net.as_ref());
    let v = &s.verdict;
    let trace = trace.then(|| {
        let mut t = Trace {
            expect: test.expect.clone(),
            expect_not: test.expect_not.clone(),
            hit: v.symbols.keys().chain(v.shadow.keys()).cloned().collect(),
            ..Trace::default()
        };
        for (rule, line, in_check) in worker.rules().take_lines() {
            if in_check {
                t.check_lines.entry(rule.clone()).or_default().insert(line);
            }
            t.lines.entry(rule).or_default().insert(line);
        }
        t
    });
    let mut failures = Vec::new();
    let hit: Vec<String> = v.symbols.keys().cloned().collect();
    for sym in &test.expect {
        if !v.symbols.contains_key(sym) {
            failures.push(format!(
                "expected {sym}, got score {} with [{}]",
                v.score,
                hit.join(", ")
            ));
        }
    }
    for sym in &test.expect_not {
        if let Some(h) = v.symbols.get(sym) {
            failures.push(format!("did not expect {sym} (options {:?})", h.options));
        }
    }
    if let Some(a) = test.action {
        if v.action != a {
            failures.push(format!(
                "expected action {:?}, got {:?} (score {}, [{}])",
                a.as_str(),
                v.action.as_str(),
                v.score,
                hit.join(", ")
            ));
        }
    }
    for sym in [crate::engine::RULE_ERROR, crate::engine::RULE_TIMEOUT] {
        if let Some(h) = v.symbols.get(sym) {
            if !test.expect.iter().any(|e| e == sym) {
                failures.push(format!("{sym}: {}", h.options.join("; ")));
            }
        }
    }
    Ok((failures, trace))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_directives_and_message() {
        let t = parse(
            b"# c\nexpect A\nexpect-not B\naction add header\nip 192.0.2.1\nrcpt x@y.z\nseen 3\n\nSubject: hi\n\nbody\n",
        )
        .unwrap();
        assert_eq!(t.expect, ["A"]);
        assert_eq!(t.expect_not, ["B"]);
        assert_eq!(t.action, Some(Action::AddHeader));
        assert_eq!(t.envelope.rcpt_to, ["x@y.z"]);
        assert_eq!(t.seen, 3);
        assert!(t.message.starts_with(b"Subject: hi"));
        assert!(parse(b"expect A\nSubject: x\n").is_err());
        assert!(parse(b"bogus 1\n\nSubject: x\n")
            .unwrap_err()
            .to_string()
            .contains("line 1"));
        assert!(parse(b"seen many\n\nx\n").is_err());
    }

    #[test]
    fn network_directives_state_what_dns_said() {
        let t = parse(
            b"auth spf fail a.example\nauth dkim pass a.example aligned\nauth dkim fail b.example\n\
auth dmarc fail a.example reject\ndnsbl DBL_BLOCKED dbl.spamhaus.org x.example blocked\n\nSubject: x\n\nb\n",
        )
        .unwrap();
        let net = t.net.unwrap();
        assert!(net.ran);
        assert_eq!(net.auth.dkim.len(), 2);
        assert_eq!(net.auth.aligned_dkim_domain(), Some("a.example"));
        assert_eq!(net.auth.dmarc.unwrap().policy.as_deref(), Some("reject"));
        assert!(net.lists[0].blocked);
        assert!(parse(b"\nSubject: x\n").unwrap().net.is_none());
        for bad in [
            "auth spf maybe",
            "auth smtp pass",
            "auth spf pass a.example extra",
            "dnsbl X z",
        ] {
            let text = format!("{bad}\n\nSubject: x\n");
            let e = parse(text.as_bytes()).unwrap_err();
            assert!(matches!(e, ParseError::Net { line: 1, .. }), "{bad}: {e}");
        }
    }
}

//! Rule tests (`*.test`, docs/rules.md): directives, a blank line, then a message. Each file
//! runs against a fresh in-memory store, so files do not see each other's statistics.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::classify::Class;
use crate::config::Config;
use crate::engine::{Action, RuleLocation};
use crate::message::{prepare, Envelope};
use crate::store::Counter;

use super::Scanner;

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

/// Parses a test file; errors name the line.
pub fn parse(text: &[u8]) -> Result<RuleTest, String> {
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
            return Err(format!(
                "line {line_no}: no blank line between directives and the message"
            ));
        }
        pos = next;
        if line.starts_with('#') {
            continue;
        }
        let (word, arg) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let arg = arg.trim();
        let count = || -> Result<usize, String> {
            arg.parse::<usize>()
                .ok()
                .filter(|n| *n <= MAX_REPEAT)
                .ok_or_else(|| format!("line {line_no}: {word} needs a count up to {MAX_REPEAT}"))
        };
        match word {
            "expect" => t.expect.push(arg.to_string()),
            "expect-not" => t.expect_not.push(arg.to_string()),
            "action" => {
                t.action = Some(
                    Action::parse(arg)
                        .ok_or_else(|| format!("line {line_no}: unknown action {arg:?}"))?,
                )
            }
            "ip" => {
                t.envelope.client_ip = Some(
                    arg.parse::<IpAddr>()
                        .map_err(|e| format!("line {line_no}: bad IP {arg:?}: {e}"))?,
                )
            }
            "helo" => t.envelope.helo = Some(arg.to_string()),
            "from" => t.envelope.mail_from = Some(arg.to_string()),
            "rcpt" => t.envelope.rcpt_to.push(arg.to_string()),
            "seen" => t.seen = count()?,
            "seen-rcpts" => t.seen_rcpts = count()?,
            "complain" => t.complain = count()?,
            "rescue" => t.rescue = count()?,
            "train-spam" => t.train_spam = count()?,
            "train-ham" => t.train_ham = count()?,
            "train-background" => t.train_background = count()?,
            _ => return Err(format!("line {line_no}: unknown directive {word:?}")),
        }
    }
    if t.message.is_empty() {
        return Err("the message is empty".into());
    }
    Ok(t)
}

/// The outcome of one test file.
#[derive(Debug, Clone, PartialEq)]
pub struct TestResult {
    pub file: PathBuf,
    /// Empty when the test passed.
    pub failures: Vec<String>,
}

/// Runs every `*.test` in `dir` against the rules at `rules`.
pub fn run_dir(
    config: &Config,
    rules: &RuleLocation,
    dir: &Path,
) -> Result<Vec<TestResult>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "test"))
        .collect();
    files.sort();
    let mut results = Vec::new();
    for file in files {
        let failures = match std::fs::read(&file) {
            Ok(text) => match parse(&text) {
                Ok(test) => run_one(config, rules, &test)?,
                Err(e) => vec![e],
            },
            Err(e) => vec![e.to_string()],
        };
        results.push(TestResult { file, failures });
    }
    Ok(results)
}

/// Runs one test; the `Err` is a rule-set load error (no test can run).
pub fn run_one(
    config: &Config,
    rules: &RuleLocation,
    test: &RuleTest,
) -> Result<Vec<String>, String> {
    let scanner = Scanner::in_memory(config, rules.clone())?;
    let mut worker = scanner.worker();
    let input = prepare(&test.message, &config.limits);
    for _ in 0..test.seen {
        let s = worker.scan(&input, &test.envelope);
        scanner.apply(&s.updates);
    }
    for i in 0..test.seen_rcpts {
        let mut envelope = test.envelope.clone();
        envelope.rcpt_to = vec![format!("rcpt{i}@recipients.example")];
        let s = worker.scan(&input, &envelope);
        scanner.apply(&s.updates);
    }
    for (n, counter) in [
        (test.complain, Counter::Complaint),
        (test.rescue, Counter::Rescue),
    ] {
        if n > 0 {
            let analysis = super::analyze(&input, &test.envelope, &config.limits);
            for _ in 0..n {
                scanner.learn(&analysis, counter);
            }
        }
    }
    // Classifier training repeats a message on purpose, so it bypasses the once-per-message rule.
    let stock_ham = prepare(STOCK_HAM, &config.limits);
    let stock_spam = prepare(STOCK_SPAM, &config.limits);
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
        let scanned = worker.scan(input, &test.envelope);
        let features = scanner.features(&scanned);
        for _ in 0..n {
            scanner.classifier().train(&features, class, None);
        }
    }
    let s = worker.scan(&input, &test.envelope);
    let v = &s.verdict;
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
    Ok(failures)
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
            .contains("line 1"));
        assert!(parse(b"seen many\n\nx\n").is_err());
    }
}

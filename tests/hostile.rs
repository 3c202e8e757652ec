//! The adversarial corpus (tests/data/hostile/, written by scripts/hostile_corpus.py; its
//! README says what each message attacks) through the whole pipeline with the default rules, as
//! `shrike scan` and the daemon's workers run it: every message gets a verdict from the rules,
//! no rule fails or is stopped, and no rule is skipped because the message's budget ran out.
//! A message built to be expensive must not buy its sender fewer rules.
//!
//! Each message's scan CPU (the thread's clock) is printed for information only: the bound
//! (≤ 50 ms in a release build) is measured by scripts/bench_hostile.sh, since a test build is
//! unoptimized and CI machines vary. The budgets themselves do hold in test builds (scaled for
//! debug builds, ARCHITECTURE.md "Limits"), so a rule stopped here is stopped in production.

#[path = "common/hostile.rs"]
mod hostile;

use std::panic::{catch_unwind, AssertUnwindSafe};

use shrike::config::Config;
use shrike::engine::RuleLocation;
use shrike::message::prepare;
use shrike::scan::Scanner;

#[test]
fn every_hostile_message_is_judged_by_every_rule() {
    let corpus = hostile::load("");
    assert!(
        corpus.len() >= 30,
        "the corpus has its messages: {} in {}",
        corpus.len(),
        hostile::dir().display()
    );
    let config = Config::default();
    let scanner = Scanner::in_memory(
        &config.scan_settings(),
        &config.store,
        RuleLocation::Embedded,
    )
    .expect("the default rules load");
    let mut worker = scanner.worker();
    let mut failures = Vec::new();
    eprintln!(
        "{:<28} {:>10} {:>9} {:>8}  action",
        "message", "bytes", "cpu ms", "score"
    );
    for m in &corpus {
        let envelope = hostile::envelope(&m.name);
        let start = hostile::thread_cpu();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let input = prepare(&m.raw, scanner.limits());
            let scanned = worker.scan(&input, &envelope);
            scanner.apply(&scanned.updates);
            scanned.verdict
        }));
        let cpu = hostile::thread_cpu() - start;
        match outcome {
            Ok(verdict) => {
                eprintln!(
                    "{:<28} {:>10} {:>9.1} {:>8.2}  {}",
                    m.name,
                    m.raw.len(),
                    cpu.as_secs_f64() * 1e3,
                    verdict.score,
                    verdict.action.as_str()
                );
                failures.extend(
                    hostile::problems(&verdict)
                        .into_iter()
                        .map(|p| format!("{}: {p}", m.name)),
                );
            }
            Err(_) => {
                failures.push(format!("{}: the scan panicked", m.name));
                // A panic may have left the worker's Lua state mid-scan: the next message
                // gets a fresh one, as the daemon's pool would give it.
                worker = scanner.worker();
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} problem(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

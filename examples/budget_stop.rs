//! How long a rule with a catastrophic pattern runs before the budget stops it, and that the
//! next message on the same worker is scanned normally (BENCHMARKS.md, "Hostile mail").
//!
//! A rule `find(msg:subject(), "^(.-)(.-)(.-)(.-)x$")` (hours of backtracking on a
//! 2,000-character subject) beside a cheap one, at the default budgets. Each round scans the
//! long-subject message, then a normal one, on one worker; prints the CPU time of each scan
//! (this thread's clock), the stopped rule's ratio to its budget and what the next scan got.
//!
//!   cargo run --release --example budget_stop [ROUNDS]

use std::sync::Arc;
use std::time::Duration;

use shrike::config::Config;
use shrike::engine::RuleLocation;
use shrike::message::{prepare, Envelope};
use shrike::scan::Scanner;
use shrike::store::{ReputationStore, Store, SystemClock};

fn thread_cpu() -> Duration {
    // (The calling thread's own clock cannot fail; a zero would only spoil this measurement.)
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(Duration::ZERO, |ts| {
            Duration::new(ts.tv_sec() as u64, ts.tv_nsec() as u32)
        })
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let dir = std::env::temp_dir().join(format!("shrike-budget-stop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("rules.lua"),
        "local find = string.find\n\
         rule { name = 'BACKTRACK', score = 3, check = function(msg)\n\
           return find(msg:subject(), '^(.-)(.-)(.-)(.-)x$') ~= nil end }\n\
         rule { name = 'FINE', score = 1, check = function(msg) return msg:subject() ~= '' end }\n",
    )
    .unwrap();
    let config = Config::default();
    let store: Arc<dyn ReputationStore> =
        Arc::new(Store::new(&config.store, Arc::new(SystemClock)).unwrap());
    let scanner = Scanner::new(
        &config.scan_settings(),
        RuleLocation::Dir(dir.clone()),
        store,
    )
    .expect("rules load");
    let mut worker = scanner.worker();
    let normal =
        b"From: a@example.com\r\nTo: b@example.org\r\nSubject: hello\r\n\r\nhi\r\n".to_vec();
    let long = format!(
        "From: a@example.com\r\nTo: b@example.org\r\nSubject: {}\r\n\r\nhi\r\n",
        "a".repeat(2000)
    )
    .into_bytes();
    let budget = config.engine.rule_cpu_ms as f64;
    let (mut stopped, mut next_ok) = (Vec::new(), 0);
    for _ in 0..rounds {
        let input = prepare(&long, scanner.limits());
        let t0 = thread_cpu();
        let v = worker.scan(&input, &Envelope::default()).verdict;
        let spent = (thread_cpu() - t0).as_secs_f64() * 1e3;
        assert!(
            v.symbols.contains_key("RULE_TIMEOUT"),
            "the backtracking rule was not stopped: {:?}",
            v.symbols
        );
        stopped.push(spent);
        let input = prepare(&normal, scanner.limits());
        let t0 = thread_cpu();
        let v = worker.scan(&input, &Envelope::default()).verdict;
        let next = (thread_cpu() - t0).as_secs_f64() * 1e3;
        if !v.symbols.contains_key("RULE_TIMEOUT") && v.symbols.contains_key("FINE") {
            next_ok += 1;
        }
        println!("stopped scan {spent:7.2} ms CPU   next scan {next:6.3} ms CPU");
    }
    stopped.sort_by(f64::total_cmp);
    let median = stopped[stopped.len() / 2];
    let max = stopped[stopped.len() - 1];
    println!(
        "rule budget {budget} ms: stopped scans median {median:.2} ms ({:.2}x), max {max:.2} ms \
         ({:.2}x); next message scanned normally {next_ok}/{rounds}",
        median / budget,
        max / budget
    );
    let _ = std::fs::remove_dir_all(&dir);
}

//! Scan CPU of each message of the adversarial corpus (tests/data/hostile/), with the default
//! rules (or a rule directory), as a daemon worker spends it: prepare, parse, entities,
//! shingles, store reads, rules, verdict. Each message is scanned ROUNDS times on one thread and
//! its median thread CPU time printed with its stages' wall time (analysis: parse, entities
//! and shingles; rules), the rule that took longest (its mean time a scan) and the RULE_TIMEOUT
//! / RULE_ERROR options if any; then the worst, the
//! median and worst / median over the corpus. scripts/bench_hostile.sh runs it in a release
//! build; it is also the target for profilers:
//! `perf record target/release/examples/hostile_times 5 urls_100k_html`.
//!
//! `cargo run --release --example hostile_times -- [ROUNDS] [NAME_FILTER] [RULES_DIR]`
#[path = "../tests/common/hostile.rs"]
mod hostile;

use std::sync::atomic::Ordering;
use std::time::Duration;

use shrike::config::Config;
use shrike::engine::RuleLocation;
use shrike::message::prepare;
use shrike::scan::{ScanWorker, Scanner};

/// Each rule's time so far (ns), after the worker's counters are flushed.
fn rule_nanos(scanner: &Scanner, worker: &mut ScanWorker) -> Vec<u64> {
    worker.rules().flush_counters();
    let g = scanner.engine().generation();
    g.counters
        .iter()
        .map(|c| c.nanos.load(Ordering::Relaxed))
        .collect()
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5).max(1);
    let filter = args.next().unwrap_or_default();
    let location = args
        .next()
        .map_or(RuleLocation::Embedded, |d| RuleLocation::Dir(d.into()));
    let config = Config::default();
    let scanner = Scanner::in_memory(&config.scan_settings(), &config.store, location)
        .expect("the rules load");
    let mut worker = scanner.worker();
    let corpus = hostile::load(&filter);
    println!(
        "{:<28} {:>10} {:>9} {:>11} {:>9}  {:<28} problems",
        "message", "bytes", "cpu ms", "analyze ms", "rules ms", "costliest rule (ms)"
    );
    let mut per_message = Vec::new();
    for m in &corpus {
        let envelope = hostile::envelope(&m.name);
        let (mut cpu, mut analyze, mut rules) = (Vec::new(), Vec::new(), Vec::new());
        let mut problems = Vec::new();
        // One scan first, not counted: the first scan of a worker builds its lazy tables, and
        // a message's first scan warms the caches the rounds then share.
        let input = prepare(&m.raw, scanner.limits());
        drop(worker.scan(&input, &envelope));
        let before = rule_nanos(&scanner, &mut worker);
        for _ in 0..rounds {
            let start = hostile::thread_cpu();
            let input = prepare(&m.raw, scanner.limits());
            let scanned = worker.scan(&input, &envelope);
            cpu.push(hostile::thread_cpu() - start);
            analyze.push(scanned.times.analyze);
            rules.push(scanned.times.rules);
            problems = hostile::problems(&scanned.verdict);
            // Not applied: every round sees the same store, so the rounds are alike.
            drop(scanned);
        }
        let after = rule_nanos(&scanner, &mut worker);
        let g = scanner.engine().generation();
        let rules = median(&mut rules);
        // The engine times one scan in several and scales it up, so a rule's time is given as
        // its share of all rules' timed time, applied to the rules stage's median.
        let spent: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        let total = spent.iter().sum::<u64>().max(1) as f64;
        let costliest = (spent.iter().zip(&g.rules))
            .max_by_key(|(nanos, _)| **nanos)
            .map(|(&nanos, r)| format!("{} {:.2}", r.name, ms(rules) * nanos as f64 / total))
            .unwrap_or_default();
        let cpu = median(&mut cpu);
        println!(
            "{:<28} {:>10} {:>9.2} {:>11.2} {:>9.2}  {:<28} {}",
            m.name,
            m.raw.len(),
            ms(cpu),
            ms(median(&mut analyze)),
            ms(rules),
            costliest,
            problems.join("; ")
        );
        per_message.push((cpu, m.name.as_str()));
    }
    if per_message.is_empty() {
        eprintln!("no message matches {filter:?}");
        std::process::exit(1);
    }
    per_message.sort();
    let (worst, worst_name) = per_message[per_message.len() - 1];
    let (med, _) = per_message[per_message.len() / 2];
    println!(
        "messages {}  worst {:.2} ms ({worst_name})  median {:.2} ms  worst/median {:.1}",
        per_message.len(),
        ms(worst),
        ms(med),
        worst.as_secs_f64() / med.as_secs_f64().max(1e-9)
    );
}

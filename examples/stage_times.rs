//! Runs the pipeline over the corpus N times and prints the time per stage, the distribution of
//! the Lua rules' time per message, and the costliest rules. Also the target for profilers:
//! `valgrind --tool=callgrind target/release/examples/stage_times 1`.
//! `cargo run --release --example stage_times -- 5 [RULES_DIR]`
#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shrike::config::Config;
use shrike::engine::{MessageData, RuleLocation};
use shrike::message::{parse, prepare, Envelope};
use shrike::scan::Scanner;
use shrike::store::{ManualClock, ReputationStore, Store, StoreKey};

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let location = args
        .next()
        .map_or(RuleLocation::Embedded, |d| RuleLocation::Dir(d.into()));
    let corpus = common::load_corpus();
    let config = Config::default();
    let store: Arc<dyn ReputationStore> =
        Arc::new(Store::new(&config.store, Arc::new(ManualClock::new(1_800_000_000))).unwrap());
    let scanner =
        Scanner::new(&config.scan_settings(), location, Arc::clone(&store)).expect("rules load");
    let mut worker = scanner.worker();
    // Build the Lua state before measuring, as the daemon's workers do before it reports ready
    // (before, the first message's rules paid the ~10 ms state build: the maximum below).
    worker.rules().warm();
    let limits = &config.limits;
    let env = Envelope::default();
    let names = [
        "prepare", "parse", "entities", "shingles", "lookups", "rules", "updates",
    ];
    let mut t = [Duration::ZERO; 7];
    // The same message through `ScanWorker::scan` as the daemon runs it (analysis, lookups,
    // rules, verdict, the update list): the check on the sum of the stages above.
    let mut whole = Duration::ZERO;
    // The Lua state's heap at its largest, after a message's rules.
    let mut lua_peak = 0usize;
    // How many messages' rules saw the Lua heap shrink, and their rules' time.
    let (mut shrank, mut shrank_time) = (0usize, Duration::ZERO);
    let mut rule_times = Vec::with_capacity(rounds * corpus.len());
    let mut n = 0usize;
    // STAGE_TOP=N: print the N messages whose parse, entities and rules took longest.
    // (kept only when asked for: the bookkeeping allocates between the timed stages)
    let top: usize = std::env::var("STAGE_TOP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut msg_times = Vec::new();
    // STAGE_THRASH_MB=N: before each message, write one byte of every cache line of an N MiB
    // buffer, so that each scan starts with cold caches, as it does on a machine busy with other
    // processes (an MTA's): 64 evicts this machine's 32 MiB L3.
    let mut thrash = vec![
        0u8;
        std::env::var("STAGE_THRASH_MB")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0)
            << 20
    ];
    // STAGE_SLEEP_US=N: sleep N µs before each message, as a daemon's worker waits for its next
    // message (its core idles or runs other threads meanwhile).
    let sleep = Duration::from_micros(
        std::env::var("STAGE_SLEEP_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    );
    // STAGE_WHOLE_ONLY=1: time only `ScanWorker::scan` and the store update, each message seen
    // once a round, without the staged pass before it that warms its caches. The first round
    // is not timed (it builds the regex engines' and the Lua heap's working sets, as criterion's
    // warm-up does for `rules/full_scan`).
    let whole_only = std::env::var("STAGE_WHOLE_ONLY").is_ok_and(|v| v == "1");
    if whole_only {
        for m in &corpus {
            let input = prepare(&m.raw, limits);
            scanner.apply(&worker.scan(&input, &env).updates);
        }
        for _ in 0..rounds {
            for m in &corpus {
                if !sleep.is_zero() {
                    std::thread::sleep(sleep);
                }
                let s0 = Instant::now();
                let input = prepare(&m.raw, limits);
                let scanned = worker.scan(&input, &env);
                scanner.apply(&scanned.updates);
                whole += s0.elapsed();
                n += 1;
            }
        }
        println!(
            "first-touch ScanWorker::scan with prepare and updates: {:.1} µs/msg",
            whole.as_secs_f64() * 1e6 / n as f64
        );
        return;
    }
    for _ in 0..rounds {
        for m in &corpus {
            if !sleep.is_zero() {
                std::thread::sleep(sleep);
            }
            for i in (0..thrash.len()).step_by(64) {
                thrash[i] = thrash[i].wrapping_add(1);
            }
            std::hint::black_box(&mut thrash);
            // (read here, outside the timed stages: nothing runs Lua before this message's rules)
            let heap_before = worker.rules().memory();
            let s0 = Instant::now();
            let input = prepare(&m.raw, limits);
            let s1 = Instant::now();
            let parsed = parse(&input, limits);
            let s2 = Instant::now();
            let entities = shrike::entities::extract(&parsed, &env);
            let s3 = Instant::now();
            let shingles = shrike::shingle::compute(&parsed, &entities, &env);
            let s4 = Instant::now();
            let keys: Vec<StoreKey> = shingles.iter().map(|s| scanner.key(s)).collect();
            let stats = store.lookup_many(&keys);
            let s5 = Instant::now();
            let data = MessageData {
                message: &parsed,
                entities: &entities,
                shingles: &shingles,
                stats: &stats,
                late: None,
                anomalies: &parsed.anomalies,
                envelope: &env,
                now: store.now(),
                max_html_bytes: config.engine.max_html_bytes,
                classifier: None,
                reputation_window: 3,
                observe: false,
                net: None,
                traffic: Default::default(),
            };
            let outcome = worker.rules().run(&data, n as u64);
            n += outcome.hits.len();
            let s6 = Instant::now();
            let heap_after = worker.rules().memory();
            lua_peak = lua_peak.max(heap_after);
            // The Lua heap shrank: the collector finished a cycle in this message's rules.
            if heap_after < heap_before {
                shrank += 1;
                shrank_time += s6 - s5;
            }
            // The store update as the scan records it (verdict included).
            let scanned = worker.scan(&input, &env);
            let s7a = Instant::now();
            scanner.apply(&scanned.updates);
            let s7 = Instant::now();
            for (i, (a, b)) in [
                (s0, s1),
                (s1, s2),
                (s2, s3),
                (s3, s4),
                (s4, s5),
                (s5, s6),
                (s7a, s7),
            ]
            .iter()
            .enumerate()
            {
                t[i] += *b - *a;
            }
            whole += s7a - s6;
            rule_times.push(s6 - s5);
            if top > 0 {
                msg_times.push((
                    s6 - s5 + (s3 - s1),
                    [s2 - s1, s3 - s2, s6 - s5],
                    format!("{}/{}", m.label, m.name),
                    m.raw.len(),
                ));
            }
        }
    }
    let msgs = (rounds * corpus.len()) as f64;
    for (name, d) in names.iter().zip(t) {
        println!("{name:10} {:7.1} µs/msg", d.as_secs_f64() * 1e6 / msgs);
    }
    let total: Duration = t.iter().sum();
    println!(
        "total {:.1} µs/msg, {:.0} msgs/s ({n} hits)",
        total.as_secs_f64() * 1e6 / msgs,
        msgs / total.as_secs_f64()
    );
    if top > 0 {
        msg_times.sort_by(|a, b| b.cmp(a));
        let all: Duration = msg_times.iter().map(|m| m.0).sum();
        let shown: Duration = msg_times.iter().take(top).map(|m| m.0).sum();
        let us = |d: &Duration| d.as_secs_f64() * 1e6;
        println!(
            "top {top} messages by parse + entities + rules ({:.1}% of that time):",
            100.0 * shown.as_secs_f64() / all.as_secs_f64()
        );
        for (d, [p, e, r], name, len) in msg_times.iter().take(top) {
            println!(
                "  {:8.1} µs (parse {:.1}, entities {:.1}, rules {:.1}) {len:8} bytes  {name}",
                us(d),
                us(p),
                us(e),
                us(r)
            );
        }
    }
    println!(
        "ScanWorker::scan {:.1} µs/msg (+ prepare and updates above: {:.0} msgs/s)",
        whole.as_secs_f64() * 1e6 / msgs,
        msgs / (whole + t[0] + t[6]).as_secs_f64()
    );
    println!(
        "Lua heap after a message's rules: at most {} KiB (now {} KiB)",
        lua_peak >> 10,
        worker.rules().memory() >> 10
    );
    println!(
        "rules in which the Lua heap shrank: {shrank} messages, {:.1} µs each on average ({:.1} µs/msg of all)",
        shrank_time.as_secs_f64() * 1e6 / shrank.max(1) as f64,
        shrank_time.as_secs_f64() * 1e6 / msgs
    );
    rule_times.sort();
    let q = |p: f64| rule_times[((rule_times.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6;
    println!(
        "rules per message: median {:.1} µs, p90 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        q(0.5),
        q(0.9),
        q(0.99),
        q(1.0)
    );
    worker.rules().flush_counters();
    let g = scanner.engine().generation();
    let mut per_rule: Vec<(u64, &str, u64)> = g
        .rules
        .iter()
        .zip(&g.counters)
        .map(|(r, c)| {
            (
                c.nanos.load(Ordering::Relaxed),
                r.name.as_str(),
                c.hits.load(Ordering::Relaxed),
            )
        })
        .collect();
    per_rule.sort_by(|a, b| b.cmp(a));
    let runs = g
        .counters
        .first()
        .map_or(1, |c| c.runs.load(Ordering::Relaxed).max(1));
    println!("costliest rules (µs per message, hits):");
    for (nanos, name, hits) in per_rule.iter().take(40) {
        println!(
            "  {name:28} {:7.2} {hits}",
            *nanos as f64 / runs as f64 / 1e3
        );
    }
}

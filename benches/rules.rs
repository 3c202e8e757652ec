//! The rules engine over the development corpus, one thread, default rule set. Targets
//! (DESIGN.md §4): Lua rules ≤ 30 µs per message (median: see `examples/stage_times.rs`),
//! full scan ≥ 10,000 messages/s, reload of 100 rule files ≤ 200 ms. Run:
//!
//!     cargo bench --bench rules

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shrike::config::Config;
use shrike::engine::{MessageData, RuleLocation};
use shrike::message::{prepare, Envelope};
use shrike::scan::{analyze, Scanner};
use shrike::store::{ManualClock, ReputationStore, Store, StoreKey};

fn scanner(location: RuleLocation) -> Arc<Scanner> {
    let config = Config::default();
    let store: Arc<dyn ReputationStore> =
        Arc::new(Store::new(&config.store, Arc::new(ManualClock::new(1_800_000_000))).unwrap());
    Scanner::new(&config.scan_settings(), location, store).expect("rules load")
}

fn rules(c: &mut Criterion) {
    let corpus = common::load_corpus();
    let envelope = Envelope::default();
    let s = scanner(RuleLocation::Embedded);
    let limits = s.limits().clone();

    // Warm the store with one pass so reputation lookups find keys, as in production.
    let mut w = s.worker();
    for m in &corpus {
        let input = prepare(&m.raw, &limits);
        let scanned = w.scan(&input, &envelope);
        s.apply(&scanned.updates);
    }

    let mut group = c.benchmark_group("rules");
    group.throughput(Throughput::Elements(corpus.len() as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));

    // Lua alone: messages analyzed and looked up beforehand.
    let inputs: Vec<_> = corpus.iter().map(|m| prepare(&m.raw, &limits)).collect();
    let analyses: Vec<_> = inputs
        .iter()
        .map(|i| analyze(i, &envelope, &limits))
        .collect();
    let stats: Vec<_> = analyses
        .iter()
        .map(|a| {
            let keys: Vec<StoreKey> = a
                .shingles
                .iter()
                .map(|sh| StoreKey {
                    namespace: 0,
                    kind: sh.kind.id(),
                    hash: sh.hash,
                })
                .collect();
            s.store().lookup_many(&keys)
        })
        .collect();
    let mut runner = s.engine().runner();
    group.bench_function("lua_only", |b| {
        b.iter(|| {
            for (a, st) in analyses.iter().zip(&stats) {
                let data = MessageData {
                    message: &a.message,
                    entities: &a.entities,
                    shingles: &a.shingles,
                    stats: st,
                    late: None,
                    anomalies: &a.anomalies,
                    envelope: &envelope,
                    now: 1_800_000_000,
                    max_html_bytes: 1 << 20,
                    classifier: None,
                    reputation_window: 3,
                    observe: false,
                    net: None,
                    traffic: Default::default(),
                };
                black_box(runner.run(&data, 1).hits.len());
            }
        })
    });

    group.bench_function("full_scan", |b| {
        b.iter(|| {
            for m in &corpus {
                let input = prepare(&m.raw, &limits);
                let scanned = w.scan(&input, &envelope);
                s.apply(&scanned.updates);
                black_box(scanned.verdict.score);
            }
        })
    });
    group.finish();
}

/// 100 rule files (the default set's rules spread over files, plus generated ones).
fn reload(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for entry in std::fs::read_dir(root.join("rules")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "lua") {
            std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
            n += 1;
        }
    }
    let mut i = 0;
    while n < 100 {
        std::fs::write(
            dir.path().join(format!("90_gen_{i:03}.lua")),
            format!(
                "local util = require('shrike.util')\n\
                 rule {{ name = 'GEN_{i}', score = 0.1, description = 'generated', group = 'gen',\n\
                   check = function(msg)\n\
                     local s = msg:subject_normalized()\n\
                     if s:find('offer {i}', 1, true) then return true end\n\
                     return re.match('(?i)unique phrase {i}\\\\b', msg:text())\n\
                   end }}\n"
            ),
        )
        .unwrap();
        n += 1;
        i += 1;
    }
    let s = scanner(RuleLocation::Dir(dir.path().to_path_buf()));
    let input = prepare(b"Subject: hi\r\n\r\nbody\r\n", s.limits());
    let mut w = s.worker();
    let mut group = c.benchmark_group("reload");
    group.sample_size(20);
    group.bench_function("100_files_build_and_swap", |b| {
        b.iter(|| black_box(s.engine().reload().unwrap()))
    });
    group.bench_function("100_files_reload_then_first_scan", |b| {
        b.iter(|| {
            s.engine().reload().unwrap();
            black_box(w.scan(&input, &Envelope::default()).verdict.score)
        })
    });
    group.finish();
}

criterion_group!(benches, rules, reload);
criterion_main!(benches);
